#!/usr/bin/env bash
# `kvreplay simulate` and `plan` on requests that can never fit (SPEC 3.4;
# README "Simulation"): each is skipped, counted in the report
# (requests.skipped and its reason's key) and warned about on stderr naming the
# option that decides it, even with --quiet, and the run ends. Every run here
# is bounded by `timeout`: a request that admission waits for forever used to
# make simulate and plan loop (and --timeline grow) without end.
#
# Usage: run_simulate_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_simulate_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-simulate.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2

run_timeout=30  # seconds, for run (lib.sh): each of these runs takes well under one
before_run() { rm -f "$work/report.json" "$work/timeline.csv"; }

# Request 2 asks for 8 samples; under the generic engine (fork + COW) --max-seqs 4
# can never run them at once. The vllm engine fans them out into requests of
# their own (vLLM's ParentRequest), so nothing is skipped there.
cat >"$work/samples.jsonl" <<'EOF'
{"arrival": 0, "prompt": 40, "output": 8}
{"arrival": 0.1, "prompt": 40, "output": 8, "n": 8}
{"arrival": 0.2, "prompt": 40, "output": 8, "n": 4}
{"arrival": 0.3, "prompt": 40, "output": 8, "n": 9}
EOF

for allocator in paged contiguous-max; do
  run simulate "$work/samples.jsonl" --kv-memory 1GiB --max-seq-tokens 256 --max-seqs 4 \
    --engine generic --allocator "$allocator" -q \
    --report "$work/report.json" --timeline "$work/timeline.csv"
  check '[[ $rc -eq 0 ]]' "exit $rc (124: it did not end): $(err_text)"
  check '[[ -s $work/report.json ]] && [[ $(key .requests.skipped) == 2 ]]' \
    "requests.skipped is not 2"
  check '[[ -s $work/report.json ]] && [[ $(key .requests.skipped_too_many_samples) == 2 ]]' \
    "requests.skipped_too_many_samples is not 2"
  check '[[ -s $work/report.json ]] && [[ $(key .requests.skipped_pool_too_small) == 0 ]]' \
    "requests.skipped_pool_too_small is not 0"
  check '[[ -s $work/report.json ]] && [[ $(key .requests.finished) == 2 ]]' \
    "requests.finished is not 2"
  check '[[ -s $work/timeline.csv && $(wc -l <"$work/timeline.csv") -lt 100 ]]' \
    "timeline of $(wc -l 2>/dev/null <"$work/timeline.csv") lines"
  check '[[ ! -s $work/out ]]' "--quiet printed a summary"
  check '[[ $(wc -l <"$work/err") -eq 1 ]]' "stderr is not one line: $(err_text)"
  check 'grep -qxF "kvreplay simulate: warning: $work/samples.jsonl: 2 requests skipped: n above --max-seqs 4 (first: line 2, n 8)" "$work/err"' \
    "stderr: $(err_text)"
  finish "simulate --allocator $allocator: n above --max-seqs is skipped, counted, warned"
done

run simulate "$work/samples.jsonl" --kv-memory 1GiB --max-seq-tokens 256 --max-seqs 4 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && ! -s $work/err ]]' "exit $rc: $(err_text)"
check '[[ -s $work/report.json ]] && [[ $(key .config.simulation.engine) == vllm ]]' \
  "the default engine is $(key .config.simulation.engine)"
check '[[ -s $work/report.json ]] && [[ $(key .requests.skipped) == 0 && $(key .requests.finished) == 4 ]]' \
  "requests: $(key '.requests | tostring')"
check '[[ -s $work/report.json ]] && [[ $(key .scheduler.output_tokens) == $((8 * (1 + 8 + 4 + 9))) ]]' \
  "output tokens $(key .scheduler.output_tokens): each child generates its own"
finish "simulate (vllm, the default): n above --max-seqs fans out, nothing skipped"

# Without --quiet the summary counts them too; the same run twice gives the same report.
run simulate "$work/samples.jsonl" --kv-memory 1GiB --max-seqs 4 --engine generic \
  --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check 'grep -q "4 total, 2 finished, 2 skipped" "$work/out"' "summary: $(head -c 600 "$work/out")"
check 'grep -q "n above --max-seqs 4" "$work/err"' "no warning: $(err_text)"
jq 'del(.timing)' "$work/report.json" >"$work/first.json" 2>/dev/null
run simulate "$work/samples.jsonl" --kv-memory 1GiB --max-seqs 4 --engine generic \
  --report "$work/report.json"
