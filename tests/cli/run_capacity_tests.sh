#!/usr/bin/env bash
# kvreplay capacity end to end: the breakdown in the engine's words, --report
# JSON, each engine's knob under its own name, refusals with exit 2 and one
# line, and the capacity table of bench/capacity/ within its stated bounds.
#
# Usage: run_capacity_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_capacity_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-capacity.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2

run_timeout=60
before_run() { rm -f "$work/report.json"; }
# refused WHAT MESSAGE ARGS...: exit 2, stderr exactly MESSAGE, no report.
refused() {
  local what=$1 message=$2
  shift 2
  run "$@" --report "$work/report.json"
  check '[[ $rc -eq 2 ]]' "exit $rc, not 2"
  check '[[ "$(cat "$work/err")" == "$message" ]]' "stderr: $(err_text)"
  check '[[ ! -e $work/report.json ]]' "a report was written"
  finish "refused: $what"
}

for i in $(seq 0 19); do
  echo "{\"arrival\": $((i / 4)).$((i % 4))5, \"prompt\": $((100 + 13 * i)), \"output\": $((8 + i % 5))}"
done >"$work/requests.jsonl"

run capacity --model llama-3.1-8b --gpu h100-80gb --max-model-len 32768 --report "$work/report.json"
check '[[ $rc -eq 0 && ! -s $work/err ]]' "exit $rc: $(err_text)"
check 'grep -q "GPU KV cache size: .* tokens, Maximum concurrency for 32,768 tokens per request: " "$work/out"' \
  "no vLLM capacity line: $(head -c 600 "$work/out" | tr '\n' '|')"
check '[[ $(key .kv_cache.tokens) -gt 0 && $(key ".kv_cache.blocks * 16 >= .kv_cache.tokens") == true ]]' \
  "kv_cache: $(key -c .kv_cache)"
check '[[ $(key ".memory.budget_bytes_per_gpu - .memory.weights_bytes_per_gpu - .memory.activation_bytes_per_gpu - .memory.cuda_graph_bytes_per_gpu - .memory.non_torch_bytes_per_gpu == .kv_cache.bytes_per_gpu") == true ]]' \
  "the breakdown does not add up: $(key -c .memory)"
check '[[ $(key ".max_concurrency > 0 and (.rules | length) >= 5 and .engine == \"vllm\"") == true ]]' \
  "max_concurrency or rules: $(key -c '[.max_concurrency, (.rules | length)]')"
finish "capacity: vLLM's breakdown, its words and --report"
cap_kv=$(key .kv_cache.bytes_per_gpu)

# simulate sizes its pool by the same rule (--kv-memory auto is the default on a GPU).
run simulate "$work/requests.jsonl" --model llama-3.1-8b --gpu h100-80gb --max-seq-tokens 32768 \
  -q --report "$work/sim.json"
check '[[ $rc -eq 0 ]]' "simulate exit $rc: $(err_text)"
check '[[ $(jq ".config.kv_memory" "$work/sim.json") == "$cap_kv" && $(jq -r ".config.kv_memory_rule.engine" "$work/sim.json") == vllm ]]' \
  "simulate's kv_memory $(jq .config.kv_memory "$work/sim.json") is not capacity's $cap_kv"
run simulate "$work/requests.jsonl" --model llama-3.1-8b --gpu h100-80gb --max-seq-tokens 32768 \
  --kv-memory auto -q --report "$work/sim2.json"
check '[[ $rc -eq 0 && $(jq ".config.kv_memory" "$work/sim2.json") == "$cap_kv" ]]' \
  "--kv-memory auto: $(err_text)"
run simulate "$work/requests.jsonl" --model llama-3.1-8b --engine sglang --gpu h100-80gb -q \
  --report "$work/sim3.json"
check '[[ $rc -eq 0 && $(jq -r ".config.kv_memory_rule.engine" "$work/sim3.json") == sglang ]]' \
  "--engine sglang sizes by SGLang's rule: $(jq -c .config.kv_memory_rule "$work/sim3.json")"
finish "simulate --gpu: the pool is capacity's figure for the engine"

# plan sweeps the engine's memory knob: one deployment a value, each pool by the rule.
run plan "$work/requests.jsonl" --model llama-3.1-8b --gpu h100-80gb \
  --gpu-memory-utilization 0.5,0.8 --no-search -q --report "$work/plan.json"
check '[[ $rc -eq 0 && $(jq -r "[.cells[].deployment.label] | join(\",\")" "$work/plan.json") == "h100-80gb x1 (memory 0.5),h100-80gb x1 (memory 0.8)" ]]' \
  "labels: $(jq -c '[.cells[].deployment.label]' "$work/plan.json" 2>/dev/null) $(err_text)"
