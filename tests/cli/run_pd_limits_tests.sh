#!/usr/bin/env bash
# Disaggregated prefill and decode at its limits, from the command line:
#   - a named-prefix prompt of more pages than a 16-bit field holds moves each
#     page once (the decode side's keys never alias), and the emitted kvtrace
#     replays with --verify;
#   - a trace hash id in kvreplay's reserved range is refused in every format
#     that has hash ids (exit 2, one line naming the limit), under P/D too;
#   - a decode instance waiting on a very slow link takes few steps, not one
#     empty step after another;
#   - a request the decode side can never fit is skipped on admission, before
#     its prefill and transfer, and counted once in the report.
# No timing decides a pass.
#
# Usage: run_pd_limits_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_pd_limits_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-pd-limits.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
run_timeout=600
tiny=(--layers 1 --kv-heads 1 --head-dim 8)
pd=(--prefill-replicas 1 --decode-replicas 1)

# 1. Two prompts of 70,001 one-token pages naming one 10-token prefix: the
#    first moves its 70,000 full pages (all but the last token's), the second
#    only its own 69,990 (the prefix's are cached on the decode side). Keys
#    made of a truncated page index aliased page k with k + 65,536: fewer
#    blocks moved, and the decode side "hit" pages it never received.
printf '%s\n' \
  '{"arrival": 0, "prompt": 70001, "output": 2, "prefix": "sys", "prefix_tokens": 10}' \
  '{"arrival": 1000, "prompt": 70001, "output": 2, "prefix": "sys", "prefix_tokens": 10}' \
  >long.jsonl
run simulate long.jsonl "${tiny[@]}" --page-tokens 1 --kv-memory 64MiB --max-seq-tokens 200000 \
  "${pd[@]}" --report long.json --emit-trace long.kvtrace -q
check '[[ $rc -eq 0 ]]' "long prompt: exit $rc: $(err_text)"
check 'jq -e ".fleet.kv_transfer.blocks == 70000 + 69990 and .fleet.kv_transfer.requests == 2" long.json >/dev/null' \
  "long prompt: moved $(jq -c ".fleet.kv_transfer | {requests, blocks}" long.json 2>/dev/null)"
check 'jq -e ".requests.finished == 2 and .status == \"ok\"" long.json >/dev/null' \
  "long prompt: $(jq -c "{status, requests}" long.json 2>/dev/null)"
check 'jq -e ".instances[1].scheduler.prompt_tokens_computed == 2" long.json >/dev/null' \
  "long prompt: the decode side computed $(jq ".instances[1].scheduler.prompt_tokens_computed" long.json 2>/dev/null) prompt tokens, expected 2 (one a request)"
run replay long.kvtrace --backend cpu --verify "${tiny[@]}" -q
check '[[ $rc -eq 0 ]]' "long prompt: replay --verify of the emitted trace: exit $rc: $(err_text)"
finish "a prompt over 65,536 pages moves each page once; its kvtrace verifies"

# 2. Hash ids past 2^62 - 1 are refused as the trace is read, in both formats
#    that carry them, by simulate alone and under P/D.
# shellcheck disable=SC2034 # read by check's eval
limit="is past the hash id limit of 2^62 - 1 (4611686018427387903; kvreplay keys its own pages above it)"
printf '%s\n' \
  '{"arrival": 0, "prompt": 40, "output": 1, "hash_block_tokens": 16, "hash_ids": [1, 2, 3]}' \
  '{"arrival": 1, "prompt": 40, "output": 1, "hash_block_tokens": 16, "hash_ids": [4611686018427387904, 2, 3]}' \
  >native.jsonl
printf '%s\n' \
  '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}' \
  '{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, 9223372036854775808]}' \
  >mooncake.jsonl
for args in "" "${pd[*]}"; do
  # shellcheck disable=SC2086
  run simulate native.jsonl --kv-memory 1GiB $args -q
  check '[[ $rc -eq 2 && $(cat "$work/err") == "native.jsonl:2: hash_ids: 4611686018427387904 $limit" ]]' \
    "native ${args:-alone}: exit $rc: $(err_text)"
  # shellcheck disable=SC2086
  run simulate mooncake.jsonl --kv-memory 1GiB $args -q
  check '[[ $rc -eq 2 && $(cat "$work/err") == "mooncake.jsonl:2: hash_ids: 9223372036854775808 $limit" ]]' \
    "mooncake ${args:-alone}: exit $rc: $(err_text)"