check 'jq "del(.timing)" "$work/report.json" | cmp -s - "$work/first.json"' "reports differ"
finish "simulate: the summary counts skipped requests; the report is deterministic"

# plan: the sweep and its search for the smallest memory end too, and say so once.
run plan "$work/samples.jsonl" --kv-memory 256MiB,1GiB --max-seqs 4 --engine generic -j 2 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc (124: it did not end): $(err_text)"
check '[[ $(wc -l <"$work/err") -eq 1 ]]' "stderr is not one line: $(err_text)"
check 'grep -qxF "kvreplay plan: warning: $work/samples.jsonl: 2 requests skipped: n above --max-seqs 4 (first: line 2, n 8)" "$work/err"' \
  "stderr: $(err_text)"
check '[[ -s $work/report.json ]] && [[ $(key ".cells | map(.skipped) | unique | tostring") == "[2]" ]]' \
  "cells do not all skip 2"
check '[[ -s $work/report.json ]] && [[ $(key ".min_kv_memory[0].pool_blocks") != null ]]' \
  "no smallest memory found for the requests that can fit"
finish "plan: n above --max-seqs is skipped, warned once, and the search ends"

run plan "$work/samples.jsonl" --kv-memory 1GiB --max-seqs 4 --engine generic -j 1
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check 'grep -q "every request that can fit served; some were skipped: see the warnings" "$work/out"' \
  "the table claims every request served: $(grep smallest "$work/out")"
finish "plan: never claims every request served when some were skipped"

# The other reasons a request can never fit: longer than --max-seq-tokens, more
# blocks than the pool less the watermark. Warned even with --quiet.
cat >"$work/sizes.jsonl" <<'EOF'
{"arrival": 0, "prompt": 40, "output": 8}
{"arrival": 0.1, "prompt": 300, "output": 8}
{"arrival": 0.2, "prompt": 100, "output": 20}
{"arrival": 0.3, "prompt": 100, "output": 100}
{"arrival": 0.4, "prompt": 250, "output": 10}
EOF
run simulate "$work/sizes.jsonl" --pool-blocks 8 --page-tokens 16 --max-seq-tokens 256 \
  --engine generic --watermark 0 -q --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ -s $work/report.json ]] && [[ $(key .requests.skipped) == 3 ]]' "requests.skipped is not 3"
check '[[ -s $work/report.json ]] && [[ $(key .requests.skipped_pool_too_small) == 1 ]]' \
  "requests.skipped_pool_too_small is not 1"
check '[[ $(wc -l <"$work/err") -eq 2 ]]' "stderr is not two lines: $(err_text)"
check 'grep -qF "2 requests skipped: longer than --max-seq-tokens 256 (first: line 2, 307 tokens)" "$work/err"' \
  "no --max-seq-tokens warning: $(err_text)"
check 'grep -qF "1 request skipped: more blocks than the pool of 8 less the --watermark (first: line 4, 13 blocks; give a larger --kv-memory or --pool-blocks)" "$work/err"' \
  "no pool warning: $(err_text)"
# vllm: block 0 is the null block, so 7 blocks hold KV and the 119-token
# request (8 blocks) never fits either.
run simulate "$work/sizes.jsonl" --pool-blocks 8 --page-tokens 16 --max-seq-tokens 256 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ -s $work/report.json ]] && [[ $(key .requests.skipped) == 4 && $(key .requests.skipped_pool_too_small) == 2 ]]' \
  "vllm requests: $(key '.requests | tostring')"
check 'grep -qF "2 requests skipped: more blocks than the pool of 8 less the null block (first: line 3, 8 blocks; give a larger --kv-memory or --pool-blocks)" "$work/err"' \
  "no vllm pool warning: $(err_text)"
finish "simulate: too long and too large requests are warned about with their option"

# A request that fits is always admitted once nothing else runs, whatever the
# step budget: one token per step, a pool just large enough, many samples.
cat >"$work/tight.jsonl" <<'EOF'
{"arrival": 0, "prompt": 33, "output": 15, "n": 3}
{"arrival": 0, "prompt": 33, "output": 15, "n": 3}
{"arrival": 0, "prompt": 17, "output": 40}
EOF
# 33 + 15 - 1 = 47 tokens: 2 shared pages + 3 x (3 - 2) = 5 blocks of 16.
run simulate "$work/tight.jsonl" --pool-blocks 5 --page-tokens 16 --watermark 0 \
  --max-batched-tokens 1 --max-seqs 3 --check every -q --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc (124: it did not end): $(err_text)"
