#!/usr/bin/env bash
# Forged plan parts (README, "Plans on a cluster"): plan-merge checks every cell
# of a part against the sweep cell it claims to be (configuration, simulation
# options, fleet, router, GPUs, SLO targets, price) and the figures it derives
# from its own counts (hit rate, throughput, SLO attainment, $), and simulates
# again every answer and every cell whose figures decide one: the fleet
# answer and each cell that could have won in its stead, the smallest
# deployment with those at or above it and the last that does not serve, the
# smallest KV memory (its pool serves, one block less does not, every swept
# pool above it serves). Each forgery below, in range and consistent with the
# part's other checks, exits 2 with one line `FILE: FIELD: problem` and writes
# nothing; the honest parts merge to exactly the unsharded plan.
#
# Usage: run_plan_merge_verify_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_plan_merge_verify_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-merge-verify.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
run_timeout=240
azure=$root/traces/requests/azure_conv.csv

# sweep NAME N PLAN-ARGS...: the unsharded plan (whole.json) and N parts in
# $work/NAME, and the honest merge, which must be the unsharded plan.
sweep() {
  local name=$1 n=$2
  shift 2
  mkdir -p "$work/$name"
  run plan "$@" --report "$work/$name/whole.json" -q
  check '[[ $rc == 0 ]]' "the unsharded plan exits $rc: $(err_text)"
  local i
  for ((i = 1; i <= n; i++)); do
    run plan "$@" --shard "$i/$n" --report "$work/$name/part-$i.json" -q
    check '[[ $rc == 0 ]]' "shard $i/$n exits $rc: $(err_text)"
  done
  run plan-merge "$work/$name"/part-*.json --report "$work/$name/merged.json" -q
  check '[[ $rc == 0 ]]' "the honest merge exits $rc: $(err_text)"
  check "cmp -s '$work/$name/whole.json' '$work/$name/merged.json'" \
    "the honest merge differs from the unsharded plan"
  finish "$name: the honest parts merge to the unsharded plan"
}

# The part and the position in it of sweep cell INDEX: "FILE K".
holder() {  # NAME INDEX
  local f k
  for f in "$work/$1"/part-*.json; do
    k=$(jq --argjson i "$2" '[.cells[].index] | index($i) // empty' "$f")
    if [[ -n $k ]]; then
      echo "$f $k"
      return
    fi
  done
}

# forged NAME PART FIELD FILTER: PART of sweep NAME edited by the jq FILTER is
# refused: exit 2, one line that starts `FORGED: FIELD`, no report nor HTML.
forged() {
  local name=$1 part=$2 field=$3 filter=$4
  local copy=$work/$name/forged-$(basename "$part")
  rm -rf "$work/out-dir" && mkdir "$work/out-dir"
  jq -c "$filter" "$part" >"$copy" || { echo "bad filter $filter"; exit 2; }
  check "! cmp -s '$part' '$copy'" "the filter changed nothing"
  local parts=() f
  for f in "$work/$name"/part-*.json; do
    if [[ $f == "$part" ]]; then parts+=("$copy"); else parts+=("$f"); fi
  done
  run plan-merge "${parts[@]}" --report "$work/out-dir/plan.json" --html "$work/out-dir/plan.html"
  check '[[ $rc == 2 ]]' "exit $rc, not 2: $(err_text)"
  check "[[ \$(cat '$work/err') == '$copy: $field'* ]]" "stderr is not '$copy: $field...': $(err_text)"
  check "[[ \$(wc -l <'$work/err') == 1 ]]" "not one line on stderr: $(err_text)"
  check "[[ -z \$(ls -A '$work/out-dir') ]]" "something was written: $(ls -A "$work/out-dir")"
  rm -f "$copy"
  finish "$name: plan-merge refuses $field after ${filter:0:100}"
}

# ------------------------------------------------------------ fleet answers
fleet=("$azure" --model llama-3.1-8b --gpu h100-80gb --replicas 1,2 --router round-robin,prefix-aware
  --gpu-hour-usd 2 --slo-ttft-ms 60000 --slo-attainment 0.5 --no-search)
