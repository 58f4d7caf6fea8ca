#!/usr/bin/env bash
# The planner's question from the command line: per-metric percentile SLOs
# (--slo METRIC:pNN:MS) beside the joint rule and vllm bench serve's
# --goodput, any --percentiles, inter-token latency, --time-scale; plan sweeps
# of offload settings, batch limits and load; --objective's one answer across
# the cells (or the nearest miss and what binds it); every answer's simulate
# line reproducing its cell; every misuse exit 2 with one line.
#
# Usage: run_planner_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_planner_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-planner.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
run_timeout=240
trace=$work/azure.csv
head -n "$(trace_lines 401 121)" traces/requests/azure_conv.csv >"$trace"
requests=$(($(wc -l <"$trace") - 1))
mooncake=traces/requests/mooncake_conv.jsonl
sim=(--model llama-3.1-8b --gpu h100-80gb -q)

# 1. Percentile targets: each target's value is the report's percentile, met
# when at most its limit; slo.met is every target's.
run simulate "$trace" "${sim[@]}" --slo ttft:p95:100000,tpot:p90:1,itl:p99:100000,e2e:p50:100000 \
  --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "--slo: exit $rc: $(err_text)"
check 'jq -e ".slo.targets | length == 4" "$work/report.json" >/dev/null' "targets: $(key '.slo | tostring')"
check 'jq -e "[.slo.targets[] as \$t | .latency[\$t.metric + \"_ms\"][\"p\" + (\$t.percentile | tostring)] == \$t.value_ms] | all" "$work/report.json" >/dev/null' \
  "a target's value is not its percentile: $(key '.slo.targets | tostring') vs $(key '.latency | tostring')"
check 'jq -e "[.slo.targets[] | .met == (.value_ms <= .limit_ms)] | all" "$work/report.json" >/dev/null' \
  "met is not value <= limit: $(key '.slo.targets | tostring')"
check 'jq -e ".slo.met == false and ([.slo.targets[].met] == [true, false, true, true]) and (.slo | has(\"attainment\") | not)" "$work/report.json" >/dev/null' \
  "slo.met: $(key '.slo | tostring')"
finish "simulate --slo: each target its percentile, met by its limit, slo.met all of them"

# 2. A per-metric p95 target accepts what the joint rule (99% of requests
# meeting both) rejects: limits at the p95s themselves.
run simulate "$trace" "${sim[@]}" --report "$work/plain.json"
ttft95=$(jq '.latency.ttft_ms.p95' "$work/plain.json")
tpot95=$(jq '.latency.tpot_ms.p95' "$work/plain.json")
run simulate "$trace" "${sim[@]}" --slo "ttft:p95:$ttft95,tpot:p95:$tpot95" --slo-ttft-ms "$ttft95" \
  --slo-tpot-ms "$tpot95" --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "joint and targets: exit $rc: $(err_text)"
check 'jq -e "[.slo.targets[].met] == [true, true] and .slo.attainment < 0.99 and .slo.met == false" "$work/report.json" >/dev/null' \
  "targets met, joint rule not: $(key '.slo | tostring')"
run simulate "$trace" "${sim[@]}" --slo "ttft:p95:$ttft95,tpot:p95:$tpot95" --report "$work/targets.json"
check 'jq -e ".slo.met == true" "$work/targets.json" >/dev/null' "the p95 targets alone: $(jq -c .slo "$work/targets.json")"
finish "simulate: a p95 target accepts what the joint rule rejects"

# 3. --goodput is vllm bench serve's rule: the joint rule's count, e2el too.
run simulate "$trace" "${sim[@]}" --slo-ttft-ms 200 --slo-tpot-ms 12 --report "$work/joint.json"
run simulate "$trace" "${sim[@]}" --goodput ttft:200 tpot:12 --report "$work/goodput.json"
check '[[ $rc -eq 0 ]] && [[ $(jq -s ".[0].slo.requests_met == .[1].slo.requests_met and .[0].slo.goodput_rps == .[1].slo.goodput_rps" "$work/joint.json" "$work/goodput.json") == true ]]' \
  "goodput and the joint rule differ: $(jq -s -c '[.[].slo]' "$work/joint.json" "$work/goodput.json")"