check '[[ -s $work/report.json ]] && [[ $(key .requests.finished) == 3 ]]' \
  "requests.finished is not 3"
check '[[ ! -s $work/err ]]' "stderr: $(err_text)"
finish "simulate: --max-batched-tokens 1 and a pool just large enough still finish"

# plan's answer reproduces (SPEC 3.4). On the Azure slice, under the linear cost
# model, 1595 blocks serve every request without preemption but 1611 (3222MiB)
# preempt once: the search
# answer must be raised past that swept size, and the printed --kv-memory must
# give exactly the answer's pool, which serves without preemption.
run_timeout=120
run plan traces/requests/azure_conv.csv --kv-memory 1GiB,3222MiB,8GiB -j 2 --engine generic \
  --cost-model linear --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
answer=$(key '.min_kv_memory[0].pool_blocks')
memory=$(key '.min_kv_memory[0].kv_memory')
check '[[ $(key ".cells[1].pool_blocks") == 1611 && $(key ".cells[1].preemptions") -gt 0 ]]' \
  "the swept 3222MiB is not 1611 blocks that preempt: $(key '.cells[1] | tostring')"
check '[[ $answer -gt 1611 ]] && [[ $(key ".min_kv_memory[0].raised_past_pool_blocks | tostring") == "[1611]" ]]' \
  "the answer $answer was not raised past 1611: $(key '.min_kv_memory[0] | tostring')"
check 'grep -qF -- "--kv-memory $memory = $answer blocks" "$work/out" && grep -qF "raised past the swept 1611 blocks" "$work/out"' \
  "the table does not print the reproducing size: $(grep -A1 smallest "$work/out" | tr '\n' '|')"
run simulate traces/requests/azure_conv.csv --kv-memory "$memory" --engine generic --cost-model linear -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 ]] && [[ $(key .config.pool_blocks) == "$answer" ]] &&
       [[ $(key .scheduler.preemptions) == 0 && $(key .requests.skipped) == 0 ]]' \
  "simulate --kv-memory $memory: exit $rc, $(key '[.config.pool_blocks, .scheduler.preemptions, .requests.skipped] | tostring')"
finish "plan: the answer holds at every swept size above it, and its printed size reproduces it"

# The same under the default engine (vllm): the printed size reproduces the answer.
run plan traces/requests/azure_conv.csv --kv-memory 1GiB,2GiB,4GiB -j 2 -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .simulation.engine) == vllm && $(key .simulation.gpu_class) == large ]]' \
  "exit $rc: $(err_text)"
answer=$(key '.min_kv_memory[0].pool_blocks')
memory=$(key '.min_kv_memory[0].kv_memory')
check '[[ $answer -gt 1024 && $answer -lt 4096 ]]' "vllm answer $answer blocks"
run simulate traces/requests/azure_conv.csv --kv-memory "$memory" -q --report "$work/report.json"
check '[[ $rc -eq 0 ]] && [[ $(key .config.pool_blocks) == "$answer" ]] &&
       [[ $(key .scheduler.preemptions) == 0 && $(key .config.simulation.engine) == vllm ]]' \
  "simulate --kv-memory $memory: exit $rc, $(key '[.config.pool_blocks, .scheduler.preemptions] | tostring')"
finish "plan (vllm): the printed size reproduces the answer"

# Every setting that changes a figure is recorded, and rows are labelled by the
# geometry when options override the preset's.
run plan traces/requests/azure_conv.csv --kv-memory 4GiB --layers 40 --kv-cache-dtype fp8 \
  --max-seq-tokens 8192 --no-search -q --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(key ".config | tostring") == "{\"alloc_order\":\"lifo\",\"dtype\":\"fp8\",\"gpu\":null,\"gpu_memory_utilization\":null,\"max_seq_tokens\":8192,\"per_gpu\":true,\"pp\":1,\"tp\":1}" ]]' \
  "plan.config: $(key '.config | tostring')"
check '[[ $(key ".cells[0].label") == 40x8x128 && $(key ".cells[0].config.layers") == 40 ]]' \
  "the row is labelled $(key '.cells[0].label')"
finish "plan: settings recorded, overridden geometry in the labels"

# --engine vllm from the command line: recorded, no watermark unless given,
# every invariant at every step, each output token counted once.
want_output=$(awk -F, 'NR > 1 { s += $3 } END { print s }' traces/requests/azure_conv.csv)
run simulate traces/requests/azure_conv.csv --engine vllm --kv-memory 1GiB --check every -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(key .config.simulation.engine) == vllm && $(key .config.simulation.watermark) == 0 ]]' \
  "config.simulation: $(key '.config.simulation | tostring')"
