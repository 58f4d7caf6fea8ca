#!/usr/bin/env bash
# `kvreplay plan` over fleets (SPEC 3.6) from the command line: --replicas,
# --pd and --router lists sweep fleets; the answer (min_fleet) is the fewest
# GPUs that serve the trace with no preemption and the SLOs met, then the
# lowest $ (recomputed here from the cells), verified, and reproduced by
# `simulate` with the options it prints; each router's fewest; every cell
# is the simulation of its fleet; --gpu-prices prices each GPU kind; shards
# merge byte-identical (report and HTML); every misuse is exit 2.
#
# Usage: run_plan_fleet_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_plan_fleet_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-plan-fleet.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
run_timeout=240
trace=traces/requests/mooncake_conv.jsonl
printf '{\n  "h100-80gb": 2.5,\n  "h200": 3.2\n}\n' >"$work/prices.json"
slo=(--slo-ttft-ms 10000 --slo-tpot-ms 300 --slo-attainment 0.9)
sweep=(--model llama-3.1-8b --gpu h100-80gb,h200 --replicas 1,2,4 --pd 1:1,2:2
  --router round-robin,prefix-aware "${slo[@]}" --gpu-prices "$work/prices.json" --no-search)

# 1. The sweep: one cell per GPU x fleet x router (a fleet that routes
#    nothing once), the answer recomputed from the cells, verified.
run plan "$trace" "${sweep[@]}" --report "$work/plan.json" --html "$work/plan.html"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
# Per GPU: x1, 2 routers x (2 and 4 replicas), pd 1:1 (routes nothing), 2 routers x pd 2:2.
check '[[ $(jq ".cells | length" "$work/plan.json") == 16 ]]' "not 16 cells"
check '[[ $(jq "[.cells[] | select(.deployment.label == \"h200 x4 (pd 2:2, prefix-aware)\")] | length" "$work/plan.json") == 1 ]]' \
  "no cell h200 x4 (pd 2:2, prefix-aware)"
check '[[ $(jq "[.cells[] | select(.deployment.fleet.instances > 1 and .fleet.gpus != .deployment.gpus)] | length" "$work/plan.json") == 0 ]]' \
  "a cell's fleet is not its deployment's"
check '[[ $(jq "[.cells[] | select(.deployment.gpus != .deployment.tp * .deployment.pp * .deployment.fleet.instances)] | length" "$work/plan.json") == 0 ]]' \
  "a deployment's GPUs are not tp x pp x instances"
# Priced by kind: $ an hour = GPUs x the file's price.
check '[[ $(jq "[.cells[] | select(.cost_usd.usd_per_hour != .deployment.gpus * (if .deployment.gpu == \"h200\" then 3.2 else 2.5 end))] | length" "$work/plan.json") == 0 ]]' \
  "a cell's \$ an hour is not its GPUs x its kind's price"
expected=$(jq -r '[.cells[] | select(.preemptions == 0 and .slo.attainment >= 0.9)]
  | sort_by(.deployment.gpus, .cost_usd.usd_per_hour, .cost_usd.usd_per_million_output_tokens)
  | .[0].deployment.label // "none"' "$work/plan.json")
answer=$(jq -r '.min_fleet[0].deployment.label // "none"' "$work/plan.json")
check '[[ $expected != none && $answer == "$expected" ]]' "answer '$answer', the cells say '$expected'"
check '[[ $(jq ".min_fleet[0].verified" "$work/plan.json") == true ]]' "the answer is not verified"
check '[[ $(jq "[.min_fleet[0].by_router[] | select(.gpus < $(jq .min_fleet[0].gpus "$work/plan.json"))] | length" "$work/plan.json") == 0 ]]' \
  "a router's fewest GPUs are fewer than the answer's"
check '[[ $(jq -r "[.min_fleet[0].by_router[].router] | join(\",\")" "$work/plan.json") == round-robin,prefix-aware ]]' \
  "by_router does not name the swept routers"
check 'grep -q "<h2>Fewest GPUs meeting the SLOs" "$work/plan.html"' "the HTML has no answer table"
check 'grep -q "usd_per_million_output_tokens" "$work/plan.html"' "the HTML's data has no \$ per million tokens"
check 'grep -q "fewest GPUs with no preemption" "$work/out"' "the table has no answer"
finish "plan over fleets: cells, prices, the answer from the cells, verified"

# 2. The answer reproduces: simulate with the options the plan prints.
read -r -a args <<<"$(jq -r '.min_fleet[0].simulate_args' "$work/plan.json")"
run simulate "$trace" "${args[@]}" --report "$work/answer.json" -q
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
for figure in hit_rate slo_attainment usd_per_million_output_tokens p99_ttft_ms; do
  case $figure in
    hit_rate) path=.prefix_cache.hit_rate ;;
    slo_attainment) path=.slo.attainment ;;
    usd_per_million_output_tokens) path=.cost_usd.usd_per_million_output_tokens ;;
    p99_ttft_ms) path=.latency.ttft_ms.p99 ;;
  esac
  check "[[ \$(jq '.min_fleet[0].$figure' '$work/plan.json') == \$(jq '$path' '$work/answer.json') ]]" \
    "simulate gives another $figure than the plan's answer"
