#!/usr/bin/env bash
# Models and deployments from the command line (SPEC 3.2; README "Models and
# deployments"): every preset on a GPU at several --tp, --model-config files
# (nested text_config too), --pp, --gpu-memory-utilization, --gpu setting the
# GPU class, --max-seq-tokens defaulting to the model's context, plan with a
# fixed deployment, the report's per-GPU keys, and every refusal (exit 2, one
# line naming the option or the config file's field).
#
# Usage: run_models_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_models_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-models.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2

run_timeout=60
before_run() { rm -f "$work/report.json" "$work/plan.json"; }
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

# 40 short requests, a few sharing a prefix.
for i in $(seq 0 39); do
  echo "{\"arrival\": $((i / 4)).$((i % 4))5, \"prompt\": $((100 + 13 * i)), \"output\": $((8 + i % 5))}"
done >"$work/requests.jsonl"

# Every preset on an H100 80GB where its weights fit at some --tp: the report's
# figures per GPU, as README's table gives them (bytes per token x tp is the
# whole model's, and the pool is the GPU's memory less weights and reserve).
for model in llama-3.1-8b llama-3.1-70b qwen3-8b qwen3-32b qwen3-235b-a22b gpt-oss-20b \
  gpt-oss-120b gemma-3-27b mistral-7b qwen2.5-7b llama-3-8b; do
  for tp in 4 8; do
    [[ $model == qwen2.5-7b && $tp == 8 ]] && continue       # 28 heads: refused below
    [[ $model == qwen3-235b-a22b && $tp == 4 ]] && continue  # 109 GiB of weights a GPU
    run simulate "$work/requests.jsonl" --model "$model" --gpu h100-80gb --tp "$tp" -q \
      --report "$work/report.json"
    check '[[ $rc -eq 0 && ! -s $work/err ]]' "exit $rc: $(err_text)"
    check '[[ -s $work/report.json && $(key .config.per_gpu) == true ]]' "config.per_gpu is not true"
    check '[[ -s $work/report.json && $(key .config.tp) == $tp && $(key .config.pp) == 1 ]]' \
      "tp/pp: $(key '[.config.tp, .config.pp] | tostring')"
    check '[[ -s $work/report.json && $(key .config.gpu) == h100-80gb && $(key .config.gpu_memory_utilization) == 0.92 ]]' \
      "gpu: $(key '[.config.gpu, .config.gpu_memory_utilization] | tostring')"
    # KV memory = ceil(0.92 x CUDA's 79.19 GiB) - weights - reserve (vLLM 0.21's rule,
    # kvreplay capacity), and the pool floors it to blocks.
    check '[[ -s $work/report.json && $(key ".config.kv_memory == 78227670303 - .config.weights_bytes_per_gpu - .config.activation_reserve_bytes") == true ]]' \
      "kv_memory is not the budget less weights and reserve: $(key '.config | [.kv_memory, .weights_bytes_per_gpu, .activation_reserve_bytes] | tostring')"
    check '[[ -s $work/report.json && $(key ".config.pool_blocks == ((.config.kv_memory / .config.block_bytes) | floor)") == true ]]' \
      "pool_blocks is not floor(kv_memory / block_bytes)"
    check '[[ -s $work/report.json && $(key .config.model_source) == preset:* ]]' \
      "model_source: $(key .config.model_source)"
    finish "simulate --model $model --gpu h100-80gb --tp $tp: the pool of one GPU"
  done
done

# Bytes per token per GPU: the KV heads split by tp (replicated past their
# count), the MLA latent on every rank.
run simulate "$work/requests.jsonl" --model llama-3.1-70b --gpu h100-80gb --tp 2 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.bytes_per_token) == $((2 * 80 * 4 * 128 * 2)) && $(key .config.kv_heads) == 4 ]]' \
  "llama-3.1-70b tp 2: $(key '.config | [.bytes_per_token, .kv_heads] | tostring')"
run simulate "$work/requests.jsonl" --model qwen3-235b-a22b --gpu h100-80gb --tp 8 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.kv_heads) == 1 && $(key .config.bytes_per_token) == $((2 * 94 * 1 * 128 * 2)) ]]' \
  "qwen3-235b tp 8 (4 KV heads, replicated): $(key '.config | [.bytes_per_token, .kv_heads] | tostring')"