check '[[ $(jq "[.cells[].config.kv_memory] | .[0] < .[1]" "$work/plan.json") == true && $(jq "[.cells[].config.gpu_memory_utilization] == [0.5, 0.8]" "$work/plan.json") == true ]]' \
  "pools: $(jq -c '[.cells[] | [.config.gpu_memory_utilization, .config.kv_memory]]' "$work/plan.json" 2>/dev/null)"
run plan "$work/requests.jsonl" --model llama-3.1-8b --gpu h100-80gb --gpu-memory-utilization 0.5,1.5 \
  --no-search -q
check '[[ $rc -eq 2 && "$(cat "$work/err")" == "command line: --gpu-memory-utilization: 1.5 is not in (0, 1]" ]]' \
  "a fraction past 1: exit $rc: $(err_text)"
finish "plan --gpu-memory-utilization A,B: a deployment each, its pool by the engine's rule"

run capacity --engine sglang --model llama-3.1-8b --gpu h100-80gb
check '[[ $rc -eq 0 ]] && grep -q "mem_fraction_static 0.835 (default)" "$work/out" && grep -q "^  max_total_num_tokens=" "$work/out"' \
  "sglang: $(head -c 600 "$work/out" | tr '\n' '|') $(err_text)"
run capacity --engine trtllm --model llama-3.1-8b-fp8 --gpu h100-80gb
check '[[ $rc -eq 0 ]] && grep -q "Allocated .* GiB for max tokens in paged KV cache (" "$work/out"' \
  "trtllm: $(head -c 600 "$work/out" | tr '\n' '|') $(err_text)"
finish "capacity: SGLang's and TensorRT-LLM's words"

refused "a knob of another engine" \
  "command line: --mem-fraction-static is sglang's knob, not vllm's" \
  capacity --model llama-3.1-8b --gpu h100-80gb --mem-fraction-static 0.8
refused "a fraction outside (0, 1]" \
  "command line: --gpu-memory-utilization 1.5: must be in (0, 1]" \
  capacity --model llama-3.1-8b --gpu h100-80gb --gpu-memory-utilization 1.5
refused "a fraction that is not a number" \
  "command line: --free-gpu-memory-fraction: must be a finite number, got nan" \
  capacity --engine trtllm --model llama-3.1-8b --gpu h100-80gb --free-gpu-memory-fraction nan
refused "weights over the budget" \
  "command line: the weights (131.45 GiB a GPU), the profile run (1.95 GiB), memory outside torch (0.25 GiB) and CUDA graphs (1.71 GiB) under --gpu-memory-utilization 0.92 leave -62.50 GiB for the KV cache of a h100-80gb (135.36 GiB taken, 72.86 GiB granted); give a larger --tp or --pp, a larger memory fraction, or a GPU with more memory" \
  capacity --model llama-3.1-70b --gpu h100-80gb
refused "a TP the heads do not divide" \
  "command line: num_attention_heads 28 is not divisible by --tp 8 (vLLM refuses it)" \
  capacity --model qwen2.5-7b --gpu h100-80gb --tp 8
refused "no GPU" "command line: give one of --gpu or --gpu-memory" \
  capacity --model llama-3.1-8b
refused "a GPU memory that does not parse" \
  "command line: --gpu-memory: 'lots' is not a size (expected e.g. 80GiB, 512MiB or a byte count)" \
  capacity --model llama-3.1-8b --gpu-memory lots
refused "a version that does not parse" \
  "command line: --engine-version: 'new' is not a version (A.B or A.B.C, e.g. 0.21)" \
  capacity --model llama-3.1-8b --gpu h100-80gb --engine-version new
run capacity --model llama-3.1-8b --gpu h100-80gb --report "$work/nodir/r.json"
check '[[ $rc -eq 2 && ! -e $work/nodir ]]' "an unwritable report: exit $rc"
finish "capacity: a report that cannot be written is exit 2"

# The capacity table: every log of bench/capacity/ predicted, and the medians
# within the README's figures (exit 1 past them).
table=$(bash scripts/capacity-table "$kvreplay" --json)
check '[[ $(jq "[.rows[] | select(.refused)] | length" <<<"$table") == 0 ]]' \
  "a log's deployment was refused: $(jq -c '[.rows[] | select(.refused) | .id]' <<<"$table")"
check '[[ $(jq ".rows | length" <<<"$table") == $(grep -c . bench/capacity/logs.jsonl) ]]' "rows missing"
check '[[ $(jq "[.summary[] | .median <= 1.0] | all" <<<"$table") == true && $(jq ".summary | length" <<<"$table") == 3 ]]' \
  "medians past the README's: $(jq -c .summary <<<"$table")"
finish "capacity table: bench/capacity/ within the README's figures"

echo "$passed passed, $failed failed"
((failed == 0))
