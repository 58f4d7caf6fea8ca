#!/usr/bin/env bash
# simulate streams its trace (docs/SCALE.md): memory is bounded by the
# requests in flight and the cache, not by the trace's length. Ten
# back-to-back copies of the Mooncake trace (each shifted past the last
# arrival of the one before) must peak at most 1.5x the RSS of one copy, from
# a file and from gzip on standard input, where one instance keeps up
# (llama-3.1-8b on h100-80gb, TP 4: an overloaded run's backlog is in flight
# and does grow), and the last five copies add under 1 MiB. The ten copies finish ten times the requests, and their
# latency percentiles come from the bounded histogram (exact: false).
#
# Needs ../shared/traces beside the checkout (skipped, exit 77, without it)
# and GNU time (/usr/bin/time; scripts/bootstrap installs it).
# Usage: run_streaming_tests.sh KVREPLAY_BINARY REPO_ROOT SHARED_DIR
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root shared -- "$@"
command -v jq >/dev/null || { echo "run_streaming_tests.sh: 'jq' is required" >&2; exit 2; }
trace=$shared/traces/mooncake/conversation_trace.jsonl
if [[ ! -r $trace ]]; then
  echo "SKIP: $trace is absent"
  exit 77
fi
if [[ ! -x /usr/bin/time ]]; then
  echo "FAIL: GNU time (/usr/bin/time) is missing: scripts/bootstrap installs it"
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-streaming.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT

span=$(tail -n 1 "$trace" | jq .timestamp)
for ((c = 0; c < 10; c++)); do
  jq -c --argjson off "$((c * (span + 1000)))" '.timestamp += $off' "$trace"
done >"$work/ten.jsonl"
head -n "$((5 * $(grep -c . "$trace")))" "$work/ten.jsonl" >"$work/five.jsonl"
gzip -c "$work/ten.jsonl" >"$work/ten.jsonl.gz"
requests=$(grep -c . "$trace")

peak() {  # peak NAME INPUT [ARGS...]: simulate INPUT, its peak RSS in KB into $NAME, report $work/NAME.json
  local name=$1 input=$2
  shift 2
  /usr/bin/time -f "%M" -o "$work/$name.rss" "$kvreplay" simulate "$input" --model llama-3.1-8b \
    --gpu h100-80gb --tp 4 -q --report "$work/$name.json" "$@" 2>"$work/$name.err"
  rc=$?
  check "[[ $rc == 0 ]]" "simulate $name exits $rc: $(head -c 300 "$work/$name.err")"
  printf -v "$name" '%s' "$(tail -n 1 "$work/$name.rss")"
}
peak one "$trace"
peak five "$work/five.jsonl"
peak ten "$work/ten.jsonl"
peak gz - <"$work/ten.jsonl.gz"
echo "peak RSS: one copy $one KB, five $five KB, ten $ten KB, ten from gzip stdin $gz KB"
check "(( ten * 2 <= one * 3 ))" "ten copies peak at $ten KB, over 1.5x one copy's $one KB"
# Past the exact percentiles' 65,536 values (five copies hold 60k), nothing
# grows: five more copies add under 1 MiB (keeping every latency added 2.4 MB).
check "(( ten - five <= 1024 ))" "five more copies add $((ten - five)) KB: something grows with the trace"
check "(( gz * 2 <= one * 3 ))" "ten copies from gzip stdin peak at $gz KB, over 1.5x one copy's $one KB"
check "[[ \$(jq .requests.finished '$work/one.json') == $requests ]]" "one copy did not finish $requests requests"
check "[[ \$(jq .requests.finished '$work/ten.json') == $((10 * requests)) ]]" "ten copies did not finish $((10 * requests)) requests"
check "[[ \$(jq .overload.overloaded '$work/ten.json') == false ]]" "ten copies overload the deployment: the check measures a backlog"
check "[[ \$(jq .latency.ttft_ms.exact '$work/one.json') == true ]]" "one copy's percentiles are not exact"
check "[[ \$(jq .latency.ttft_ms.exact '$work/ten.json') == false ]]" "ten copies' percentiles are exact: every value was kept"
jq -S 'del(.timing, .trace.path)' "$work/ten.json" >"$work/ten.cmp"
jq -S 'del(.timing, .trace.path)' "$work/gz.json" >"$work/gz.cmp"
check "cmp -s '$work/ten.cmp' '$work/gz.cmp'" "gzip on stdin gives another report than the file"
finish "ten copies of a trace in the memory of one"

echo "$passed passed, $failed failed"
((failed == 0))