run simulate "$work/requests.jsonl" --model deepseek-v3 --gpu h200 --tp 8 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.kv_tensors) == 1 && $(key .config.bytes_per_token) == $((61 * 576 * 2)) ]]' \
  "deepseek-v3 tp 8 on h200: $(key '.config | [.bytes_per_token, .kv_tensors] | tostring') $(err_text)"
check '[[ $rc -eq 0 && $(key .config.max_seq_tokens) == 163840 ]]' \
  "deepseek-v3 max_seq_tokens $(key .config.max_seq_tokens): not its context length"
run simulate "$work/requests.jsonl" --model llama-3.1-405b --gpu h100-80gb --tp 8 --pp 2 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.layers) == 63 && $(key .config.bytes_per_token) == $((2 * 63 * 1 * 128 * 2)) ]]' \
  "llama-3.1-405b tp 8 pp 2 (16 GPUs): $(key '.config | [.layers, .bytes_per_token] | tostring') $(err_text)"
# The weights of the heaviest... of the deciding stage, as kvreplay capacity gives them.
cap=$("$kvreplay" capacity --model llama-3.1-405b --gpu h100-80gb --tp 8 --pp 2 --report - 2>/dev/null | jq .memory.weights_bytes_per_gpu)
check '[[ $rc -eq 0 && -n $cap && $(key .config.weights_bytes_per_gpu) == "$cap" && $cap -gt $((2 * 405849243648 / 16 - (1 << 30))) ]]' \
  "weights per GPU $(key .config.weights_bytes_per_gpu): not capacity's $cap"
run simulate "$work/requests.jsonl" --model gemma-3-27b --gpu h100-80gb --gpu-memory-utilization 0.8 -q \
  --report "$work/report.json"
# vLLM's groups (_get_kv_cache_groups_uniform_page_size): 52 sliding and 10 full
# layers, group size 10: ceil(52 / 10) = 6 sliding groups of 9, 9, 9, 9, 8, 8
# layers, then the full one; a block is a page of 10 layers.
check '[[ $rc -eq 0 && $(key "[.config.kv_cache_groups[] | \"\(.attention):\(.layers):\(.window_tokens)\"] | join(\",\")") == "sliding:9:1024,sliding:9:1024,sliding:9:1024,sliding:9:1024,sliding:8:1024,sliding:8:1024,full:10:0" ]]' \
  "gemma-3-27b groups: $(key '.config.kv_cache_groups | tostring') $(err_text)"
check '[[ $rc -eq 0 && $(key .config.block_bytes) == $((2 * 10 * 16 * 128 * 2 * 16)) ]]' \
  "gemma-3-27b block_bytes $(key .config.block_bytes): not a page of 10 layers"
check '[[ $rc -eq 0 && $(key ".config.kv_memory == 68024061133 - .config.weights_bytes_per_gpu - .config.activation_reserve_bytes") == true ]]' \
  "--gpu-memory-utilization 0.8 (of CUDA's 79.19 GiB: 68024061133): kv_memory $(key .config.kv_memory)"
check '[[ $rc -eq 0 && $(key .config.bytes_per_token) == $((2 * 62 * 16 * 128 * 2)) ]]' \
  "gemma-3-27b bytes_per_token $(key .config.bytes_per_token): not full attention's in every layer"
finish "simulate: bytes per token per GPU under tp, pp, MLA and sliding windows"

# --gpu sets the GPU class unless --gpu-class is given; --kv-memory still sets the pool.
run simulate "$work/requests.jsonl" --model qwen3-8b --gpu a100-80gb -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.simulation.gpu_class) == small && $(key .config.simulation.max_batched_tokens) == 2048 ]]' \
  "a100: $(key '.config.simulation | [.gpu_class, .max_batched_tokens] | tostring')"
# vLLM's profile run at the small class's limits: the sampler's 256 requests x
# 151936 logits x 14.9 bytes beside 2048 tokens' hidden states, the CUDA-graph
# estimate of 36 layers, 0.25 GiB outside torch (kvreplay capacity's rule; a
# byte either way for the rounding of doubles).
reserve=$(awk 'BEGIN { printf "%d", int(256 * 151936 * 14.9 + 2048 * 4096 * 2) + int((0.376 + 0.0167 * 36) * 2^30) + 2^28 }')
check '[[ $rc -eq 0 && $(key ".config.activation_reserve_bytes - $reserve | fabs <= 2") == true ]]' \
  "the reserve is not sized for the small class's limits: $(key .config.activation_reserve_bytes)"