sweep fleet 3 "${fleet[@]}"
w=$work/fleet/whole.json
answer=$(jq '.min_fleet[0].deployment.label as $l | [.cells[].deployment.label] | index($l)' "$w")
check '[[ $answer =~ ^[0-9]+$ ]]' "the fleet plan has no answer: $(jq -c '.min_fleet' "$w")"
rr=$(jq '[.cells[].deployment.label] | index("h100-80gb x2 (2 replicas, round-robin)")' "$w")
check '[[ $rr =~ ^[0-9]+$ && $rr != "$answer" ]]' "no 2-replica round-robin cell apart from the answer"
finish "fleet: the sweep has an answer and a losing cell"
read -r part k <<<"$(holder fleet "$answer")"
# The answer forged to preempt: the next cheapest fleet would win, and simulates
# as its part says; the merge simulates the cell that could have won too.
forged fleet "$part" "cells[$k].report: the figures of" ".cells[$k].report.scheduler.preemptions = 1"
forged fleet "$part" "cells[$k].report: the figures of" ".cells[$k].report.slo.requests_met = 0 | .cells[$k].report.slo.met = false | .cells[$k].report.slo.attainment = 0"
read -r part k <<<"$(holder fleet "$rr")"
forged fleet "$part" "cells[$k].report.fleet.router.policy" ".cells[$k].report.fleet.router.policy = \"prefix-aware\""
forged fleet "$part" "cells[$k].report.cost_usd.gpus" ".cells[$k].report.cost_usd.gpus = 1"
forged fleet "$part" "cells[$k].report.fleet.replicas" ".cells[$k].report.fleet.replicas = 4"
forged fleet "$part" "cells[$k].report.config.tp" ".cells[$k].report.config.tp = 2"
forged fleet "$part" "cells[$k].report.config.router" ".cells[$k].report.config.router = {\"policy\": \"round-robin\"}"
forged fleet "$part" "cells[$k].report.prefix_cache.hit_rate" ".cells[$k].report.prefix_cache.hit_rate = 0.5"
forged fleet "$part" "cells[$k].report.slo.attainment" ".cells[$k].report.slo.attainment = 0.25"
forged fleet "$part" "cells[$k].report.slo.ttft_ms" ".cells[$k].report.slo.ttft_ms = 1"
forged fleet "$part" "cells[$k].report.cost_usd.usd_per_million_output_tokens" \
  ".cells[$k].report.cost_usd.usd_per_million_output_tokens = 0.001"
forged fleet "$part" "cells[$k].report.scheduler.output_tokens_per_second" \
  ".cells[$k].report.scheduler.output_tokens_per_second *= 2"

# ------------------------------------------------- the smallest deployment
deploy=("$azure" --model llama-3.1-8b --gpu h100-80gb --tp 1,2 --no-search)
sweep deploy 2 "${deploy[@]}"
w=$work/deploy/whole.json
check '[[ $(jq -r ".min_deployment[0].deployment.label" "$w") == "h100-80gb x1" ]]' \
  "the smallest deployment is not h100-80gb x1: $(jq -c '.min_deployment' "$w")"
finish "deploy: the smallest deployment is one GPU"
read -r part k <<<"$(holder deploy 0)"
# tp 1 forged to preempt: tp 2 would be the answer; tp 1 decides it, and is simulated.
forged deploy "$part" "cells[$k].report: the figures of" ".cells[$k].report.scheduler.preemptions = 1"
forged deploy "$part" "cells[$k].report.config.gpu" ".cells[$k].report.config.gpu = \"h200\""

# ------------------------------------------------- the smallest KV memory
# Page 16: 512 blocks preempt, 4,096 serve, and the answer lies between.
search=("$azure" --kv-memory 1GiB,8GiB --page-tokens 16,32)
sweep search 2 "${search[@]}"
w=$work/search/whole.json
blocks=$(jq '.min_kv_memory[0].pool_blocks' "$w")
check '[[ $blocks =~ ^[0-9]+$ && $blocks -gt 2 ]]' "no answer of more than 2 blocks: $blocks"
finish "search: the smallest KV memory is found"
part=$work/search/part-1.json
check "[[ \$(jq '.searches[0].index' '$part') == 0 && \$(jq '.cells[0].index' '$part') == 0 ]]" \
  "part 1 does not hold search 0 and cell 0"
finish "search: part 1 holds search 0"
forged search "$part" "searches[0].pool_blocks: $((blocks + 1)) blocks, but simulated again $blocks blocks serve" \
  ".searches[0].pool_blocks += 1"
forged search "$part" "searches[0].pool_blocks: $((blocks - 1)) blocks, but simulated again they do not serve" \
  ".searches[0].pool_blocks -= 1"
unmet() { echo ".searches[0].pool_blocks = null | .searches[0].unmet = {\"reason\": \"compute_bound\", \"pool_blocks\": $1, \"message\": \"m\"}"; }
forged search "$part" "searches[0].unmet: no pool serves, but $work/search/forged-part-1.json: cells[1]" \
  "$(unmet "$blocks")"
forged search "$part" "searches[0].unmet.pool_blocks: compute-bound at 8192 blocks, but simulated again" \
  "$(unmet 8192)"
# The swept 4,096 blocks above the answer decide it: said to preempt, or
# simulated again.
check "[[ \$(jq '.cells[1].report.config.pool_blocks' '$part') == 4096 && $blocks -lt 4096 ]]" \
  "cell 1 is not the swept 4,096 blocks above the answer"
finish "search: a swept pool lies above the answer"
forged search "$part" "searches[0].pool_blocks: $blocks blocks, but $work/search/forged-part-1.json: cells[1] says" \
  ".cells[1].report.scheduler.preemptions = 3"