check '[[ $(key ".invariants.violations | length") == 0 && $(key .requests.finished) == 1000 ]]' \
  "violations or unfinished requests: $(key '[.invariants, .requests] | tostring')"
check '[[ $(key .scheduler.preemptions) -gt 0 && $(key .scheduler.output_tokens) == "$want_output" ]]' \
  "output tokens $(key .scheduler.output_tokens), want $want_output (preemptions $(key .scheduler.preemptions))"
run simulate traces/requests/azure_conv.csv --engine vllm --watermark 0.05 --kv-memory 1GiB -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.simulation.watermark) == 0.05 ]]' "a given --watermark is kept"
run simulate traces/requests/azure_conv.csv --engine tensorrt --kv-memory 1GiB -q
check '[[ $rc -eq 2 ]] && grep -q -- "--engine" "$work/err"' "an unknown engine: exit $rc, $(err_text)"
finish "simulate --engine vllm: recorded, checked at every step, output counted once"

# --engine sglang: one-token pages by default, its own section of figures,
# checked every 200 steps (every step on this trace is 44,000 checks of a
# 65,536-block pool: minutes under the sanitizers; the engine tests and the
# gate check every step), its options refused under another engine and vLLM's
# budgets refused under it.
run simulate traces/requests/mooncake_conv.jsonl --engine sglang --model llama-3.1-8b \
  --gpu h100-80gb --tp 4 --kv-memory 2GiB --check 200 -q --report "$work/report.json" \
  --requests "$work/requests.csv"
check '[[ $rc -eq 0 && $(key .config.page_tokens) == 1 && $(key ".invariants.violations | length") == 0 ]]' \
  "sglang runs checked: exit $rc, page $(key .config.page_tokens), $(err_text)"
check '[[ $(key .sglang.schedule_policy) == lpm && $(key .sglang.chunked_prefill_size) == 8192 ]]' \
  "sglang's defaults: $(key .sglang.schedule_policy), $(key .sglang.chunked_prefill_size)"
check '[[ $(key .sglang.cached_tokens) == $(key .prefix_cache.hit_tokens) && $(key .sglang.cached_tokens) -gt 0 ]]' \
  "cached_tokens $(key .sglang.cached_tokens) are the hit tokens $(key .prefix_cache.hit_tokens)"
check '[[ $(key .sglang.retracted_requests) == $(key .scheduler.preemptions) ]]' \
  "retractions $(key .sglang.retracted_requests) counted as preemptions"
csv_cached=$(awk -F, 'NR > 1 && $7 == "finished" { s += $13 } END { print s + 0 }' "$work/requests.csv")
check '[[ $csv_cached == $(key .sglang.cached_tokens) ]]' \
  "the CSV's cached_tokens add up: $csv_cached"
run simulate traces/requests/azure_conv.csv --engine vllm --schedule-policy fcfs --kv-memory 1GiB -q
check '[[ $rc -eq 2 ]] && grep -q -- "--schedule-policy is an option of --engine sglang" "$work/err"' \
  "an sglang option under vllm: exit $rc, $(err_text)"
run simulate traces/requests/azure_conv.csv --engine sglang --max-seqs 8 --kv-memory 1GiB -q
check '[[ $rc -eq 2 ]] && grep -q -- "--max-seqs is not an option of --engine sglang" "$work/err"' \
  "a vllm budget under sglang: exit $rc, $(err_text)"
run simulate traces/requests/azure_conv.csv --engine sglang --allocator contiguous-max --kv-memory 1GiB -q
check '[[ $rc -eq 2 ]] && grep -q -- "--engine sglang needs --allocator paged" "$work/err"' \
  "sglang with a contiguous allocator: exit $rc, $(err_text)"
finish "simulate --engine sglang: defaults, figures, refusals"

# --engine trtllm: 32-token blocks and TensorRT-LLM's batch limits by default,
# its own section of figures, KV events the events checker accepts, pauses
# counted as preemptions, its options refused under another engine and what it
# does not model refused under it.
run simulate traces/requests/azure_conv.csv --engine trtllm --kv-memory 1GiB --check 100 -q \
  --report "$work/report.json" --kv-events "$work/events.jsonl"
check '[[ $rc -eq 0 && $(key .config.page_tokens) == 32 && $(key ".invariants.violations | length") == 0 ]]' \
  "trtllm runs checked: exit $rc, page $(key .config.page_tokens), $(err_text)"