check '[[ $rc -eq 0 && $(key .config.max_seq_tokens) == 40960 ]]' \
  "max_seq_tokens $(key .config.max_seq_tokens): not qwen3-8b's context"
run simulate "$work/requests.jsonl" --model qwen3-8b --gpu a100-80gb --gpu-class large -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.simulation.gpu_class) == large ]]' "--gpu-class given did not win"
run simulate "$work/requests.jsonl" --model qwen3-8b --gpu l40s --kv-memory 2GiB -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.kv_memory) == $((2 << 30)) && $(key .config.activation_reserve_bytes) == null ]]' \
  "--kv-memory with --gpu: $(key '.config | [.kv_memory, .activation_reserve_bytes] | tostring')"
check '[[ $rc -eq 0 && $(key .config.gpu) == l40s && $(key .config.simulation.gpu_class) == small ]]' \
  "--kv-memory with --gpu: gpu $(key .config.gpu)"
run simulate "$work/requests.jsonl" --kv-memory 1GiB -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.model) == llama-3.1-8b && $(key .config.max_seq_tokens) == 131072 && $(key .config.gpu) == null && $(key .config.tp) == 1 ]]' \
  "the default model: $(key '.config | [.model, .max_seq_tokens, .gpu, .tp] | tostring')"
finish "simulate: --gpu sets the GPU class, --kv-memory the pool, --max-seq-tokens the model's context"

# The summary says its figures are per GPU, and where the pool came from.
run simulate "$work/requests.jsonl" --model llama-3.1-70b --gpu h100-80gb --tp 4
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check 'grep -q "^config (per GPU): llama-3.1-70b bf16, page 16 tokens, " "$work/out"' \
  "no per-GPU config line: $(head -c 300 "$work/out")"
check 'grep -q "^deployment: h100-80gb, tp 4, pp 1 (80 layers x 2 KV heads per GPU), vllm 0.21.s rule at gpu_memory_utilization 0.92: per GPU weights 32.9 GiB, activation [0-9.]* GiB, CUDA graphs [0-9.]* GiB, non-torch [0-9.]* GiB, KV [0-9.]* GiB$" "$work/out"' \
  "no deployment line: $(grep deployment "$work/out")"
finish "simulate: the summary's figures are per GPU and say so"

# --model-config: a Hugging Face config.json, nested text_config too.
cat >"$work/config.json" <<'EOF'
{
  "architectures": ["SomeVlmForConditionalGeneration"],
  "model_type": "some_vlm",
  "torch_dtype": "bfloat16",
  "text_config": {
    "model_type": "llama",
    "num_hidden_layers": 16,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 8192,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "sliding_window": 512,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                    "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                    "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                    "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "tie_word_embeddings": true
  }
}
EOF
run simulate "$work/requests.jsonl" --model-config "$work/config.json" --gpu l40s --tp 2 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && ! -s $work/err ]]' "exit $rc: $(err_text)"
check '[[ -s $work/report.json && $(key .config.model_source) == "file:$work/config.json" && $(key .config.model) == "$work/config.json" ]]' \
  "model: $(key '.config | [.model, .model_source] | tostring')"
check '[[ -s $work/report.json && $(key .config.bytes_per_token) == $((2 * 16 * 4 * 64 * 2)) && $(key .config.max_seq_tokens) == 8192 ]]' \
  "geometry: $(key '.config | [.bytes_per_token, .max_seq_tokens] | tostring')"
check '[[ -s $work/report.json && $(key "[.config.kv_cache_groups[] | \"\(.attention):\(.layers):\(.window_tokens)\"] | join(\",\")") == "sliding:4:512,sliding:4:512,sliding:4:512,full:4:0" ]]' \
  "groups: $(key '.config.kv_cache_groups | tostring')"
# 128256 * 2048 tied; per layer q,o 2048 x 2048, k,v 2048 x 512, MLP 3 * 2048 * 8192.
params=$((128256 * 2048 + 16 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192)))
# Per GPU: the rank's share as kvreplay capacity computes it (the vocabulary,
# q and o, the MLP split in two; k and v split; norms and the rotary cache whole).
cap=$("$kvreplay" capacity --model-config "$work/config.json" --gpu l40s --tp 2 --max-model-len 8192 --report - 2>/dev/null | jq .memory.weights_bytes_per_gpu)
check '[[ -s $work/report.json && $(key .config.parameters.total) == $params && $(key .config.weights_bytes_per_gpu) == "$cap" && $cap -ge $params ]]' \
  "parameters $(key .config.parameters.total), weights per GPU $(key .config.weights_bytes_per_gpu): not capacity's $cap"
