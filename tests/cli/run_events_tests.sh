#!/usr/bin/env bash
# `kvreplay events` from the command line (a KV-event stream, vLLM's KVEventBatch
# JSON Lines: vllm/distributed/kv_events.py):
#   - every file of tests/cli/events/bad/ fails with exit 2 and exactly the
#     stderr line of expected.txt (FILE:LINE: FIELD: problem), and its --json
#     path is never written (nothing left in the folder);
#   - vLLM's recorded shape passes; the hand-worked stream's figures in the
#     JSON; the same bytes on every run, from gzip and standard input too;
#   - per-block counts (a hash stored twice is cached twice, Dynamo's
#     EventDedupFilter), --unique, seq gaps, on a hand-worked stream;
#   - --mid-stream: the tail of kvreplay's own stream refused without it
#     (FILE:LINE: FIELD), accepted with it;
#   - an empty file, a missing file, a truncated gzip, --json -
#     and through a symlink, --json onto the input, unknown options, --help.
# Usage: run_events_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
for tool in jq gzip cmp; do
  command -v "$tool" >/dev/null || { echo "run_events_tests.sh: '$tool' is required" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-events.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
events=$root/tests/cli/events

# --- every check: one bad stream each, the exact line, no output left behind
cd "$events/bad" || exit 2
while IFS=$'\t' read -r file expected; do
  [[ -z $file || $file == \#* ]] && continue
  rm -rf "$work/bad" && mkdir -p "$work/bad"
  run events "$file" --json "$work/bad/summary.json"
  check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
  check '[[ $(cat "$work/err") == "$expected" ]]' \
    "stderr: got '$(err_text)', expected '$expected'"
  check '[[ $(wc -l <"$work/err") -eq 1 ]]' "$(wc -l <"$work/err") lines on stderr, expected 1"
  check '[[ ! -s $work/out ]]' "wrote to stdout: $(head -c 200 "$work/out")"
  check '[[ -z $(ls -A "$work/bad") ]]' "left $(ls -A "$work/bad") behind"
  finish "bad stream $file"
done <expected.txt
for file in *.jsonl; do
  check 'grep -q "^$file"$'"'"'\t'"'"' expected.txt' "not in expected.txt"
  finish "bad stream $file has an expectation"
done
cd "$root" || exit 2

# --- vLLM's own recorded shape: positional batches, tag-first events, CPU events
# with parent null, token_ids [] and block_size 0, hashes up to 2^64-1
run events "$events/vllm_recorded.jsonl" --json "$work/vllm.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check 'grep -q "7 batches, 9 events" "$work/out"' "summary: $(head -c 300 "$work/out")"
check '[[ $(jq -c "[.media[] | [.medium, .stored, .removed, .cleared, .reuse.count]]" \
  "$work/vllm.json") == "[[\"GPU\",4,1,3,1],[\"CPU\",3,2,1,1]]" ]]' \
  "figures: $(jq -c .media "$work/vllm.json")"
finish "vLLM's recorded shape passes"

# --- the hand-worked stream (tests/app/events_check_test.cc works it out)
run events "$events/summary.jsonl" --json "$work/a.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
gpu='.media[] | select(.medium == "GPU" and .instance == 0)'
check '[[ $(jq -c "[.batches, .events.BlockStored, .events.BlockRemoved, .events.AllBlocksCleared]" \
  "$work/a.json") == "[8,9,3,1]" ]]' "counts: $(jq -c .events "$work/a.json")"
check '[[ $(jq -c "$gpu | [.stored, .removed, .cleared, .cached, .peak.cached, .peak.ts]" \
  "$work/a.json") == "[12,4,7,1,7,5]" ]]' "GPU: $(jq -c "$gpu" "$work/a.json")"
check '[[ $(jq -c "$gpu | .reuse" "$work/a.json") == \
  "{\"count\":5,\"distance\":{\"max\":6,\"p50\":5,\"p90\":6,\"p99\":6},\"time_s\":{\"p50\":1,\"p99\":2}}" ]]' \
  "reuse: $(jq -c "$gpu | .reuse" "$work/a.json")"
check '[[ $(jq -c "$gpu | [.churn_per_s, .samples]" "$work/a.json") == "[1.6,[3,4,5,3,3,7,7,7,7,1]]" ]]' \
  "churn and samples: $(jq -c "$gpu | [.churn_per_s, .samples]" "$work/a.json")"
check '[[ $(jq -c "[.ts.first, .ts.last, .ts.span, (.sample_ts | length)]" "$work/a.json") == "[0,10,10,10]" ]]' \
  "ts: $(jq -c .ts "$work/a.json")"
finish "the hand-worked stream's figures"

run events "$events/summary.jsonl" --json "$work/b.json"
check 'cmp -s "$work/a.json" "$work/b.json"' "two runs differ"
finish "the JSON summary is the same bytes every run"

gzip -c "$events/summary.jsonl" >"$work/summary.jsonl.gz"
run events "$work/summary.jsonl.gz" --json "$work/gz.json"
check '[[ $rc -eq 0 ]]' "gzip: exit $rc: $(err_text)"
check 'cmp -s <(jq "del(.input)" "$work/a.json") <(jq "del(.input)" "$work/gz.json")' \
  "gzip: another summary"
run_cmd bash -c '"$0" events - --json - <"$1"' "$kvreplay" "$work/summary.jsonl.gz"
check '[[ $rc -eq 0 ]]' "stdin: exit $rc: $(err_text)"
check '[[ $(jq -r .input "$work/out") == "<stdin>" ]]' "stdin: --json - is not the JSON on stdout"
check 'cmp -s <(jq "del(.input)" "$work/a.json") <(jq "del(.input)" "$work/out")' \
  "stdin: another summary"
check 'grep -q "^<stdin>: 8 batches" "$work/err"' "stdin: the text summary is not on stderr"
finish "gzip and standard input give the same summary; --json - is stdout"

# --- per block: a medium is a multiset (vLLM caches a hash in several blocks);
# --unique refuses a second store; --duplicates (the old flag) changes nothing
run events "$events/double_store.jsonl" --json "$work/dup.json"
check '[[ $rc -eq 0 ]]' "double store: exit $rc: $(err_text)"
check '[[ $(jq -c "[.duplicates, (.media[0] | .cached, .peak.cached, .duplicate_stores, .keys.stored, .keys.cached, .keys.peak)]" "$work/dup.json") == "[true,5,5,1,5,4,4]" ]]' \
  "figures: $(jq -c . "$work/dup.json")"
run events "$events/double_store.jsonl" --duplicates --json "$work/dup2.json"
check '[[ $rc -eq 0 ]] && cmp -s "$work/dup.json" "$work/dup2.json"' "--duplicates: exit $rc, another summary"
run events "$events/double_store.jsonl" --unique
check '[[ $rc -eq 2 && $(cat "$work/err") == "$events/double_store.jsonl:3: events[0].block_hashes[1]: 3 is already cached in instance 0'"'"'s GPU (stored on line 2; without --unique a medium holds a hash in several blocks)" ]]' \
  "--unique: exit $rc, $(err_text)"
finish "per-block counts by default; --unique refuses a second store"

# --- Dynamo's per-block counts, worked by hand (tests/cli/events/dynamo_counts.jsonl):
#   seq 0  store a, b            blocks {a:1, b:1}  keys stored 2
#   seq 1  store b (parent a)    {a:1, b:2}         a duplicate: 3 cached, the peak (ts 1)
#   seq 2  remove b              {a:1, b:1}         b's count 2 -> 1: no key removed
#   seq 4  remove b, remove a    {}                 keys removed 2; seq 3 missed (a gap)
# stored 3 and removed 3 blocks over 4 s: 0.75 blocks/s each; the longest time
# between batches 2 s (ts 2 to 4).
run events "$events/dynamo_counts.jsonl" --json "$work/dyn.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -c ".media[0] | [.stored, .removed, .cached, .peak.cached, .peak.ts, .duplicate_stores]" "$work/dyn.json") == "[3,3,0,3,1,1]" ]]' \
  "blocks: $(jq -c ".media[0]" "$work/dyn.json")"
check '[[ $(jq -c ".media[0].keys | [.stored, .removed, .cached, .peak]" "$work/dyn.json") == "[2,2,0,2]" ]]' \
  "keys: $(jq -c ".media[0].keys" "$work/dyn.json")"
check '[[ $(jq -c ".media[0] | [.stored_per_s, .removed_per_s, .churn_per_s]" "$work/dyn.json") == "[0.75,0.75,1.5]" ]]' \
  "rates: $(jq -c ".media[0]" "$work/dyn.json")"
check '[[ $(jq -c "[.seq.batches, .seq.gaps, .seq.missing, .seq.late_starts, .max_interval.s, .max_interval.ts]" "$work/dyn.json") == "[4,1,1,0,2,4]" ]]' \
  "seq and gaps: $(jq -c "[.seq, .max_interval]" "$work/dyn.json")"
check 'grep -q "seq: 4 batches numbered, 1 gap (1 missing)" "$work/out"' "text: $(head -c 400 "$work/out")"
tail -n 2 "$events/dynamo_counts.jsonl" >"$work/dyn_tail.jsonl"
run events "$work/dyn_tail.jsonl"
check '[[ $rc -eq 2 && $(cat "$work/err") == "$work/dyn_tail.jsonl:1: seq: instance 0 starts at 2, not 0 (a stream captured mid-run: --mid-stream)" ]]' \
  "a tail starting at seq 2: exit $rc, $(err_text)"
run events "$work/dyn_tail.jsonl" --mid-stream --json "$work/dyn_tail.json"
check '[[ $rc -eq 0 && $(jq -c "[.seq.late_starts, .media[0].mid_stream.unmatched_removals, .media[0].removed, .media[0].cached]" "$work/dyn_tail.json") == "[1,3,3,0]" ]]' \
  "--mid-stream: exit $rc, $(err_text) $(jq -c . "$work/dyn_tail.json" 2>/dev/null)"
finish "Dynamo's per-block counts, keys, rates and seq gaps of a hand-worked stream"

# --- the tail of kvreplay's own stream: refused at its first unknown parent or
# removal without --mid-stream, accepted with it (and the whole stream clean)
head -n 150 traces/requests/mooncake_conv.jsonl >"$work/short.jsonl"
run simulate "$work/short.jsonl" --model llama-3.1-8b --tp 4 --gpu h100-80gb --kv-memory 2GiB \
  --max-seq-tokens 131072 -q --kv-events "$work/own.jsonl"
check '[[ $rc -eq 0 ]]' "simulate: exit $rc: $(err_text)"
lines=$(wc -l <"$work/own.jsonl")
tail -n $((lines / 2)) "$work/own.jsonl" >"$work/own_tail.jsonl"
run events "$work/own.jsonl" --json "$work/own.json"
check '[[ $rc -eq 0 && $(jq "[.media[].removed] | add" "$work/own.json") -gt 0 ]]' \
  "the whole stream: exit $rc, $(err_text)"
run events "$work/own_tail.jsonl"
check '[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]] && grep -qE "^$work/own_tail.jsonl:[0-9]+: events\[[0-9]+\]\.(parent_block_hash|block_hashes\[[0-9]+\]): .* \(a stream captured mid-run: --mid-stream\)$" "$work/err"' \
  "the tail without --mid-stream: exit $rc, $(err_text)"
run events "$work/own_tail.jsonl" --mid-stream --json "$work/own_tail.json"
check '[[ $rc -eq 0 ]]' "the tail with --mid-stream: exit $rc, $(err_text)"
check '[[ $(jq "[.media[].mid_stream | .orphan_stores + .unmatched_removals] | add" "$work/own_tail.json") -gt 0 ]]' \
  "no orphan store nor unmatched removal counted: $(jq -c .media "$work/own_tail.json")"
check '[[ $(jq -r .mid_stream "$work/own_tail.json") == true ]] && grep -q "mid-stream: " "$work/out"' \
  "the summary does not say mid-stream"
finish "the tail of kvreplay's own stream: refused without --mid-stream, accepted with it"

# --- an empty file: no batches, a summary of nothing
: >"$work/empty.jsonl"
run events "$work/empty.jsonl" --json "$work/empty.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -c "[.batches, .media, .sample_ts, .ts.first]" "$work/empty.json") == "[0,[],[],null]" ]]' \
  "$(jq -c . "$work/empty.json")"
check 'grep -q "0 batches, 0 events" "$work/out"' "text: $(head -c 200 "$work/out")"
finish "an empty file"

# --- a missing file, a truncated gzip: exit 2, one line naming the file
run events "$work/nope.jsonl" --json "$work/nope.json"
check '[[ $rc -eq 2 && $(cat "$work/err") == "$work/nope.jsonl: file: cannot open: No such file or directory" ]]' \
  "exit $rc, $(err_text)"
check '[[ ! -e $work/nope.json ]]' "wrote the summary"
finish "a missing file"
head -c 60 "$work/summary.jsonl.gz" >"$work/cut.gz"
run events "$work/cut.gz"
check '[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]] && grep -q "^$work/cut.gz:1: file: " "$work/err"' \
  "exit $rc, $(err_text)"
finish "a truncated gzip"

# --- outputs: a symlink is followed, an existing file stays until the run passes,
# the input is never the output
mkdir -p "$work/links"
echo old >"$work/links/target.json"
ln -s target.json "$work/links/link.json"
run events "$events/summary.jsonl" --json "$work/links/link.json"
check '[[ $rc -eq 0 && -L $work/links/link.json ]]' "exit $rc; the link is gone"
check 'cmp -s "$work/links/target.json" "$work/a.json"' "the target is not the summary"
echo old >"$work/links/target.json"
run events "$events/bad/removed_absent.jsonl" --json "$work/links/link.json"
check '[[ $rc -eq 2 && $(cat "$work/links/target.json") == old ]]' "a failed run touched the target"
check '[[ $(ls -A "$work/links" | wc -l) -eq 2 ]]' "left $(ls -A "$work/links") behind"
cp "$events/summary.jsonl" "$work/in.jsonl"
run events "$work/in.jsonl" --json "$work/in.jsonl"
check '[[ $rc -eq 2 ]] && cmp -s "$work/in.jsonl" "$events/summary.jsonl"' \
  "--json onto the input: exit $rc, $(err_text)"
finish "--json through a symlink; a failed run writes nothing; never onto the input"

# --- memory: what the check keeps (a hash table entry per distinct hash, ...) is
# counted against the memory limit as it grows; a stream that passes it is exit 2,
# one line, at the line where it did, and the process stays within the limit.
# 1,000,000 distinct hashes, 1,000 a batch: ~200 MiB of state.
awk 'BEGIN { for (b = 0; b < 1000; b++) {
  printf "{\"ts\": %d, \"events\": [[\"BlockStored\", [", b
  for (k = 0; k < 1000; k++) printf "%s%d", (k ? "," : ""), b * 1000 + k
  print "]]]}" } }' >"$work/distinct.jsonl"
mkdir -p "$work/mem"
rss() { awk '/^maxrss/ { print $2 }' "$work/rss"; }  # KiB, of the last run under measured
measured() { /usr/bin/time -f "maxrss %M" -o "$work/rss" "$@"; }
if [[ -x /usr/bin/time ]]; then timer=measured; else timer=; fi
run_cmd $timer env KVREPLAY_MEMORY_LIMIT=100MiB "$kvreplay" events "$work/distinct.jsonl" \
  --json "$work/mem/summary.json"
check '[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]]' "exit $rc, $(err_text)"
check 'grep -qE "^$work/distinct.jsonl:[0-9]+: events\[0\]\.block_hashes\[[0-9]+\]: checking the stream up to here needs 100\.00 MiB \(16 MiB \+ 4 x [0-9]+ bytes of the line \+ .* distinct hashes \+ .*\), over the memory limit of 100\.00 MiB \(KVREPLAY_MEMORY_LIMIT\)$" "$work/err"' \
  "not the memory limit's line: $(err_text)"
check '[[ -z $(ls -A "$work/mem") && ! -s $work/out ]]' "wrote $(ls -A "$work/mem") or to stdout"
# (Not under the sanitizers: their shadow memory and quarantine are no run's.)
if [[ -n $timer && -z ${KVREPLAY_SANITIZED:-} ]]; then
  check '[[ $(rss) -le 102400 ]]' "peak RSS $(rss) KiB over the limit of 100 MiB"
fi
run_cmd $timer "$kvreplay" events "$work/distinct.jsonl" --json "$work/mem/summary.json" -q
check '[[ $rc -eq 0 && $(jq ".media[0].cached" "$work/mem/summary.json") == 1000000 ]]' \
  "without the limit: exit $rc, $(err_text)"
if [[ -n $timer ]]; then
  check '[[ $(rss) -gt 102400 ]]' "peak RSS $(rss) KiB: the stream does not need more than the limit"
fi
rm -rf "$work/mem" && mkdir -p "$work/mem"
finish "a stream whose state passes KVREPLAY_MEMORY_LIMIT: exit 2, one line, within the limit"

# A line is refused as it grows past what the limit leaves (held 4 times over).
run_cmd env KVREPLAY_MEMORY_LIMIT=100MiB bash -c \
  'head -c 41943040 /dev/zero | tr "\0" " " | "$0" events - --json "$1"' "$kvreplay" \
  "$work/mem/line.json"
check '[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]]' "exit $rc, $(err_text)"
check 'grep -qE "^<stdin>:1: json: checking the stream up to here needs [0-9.]+ MiB \(16 MiB \+ 4 x [0-9]+ bytes of the line\), over the memory limit of 100\.00 MiB \(KVREPLAY_MEMORY_LIMIT\)$" "$work/err"' \
  "not the memory limit's line: $(err_text)"
check '[[ -z $(ls -A "$work/mem") ]]' "wrote $(ls -A "$work/mem")"
finish "a 40 MiB line under a 100 MiB limit: exit 2 before it is held"

# --- usage
run events "$events/summary.jsonl" --no-such-option
check '[[ $rc -eq 2 ]]' "unknown option: exit $rc"
run events
check '[[ $rc -eq 2 ]]' "no FILE: exit $rc"
run events --help
check '[[ $rc -eq 0 ]]' "--help: exit $rc"
check 'grep -q "KVEventBatch" "$work/out" && grep -q "Checks" "$work/out" &&
  grep -q "FILE:LINE: FIELD: problem" "$work/out" && grep -q -- "--mid-stream" "$work/out" && grep -q -- "--unique" "$work/out"' \
  "--help explains neither the form nor the checks"
run --help
check 'grep -q "^  events " "$work/out"' "kvreplay --help does not list events"
finish "usage: unknown options, --help"

echo "$passed passed, $failed failed"
((failed == 0))