check '[[ $(key .config.simulation.max_batch_size) == 2048 && $(key .config.simulation.max_num_tokens) == 8192 ]]' \
  "trtllm's limits: $(key .config.simulation.max_batch_size), $(key .config.simulation.max_num_tokens)"
check '[[ $(key .trtllm.capacity_scheduler_policy) == guaranteed-no-evict && $(key .scheduler.preemptions) == 0 ]]' \
  "guaranteed-no-evict never pauses: $(key .scheduler.preemptions)"
run events "$work/events.jsonl"
check '[[ $rc -eq 0 ]]' "trtllm's KV events check clean: exit $rc, $(err_text)"
run simulate traces/requests/azure_conv.csv --engine trtllm --capacity-policy max-utilization \
  --kv-memory 1GiB -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .trtllm.paused_requests) == $(key .scheduler.preemptions) ]]' \
  "pauses $(key .trtllm.paused_requests) counted as preemptions"
run simulate traces/requests/azure_conv.csv --engine vllm --capacity-policy max-utilization --kv-memory 1GiB -q
check '[[ $rc -eq 2 ]] && grep -q -- "--capacity-policy is an option of --engine trtllm" "$work/err"' \
  "a trtllm option under vllm: exit $rc, $(err_text)"
# --offload cpu:SIZE is the host tier (host_cache_size): blocks taken for reuse
# move there, and matches on them come back, counted as the cpu tier's hits.
run simulate traces/requests/mooncake_conv.jsonl --engine trtllm --kv-memory 256MiB \
  --offload cpu:1GiB --check 100 -q --report "$work/report.json" --kv-events "$work/events.jsonl"
check '[[ $rc -eq 0 && $(key ".invariants.violations | length") == 0 &&
  $(key .offload.tiers.cpu.stored) -gt 0 && $(key .offload.tiers.cpu.hit_tokens) -gt 0 &&
  $(key .prefix_cache.hits_by_tier.cpu) == $(key .offload.tiers.cpu.hit_tokens) ]]' \
  "trtllm's host tier: exit $rc, $(jq -c .offload.tiers.cpu "$work/report.json" 2>&1 | head -c 300), $(err_text)"
run events "$work/events.jsonl"
check '[[ $rc -eq 0 ]] && grep -q "CPU: stored" "$work/out"' \
  "trtllm's host tier in the KV events: exit $rc, $(err_text)"
for refused in "--watermark 0.1" "--offload cpu:1GiB,disk:4GiB" "--offload cpu:1GiB --offload-policy arc" \
  "--max-seqs 8 --max-batch-size 8"; do
  # shellcheck disable=SC2086
  run simulate traces/requests/azure_conv.csv --engine trtllm --kv-memory 1GiB $refused -q
  check '[[ $rc -eq 2 ]]' "trtllm with $refused: exit $rc, $(err_text)"
done
finish "simulate --engine trtllm: defaults, figures, events, refusals"

# vllm's batch limits are `vllm serve`'s for the GPU class unless given; the
# generic engine keeps its own (256 sequences, 8192 tokens).
sim_key() { key ".config.simulation | [.max_batched_tokens, .max_seqs, .gpu_class] | tostring"; }
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(sim_key) == "[8192,1024,\"large\"]" ]]' "default: $(sim_key)"
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB --gpu-class small -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(sim_key) == "[2048,256,\"small\"]" ]]' "--gpu-class small: $(sim_key)"
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB --gpu-class small --max-seqs 64 \
  --max-batched-tokens 4096 -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(sim_key) == "[4096,64,\"small\"]" ]]' "given limits: $(sim_key)"
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB --engine generic -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(sim_key) == "[8192,256,null]" ]]' "generic: $(sim_key)"
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB --gpu-class medium -q
check '[[ $rc -eq 2 ]] && grep -q -- "--gpu-class" "$work/err"' "an unknown class: exit $rc, $(err_text)"
run simulate traces/requests/azure_conv.csv --kv-memory 8GiB --allocator contiguous-max -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.simulation.engine) == generic ]]' \
  "a contiguous allocator runs $(key .config.simulation.engine): exit $rc"
run simulate traces/requests/azure_conv.csv --kv-memory 8GiB --allocator contiguous-max \
  --engine vllm -q
check '[[ $rc -eq 2 ]] && grep -q -- "--engine vllm needs --allocator paged" "$work/err"' \
  "vllm with a contiguous allocator: exit $rc, $(err_text)"