jq 'del(.timing)' "$work/report.json" >"$work/first.json"
run simulate "$work/requests.jsonl" --model-config "$work/config.json" --gpu l40s --tp 2 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 ]] && diff -q <(jq "del(.timing)" "$work/report.json") "$work/first.json" >/dev/null' \
  "the same run twice gave different reports"
finish "simulate --model-config: a nested text_config, sliding layers, per-GPU figures, deterministic"

# Refusals: exit 2, one line naming the option or the config file's field.
jq 'del(.text_config.num_hidden_layers)' "$work/config.json" >"$work/no_layers.json"
refused "a config.json without num_hidden_layers" \
  "$work/no_layers.json: text_config.num_hidden_layers: missing" \
  simulate "$work/requests.jsonl" --model-config "$work/no_layers.json" --kv-memory 1GiB -q
jq '.text_config.num_key_value_heads = "8"' "$work/config.json" >"$work/typed.json"
refused "a config.json field of the wrong type" \
  "$work/typed.json: text_config.num_key_value_heads: expected an integer, got \"8\"" \
  simulate "$work/requests.jsonl" --model-config "$work/typed.json" --kv-memory 1GiB -q
printf '{\n  "num_hidden_layers": 4,\n  oops\n}\n' >"$work/broken.json"
run simulate "$work/requests.jsonl" --model-config "$work/broken.json" --kv-memory 1GiB -q
check '[[ $rc -eq 2 ]] && grep -q "^$work/broken.json:3: json: not valid JSON: " "$work/err"' \
  "broken JSON: exit $rc: $(err_text)"
finish "refused: a config.json that is not JSON"
refused "a config.json that does not exist" \
  "$work/absent.json: file: cannot open: No such file or directory" \
  simulate "$work/requests.jsonl" --model-config "$work/absent.json" --kv-memory 1GiB -q
refused "weights that do not fit" \
  "command line: --gpu: llama-3.1-70b at --tp 1 --pp 1: the weights (131.45 GiB a GPU), the profile run (1.95 GiB), memory outside torch (0.25 GiB) and CUDA graphs (1.71 GiB) under --gpu-memory-utilization 0.92 leave -62.50 GiB for the KV cache of a h100-80gb (135.36 GiB taken, 72.86 GiB granted); give a larger --tp or --pp, a larger memory fraction, or a GPU with more memory" \
  simulate "$work/requests.jsonl" --model llama-3.1-70b --gpu h100-80gb -q
refused "an unknown GPU" \
  "command line: --gpu: unknown GPU 'h100' (known: a100-80gb, b200, h100-80gb, h200, l40s, mi300x)" \
  simulate "$work/requests.jsonl" --gpu h100 -q
refused "--tp that does not divide the heads" \
  "command line: --tp: num_attention_heads 28 is not divisible by --tp 8 (vLLM refuses it)" \
  simulate "$work/requests.jsonl" --model qwen2.5-7b --gpu h100-80gb --tp 8 -q
refused "--pp past the layers" \
  "command line: --pp: --pp 40 is more stages than the 32 layers" \
  simulate "$work/requests.jsonl" --model mistral-7b --gpu h100-80gb --pp 40 -q
refused "--gpu-memory-utilization without --gpu" \
  "command line: --gpu-memory-utilization: needs --gpu (the GPU whose memory it divides)" \
  simulate "$work/requests.jsonl" --kv-memory 1GiB --gpu-memory-utilization 0.8 -q
refused "--gpu-memory-utilization above 1" \
  "command line: --gpu-memory-utilization: 1.2 is not in (0, 1]" \
  simulate "$work/requests.jsonl" --gpu h200 --gpu-memory-utilization 1.2 -q
refused "--model and --model-config together" \
  "command line: --model-config: give one of --model or --model-config, not both" \
  simulate "$work/requests.jsonl" --model qwen3-8b --model-config "$work/config.json" --kv-memory 1GiB -q
refused "--gpu with a geometry given by hand" \
  "command line: --gpu: sizing the pool from the GPU's memory needs the model's weights: give --model or --model-config (a geometry given by hand has none), or --kv-memory" \
  simulate "$work/requests.jsonl" --layers 4 --kv-heads 2 --head-dim 64 --gpu h200 -q