done
# The largest id allowed is read.
sed 's/4611686018427387904/4611686018427387903/' native.jsonl >native_ok.jsonl
run simulate native_ok.jsonl --kv-memory 1GiB -q
check '[[ $rc -eq 0 ]]' "2^62 - 1 refused: exit $rc: $(err_text)"
finish "trace hash ids in the reserved range are refused in every format"

# 3. A link of 1 MB/s (--kv-transfer-gbps 0.001) into a decode pool of 12
#    blocks (4-token pages of 512 KiB): 19-token prompts growing by 20 tokens.
#    A transfer holds blocks while it crosses (2 s), the request decoding
#    there needs one, is preempted and cannot come back until the landing:
#    the instance has nothing to run. It used to take one empty step after
#    another (13,248 steps for 60 output tokens); it now moves its clock to
#    the landing without a step.
printf '%s\n' \
  '{"arrival": 0, "prompt": 19, "output": 20, "hash_block_tokens": 8, "hash_ids": [1, 2, 3]}' \
  '{"arrival": 0.001, "prompt": 19, "output": 20, "hash_block_tokens": 8, "hash_ids": [4, 5, 6]}' \
  '{"arrival": 0.002, "prompt": 19, "output": 20, "hash_block_tokens": 8, "hash_ids": [7, 8, 9]}' \
  >slow.jsonl
run simulate slow.jsonl --page-tokens 4 --kv-memory 6MiB "${pd[@]}" --kv-transfer-gbps 0.001 \
  --check every --report slow.json -q
check '[[ $rc -eq 0 ]]' "slow link: exit $rc: $(err_text)"
check 'jq -e ".requests.finished == 3 and .status == \"ok\" and .fleet.kv_transfer.blocks == 12" slow.json >/dev/null' \
  "slow link: $(jq -c "{status, requests, blocks: .fleet.kv_transfer.blocks}" slow.json 2>/dev/null)"
# The case at issue: the decode side was preempted while a transfer held its blocks.
check 'jq -e ".instances[1].scheduler.preemptions > 0" slow.json >/dev/null' \
  "slow link: no preemption on the decode side (the case is not exercised)"
# 3 prompts and 60 output tokens: a step each at most, and a few more.
check 'jq -e ".instances[1].scheduler.steps <= 100" slow.json >/dev/null' \
  "slow link: the decode instance took $(jq ".instances[1].scheduler.steps" slow.json 2>/dev/null) steps"
# The clock still waits for the transfers: of 2.1 s each, the second starts
# only when the first has landed (no room before).
check 'jq -e ".scheduler.virtual_seconds >= 2 * .fleet.kv_transfer.ms.max / 1e3" slow.json >/dev/null' \
  "slow link: virtual time $(jq ".scheduler.virtual_seconds" slow.json 2>/dev/null) s is shorter than the transfers"
finish "a very slow link costs time, not steps"

# 4. --max-seq-tokens 100: the first request (prompt 50, output 80) fits a
#    prefill instance (50 + 1 tokens) but never the decode side; it is skipped
#    on admission, before its prefill, and counted once.
printf '%s\n' \
  '{"arrival": 0, "prompt": 50, "output": 80}' \
  '{"arrival": 1, "prompt": 50, "output": 10}' >never.jsonl
run simulate never.jsonl --kv-memory 1GiB --max-seq-tokens 100 "${pd[@]}" --report never.json \
  --requests never.csv
check '[[ $rc -eq 0 ]]' "never fits: exit $rc: $(err_text)"
check 'jq -e ".requests | .total == 2 and .finished == 1 and .skipped == 1 and .skipped_too_long == 1" never.json >/dev/null' \
  "never fits: requests $(jq -c .requests never.json 2>/dev/null)"
check 'jq -e ".fleet.kv_transfer.requests == 1" never.json >/dev/null' \
  "never fits: $(jq ".fleet.kv_transfer.requests" never.json 2>/dev/null) transfers, expected 1"
check 'jq -e ".instances[0].requests.skipped == 1 and .instances[1].requests.skipped == 0 and .instances[0].scheduler.prompt_tokens_computed == 50" never.json >/dev/null' \
  "never fits: instances $(jq -c "[.instances[] | {requests, computed: .scheduler.prompt_tokens_computed}]" never.json 2>/dev/null)"
check '[[ $(tail -n +2 never.csv | wc -l) -eq 2 ]]' "never fits: --requests has $(tail -n +2 never.csv | wc -l) rows, expected 2"
finish "a request the decode side can never fit is skipped before its prefill, once"

echo "$passed passed, $failed failed"
((failed == 0))