done
# And a P/D cell is the simulation of its fleet.
run simulate "$trace" --model llama-3.1-8b --gpu h200 --prefill-replicas 2 --decode-replicas 2 \
  --router prefix-aware "${slo[@]:0:4}" --report "$work/pd.json" -q
check '[[ $(jq "[.cells[] | select(.deployment.label == \"h200 x4 (pd 2:2, prefix-aware)\")][0].latency" "$work/plan.json") == $(jq .latency "$work/pd.json") ]]' \
  "the plan's P/D cell is not simulate's"
# Prices and SLOs that take many digits reproduce too.
run plan "$trace" --model llama-3.1-8b --gpu h100-80gb --replicas 4,8 --slo-ttft-ms 9876.54321 \
  --slo-tpot-ms 300.123456789 --slo-attainment 0.5 --gpu-hour-usd 2.987654321 --no-search \
  --report "$work/digits.json" -q
read -r -a args <<<"$(jq -r '.min_fleet[0].simulate_args' "$work/digits.json")"
run simulate "$trace" "${args[@]}" --report "$work/digits-sim.json" -q
check '[[ $(jq .min_fleet[0].usd_per_million_output_tokens "$work/digits.json") == $(jq .cost_usd.usd_per_million_output_tokens "$work/digits-sim.json") ]]' \
  "simulate_args lost digits: ${args[*]}"
finish "the answer and a P/D cell reproduce with simulate"

# 3. Shards merge byte-identical to the plan run whole (report and HTML).
for i in 1 2 3; do
  run plan "$trace" "${sweep[@]}" --shard "$i/3" --report "$work/part$i.json"
  check '[[ $rc -eq 0 ]]' "shard $i: exit $rc: $(err_text)"
done
run plan-merge "$work"/part{1,2,3}.json --report "$work/merged.json" --html "$work/merged.html" -q
check '[[ $rc -eq 0 ]]' "plan-merge: exit $rc: $(err_text)"
check 'cmp -s "$work/plan.json" "$work/merged.json"' "the merged report differs"
check 'cmp -s "$work/plan.html" "$work/merged.html"' "the merged HTML differs"
# Shards priced otherwise are not one sweep; a part's forged cost is refused.
run plan "$trace" "${sweep[@]}" --shard 1/2 --report "$work/p1.json"
sed 's/"h200": 3.2/"h200": 3.3/' "$work/prices.json" >"$work/prices2.json"
run plan "$trace" "${sweep[@]//$work\/prices.json/$work/prices2.json}" --shard 2/2 --report "$work/p2.json"
run plan-merge "$work/p1.json" "$work/p2.json" --report "$work/mixed.json" -q
check '[[ $rc -eq 2 && ! -e "$work/mixed.json" ]]' "shards priced otherwise merged: exit $rc: $(err_text)"
jq -c '.cells[0].report.cost_usd.usd_per_hour += 1' \
  "$work/part1.json" >"$work/forged1.json"
run plan-merge "$work/forged1.json" "$work/part2.json" "$work/part3.json" --report "$work/forged.json" -q
check '[[ $rc -eq 2 && ! -e "$work/forged.json" ]] && grep -q "cost_usd.usd_per_hour: .*, but .* GPUs at" "$work/err"' \
  "a forged \$ an hour merged, or unclear: exit $rc: $(err_text)"
finish "a fleet plan's shards merge byte-identical"