refused "an unknown model" \
  "command line: --model: unknown model 'llama-4' (known: deepseek-v3, gemma-3-27b, gpt-oss-120b, gpt-oss-20b, llama-3.1-405b, llama-3.1-405b-fp8, llama-3.1-70b, llama-3.1-70b-fp8, llama-3.1-8b, llama-3.1-8b-fp8, mistral-7b, qwen2.5-7b, qwen3-235b-a22b, qwen3-32b, qwen3-8b (aliases: llama-3-70b = llama-3.1-70b, llama-3-8b = llama-3.1-8b); Hugging Face ids of the same checkpoints resolve too (e.g. meta-llama/Llama-3.1-8B-Instruct))" \
  simulate "$work/requests.jsonl" --model llama-4 --kv-memory 1GiB -q
refused "no pool size" \
  "command line: --kv-memory: missing: give --kv-memory (e.g. 40GiB), --pool-blocks or --gpu (e.g. h100-80gb)" \
  simulate "$work/requests.jsonl" --model qwen3-8b -q
refused "plan without --kv-memory or --gpu" \
  "command line: --kv-memory: missing: give the sizes to sweep, or --gpu to size one pool per model from its memory" \
  plan "$work/requests.jsonl" --model qwen3-8b -q

# plan: a fixed deployment; without --kv-memory, --gpu sizes one pool per model.
run plan "$work/requests.jsonl" --model qwen3-8b,gpt-oss-20b --model-config "$work/config.json" \
  --gpu h100-80gb --tp 2 --no-search -q -j 2 --report "$work/plan.json"
check '[[ $rc -eq 0 && ! -s $work/err ]]' "exit $rc: $(err_text)"
check '[[ -s $work/plan.json && $(jq ".cells | length" "$work/plan.json") == 3 ]]' "cells: $(jq -c '[.cells[].model]' "$work/plan.json" 2>/dev/null)"
check '[[ -s $work/plan.json && $(jq -r "[.cells[].model] | join(\",\")" "$work/plan.json") == "qwen3-8b,gpt-oss-20b,$work/config.json" ]]' \
  "models: $(jq -c '[.cells[].model]' "$work/plan.json" 2>/dev/null)"
check '[[ -s $work/plan.json && $(jq -r ".config | [.tp, .gpu, .per_gpu] | tostring" "$work/plan.json") == "[2,\"h100-80gb\",true]" ]]' \
  "plan.config: $(jq -c '.config' "$work/plan.json" 2>/dev/null)"
check '[[ -s $work/plan.json && $(jq -r ".config.max_seq_tokens" "$work/plan.json") == null ]]' \
  "max_seq_tokens differs per model, yet plan.config has it"
check '[[ -s $work/plan.json && $(jq -r "[.cells[] | .config.kv_memory == 78227670303 - .config.weights_bytes_per_gpu - .config.activation_reserve_bytes] | all" "$work/plan.json") == true ]]' \
  "a cell's pool is not its GPU's memory less weights and reserve"
finish "plan --gpu --tp: one pool per model from the GPU's memory, presets and config files"
run plan "$work/requests.jsonl" --model qwen3-8b --gpu h100-80gb --kv-memory 1GiB,2GiB -q -j 2 \
  --report "$work/plan.json"
check '[[ $rc -eq 0 && $(jq -r "[.cells[].config.kv_memory] | tostring" "$work/plan.json") == "[1073741824,2147483648]" ]]' \
  "exit $rc: $(err_text) $(jq -c '[.cells[].config.kv_memory]' "$work/plan.json" 2>/dev/null)"
check '[[ $rc -eq 0 && $(jq -r ".min_kv_memory[0].pool_blocks > 0" "$work/plan.json") == true ]]' \
  "no smallest KV memory found"
finish "plan --gpu --kv-memory: the swept sizes still set the pool"

# plan sweeps deployments: --gpu x --tp, the pool of each from its GPU. Llama-3.1-70B's
# 141 GB of bf16 weights fit neither one H100 (72 GiB usable) nor one or two L40S
# (43.2 GiB usable each): those deployments are rows that do not run. The 40 short
# requests fit 2 H100s (1,494 blocks) and 4 L40S without preemption: the answers.
run plan "$work/requests.jsonl" --model llama-3.1-70b --gpu h100-80gb,l40s --tp 1,2,4 --no-search -q \
  -j 2 --report "$work/plan.json"
check '[[ $rc -eq 0 && $(jq -r "[.cells[].deployment.label] | join(\",\")" "$work/plan.json") == "h100-80gb x2 (tp 2),h100-80gb x4 (tp 4),l40s x4 (tp 4)" ]]' \
  "exit $rc: $(err_text) cells $(jq -c '[.cells[].deployment.label]' "$work/plan.json" 2>/dev/null)"
