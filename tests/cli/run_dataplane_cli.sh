#!/usr/bin/env bash
# The data plane from the command line (SPEC 5, README "Data plane"):
#   - `replay --backend cpu --verify` passes on every example trace, and its
#     report equals the metadata-only report apart from "timing", whose
#     "kernels" it fills;
#   - a planted missing copy-on-write (dataplane_fault_replay) exits 1 naming the
#     sequence, the position and the event;
#   - `--backend cuda` without a usable device exits 2 with one clear line (with
#     a device, the verified replay passes instead);
#   - an arena above --arena-limit exits 2 naming --kv-memory / --pool-blocks;
#   - --verify without a backend is a usage error; `kernels --help` has an example.
# Usage: run_dataplane_cli.sh KVREPLAY_BINARY FAULT_REPLAY_BINARY REPO_ROOT
# shellcheck disable=SC2016  # check() evaluates its single-quoted condition later
set -uo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 KVREPLAY_BINARY FAULT_REPLAY_BINARY REPO_ROOT" >&2
  exit 2
fi
kvreplay=$(realpath "$1")
fault=$(realpath "$2")
root=$(realpath "$3")
work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-dataplane.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2

# shellcheck source=lib.sh
source "$root/tests/cli/lib.sh"
# The report without its top-level "timing" object (2-space indent).
strip_timing() {
  awk 'skip && /^  }/ { skip = 0; next } skip { next } /^  "timing": \{/ { skip = 1; next } { print }' "$1"
}

# --- Verified replays of every example trace --------------------------------
for trace in traces/fork_cow.jsonl traces/prefix_partial.jsonl traces/prefix_drop.jsonl \
  traces/quickstart.jsonl traces/document.json traces/offload_tiers.jsonl; do
  run_cmd "$kvreplay" replay "$trace" --check every --report "$work/none.json"
  check '[[ $rc -eq 0 ]]' "metadata-only replay: exit $rc: $(err_text 1500)"
  run_cmd "$kvreplay" replay "$trace" --check every --backend cpu --verify --report "$work/cpu.json"
  check '[[ $rc -eq 0 ]]' "exit $rc, expected 0: $(err_text 1500)"
  check 'grep -q "^  verified  *[1-9][0-9]* checkpoints" "$work/out"' "no 'verified' line in the summary"
  check 'cmp -s <(strip_timing "$work/none.json") <(strip_timing "$work/cpu.json")' \
    "the report differs from --backend none apart from timing"
  check 'jq -e ".timing.kernels.append.launches > 0 and .timing.kernels.gather.gbps >= 0" "$work/cpu.json" >/dev/null' \
    "timing.kernels lacks append/gather: $(jq -c .timing.kernels "$work/cpu.json" 2>&1 | head -c 300)"
  finish "replay $trace --backend cpu --verify"
done