# 4. With the search: a fleet's pool is each instance's.
run plan "$trace" --model llama-3.1-8b --kv-memory 4GiB --replicas 2 --router prefix-aware \
  --report "$work/search.json" -q
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
read -r -a args <<<"--model llama-3.1-8b --replicas 2 --router prefix-aware --kv-memory $(jq -r '.min_kv_memory[0].kv_memory' "$work/search.json")"
run simulate "$trace" "${args[@]}" --report "$work/at.json" -q
check '[[ $(jq .scheduler.preemptions "$work/at.json") == 0 ]]' "the smallest memory preempts: ${args[*]}"
check '[[ $(jq ".min_kv_memory[0].deployment.fleet.replicas" "$work/search.json") == 2 ]]' \
  "the search is not of the 2-replica fleet"
finish "the smallest KV memory of a fleet serves"

# 5. Misuse: exit 2, naming the option (or the file and line).
printf '{\n  "h100-80gb": 2.5,\n  "b300x": 1\n}\n' >"$work/unknown.json"
printf '{\n  "h100-80gb": "cheap"\n}\n' >"$work/text.json"
printf '{"h100-80gb": 2.5}\n' >"$work/h100.json"
printf '{"h100-80gb": 1e10}\n' >"$work/dear.json"
base=(plan "$trace" --model llama-3.1-8b --gpu h100-80gb --no-search -q)
while IFS='|' read -r words expect; do
  read -r -a extra <<<"$words"
  run "${base[@]}" "${extra[@]}"
  check '[[ $rc -eq 2 ]] && grep -qF -- "$expect" "$work/err"' "${words}: exit $rc, not 2 naming '$expect': $(err_text)"
done <<EOF2
--pd 0:1|--pd: '0:1'
--pd 2|--pd: '2'
--pd 1:x|--pd: '1:x'
--pd 1:2:3|--pd: '1:2:3'
--replicas 1 --router prefix-aware|--router routes requests
--replicas 2 --kv-transfer-gbps 10|--kv-transfer-gbps is an option of --pd
--pd 1:1 --engine sglang|--pd: disaggregated serving
--replicas 0|--replicas
--replicas 2 --gpu-prices $work/unknown.json|unknown.json:3: --gpu-prices: "b300x": unknown GPU
--replicas 2 --gpu-prices $work/text.json|text.json:2: --gpu-prices: "h100-80gb": "cheap" is not a price
--replicas 2 --gpu-prices $work/dear.json|dear.json:1: --gpu-prices: "h100-80gb": 10000000000.0 is not a price
--pd 1:1 --router prefix-aware|--router routes requests
--replicas 2 --gpu h200 --gpu-prices $work/h100.json|has no price for h200
--replicas 2 --gpu-prices $work/h100.json --gpu-hour-usd 2|excludes
EOF2
# A fleet plan's shards read the trace from a file: the merge simulates the answer again.
run_cmd bash -c '"$1" plan - --model llama-3.1-8b --gpu h100-80gb --replicas 2 --no-search \
  --shard 1/2 --report "$2" <"$3"' _ "$kvreplay" "$work/stdin-part.json" "$trace"
check '[[ $rc -eq 2 && ! -e "$work/stdin-part.json" ]] && grep -q "shard a trace file" "$work/err"' \
  "a fleet plan sharded from standard input: exit $rc: $(err_text)"
finish "misused fleet and price options are refused"

# 6. simulate --gpu-prices: the price of --gpu's kind; without fleet flags, plan has no min_fleet.
run simulate "$trace" --model llama-3.1-8b --gpu h200 --gpu-prices "$work/prices.json" \
  --report "$work/priced.json" -q
check '[[ $rc -eq 0 && $(jq .cost_usd.gpu_hour_usd "$work/priced.json") == 3.2 ]]' \
  "simulate --gpu-prices: not h200's price: $(err_text)"
run plan "$trace" --model llama-3.1-8b --gpu h100-80gb --no-search --report "$work/plain.json" -q
check '[[ $rc -eq 0 && $(jq "has(\"min_fleet\")" "$work/plain.json") == false ]]' \
  "a plan with no fleet options has min_fleet"
# A fleet's memory is every instance's: checked before the run.
KVREPLAY_MEMORY_LIMIT=60MiB run simulate "$trace" --kv-memory 64MiB --replicas 4096 -q
check '[[ $rc -eq 2 ]] && grep -q -- "--replicas: .*4096 instances" "$work/err"' \
  "simulate --replicas 4096 under a 60 MiB limit: exit $rc: $(err_text)"
finish "simulate --gpu-prices; no fleet answer without fleet options"

echo "$passed passed, $failed failed"
((failed == 0))