forged search "$part" "cells[1].report: the figures of" ".cells[1].report.latency.ttft_ms.p99 += 1"
# Cells that are not the sweep's: another model, page size, option, a copy.
forged search "$part" "cells[0].report.config.model" '.cells[0].report.config.model = "qwen3-8b"'
forged search "$part" "cells[0].report.config.page_tokens" '.cells[0].report.config.page_tokens = 32'
forged search "$part" "cells[0].report.config.simulation.watermark" \
  '.cells[0].report.config.simulation.watermark = 0.02'
run plan "${search[@]}" --watermark 0.02 --shard 1/2 --report "$work/search/other.json" -q
check '[[ $rc == 0 ]]' "the other sweep's shard exits $rc"
forged search "$part" "cells[0].report.config.simulation.watermark" \
  ".cells[0] = $(jq -c '.cells[0]' "$work/search/other.json")"
rm -f "$work/search/other.json"
forged search "$part" "cells[1].index: cell 0 again" '.cells[1] = .cells[0]'
forged search "$part" "cells[0].index: cell 99 is not in the sweep" '.cells[0].index = 99'
forged search "$part" "cells[0].report.prefix_cache.hit_rate" '.cells[0].report.prefix_cache.hit_rate = 0.5'
forged search "$part" "cells[0].report.prefix_cache.hit_tokens" \
  '.cells[0].report.prefix_cache.hit_tokens = .cells[0].report.prefix_cache.query_tokens + 1'

# The trace edited between the shards and the merge: the answers simulated
# again are of another trace.
cp "$azure" "$work/trace.csv"
for i in 1 2; do
  run plan "$work/trace.csv" --kv-memory 1GiB --page-tokens 16,32 --shard "$i/2" \
    --report "$work/trace-$i.json" -q
done
sed -i '$d' "$work/trace.csv"
rm -rf "$work/out-dir" && mkdir "$work/out-dir"
run plan-merge "$work/trace-1.json" "$work/trace-2.json" --report "$work/out-dir/plan.json"
check '[[ $rc == 2 && $(wc -l <"$work/err") == 1 && -z $(ls -A "$work/out-dir") ]]' \
  "a merge over an edited trace: exit $rc: $(err_text)"
check "[[ \$(cat '$work/err') == '$work/trace.csv: not the trace the plan'* ]]" "unclear: $(err_text)"
finish "plan-merge refuses a trace edited since the shards"

# --verify-all: a losing cell's figure that decides nothing (its mean waste) is
# trusted by default and refused when every cell is simulated again.
read -r rpart rk <<<"$(holder fleet "$rr")"
forgery=$work/fleet/forged-waste.json
jq -c ".cells[$rk].report.fragmentation.waste_ratio_mean = 0.5" "$rpart" >"$forgery"
parts=()
for f in "$work/fleet"/part-*.json; do
  if [[ $f == "$rpart" ]]; then parts+=("$forgery"); else parts+=("$f"); fi
done
rm -rf "$work/out-dir" && mkdir "$work/out-dir"
run plan-merge "${parts[@]}" --verify-all --report "$work/out-dir/plan.json"
check '[[ $rc == 2 && $(wc -l <"$work/err") == 1 && -z $(ls -A "$work/out-dir") ]]' \
  "--verify-all over a forged losing cell: exit $rc: $(err_text)"
check "[[ \$(cat '$work/err') == '$forgery: cells[$rk].report.fragmentation: not what simulating'* ]]" \
  "unclear: $(err_text)"
run plan-merge "$work/fleet"/part-*.json --verify-all --report "$work/out-dir/plan.json" -q
check '[[ $rc == 0 ]] && cmp -s "$work/out-dir/plan.json" "$work/fleet/whole.json"' \
  "--verify-all over the honest parts: exit $rc: $(err_text)"
finish "plan-merge --verify-all checks every figure of every cell"

# A plan with answers shards a trace file: the merge simulates them again.
run_cmd bash -c '"$1" plan - --kv-memory 1GiB --shard 1/2 --report "$2" <"$3"' _ "$kvreplay" \
  "$work/stdin-part.json" "$azure"
check '[[ $rc == 2 && ! -e "$work/stdin-part.json" ]] && grep -q "shard a trace file" "$work/err"' \
  "a plan with the search sharded from standard input: exit $rc: $(err_text)"
run_cmd bash -c '"$1" plan - --kv-memory 1GiB --no-search --shard 1/2 --report "$2" -q <"$3"' _ \
  "$kvreplay" "$work/stdin-part.json" "$azure"
check '[[ $rc == 0 ]]' "a plan with no answer sharded from standard input: exit $rc: $(err_text)"
finish "a plan with answers is sharded from a trace file"

echo "$passed passed, $failed failed"
((failed == 0))