check '[[ $(jq -r "[.unfit[] | .deployment.label + \": \" + (.problem | test(\"leave -[0-9.]+ GiB for the KV cache\") | tostring)] | join(\",\")" "$work/plan.json") == "h100-80gb x1: true,l40s x1: true,l40s x2 (tp 2): true" ]]' \
  "unfit: $(jq -c '[.unfit[] | [.deployment.label, .problem]]' "$work/plan.json")"
check '[[ $(jq -r "[.min_deployment[] | .gpu + \":\" + (.deployment.gpus | tostring)] | join(\",\")" "$work/plan.json") == "h100-80gb:2,l40s:4" ]]' \
  "min_deployment: $(jq -c '.min_deployment' "$work/plan.json")"
check '[[ $(jq -r "[.min_deployment[0].pool_blocks == (.cells[] | select(.deployment.label == \"h100-80gb x2 (tp 2)\") | .pool_blocks)] | all" "$work/plan.json") == true && $(jq -r ".cells[] | select(.deployment.gpus == 2) | .preemptions" "$work/plan.json") == 0 ]]' \
  "the answer is not the 2-GPU cell's pool, or that cell preempted"
finish "plan --gpu A,B --tp 1,2,4: the smallest deployment per GPU kind, unfit ones said"
run plan "$work/requests.jsonl" --model llama-3.1-8b --gpu h100-80gb,z100 -q --no-search
check '[[ $rc -eq 2 ]] && grep -q "^command line: --gpu: unknown GPU .z100." "$work/err"' \
  "exit $rc: $(err_text)"
finish "plan --gpu with an unknown GPU in the list: exit 2"

# replay: a kvtrace header may name any preset.
printf '{"kvtrace": 1, "config": {"model": "deepseek-v3", "pool_blocks": 16}}\n{"op": "admit", "seq": 0, "prompt": 20}\n{"op": "free", "seq": 0}\n' \
  >"$work/mla.jsonl"
run replay "$work/mla.jsonl" -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.bytes_per_token) == $((61 * 576 * 2)) && $(key .config.max_seq_tokens) == 32768 ]]' \
  "replay of deepseek-v3: exit $rc: $(err_text) $(key '.config | [.bytes_per_token, .max_seq_tokens] | tostring')"
run replay "$work/mla.jsonl" --model-config "$work/config.json" -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.model_source) == "file:$work/config.json" && $(key .config.bytes_per_token) == $((2 * 16 * 8 * 64 * 2)) ]]' \
  "replay --model-config: exit $rc: $(err_text) $(key '.config | [.model_source, .bytes_per_token] | tostring')"
finish "replay: a header's preset, or --model-config in its place"
# The data plane lays an MLA latent out as one head: 61 layers x 576 values, no V.
run replay "$work/mla.jsonl" --backend cpu --verify --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .status) == ok ]] && grep -q "verified" "$work/out"' \
  "replay --backend cpu --verify of deepseek-v3: exit $rc: $(err_text)"
check 'grep -q "arena 17.2 MiB" "$work/out"' \
  "the MLA arena is not 16 blocks x 16 tokens x 70,272 bytes: $(grep arena "$work/out")"
finish "replay --backend cpu --verify: an MLA model's arena holds one latent a token"
refused "decode attention on an MLA model" \
  "command line: --attention: the model keeps one MLA latent a token and layer; the paged decode attention kernel reads K and V heads (attention over the latent is not modelled); drop --attention" \
  replay "$work/mla.jsonl" --backend cpu --attention -q

# --help lists the presets and the GPUs.
for command in simulate plan; do
  run "$command" --help
  check '[[ $rc -eq 0 ]] && grep -q "gemma-3-27b" "$work/out" && grep -q "llama-3-8b = llama-3.1-8b" "$work/out"' \
    "$command --help does not list the presets"
  check 'grep -q "a100-80gb, b200, h100-80gb, h200, l40s, mi300x" "$work/out"' \
    "$command --help does not list the GPUs"
  check 'grep -q -- "--tp" "$work/out" && grep -q -- "--gpu-memory-utilization" "$work/out"' \
    "$command --help has no --tp or --gpu-memory-utilization"
  finish "$command --help lists the presets and the GPUs"
done

echo "$passed passed, $failed failed"
((failed == 0))