run simulate "$trace" "${sim[@]}" --goodput ttft:200,tpot:12,e2el:3000 --requests "$work/req.csv" \
  --report "$work/e2el.json"
met=$(awk -F, 'NR > 1 && $10 <= 200 && ($11 == "" || $11 <= 12) && $12 <= 3000' "$work/req.csv" | wc -l)
check '[[ $(jq .slo.requests_met "$work/e2el.json") == "$met" && $met -lt $(jq .slo.requests_met "$work/goodput.json") ]]' \
  "e2el: report $(jq .slo.requests_met "$work/e2el.json"), CSV $met"
finish "simulate --goodput: vllm bench serve's rule, e2el included"

# 4. --percentiles adds keys to every latency; ITL pooled per emission.
run simulate "$trace" "${sim[@]}" --percentiles 99.9,75 --report "$work/report.json"
check '[[ $rc -eq 0 ]] && jq -e "[.latency[] | has(\"p99.9\") and has(\"p75\") and .p75 <= .p90 and .p99 <= .[\"p99.9\"]] | all" "$work/report.json" >/dev/null' \
  "--percentiles: $(key '.latency.ttft_ms | tostring')"
check 'jq -e ".config.simulation.percentiles == [99.9, 75]" "$work/report.json" >/dev/null' \
  "recorded: $(key '.config.simulation.percentiles | tostring')"
# Every emission after a request's first is one gap: output tokens less one a request.
gaps=$(jq '.scheduler.output_tokens - .requests.finished' "$work/report.json")
check '[[ $(key .latency.itl_ms.count) == "$gaps" ]]' "ITL count $(key .latency.itl_ms.count), gaps $gaps"
check 'jq -e "(.latency.itl_ms.mean / .latency.tpot_ms.mean) > 0.8 and (.latency.itl_ms.mean / .latency.tpot_ms.mean) < 1.2" "$work/report.json" >/dev/null' \
  "ITL mean $(key .latency.itl_ms.mean) against TPOT mean $(key .latency.tpot_ms.mean)"
run simulate "$trace" "${sim[@]}" --metric-percentiles 99.9
check '[[ $rc -eq 0 ]]' "--metric-percentiles: exit $rc"
run simulate "$trace" --model llama-3.1-8b --gpu h100-80gb --percentiles 99.9
check 'grep -q "ITL  *p99.9 " "$work/out" && ! grep -q "TTFT .*p50" "$work/out"' "summary: $(grep -E 'TTFT|ITL' "$work/out" | tr '\n' '|')"
finish "simulate --percentiles and ITL: keys in every latency, one gap an emission"

# 5. --time-scale: the trace's own arrival times F times as fast.
run simulate "$trace" "${sim[@]}" --requests "$work/r1.csv"
run simulate "$trace" "${sim[@]}" --time-scale 2 --requests "$work/r2.csv" --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.simulation.time_scale) == 2 ]]' "--time-scale: exit $rc"
# Each request's arrival (by line) halved, to the CSV's microseconds.
worst=$(join -t, <(awk -F, 'NR > 1 { print $1 "," $6 }' "$work/r1.csv" | sort -t, -k1,1) \
  <(awk -F, 'NR > 1 { print $1 "," $6 }' "$work/r2.csv" | sort -t, -k1,1) |
  awk -F, '{ d = $2 / 2 - $3; if (d < 0) d = -d; if (d > m) m = d; n++ } END { print n, m + 0 }')
check '[[ ${worst% *} == "$requests" ]] && awk -v m="${worst#* }" "BEGIN { exit !(m <= 2e-6) }"' \
  "arrivals not halved: requests and largest difference $worst"
finish "simulate --time-scale 2: every arrival at half its time"

