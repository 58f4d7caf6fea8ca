#!/usr/bin/env bash
# `kvreplay events --subscribe` against a live publisher (tests/cli/kv_publisher:
# vLLM's ZmqEventPublisher wire format, vllm/distributed/kv_events.py, on
# 127.0.0.1 at random ports):
#   - --duration, both encodings (msgspec array_like, maps with "type") and
#     both hash kinds (uint64 above 2^63, 32 bytes), with two sequence gaps
#     filled through the replay socket: every batch written in order, and
#     `kvreplay events` accepts the capture with the stream's counts;
#   - SIGINT: exit 0 and the complete file (the publisher leaves its last gap
#     to the end, so once it has answered the replay request the subscriber has
#     received everything: no timing decides what the file holds);
#   - a gap with no --replay: noted, counted lost, exit 0;
#   - nobody publishing: an empty capture, said so;
#   - a bad endpoint, an undecodable batch (its sequence number and why) and
#     usage errors: one line, exit 2, nothing written.
# Usage: run_events_subscribe_tests.sh KVREPLAY_BINARY KV_PUBLISHER_BINARY
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay publisher -- "$@"
command -v jq >/dev/null || { echo "run_events_subscribe_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-subscribe.XXXXXX") || exit 2
pub_pid=
trap '[[ -n $pub_pid ]] && kill "$pub_pid" 2>/dev/null; rm -rf "$work"' EXIT
run_timeout=120

# start_publisher ARGS...: kv_publisher in the background; sets pub, replay
# (its endpoints, read from its first line) and pub_pid.
start_publisher() {
  rm -f "$work/endpoints"
  mkfifo "$work/endpoints" || exit 2
  "$publisher" "$@" >"$work/endpoints" 2>"$work/pub_err" &
  pub_pid=$!
  read -r pub replay <"$work/endpoints"
}
# wait_publisher: its exit status in pub_rc.
wait_publisher() {
  wait "$pub_pid"
  pub_rc=$?
  pub_pid=
}

# The stream kv_publisher sends (tests/engine/kv_test_publisher.h), 50
# batches, worked by hand: batches 0-28 store 2 blocks each (parent the block
# before), 2-28 also remove one, 29 clears, 30-49 store again (32-49 remove):
# 49 BlockStored (98 blocks), 45 BlockRemoved, 1 AllBlocksCleared; 22 cached.
summary_line='50 batches (sequence 0 to 49), 95 events (49 BlockStored, 45 BlockRemoved, 1 AllBlocksCleared)'
check_capture() {  # check_capture FILE: `kvreplay events` accepts it with the stream's figures
  run events "$1" --json "$work/check.json"
  check '[[ $rc -eq 0 ]]' "kvreplay events on the capture: exit $rc: $(err_text)"
  check '[[ $(jq -c "[.batches, .events.BlockStored, .events.BlockRemoved, .events.AllBlocksCleared]" \
    "$work/check.json") == "[50,49,45,1]" ]]' "counts: $(jq -c .events "$work/check.json")"
  check '[[ $(jq -c "[.media[] | [.medium, .stored, .removed, .cached]]" "$work/check.json") == \
    "[[\"GPU\",98,45,22]]" ]]' "figures: $(jq -c .media "$work/check.json")"
  capture=$1
  check '[[ $(jq -s -c "map(.ts) | [. == sort, length, .[0], .[-1]]" "$capture") == \
    "[true,50,1700000000,1700000012.25]" ]]' "ts not in sequence order: $(jq -c .ts "$capture" | head -3)"
}

# --- --duration, both encodings and hash kinds, two gaps filled by replay
for form in "array int" "map bytes" "array bytes" "map int"; do
  read -r encoding hashes <<<"$form"
  start_publisher --encoding "$encoding" --hashes "$hashes" --batches 50 --drop 10,11,48 --replays 2
  run events --subscribe "$pub" --replay "$replay" --duration 5 -o "$work/cap.jsonl"
  wait_publisher
  check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
  check '[[ $pub_rc -eq 0 ]]' "publisher: exit $pub_rc: $(cat "$work/pub_err")"
  check 'grep -qF "$pub: $summary_line" "$work/out"' "summary: $(head -c 400 "$work/out")"
  check 'grep -qF "2 sequence gaps, 3 batches missed: 3 replayed, 0 lost" "$work/out"' \
    "gaps: $(head -c 400 "$work/out")"
  check 'grep -qxF "$pub: batches 10 to 11 missed: replayed from $replay" "$work/err"' \
    "stderr: $(err_text)"
  check 'grep -qxF "$pub: batch 48 missed: replayed from $replay" "$work/err"' "stderr: $(err_text)"
  check '[[ $(wc -l <"$work/cap.jsonl") -eq 50 ]]' "$(wc -l <"$work/cap.jsonl") lines"
  if [[ $hashes == int ]]; then  # block 0's hash, 0xf000000000000abc: above 2^63, every digit
    check '[[ $(head -1 "$work/cap.jsonl" | jq -r ".events[0].block_hashes[0]") == 17293822569102707388 ]]' \
      "hash: $(head -c 200 "$work/cap.jsonl")"
  else
    check '[[ $(head -1 "$work/cap.jsonl" | jq -r ".events[0].block_hashes[0]" | grep -cE "^[0-9a-f]{64}$") -eq 1 ]]' \
      "hash: $(head -c 200 "$work/cap.jsonl")"
  fi
  check_capture "$work/cap.jsonl"
  finish "--duration, $encoding batches, $hashes hashes, gaps replayed: the capture passes"