finish "simulate: vllm serve batch defaults by --gpu-class, given limits win"

# --alloc-order vllm: vLLM's free queue, block 0 held as the null block. Under
# the vllm engine it is lifo (which already has the null block); elsewhere it
# takes block 0 out of the pool, checked at every step.
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB --alloc-order vllm -q \
  --report "$work/vllm_order.json"
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB -q --report "$work/report.json"
check '[[ $rc -eq 0 ]] && [[ $(jq -r .config.alloc_order "$work/vllm_order.json") == vllm ]] &&
       diff <(jq -S "del(.timing, .config.alloc_order)" "$work/vllm_order.json") \
            <(jq -S "del(.timing, .config.alloc_order)" "$work/report.json") >/dev/null' \
  "vllm engine: --alloc-order vllm is not lifo: $(err_text)"
# Block 0 is held (the checks count it) but no figure counts it (BlockPool.get_usage).
run replay traces/quickstart.jsonl --alloc-order vllm --check every -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.alloc_order) == vllm && $(key .blocks.final_used) == 0 ]] &&
       [[ $(key ".invariants.violations | length") == 0 ]]' \
  "replay --alloc-order vllm: exit $rc, $(key '[.blocks.final_used, .invariants] | tostring')"
# The generic engine: 7 of 8 blocks hold KV, so the 8-block request never fits.
run simulate "$work/sizes.jsonl" --pool-blocks 8 --page-tokens 16 --max-seq-tokens 256 \
  --engine generic --watermark 0 --alloc-order vllm --check every -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .requests.skipped_pool_too_small) == 2 ]] &&
       grep -qF "less the null block (first: line 3, 8 blocks" "$work/err"' \
  "generic --alloc-order vllm: exit $rc, $(key '.requests | tostring'), $(err_text)"
# Nor does the timeline: used_blocks + free_blocks is the pool less block 0 at every step.
run simulate traces/requests/azure_conv.csv --kv-memory 1GiB --no-prefix-cache -q \
  --timeline "$work/timeline.csv" --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .blocks.final_used) == 0 ]] &&
       awk -F, -v n="$(key .blocks.total)" "NR > 1 && \$3 + \$4 != n - 1 { bad = 1 } END { exit bad }" \
         "$work/timeline.csv"' \
  "vllm timeline: the null block counted: exit $rc, $(key .blocks.final_used)"
run replay traces/quickstart.jsonl --alloc-order newest -q
check '[[ $rc -eq 2 ]] && grep -qF "expected lifo, fifo, lowest, vllm" "$work/err"' \
  "an unknown order: exit $rc, $(err_text)"
finish "--alloc-order vllm: the null block in replay and both engines, lifo's order"

# Latency, SLOs and the per-request CSV (SPEC 3.3), from the CLI: the report's
# percentiles agree with the CSV's rows, the SLO attainment with its count.
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB --slo-ttft-ms 60 --slo-tpot-ms 9.1 \
  --requests "$work/requests.csv" --report "$work/report.json" --timeline "$work/timeline.csv"
check '[[ $rc -eq 0 && ! -s $work/err ]]' "exit $rc: $(err_text)"
check '[[ $(key .config.simulation.cost.model) == roofline && $(key .config.simulation.cost.gpu) == h100-80gb ]]' \
  "cost model: $(key '.config.simulation.cost | tostring')"
check '[[ $(head -1 "$work/requests.csv") == "line,id,prompt,output,n,arrival_s,status,preemptions,queue_ms,ttft_ms,tpot_ms,e2e_ms,cached_tokens" ]]' \
  "CSV header: $(head -1 "$work/requests.csv")"
check '[[ $(tail -n +2 "$work/requests.csv" | wc -l) == 1000 && $(key .latency.ttft_ms.count) == 1000 ]]' \
  "CSV rows: $(tail -n +2 "$work/requests.csv" | wc -l)"
# The CSV's TTFT maximum is the report's (3 decimals), and its count within the SLOs the report's.
csv_max=$(tail -n +2 "$work/requests.csv" | cut -d, -f10 | sort -g | tail -1)
check 'awk -v a="$csv_max" -v b="$(key .latency.ttft_ms.max)" "BEGIN { exit !(a - b < 0.001 && b - a < 0.001) }"' \
  "TTFT max: CSV $csv_max, report $(key .latency.ttft_ms.max)"