# 6. plan sweeps offload settings (none too), batch limits and load; the
# table and cells show the tiers' hits.
run plan "$mooncake" --gpu h100-80gb --kv-memory 4GiB --offload none,cpu:64GiB --no-search --report "$work/plan.json"
check '[[ $rc -eq 0 ]]' "plan --offload none,cpu: exit $rc: $(err_text)"
check 'jq -e "[.cells[].deployment.label] == [\"h100-80gb x1 (offload none)\", \"h100-80gb x1 (offload cpu:64GiB)\"]" "$work/plan.json" >/dev/null' \
  "cells: $(jq -c '[.cells[].deployment.label]' "$work/plan.json")"
check 'jq -e "(.cells[0].prefix_cache | has(\"hit_rate_with_tiers\") | not) and .cells[1].prefix_cache.hit_rate_with_tiers > .cells[0].prefix_cache.hit_rate and (.cells[1].offload.tiers.cpu.capacity_blocks > 0)" "$work/plan.json" >/dev/null' \
  "tier hits: $(jq -c '[.cells[].prefix_cache]' "$work/plan.json")"
check 'grep -q "tier_hit" "$work/out"' "table: $(head -2 "$work/out" | tr '\n' '|')"
run plan "$trace" --gpu h100-80gb --max-seqs 8,64 --max-batched-tokens 2048 --concurrency 4,16 --no-search \
  --report "$work/plan2.json"
check '[[ $rc -eq 0 && $(jq ".cells | length" "$work/plan2.json") == 4 ]]' "batch and load sweep: exit $rc, $(jq -c '[.cells[].deployment.label]' "$work/plan2.json")"
check 'jq -e "[.cells[].deployment.swept] == [[\"max-seqs 8\", \"concurrency 4\"], [\"max-seqs 8\", \"concurrency 16\"], [\"max-seqs 64\", \"concurrency 4\"], [\"max-seqs 64\", \"concurrency 16\"]]" "$work/plan2.json" >/dev/null' \
  "swept: $(jq -c '[.cells[].deployment.swept]' "$work/plan2.json")"
check 'jq -e "(.cells[0].output_tokens_per_second < .cells[1].output_tokens_per_second) and (.cells[1].output_tokens_per_second < .cells[3].output_tokens_per_second)" "$work/plan2.json" >/dev/null' \
  "more clients, more seats, more throughput: $(jq -c '[.cells[].output_tokens_per_second]' "$work/plan2.json")"
run plan "$trace" --gpu h100-80gb --time-scale 1,4 --no-search --report "$work/plan3.json"
check '[[ $rc -eq 0 ]] && jq -e ".cells[1].virtual_seconds < .cells[0].virtual_seconds / 2" "$work/plan3.json" >/dev/null' \
  "--time-scale sweep: exit $rc, $(jq -c '[.cells[].virtual_seconds]' "$work/plan3.json")"
finish "plan sweeps offload (none too), --max-seqs, --concurrency and --time-scale"

# 7. --objective: the best serving cell by it, across GPU kinds; its line
# reproduces it as simulate runs it.
echo '{"h100-80gb": 2.5, "h200": 3.8}' >"$work/prices.json"
run plan "$trace" --gpu h100-80gb,h200 --tp 1,2 --gpu-prices "$work/prices.json" --slo ttft:p95:1000 \
  --engine sglang --no-prefix-cache --objective usd-per-mtok --no-search --report "$work/plan.json" --html "$work/plan.html"
check '[[ $rc -eq 0 ]]' "plan --objective: exit $rc: $(err_text)"
check 'jq -e ".objective.answer.usd_per_million_output_tokens == ([.cells[] | select(.slo.met) | .cost_usd.usd_per_million_output_tokens] | min)" "$work/plan.json" >/dev/null' \
  "not the cheapest: $(jq -c '.objective.answer' "$work/plan.json") of $(jq -c '[.cells[] | [.slo.met, .cost_usd.usd_per_million_output_tokens]]' "$work/plan.json")"