done

# --- SIGINT: exit 0, everything written
start_publisher --encoding map --hashes bytes --batches 50 --drop 48 --replays 1
"$kvreplay" events --subscribe "$pub" --replay "$replay" -o "$work/int.jsonl" >"$work/out" \
  2>"$work/err" &
sub_pid=$!
wait_publisher  # it answered the replay request sent after batch 49: all 50 are on their way
kill -INT "$sub_pid"
wait "$sub_pid"
rc=$?
check '[[ $rc -eq 0 ]]' "exit $rc after SIGINT: $(err_text)"
check '[[ $pub_rc -eq 0 ]]' "publisher: exit $pub_rc: $(cat "$work/pub_err")"
check 'grep -qF "$pub: $summary_line" "$work/out"' "summary: $(head -c 400 "$work/out")"
check '[[ -f $work/int.jsonl && $(wc -l <"$work/int.jsonl") -eq 50 ]]' \
  "the file after SIGINT: $(wc -l <"$work/int.jsonl" 2>&1) lines"
check '[[ $(tail -c 1 "$work/int.jsonl" | od -An -c | tr -d " ") == "\n" ]]' "the last line is cut"
check_capture "$work/int.jsonl"
finish "SIGINT stops cleanly: exit 0, the whole capture written and accepted"

# --- a gap and no --replay: noted, lost, exit 0; -o - writes the lines to stdout
start_publisher --batches 20 --drop 5
run events --subscribe "$pub" --duration 3 -o -
wait_publisher
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(wc -l <"$work/out") -eq 19 ]]' "$(wc -l <"$work/out") lines on stdout"
check 'grep -qxF "$pub: batch 5 missed (no --replay endpoint to ask)" "$work/err"' \
  "stderr: $(err_text)"
check 'grep -qF "1 sequence gaps, 1 batches missed: 0 replayed, 1 lost" "$work/err"' \
  "summary: $(err_text)"
finish "a gap without --replay is noted and counted lost"

# --- nobody publishing: an empty capture after --duration
run events --subscribe tcp://127.0.0.1:9 --duration 0.5 -o "$work/none.jsonl"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ -f $work/none.jsonl && ! -s $work/none.jsonl ]]' "the capture is not an empty file"
check 'grep -qF "tcp://127.0.0.1:9: no batch received" "$work/out"' "summary: $(head -c 300 "$work/out")"
finish "nobody publishing: an empty capture, said so"

# --- an undecodable batch: its sequence number and why, exit 2, nothing written
start_publisher --batches 6 --bad 3
run events --subscribe "$pub" -o "$work/bad.jsonl"
wait_publisher
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check '[[ $(cat "$work/err") == "$pub: batch 3: cannot decode its KVEventBatch: not msgpack: parse error at byte 3: syntax error while parsing MessagePack number: unexpected end of input" ]]' \
  "stderr: $(err_text)"
check '[[ ! -e $work/bad.jsonl ]]' "wrote the capture of a failed run"
finish "an undecodable batch: one line naming its sequence number, exit 2"

# --- bad endpoints and usage: one line, exit 2, nothing written
while IFS='|' read -r endpoint expected; do
  run events --subscribe "$endpoint" -o "$work/x.jsonl"
  check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
  check '[[ $(cat "$work/err") == "$expected" ]]' "stderr: $(err_text)"
  check '[[ ! -e $work/x.jsonl ]]' "wrote a capture"
  finish "bad endpoint $endpoint"
done <<'EOF'
http://localhost:5557|http://localhost:5557: expected tcp://HOST:PORT (vLLM's KVEventsConfig.endpoint, e.g. tcp://localhost:5557) or ipc://PATH
tcp://localhost|tcp://localhost: expected tcp://HOST:PORT
tcp://localhost:0|tcp://localhost:0: port 0 is not a number from 1 to 65535
tcp://*:5557|tcp://*:5557: * binds; a subscriber connects to a host
EOF
run events --subscribe tcp://no-such-host.invalid:5557 -o "$work/x.jsonl"
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check '[[ $(err_text) == "tcp://no-such-host.invalid:5557: cannot resolve no-such-host.invalid: "* ]]' \
  "stderr: $(err_text)"
finish "an endpoint whose host does not resolve"
for args in "--subscribe tcp://127.0.0.1:9" "--subscribe tcp://127.0.0.1:9 -o x.jsonl FILE" \
  "--subscribe tcp://127.0.0.1:9 -o x.jsonl --json s.json" "--topic kv -o x.jsonl FILE" \
  "--subscribe tcp://127.0.0.1:9 -o x.jsonl --duration 0"; do
  cd "$work" || exit 2
  # shellcheck disable=SC2086
  run events $args
  cd "$OLDPWD" || exit 2
  check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
  check '[[ ! -e $work/x.jsonl && ! -e $work/s.json ]]' "wrote an output"
  finish "usage error: events $args"
done
run events
check '[[ $rc -eq 2 && $(cat "$work/err") == "command line: FILE is required (or --subscribe ENDPOINT -o FILE)" ]]' \
  "exit $rc: $(err_text)"
finish "events with neither FILE nor --subscribe"

echo "$passed passed, $failed failed"
((failed == 0))