csv_met=$(tail -n +2 "$work/requests.csv" | awk -F, '$10 <= 60 && ($11 == "" || $11 <= 9.1)' | wc -l)
check '[[ $csv_met == $(key .slo.requests_met) ]] && [[ $(key .slo.requests_met) -gt 0 && $(key .slo.requests_met) -lt 1000 ]]' \
  "SLO met: CSV $csv_met, report $(key .slo.requests_met)"
check 'jq -e ".slo.attainment == .slo.requests_met / 1000 and .latency.ttft_ms.p50 <= .latency.ttft_ms.p90 and .latency.ttft_ms.p90 <= .latency.ttft_ms.p99" "$work/report.json" >/dev/null' \
  "attainment or percentiles: $(key '.slo | tostring')"
check 'grep -q "TTFT  .*p50 .*p99" "$work/out" && grep -q "SLO joint attainment  *0\." "$work/out"' \
  "summary: $(grep -E 'TTFT|SLO' "$work/out" | tr '\n' '|')"
# The timeline: every request's first token in exactly one step, the step's mean TTFT beside it.
check '[[ $(head -1 "$work/timeline.csv" | cut -d, -f16-) == "waiting_requests,running_requests,first_tokens,ttft_ms_mean" ]] &&
       [[ $(tail -n +2 "$work/timeline.csv" | awk -F, "{ n += \$18 } END { print n }") == 1000 ]]' \
  "timeline: $(head -1 "$work/timeline.csv"), first tokens $(tail -n +2 "$work/timeline.csv" | awk -F, '{ n += $18 } END { print n }')"
finish "simulate: latency percentiles, SLO attainment and --requests agree"

# The roofline moves with the model and the GPU: a 70B model on 4 H100s decodes
# slower than an 8B on one, an H200 faster than an H100.
tpot() { run simulate traces/requests/azure_conv.csv "$@" -q --report "$work/report.json"; key .latency.tpot_ms.p50; }
small=$(tpot --kv-memory 16GiB --model llama-3.1-8b)
large=$(tpot --model llama-3.1-70b --gpu h100-80gb --tp 4)
h200=$(tpot --kv-memory 16GiB --model llama-3.1-8b --gpu h200)
check 'awk -v s="$small" -v l="$large" -v h="$h200" "BEGIN { exit !(l > 1.5 * s && h < 0.8 * s) }"' \
  "TPOT p50: 8B/H100 $small, 70B/4xH100 $large, 8B/H200 $h200"
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB --prefill-token-ms 0.1 -q
check '[[ $rc -eq 2 ]] && grep -qF -- "--prefill-token-ms is a constant of the linear cost model" "$work/err"' \
  "a linear constant without --cost-model linear: exit $rc, $(err_text)"
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB --cost-model linear --compute-efficiency 0.5 -q
check '[[ $rc -eq 2 ]] && grep -qF -- "--compute-efficiency is a constant of the roofline" "$work/err"' \
  "a roofline constant with --cost-model linear: exit $rc, $(err_text)"
run simulate traces/requests/azure_conv.csv --pool-blocks 1000 --layers 8 --kv-heads 8 --head-dim 128 \
  --cost-model roofline -q
check '[[ $rc -eq 2 ]] && grep -qF "needs the model'"'"'s parameter count" "$work/err"' \
  "roofline without a parameter count: exit $rc, $(err_text)"
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB --cost-model linear -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .config.simulation.cost.model) == linear && $(key .config.simulation.cost.step_ms) == 5 ]]' \
  "--cost-model linear: $(key '.config.simulation.cost | tostring')"
# compare gates latency: the same run on an H100 instead of an H200 regresses p99 TPOT.
# Under the built-in constants (an empty profile), so that only the GPU differs:
# the shipped profile's constants are fitted per GPU kind.
echo '{"kvreplay_cost_profile": 1, "base": "built-in", "profiles": []}' >"$work/builtin.json"
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB --gpu h200 -q --report "$work/h200.json" \
  --cost-profile "$work/builtin.json"
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB --gpu h100-80gb -q \
  --report "$work/h100.json" --cost-profile "$work/builtin.json"
run compare "$work/h200.json" "$work/h100.json"
check '[[ $rc -eq 1 ]] && grep -q "regression: latency.tpot_ms.p99" "$work/err"' \
  "compare H200 -> H100: exit $rc, $(err_text)"
run compare "$work/h100.json" "$work/h200.json"
check '[[ $rc -eq 0 ]] && grep -q "^latency.tpot_ms.p99 .* better" "$work/out"' \
  "compare H100 -> H200: exit $rc, $(grep latency "$work/out" | tr '\n' '|')"