args=$(jq -r .objective.answer.simulate_args "$work/plan.json")
check '[[ $args == *"--engine sglang"* && $args == *"--no-prefix-cache"* && $args == *"--slo ttft:p95:1000"* ]]' "the answer's options: $args"
eval "run simulate \"\$trace\" $args -q --report \"\$work/answer.json\""
cell=$(jq .objective.answer.cell "$work/plan.json")
check '[[ $rc -eq 0 ]] && [[ $(jq -s ".[0].cells['"$cell"'].latency == .[1].latency and .[0].cells['"$cell"'].cost_usd == .[1].cost_usd" "$work/plan.json" "$work/answer.json") == true ]]' \
  "the answer's simulate line does not reproduce its cell: exit $rc: $(err_text)"
check 'grep -q "Best by usd-per-mtok" "$work/plan.html"' "HTML has no objective section"
run plan "$trace" --gpu h100-80gb,h200 --gpu-hour-usd 3 --objective gpus --no-search --report "$work/plan.json"
check '[[ $rc -eq 0 ]] && jq -e ".objective.answer.gpus == 1" "$work/plan.json" >/dev/null' "--objective gpus: $(jq -c .objective "$work/plan.json")"
# The load's options once each; a cell without tiers without the tiers' links.
run plan "$trace" --gpu h200 --request-rate 2 --warmup-requests 10 --objective gpus --no-search \
  --report "$work/plan.json"
args=$(jq -r .objective.answer.simulate_args "$work/plan.json")
check '[[ $rc -eq 0 && $(grep -o -- "--warmup-requests" <<<"$args" | wc -l) == 1 ]]' "load options: $args"
eval "run simulate \"\$trace\" $args -q"
check '[[ $rc -eq 0 ]]' "the load's line does not run: $args: $(err_text)"
run plan "$trace" --gpu h200 --offload none,cpu:64GiB --offload-cpu-gbps 20 --offload-policy arc \
  --objective gpus --no-search --report "$work/plan.json"
args=$(jq -r .objective.answer.simulate_args "$work/plan.json")
check '[[ $rc -eq 0 && $args != *--offload* ]]' "offload none carries the tiers' options: $args"
finish "plan --objective: the cheapest serving cell across GPU kinds, its line reproducing it"

# 8. No cell serves: the nearest miss and what binds it.
run plan "$trace" --gpu h100-80gb --kv-memory 2GiB,8GiB --slo ttft:p99:1 --objective gpus --no-search \
  --report "$work/plan.json"
check '[[ $rc -eq 0 ]] && jq -e ".objective.answer == null and .objective.nearest_miss.reason == \"compute-bound prefill\" and (.objective.nearest_miss.shortfall | test(\"ttft p99\"))" "$work/plan.json" >/dev/null' \
  "nearest miss: exit $rc: $(jq -c .objective "$work/plan.json")"
check 'grep -q "nearest miss, bound by compute-bound prefill" "$work/out"' "table: $(tail -4 "$work/out" | tr '\n' '|')"
head -n "$(trace_lines 200 80)" "$mooncake" >"$work/burst.jsonl"
run plan "$work/burst.jsonl" --gpu h100-80gb --replicas 1,2 --kv-memory 2GiB --slo ttft:p95:2000 --no-search \
  --report "$work/plan.json"
check '[[ $rc -eq 0 ]] && jq -e ".min_fleet[0].deployment == null and (.min_fleet[0].nearest_miss.reason | IN(\"queueing\", \"memory\"))" "$work/plan.json" >/dev/null' \
  "fleet nearest miss: exit $rc: $(jq -c '.min_fleet[0] | {deployment, nearest_miss}' "$work/plan.json")"
finish "plan: with nothing serving, the nearest miss and its binding reason"