# --- The prefix cache and the offload tiers: the worked figures of
# traces/README.md, and the tiers' bytes verified and timed -------------------
run_cmd "$kvreplay" replay traces/offload_tiers.jsonl --backend cpu --verify --report "$work/tiers.json"
check '[[ $rc -eq 0 ]]' "exit $rc, expected 0: $(err_text 1500)"
check 'jq -e ".blocks.peak_used == 4 and .cache_ops.hit_pages == 4 and .cache_ops.peak_cached == 2
  and .cache_ops.tiers.cpu == {\"stores\": 2, \"loads\": 1, \"drops\": 1, \"peak_copies\": 2}
  and .cache_ops.tiers.disk == {\"stores\": 1, \"loads\": 1, \"drops\": 0, \"peak_copies\": 1}
  and (.cache_ops.tiers | has(\"link\") | not)
  and .timing.kernels.tier_store.launches == 3 and .timing.kernels.tier_load.launches == 2" \
  "$work/tiers.json" >/dev/null' "cache_ops/kernels differ: $(jq -c '[.cache_ops, .timing.kernels]' "$work/tiers.json" 2>&1 | head -c 600)"
check 'grep -q "verified (cache, tiers) *6 cached pages, 7 tier copies" "$work/out"' \
  "no cache/tier verification line: $(grep verified "$work/out")"
finish "replay offload_tiers.jsonl: cache_ops, tier kernels, verified copies"

printf '%s\n' '{"kvtrace": 1, "config": {"layers": 1, "kv_heads": 1, "head_dim": 2, "page_tokens": 4, "pool_blocks": 4}}' \
  '{"op": "admit", "seq": 0, "prompt": 6}' '{"op": "store", "seq": 0, "page": 1, "tier": "cpu", "key": 1}' >"$work/bad_tier.jsonl"
run_cmd "$kvreplay" replay "$work/bad_tier.jsonl" --backend cpu --verify --report "$work/bad_tier.json"
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check 'grep -q "bad_tier.jsonl:3: page: page 1 of seq 0 is not full (6 tokens, 4 per page)" "$work/err"' "message: $(err_text 300)"
check '[[ ! -e "$work/bad_tier.json" ]]' "a report was written for bad input"
finish "replay: a store of a page that is not full is bad input (exit 2, no report)"

run_cmd "$kvreplay" replay traces/oom.jsonl --on-oom skip --backend cpu --verify --attention -q
check '[[ $rc -eq 0 ]]' "exit $rc, expected 0: $(err_text 1500)"
finish "replay traces/oom.jsonl --on-oom skip --backend cpu --verify --attention"

run_cmd "$kvreplay" replay traces/oom.jsonl --on-oom fail --backend cpu --verify -q
check '[[ $rc -eq 3 ]]' "exit $rc, expected 3: $(err_text 1500)"
finish "replay traces/oom.jsonl --on-oom fail --backend cpu --verify (exit 3)"

# --- simulate --emit-trace: the schedule replays with every byte verified ----
# A slice of the Mooncake trace on a small pool (evictions, preemptions) with
# a tiny geometry; the replay's block figures must be the simulation's.
head -120 traces/requests/mooncake_conv.jsonl >"$work/m120.jsonl"
small=(--layers 2 --kv-heads 1 --head-dim 16 --pool-blocks 600)
for engine in "--engine vllm" "--engine vllm --offload cpu:16MiB,disk:32MiB" "--engine generic" \
  "--engine generic --offload cpu:16MiB,disk:32MiB" "--engine vllm --replicas 2 --router prefix-aware" \
  "--engine sglang --page-tokens 16" "--engine sglang --page-tokens 16 --replicas 2 --chunked-prefill-size 1024" \
  "--engine vllm --prefill-replicas 2 --decode-replicas 1" "--engine generic --prefill-replicas 1 --decode-replicas 2"; do
  # shellcheck disable=SC2086  # the engine's options, split on purpose
  run_cmd "$kvreplay" simulate "$work/m120.jsonl" "${small[@]}" $engine -q \
    --emit-trace "$work/emitted.jsonl" --report "$work/sim.json"
  check '[[ $rc -eq 0 ]]' "simulate: exit $rc: $(err_text 1500)"
  check 'head -1 "$work/emitted.jsonl" | jq -e ".kvtrace == 1 and .config.layers == 2" >/dev/null' \
    "header: $(head -c 300 "$work/emitted.jsonl")"
  run_cmd "$kvreplay" replay "$work/emitted.jsonl" --backend cpu --verify --check 997 \
    --report "$work/replayed.json"
  check '[[ $rc -eq 0 ]]' "replay: exit $rc: $(err_text 1500)"
  check 'grep -q "^  verified  *[1-9][0-9]* checkpoints: [1-9][0-9]* tables" "$work/out"' \
    "no verified tables: $(grep verified "$work/out")"
  check '[[ "$(jq -c "[.blocks.allocations, .blocks.frees, .blocks.final_used]" "$work/sim.json")" == \
    "$(jq -c "[.blocks.allocations, .blocks.frees, .blocks.final_used]" "$work/replayed.json")" ]]' \
    "blocks differ: $(jq -c .blocks "$work/sim.json") vs $(jq -c .blocks "$work/replayed.json")"
  check 'jq -e ".cache_ops.hit_pages > 0 and .oom.events == 0 and .status == \"ok\"" "$work/replayed.json" >/dev/null' \
    "cache_ops: $(jq -c .cache_ops "$work/replayed.json")"
  if [[ $engine == *--prefill-replicas* ]]; then
    # Disaggregated: the prompts' KV crosses the trace's link tier, each page
    # the decode side received loaded from its prefill instance's staged copy.
    check 'jq -e ".cache_ops.tiers.link.loads == $(jq .fleet.kv_transfer.blocks "$work/sim.json") and .cache_ops.tiers.link.loads > 0 and .cache_ops.tiers.link.drops == .cache_ops.tiers.link.stores" "$work/replayed.json" >/dev/null' \
      "link tier: $(jq -c .cache_ops.tiers.link "$work/replayed.json") against $(jq -c .fleet.kv_transfer "$work/sim.json")"
  fi
  finish "simulate $engine --emit-trace, then replay --backend cpu --verify"
done
# SGLang's own page of one token: a block per token, the tree's pages cached.
run_cmd "$kvreplay" simulate "$work/m120.jsonl" --layers 2 --kv-heads 1 --head-dim 16 --pool-blocks 9000 \
  --engine sglang -q --emit-trace "$work/sglang.jsonl" --report "$work/sim.json"
check '[[ $rc -eq 0 ]]' "simulate: exit $rc: $(err_text 1500)"
run_cmd "$kvreplay" replay "$work/sglang.jsonl" --backend cpu --verify --check 997 --report "$work/replayed.json"
check '[[ $rc -eq 0 ]]' "replay: exit $rc: $(err_text 1500)"
check '[[ "$(jq .blocks.final_used "$work/sim.json")" == "$(jq .blocks.final_used "$work/replayed.json")" ]]' \
  "final_used differs: $(jq -c .blocks "$work/sim.json") vs $(jq -c .blocks "$work/replayed.json")"
check 'jq -e ".cache_ops.hit_pages > 0 and .cache_ops.drops == $(jq .prefix_cache.evictions "$work/sim.json")" "$work/replayed.json" >/dev/null' \
  "cache_ops: $(jq -c .cache_ops "$work/replayed.json")"
finish "simulate --engine sglang (page of 1 token) --emit-trace, then replay --backend cpu --verify"

for engine in vllm generic; do
  run_cmd "$kvreplay" simulate "$work/m120.jsonl" "${small[@]}" --engine "$engine" -q \
    --offload cpu:16MiB --emit-trace "$work/tiers.jsonl"
  check '[[ $rc -eq 0 ]] && grep -q "\"op\":\"load\"" "$work/tiers.jsonl" && grep -q "\"op\":\"drop\"" "$work/tiers.jsonl"' \
    "no load or drop in the emitted offload trace: exit $rc"
  finish "simulate --engine $engine --offload --emit-trace writes stores, loads and drops"
done
# sglang's HiCache: host copies as the tree takes pages (each stored from a
# short sequence on the node's path), loads back at admission, host drops;
# replayed with every copy verified, the tier's figures the simulation's.
run_cmd "$kvreplay" simulate "$work/m120.jsonl" --layers 2 --kv-heads 1 --head-dim 16 --pool-blocks 3000 \
  --engine sglang --page-tokens 16 -q --offload cpu:16MiB --emit-trace "$work/hicache.jsonl" --report "$work/sim.json"
check '[[ $rc -eq 0 ]]' "simulate: exit $rc: $(err_text 1500)"
run_cmd "$kvreplay" replay "$work/hicache.jsonl" --backend cpu --verify --check 997 --report "$work/replayed.json"
check '[[ $rc -eq 0 ]]' "replay: exit $rc: $(err_text 1500)"
check 'grep -q "^  verified (cache, tiers)  *[1-9][0-9]* cached pages, [1-9][0-9]* tier copies" "$work/out"' \
  "no verified tier copies: $(grep verified "$work/out")"
check 'jq -e ".cache_ops.tiers.cpu.loads == $(jq .offload.tiers.cpu.loaded "$work/sim.json") and .cache_ops.tiers.cpu.loads > 0 and .cache_ops.tiers.cpu.drops == $(jq .offload.tiers.cpu.evicted "$work/sim.json") and .cache_ops.tiers.cpu.stores == $(jq ".offload.tiers.cpu | .resident_blocks + .evicted" "$work/sim.json")" "$work/replayed.json" >/dev/null' \
  "cpu tier: $(jq -c .cache_ops.tiers.cpu "$work/replayed.json") against $(jq -c .offload.tiers.cpu "$work/sim.json")"
check '[[ "$(jq -c "[.blocks.allocations, .blocks.frees, .blocks.final_used]" "$work/sim.json")" == \
  "$(jq -c "[.blocks.allocations, .blocks.frees, .blocks.final_used]" "$work/replayed.json")" ]]' \
  "blocks differ: $(jq -c .blocks "$work/sim.json") vs $(jq -c .blocks "$work/replayed.json")"
finish "simulate --engine sglang --offload cpu (HiCache) --emit-trace, then replay --backend cpu --verify"

run_cmd "$kvreplay" simulate "$work/m120.jsonl" "${small[@]}" --engine vllm -q \
  --emit-trace "$work/m120.jsonl"
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check '[[ "$(head -120 traces/requests/mooncake_conv.jsonl | cmp - "$work/m120.jsonl" && echo same)" == same ]]' \
  "the input trace was overwritten"
finish "simulate --emit-trace onto its own input is refused (exit 2)"

printf '{"h100-80gb": 2.5}\n' >"$work/prices.json"
cp "$work/prices.json" "$work/prices.orig"
run_cmd "$kvreplay" simulate "$work/m120.jsonl" --model llama-3.1-8b --gpu h100-80gb -q \
  --gpu-prices "$work/prices.json" --emit-trace "$work/prices.json"
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check 'grep -q "gpu-prices" "$work/err"' "message: $(err_text 300)"
check 'cmp -s "$work/prices.json" "$work/prices.orig"' "the --gpu-prices file was overwritten"
finish "simulate: an output onto the --gpu-prices file is refused (exit 2)"

# --- A planted missing copy-on-write: exit 1, naming sequence, position, event -
run_cmd "$fault" traces/fork_cow.jsonl --skip-copy 1
check '[[ $rc -eq 1 ]]' "exit $rc, expected 1: $(err_text 1500)"
check 'grep -q "^traces/fork_cow.jsonl:9: invariant D1 violated at event 8: seq 0 position 4: " "$work/err"' \
  "stderr does not name the check event, the sequence and the position: $(err_text 1500)"
check 'grep -q "expected 0x[0-9a-f]*, the token of seq 0 (admit at event 1, line 2)" "$work/err"' \
  "stderr does not name the expected writer: $(err_text 1500)"
finish "planted missing copy (--skip-copy 1)"

run_cmd "$fault" traces/prefix_partial.jsonl --write-shared 1
check '[[ $rc -eq 1 ]]' "exit $rc, expected 1: $(err_text 1500)"
check 'grep -q "invariant D1 violated at .*: seq [0-9]* position [0-9]*: " "$work/err"' \
  "stderr: $(err_text 1500)"
finish "planted write into a shared page (--write-shared 1)"

# --- --backend cuda -----------------------------------------------------------
run_cmd "$kvreplay" --version
version=$(cat "$work/out")
run_cmd "$kvreplay" replay traces/fork_cow.jsonl --backend cuda --verify
if [[ $version == *"device(s)"* ]]; then
  check '[[ $rc -eq 0 ]]' "with a CUDA device: exit $rc, expected 0: $(err_text 1500)"
  finish "replay --backend cuda --verify (device present)"
else
  check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
  check '[[ $(wc -l <"$work/err") -eq 1 ]]' "stderr is not one line: $(err_text 1500)"
  check 'grep -q "^command line: --backend: cuda: " "$work/err"' "stderr: $(err_text 1500)"
  check 'grep -qi "cuda" "$work/err" && grep -q "backend cpu" "$work/err"' "no hint: $(err_text 1500)"
  check '[[ ! -s $work/out ]]' "stdout not empty"
  finish "replay --backend cuda without a device: exit 2 ($(head -c 120 "$work/err"))"
  run_cmd "$kvreplay" kernels --batch 1 --context 16 --page-tokens 16
  check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
  check 'grep -q "^command line: --backend: cuda: " "$work/err"' "stderr: $(err_text 1500)"
  finish "kernels (cuda) without a device: exit 2"
fi

# --- The arena limit and usage errors -----------------------------------------
run_cmd "$kvreplay" replay traces/quickstart.jsonl --backend cpu --arena-limit 64MiB --report "$work/r.json"
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check 'grep -q "^command line: --backend: cpu: the host arena would need 128.0 MiB .*--kv-memory / --pool-blocks" "$work/err"' \
  "stderr: $(err_text 1500)"
check '[[ ! -e $work/r.json ]]' "a report was written"
finish "arena above --arena-limit: exit 2"

run_cmd "$kvreplay" replay traces/fork_cow.jsonl --verify
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check 'grep -q "^command line: --verify: needs --backend cpu or --backend cuda" "$work/err"' "stderr: $(err_text 1500)"
finish "--verify without --backend: exit 2"

run_cmd "$kvreplay" replay traces/fork_cow.jsonl --backend gpu
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
finish "--backend gpu: exit 2"

run_cmd "$kvreplay" replay traces/fork_cow.jsonl --backend cpu --arena-limit 12XB
check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
check 'grep -q "^command line: --arena-limit: " "$work/err"' "stderr: $(err_text 1500)"
finish "--arena-limit 12XB: exit 2"

# --- kernels ----------------------------------------------------------------
run_cmd "$kvreplay" kernels --help
check '[[ $rc -eq 0 ]]' "exit $rc"
check 'grep -q "Example" "$work/out"' "no example in the help"
finish "kernels --help"

run_cmd "$kvreplay" kernels --backend cpu --kv-heads 2 --head-dim 8 --batch 1,3 --context 24 \
  --page-tokens 3 --iters 2 --warmup 1 --report "$work/kernels.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text 1500)"
check 'grep -q "^copy roof: " "$work/out"' "no copy roof line"
check 'jq -e "(.results | length) == 8 and .copy_roof.gbps > 0" "$work/kernels.json" >/dev/null' \
  "report: $(head -c 300 "$work/kernels.json")"
finish "kernels --backend cpu (a small sweep)"

echo "$passed passed, $failed failed"
((failed == 0))