finish "simulate: the roofline follows model and GPU; cost-model options are checked"

# Overload is said on stderr even with --quiet, and recorded; a run that keeps up is quiet.
run simulate traces/requests/mooncake_conv.jsonl --kv-memory 16GiB -q --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .overload.overloaded) == true ]] &&
       grep -qE "overloaded: arrivals outpace service [0-9.]+x: the run took [0-9.]+ s of virtual time for 165.0 s of arrivals" "$work/err"' \
  "Mooncake slice on one H100: exit $rc, $(key '.overload | tostring'), $(err_text)"
run simulate traces/requests/mooncake_conv.jsonl --kv-memory 16GiB -q --model llama-3.1-8b --gpu b200 --tp 8 \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .overload.overloaded) == false && ! -s $work/err ]]' \
  "8 B200s: exit $rc, $(key '.overload | tostring'), $(err_text)"
finish "simulate: overload is warned about, even with --quiet, and recorded"

# plan by SLO (SPEC 3.4): a cell serves only when the SLOs hold for
# --slo-attainment of the requests; the answer then meets them when simulated.
run plan traces/requests/azure_conv.csv --kv-memory 1GiB,2GiB,4GiB --slo-ttft-ms 300 --slo-tpot-ms 30 \
  -j 2 --report "$work/plan.json"
check '[[ $rc -eq 0 ]] && jq -e ".simulation.slo_attainment == 0.99 and (.cells | all(has(\"slo\") and has(\"latency\")))" "$work/plan.json" >/dev/null' \
  "plan.json: exit $rc, $(err_text)"
check 'grep -qF "99% of requests meeting TTFT <= 300 ms, TPOT <= 30 ms" "$work/out" && grep -q "p99_ttft" "$work/out"' \
  "table: $(head -3 "$work/out" | tr '\n' '|')"
memory=$(jq -r '.min_kv_memory[0].kv_memory' "$work/plan.json")
run simulate traces/requests/azure_conv.csv --kv-memory "$memory" --slo-ttft-ms 300 --slo-tpot-ms 30 -q \
  --report "$work/report.json"
check '[[ $rc -eq 0 && $(key .scheduler.preemptions) == 0 ]] && jq -e ".slo.attainment >= 0.99" "$work/report.json" >/dev/null' \
  "the answer $memory: $(key '.slo | tostring')"
# A tighter TTFT than any cell meets leaves no swept cell serving, whatever the memory.
run plan traces/requests/azure_conv.csv --kv-memory 1GiB,4GiB --slo-ttft-ms 1 --no-search -j 2 \
  --report "$work/plan.json"
check '[[ $rc -eq 0 ]] && jq -e "[.cells[].slo.attainment] | all(. < 0.99)" "$work/plan.json" >/dev/null' \
  "TTFT 1 ms: $(jq -c '[.cells[].slo]' "$work/plan.json")"
finish "plan: answers meet the SLOs and reproduce"

# A request that a prefix-cache hit would stall at admission: with the hit it
# finds, its first chunk starts off the budget's boundaries, where gemma-3's
# window groups hold more pages at once than the pool has, even with nothing
# else running. vLLM would retry it forever and admit nothing behind it; this
# run used to loop without end. It is skipped (counted with the pool too
# small, the warning says how many stalled) and the run ends.
rm -f "$work/requests.csv"
run simulate traces/requests/mooncake_conv.jsonl --model gemma-3-27b --kv-memory 8GiB \
  --max-seq-tokens 131072 -q --report "$work/report.json" --requests "$work/requests.csv"
check '[[ $rc -eq 0 ]]' "exit $rc (124: it did not end), $(err_text)"
check '[[ $(key .requests.finished) == 476 && $(key .requests.skipped_pool_too_small) == 24 ]]' \
  "requests: $(key '.requests | tostring')"
check 'grep -qF "24 requests skipped: more blocks than the pool of 6553 less the null block" "$work/err" &&
  grep -qF "4 of them stalled at admission" "$work/err"' "warning: $(err_text)"
check '[[ $(grep -c ",skipped," "$work/requests.csv") == 24 && $(grep -c ",finished," "$work/requests.csv") == 476 ]]' \
  "requests.csv: $(grep -c ",skipped," "$work/requests.csv") skipped, $(grep -c ",finished," "$work/requests.csv") finished"
finish "simulate: a request stalled at admission by its prefix-cache hit is skipped, and the run ends"

echo "$passed passed, $failed failed"
((failed == 0))