# 9. --dtype is the model's, as vLLM's: float32 doubles the weights, and the
# KV cache that followed them; the KV cache's own is --kv-cache-dtype.
run simulate "$trace" "${sim[@]}" --report "$work/bf16.json"
run simulate "$trace" "${sim[@]}" --dtype float32 --report "$work/fp32.json"
check '[[ $rc -eq 0 ]] && [[ $(jq -s ".[1].config.weights_bytes_per_gpu > 1.9 * .[0].config.weights_bytes_per_gpu and .[1].config.dtype == \"fp32\" and .[1].config.model_dtype == \"fp32\" and .[1].config.pool_blocks < .[0].config.pool_blocks" "$work/bf16.json" "$work/fp32.json") == true ]]' \
  "--dtype float32: $(jq -s -c '[.[].config | [.dtype, .weights_bytes_per_gpu, .pool_blocks]]' "$work/bf16.json" "$work/fp32.json")"
run simulate "$trace" "${sim[@]}" --dtype float32 --kv-cache-dtype fp8 --report "$work/mixed.json"
check '[[ $rc -eq 0 && $(jq -r .config.dtype "$work/mixed.json") == fp8 ]]' "--kv-cache-dtype beside --dtype: $(err_text)"
run simulate "$trace" "${sim[@]}" --dtype half --report "$work/half.json"
check '[[ $(jq -s ".[0].config.weights_bytes_per_gpu == .[1].config.weights_bytes_per_gpu" "$work/bf16.json" "$work/half.json") == true ]]' \
  "--dtype half changed the weights' bytes"
finish "simulate --dtype: the model's dtype, as vLLM's"

# 10. Hostile values: exit 2, one line naming the option.
misuse() {  # misuse COMMAND WANT ARGS...
  local command=$1 want=$2
  shift 2
  run "$command" "$trace" "${sim[@]}" "$@"
  check '[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]] && grep -qF -- "$want" "$work/err"' \
    "$command $*: exit $rc: $(err_text)"
}
misuse simulate "--slo: 'ttft:95:2000'" --slo ttft:95:2000
misuse simulate "unknown metric" --slo latency:p95:20
misuse simulate "not a percentile" --slo ttft:p0:20
misuse simulate "not a percentile" --slo ttft:p100.5:20
misuse simulate "not a number of ms" --slo ttft:p95:nan
misuse simulate "not a number of ms" --slo ttft:p95:inf
misuse simulate "not a number of ms" --slo ttft:p95:-5
misuse simulate "not a number of ms" --slo ttft:p95:1e13
misuse simulate "not three fields" --slo ttft:p95
misuse simulate "given twice" --slo ttft:p95:1,ttft:p95:2
misuse simulate "--slo" --slo ""
misuse simulate "is not KEY:MS" --goodput itl:20
misuse simulate "given twice" --goodput ttft:20 --slo-ttft-ms 30
misuse simulate "not a percentile" --slo ttft:p1e-3:100
misuse simulate "not a number of ms" --slo ttft:p95:-0
misuse simulate "the joint rule's share" --slo-attainment 0.5
misuse simulate "the joint rule's share" --slo ttft:p95:100 --slo-attainment 0.5
misuse simulate "the KV cache's is --kv-cache-dtype fp8" --dtype fp8
misuse simulate "is not a model dtype" --dtype int3
run simulate "$trace" --model deepseek-v3 --tp 8 --gpu h200 -q --dtype bfloat16
check '[[ $rc -eq 2 ]] && grep -q "checkpoint is quantized" "$work/err"' "a quantized checkpoint: exit $rc: $(err_text)"
misuse simulate "--percentiles" --percentiles 0
misuse simulate "--percentiles" --percentiles nan
misuse simulate "--percentiles" --percentiles abc
misuse simulate "--slo-attainment" --slo-attainment 1.5
misuse simulate "--time-scale" --time-scale 0
misuse simulate "--time-scale" --time-scale nan
misuse simulate "--time-scale scales the trace's own arrival times" --time-scale 2 --concurrency 4
misuse plan "needs a price" --objective usd-per-mtok --no-search
misuse plan "--objective" --objective cheapest --no-search
misuse plan "--max-seqs" --max-seqs 8,0 --no-search
misuse plan "--offload: unknown tier" --offload none,tape:1GiB --no-search
misuse plan "--concurrency" --concurrency 4,abc --no-search
finish "planner options: hostile values exit 2 with one line"

echo "$passed passed, $failed failed"
((failed == 0))
