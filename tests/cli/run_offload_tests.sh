#!/usr/bin/env bash
# `kvreplay simulate --offload` (SPEC 3.7) from the command line: a CPU tier
# adds hits the GPU cache lost, reported per tier and in
# prefix_cache.hits_by_tier; a disk tier behind it and the arc policy run;
# under the sglang engine the tier is HiCache's host pool;
# the invariant checks hold; the run is deterministic; the options are recorded in
# config.simulation.offload; every misuse is exit 2 with one line.
#
# Usage: run_offload_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_offload_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-offload.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
run_timeout=300
# The first 150 requests of the Mooncake sample: enough for the GPU cache of
# 2 GiB to lose prefixes the tiers keep, short enough for a sanitizer build.
trace=$work/short.jsonl
head -n 150 traces/requests/mooncake_conv.jsonl >"$trace"
common=(--model llama-3.1-8b --tp 4 --gpu h100-80gb --kv-memory 2GiB --max-seq-tokens 131072 -q)

# 1. No tier, then a CPU tier: the tier's hits add to the GPU's.
run simulate "$trace" "${common[@]}" --report "$work/none.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
run simulate "$trace" "${common[@]}" --offload cpu:64GiB --report "$work/cpu.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq ".offload.tiers.cpu.hit_tokens > 0 and .offload.tiers.cpu.loaded > 0" "$work/cpu.json") == true ]]' \
  "no CPU tier hit: $(jq -c .offload "$work/cpu.json")"
check '[[ $(jq ".prefix_cache.hits_by_tier.cpu == .offload.tiers.cpu.hit_tokens" "$work/cpu.json") == true ]]' \
  "hits_by_tier.cpu is not the tier's hit_tokens"
check '[[ $(jq ".prefix_cache.hit_rate_with_tiers > .prefix_cache.hit_rate" "$work/cpu.json") == true ]]' \
  "the tiers add nothing to the hit rate"
check '[[ $(jq ".prefix_cache.hits_by_tier.gpu == .prefix_cache.hit_tokens" "$work/cpu.json") == true ]]' \
  "hits_by_tier.gpu is not prefix_cache.hit_tokens"
check '[[ $(jq ".offload.tiers.cpu.bytes_out == .offload.tiers.cpu.loaded * .offload.block_bytes" "$work/cpu.json") == true ]]' \
  "bytes_out is not loaded blocks x block_bytes"
check '[[ $(jq ".offload.tiers.cpu.capacity_blocks == (68719476736 / .offload.block_bytes | floor)" "$work/cpu.json") == true ]]' \
  "capacity_blocks is not 64 GiB / block_bytes"
check '[[ $(jq -c ".config.simulation.offload" "$work/cpu.json") == "{\"policy\":\"lru\",\"tiers\":{\"cpu\":{\"bytes\":68719476736,\"gbps\":64,\"latency_us\":10}}}" ]]' \
  "config.simulation.offload: $(jq -c .config.simulation.offload "$work/cpu.json")"
check '[[ $(jq ".scheduler.prompt_tokens_computed" "$work/cpu.json") -lt $(jq ".scheduler.prompt_tokens_computed" "$work/none.json") ]]' \
  "the CPU tier saved no prompt computation"
check '[[ $(jq "has(\"offload\")" "$work/none.json") == false ]]' "a run without --offload has an offload section"
finish "--offload cpu:64GiB: the tier's hits add to the GPU's"

# 2. The same run again gives the same figures.
run simulate "$trace" "${common[@]}" --offload cpu:64GiB --report "$work/cpu2.json"
check '[[ $(jq -S "{offload, prefix_cache, latency, scheduler}" "$work/cpu.json") == $(jq -S "{offload, prefix_cache, latency, scheduler}" "$work/cpu2.json") ]]' \
  "two runs differ"
finish "--offload: deterministic"

# 3. A small CPU tier under arc with a disk tier behind it, the invariants
#    checked every 50 steps (a check walks every tier: every step would take
#    minutes here; the engine tests check every step on small traces).
run simulate "$work/short.jsonl" "${common[@]}" --offload cpu:2GiB,disk:64GiB --offload-policy arc \
  --check 50 --report "$work/arc.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -r ".offload.policy" "$work/arc.json") == arc ]]' "policy is not arc"
check '[[ $(jq ".offload.tiers.cpu.evicted > 0" "$work/arc.json") == true ]]' "the 4 GiB CPU tier evicted nothing"
check '[[ $(jq ".offload.tiers.disk.hit_tokens > 0" "$work/arc.json") == true ]]' \
  "no disk hit: $(jq -c .offload.tiers.disk "$work/arc.json")"
check '[[ $(jq ".offload.tiers.cpu.resident_blocks <= .offload.tiers.cpu.capacity_blocks" "$work/arc.json") == true ]]' \
  "the CPU tier holds more than its capacity"
check '[[ $(jq ".offload.tiers.disk.gbps, .offload.tiers.disk.latency_us" "$work/arc.json" | tr "\n" " ") == "7 80 " ]]' \
  "the disk tier's link is not the default 7 GB/s, 80 us"
finish "--offload cpu,disk with arc under --check 50"

# 4. A slower link makes the loads longer, nothing else: the same hits.
run simulate "$work/short.jsonl" "${common[@]}" --offload cpu:64GiB --report "$work/fast.json"
run simulate "$work/short.jsonl" "${common[@]}" --offload cpu:64GiB --offload-cpu-gbps 1 \
  --offload-cpu-latency-us 500 --report "$work/slow.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq ".offload.tiers.cpu.load_ms.mean" "$work/slow.json" | cut -d. -f1) -gt $(jq ".offload.tiers.cpu.load_ms.mean" "$work/fast.json" | cut -d. -f1) ]]' \
  "a 1 GB/s link loads no slower than 64 GB/s"
check '[[ $(jq ".offload.tiers.cpu.gbps" "$work/slow.json") == 1 ]]' "--offload-cpu-gbps not recorded"
finish "--offload-cpu-gbps and --offload-cpu-latency-us time the loads"

# 5. --kv-events: vLLM's KV-event stream, which `kvreplay events` accepts
#    (every stored parent known, no unknown removal, no double store), alone
#    and from a fleet (each batch naming its instance).
run simulate "$trace" "${common[@]}" --offload cpu:2GiB --kv-events "$work/events.jsonl"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -c "[.events[].medium] | unique" "$work/events.jsonl" | jq -s -c "add | unique") == "[\"CPU\",\"GPU\"]" ]]' \
  "the stream's media are not CPU and GPU"
check '[[ $(jq -c "[.events[].type] | unique" "$work/events.jsonl" | jq -s -c "add | unique") == "[\"BlockRemoved\",\"BlockStored\"]" ]]' \
  "the stream's event types are not BlockRemoved and BlockStored"
run events "$work/events.jsonl" --json "$work/events.json"
check '[[ $rc -eq 0 ]]' "kvreplay events: exit $rc: $(err_text)"
run simulate "$trace" "${common[@]}" --replicas 2 --offload cpu:2GiB --kv-events "$work/fleet.jsonl"
check '[[ $rc -eq 0 ]]' "fleet: exit $rc: $(err_text)"
check '[[ $(jq -s -c "map(.instance) | unique" "$work/fleet.jsonl") == "[0,1]" ]]' "the fleet's batches do not name instances 0 and 1"
run events "$work/fleet.jsonl"
check '[[ $rc -eq 0 ]]' "kvreplay events on the fleet's stream: exit $rc: $(err_text)"
finish "--kv-events: a stream kvreplay events accepts, alone and in a fleet"

# 6. --timeline and --html per tier: the CSV's tier columns end at the
#    report's figures, a tier never holds more than its capacity, requests
#    wait for loads; the page carries each tier's card and figures. A run
#    without --offload keeps the 19 columns.
run simulate "$work/short.jsonl" "${common[@]}" --offload cpu:2GiB,disk:64GiB --report "$work/tl.json" \
  --timeline "$work/tl.csv" --html "$work/tl.html"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(head -n 1 "$work/tl.csv" | cut -d, -f20-) == loading_requests,cpu_capacity_blocks,cpu_resident_blocks,cpu_stored,cpu_loaded,cpu_evicted,disk_capacity_blocks,disk_resident_blocks,disk_stored,disk_loaded,disk_evicted ]]' \
  "the offload columns: $(head -n 1 "$work/tl.csv" | cut -d, -f20-)"
check '[[ $(tail -n 1 "$work/tl.csv" | cut -d, -f21-30) == $(jq -r "[.offload.tiers.cpu | .capacity_blocks, .resident_blocks, .stored, .loaded, .evicted] + [.offload.tiers.disk | .capacity_blocks, .resident_blocks, .stored, .loaded, .evicted] | map(tostring) | join(\",\")" "$work/tl.json") ]]' \
  "the last row's tier figures are not the report's: $(tail -n 1 "$work/tl.csv" | cut -d, -f21-30)"
check '[[ $(awk -F, "NR > 1 && (\$22 > \$21 || \$27 > \$26) { n++ } END { print n + 0 }" "$work/tl.csv") -eq 0 ]]' \
  "a row where a tier holds more than its capacity"
check '[[ $(awk -F, "NR > 1 && \$20 > 0 && \$20 <= \$16 { n++ } END { print n + 0 }" "$work/tl.csv") -gt 0 ]]' \
  "no step with a request loading from a tier (of those waiting)"
check '[[ $(awk -F, "NR > 1 && \$20 > \$16 { n++ } END { print n + 0 }" "$work/tl.csv") -eq 0 ]]' \
  "more requests loading than waiting"
check '[[ $(jq "[.offload.tiers[] | .hit_tokens + .preempted_hit_tokens == .loaded * $(jq .config.page_tokens "$work/tl.json")] | all" "$work/tl.json") == true ]]' \
  "a tier's hit tokens (first admissions and preempted) are not its loaded pages: $(jq -c .offload.tiers "$work/tl.json")"
check 'grep -q "cpu tier (2.0 GiB per GPU): prompt tokens hit" "$work/tl.html"' "no cpu tier card on the page"
check 'grep -q "hit rate with the offload tiers" "$work/tl.html"' "no hit-rate-with-tiers card"
check 'grep -q "\"tier1_loaded\":" "$work/tl.html"' "the page's timeline has no disk tier figures"
check 'grep -q "\"tiers\":\[{\"capacity_blocks\":[0-9]*,\"name\":\"cpu\"},{\"capacity_blocks\":[0-9]*,\"name\":\"disk\"}\]" "$work/tl.html"' \
  "the page's data does not list the cpu and disk tiers"
run simulate "$work/short.jsonl" "${common[@]}" --timeline "$work/plain.csv" --html "$work/plain.html"
check '[[ $(head -n 1 "$work/plain.csv" | tr , "\n" | wc -l) -eq 19 ]]' "a run without --offload has other than 19 columns"
check '! grep -q -e "tier0_resident" -e "\"tiers\":\[" -e "hit rate with the offload tiers" "$work/plain.html"' "a run without --offload has tier figures on its page"
finish "--timeline and --html per tier"

# 7. --kv-events under the generic engine: its prefix cache's changes,
#    accepted by kvreplay events, with stored parents chained.
run simulate "$trace" "${common[@]}" --engine generic --kv-events "$work/generic.jsonl"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -c "[.events[].type] | unique" "$work/generic.jsonl" | jq -s -c "add | unique") == "[\"BlockRemoved\",\"BlockStored\"]" ]]' \
  "the generic stream's event types are not BlockRemoved and BlockStored"
check '[[ $(jq "[.events[] | select(.type == \"BlockStored\" and .parent_block_hash != null)] | length" "$work/generic.jsonl" | jq -s add) -gt 0 ]]' \
  "no stored block chained to a parent"
run events "$work/generic.jsonl"
check '[[ $rc -eq 0 ]]' "kvreplay events on the generic stream: exit $rc: $(err_text)"
finish "--kv-events under the generic engine"

# 7b. --offload under the generic and sglang engines: the tiers' hits add to
#    the GPU cache's and save prompt computation, and the KV-event stream
#    (GPU and CPU media) is one kvreplay events accepts. Under sglang the
#    tier is HiCache's host pool (the tree's pages copied as they enter it,
#    a prefix evicted from the GPU loaded back at admission), its timeline
#    ending at the report's figures. (Its invariants are checked at every
#    step by tests/engine/hicache_test.cc: here, under the sanitizers, a
#    check every 50 steps ran past the 300 s limit.)
for engine in generic sglang; do
  extra=()
  [[ $engine == sglang ]] && extra=(--timeline "$work/$engine-cpu.csv")
  run simulate "$trace" "${common[@]}" --engine "$engine" --report "$work/$engine-none.json"
  check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
  run simulate "$trace" "${common[@]}" --engine "$engine" --offload cpu:64GiB --report "$work/$engine-cpu.json" \
    --kv-events "$work/$engine-cpu.jsonl" "${extra[@]}"
  check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
  check '[[ $(jq ".offload.tiers.cpu.hit_tokens > 0 and .offload.tiers.cpu.loaded > 0 and .offload.tiers.cpu.stored > 0 and .offload.policy == \"lru\"" "$work/$engine-cpu.json") == true ]]' \
    "no CPU tier hit under $engine: $(jq -c .offload "$work/$engine-cpu.json")"
  check '[[ $(jq ".prefix_cache.hit_rate_with_tiers > .prefix_cache.hit_rate and .prefix_cache.hits_by_tier.cpu == .offload.tiers.cpu.hit_tokens" "$work/$engine-cpu.json") == true ]]' \
    "hits_by_tier under $engine: $(jq -c .prefix_cache "$work/$engine-cpu.json")"
  check '[[ $(jq ".scheduler.prompt_tokens_computed" "$work/$engine-cpu.json") -lt $(jq ".scheduler.prompt_tokens_computed" "$work/$engine-none.json") ]]' \
    "the CPU tier saved the $engine engine no prompt computation"
  check '[[ $(jq ".requests.finished + .requests.skipped == .requests.total" "$work/$engine-cpu.json") == true ]]' \
    "requests unaccounted for: $(jq -c .requests "$work/$engine-cpu.json")"
  check '[[ $(jq -c "[.events[].medium] | unique" "$work/$engine-cpu.jsonl" | jq -s -c "add | unique") == "[\"CPU\",\"GPU\"]" ]]' \
    "the $engine stream's media are not CPU and GPU"
  run events "$work/$engine-cpu.jsonl"
  check '[[ $rc -eq 0 ]]' "kvreplay events on the $engine offload stream: exit $rc: $(err_text)"
  if [[ $engine == sglang ]]; then
    check '[[ $(jq ".sglang.hicache.write_policy" "$work/sglang-cpu.json") == \"write_through\" ]]' "no sglang.hicache section"
    check '[[ $(tail -n 1 "$work/sglang-cpu.csv" | cut -d, -f21-25) == $(jq -r "[.offload.tiers.cpu | .capacity_blocks, .resident_blocks, .stored, .loaded, .evicted] | map(tostring) | join(\",\")" "$work/sglang-cpu.json") ]]' \
      "the timeline's last cpu figures are not the report's: $(tail -n 1 "$work/sglang-cpu.csv" | cut -d, -f21-25)"
  fi
  finish "--offload under the $engine engine"
done

# 7c. The generic engine on a slow link: a request running alone that cannot
#    get a block while loads hold some waits for them to land. It used to
#    start over at every step while the requests it made give their loaded
#    KV back loaded it again, for ever. And a store the CPU tier refused is
#    tried again at the next step the request runs, as under vllm: C then
#    finds B's prefix in the tier.
cat >"$work/slow.jsonl" <<'JSONL'
{"arrival": 1.0, "id": "r0", "output": 1, "n": 2, "prompt": 144, "hash_block_tokens": 16, "hash_ids": [10000000, 10000001, 10000002, 10000003, 10000004, 10000005, 10000006, 10000007, 10000008]}
{"arrival": 1.06, "id": "r2", "output": 1, "n": 2, "prompt": 144, "hash_block_tokens": 16, "hash_ids": [10000010, 10000011, 10000012, 10000013, 10000014, 10000015, 10000016, 10000017, 10000018]}
{"arrival": 2.06, "id": "r4", "output": 64, "n": 3, "prompt": 112, "hash_block_tokens": 16, "hash_ids": [10000021, 10000022, 10000023, 10000024, 10000025, 10000026, 10000027]}
{"arrival": 2.27, "id": "r6", "output": 1, "n": 2, "prompt": 127, "hash_block_tokens": 16, "hash_ids": [453789, 636944, 799308, 804423, 2208, 729633, 467022, 10000036]}
{"arrival": 2.47, "id": "r7", "output": 64, "n": 4, "prompt": 29, "hash_block_tokens": 16, "hash_ids": [10000037, 10000038]}
{"arrival": 3.47, "id": "r8", "output": 20, "n": 1, "prompt": 141, "hash_block_tokens": 16, "hash_ids": [10000039, 10000040, 10000041, 10000042, 10000043, 10000044, 10000045, 10000046, 10000047]}
{"arrival": 3.48, "id": "r9", "output": 5, "n": 4, "prompt": 96, "hash_block_tokens": 16, "hash_ids": [596853, 888598, 841235, 10000048, 10000049, 10000050]}
JSONL
small=(--model llama-3.1-8b --tp 4 --gpu h100-80gb --max-seq-tokens 4096 --check every -q)
run simulate "$work/slow.jsonl" "${small[@]}" --engine generic --pool-blocks 24 --offload cpu:16MiB \
  --offload-cpu-gbps 0.01 --report "$work/slow.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq ".requests.finished" "$work/slow.json") -eq 7 ]]' "requests: $(jq -c .requests "$work/slow.json")"
cat >"$work/refused.jsonl" <<'JSONL'
{"arrival": 0, "id": "A", "prompt": 64, "output": 200, "hash_block_tokens": 16, "hash_ids": [1, 2, 3, 4]}
{"arrival": 0, "id": "B", "prompt": 48, "output": 200, "hash_block_tokens": 16, "hash_ids": [5, 6, 7]}
{"arrival": 10, "id": "D", "prompt": 560, "output": 1, "hash_block_tokens": 16, "hash_ids": [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134]}
{"arrival": 20, "id": "C", "prompt": 64, "output": 1, "hash_block_tokens": 16, "hash_ids": [5, 6, 7, 8]}
JSONL
for engine in vllm generic; do
  run simulate "$work/refused.jsonl" "${small[@]}" --engine "$engine" --pool-blocks 36 --watermark 0 \
    --offload cpu:2MiB --offload-cpu-gbps 0.1 --report "$work/refused-$engine.json"
  check '[[ $rc -eq 0 ]]' "$engine: exit $rc: $(err_text)"
  check '[[ $(jq -c "[.offload.tiers.cpu.store_refused > 0, .offload.tiers.cpu.hit_tokens]" "$work/refused-$engine.json") == "[true,32]" ]]' \
    "$engine: B's refused store was not retried: $(jq -c .offload.tiers.cpu "$work/refused-$engine.json")"
done
finish "generic offload: a slow link ends; a refused store is retried"

# 8. --kv-events under the sglang engine: the radix tree's pages, one event
#    a page (SGLang's KVCacheEventMixin), of the page's size, accepted by
#    kvreplay events; in a fleet, each batch names its instance.
run simulate "$trace" "${common[@]}" --engine sglang --page-tokens 16 --kv-events "$work/sglang.jsonl"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -c "[.events[] | .block_hashes | length] | unique" "$work/sglang.jsonl" | jq -s -c "add | unique") == "[1]" ]]' \
  "an sglang event names other than one page"
check '[[ $(jq -c "[.events[] | select(.type == \"BlockStored\") | .block_size] | unique" "$work/sglang.jsonl" | jq -s -c "add | unique") == "[16]" ]]' \
  "an sglang BlockStored's block_size is not the page's 16 tokens"
check '[[ $(jq "[.events[] | select(.type == \"BlockRemoved\")] | length" "$work/sglang.jsonl" | jq -s add) -gt 0 ]]' \
  "the sglang stream removes nothing"
run events "$work/sglang.jsonl"
check '[[ $rc -eq 0 ]]' "kvreplay events on the sglang stream: exit $rc: $(err_text)"
run simulate "$trace" "${common[@]}" --engine sglang --page-tokens 16 --replicas 2 --router prefix-aware \
  --kv-events "$work/sglang-fleet.jsonl"
check '[[ $rc -eq 0 ]]' "fleet: exit $rc: $(err_text)"
check '[[ $(jq -s -c "map(.instance) | unique" "$work/sglang-fleet.jsonl") == "[0,1]" ]]' "the sglang fleet's batches do not name instances 0 and 1"
run events "$work/sglang-fleet.jsonl"
check '[[ $rc -eq 0 ]]' "kvreplay events on the sglang fleet's stream: exit $rc: $(err_text)"
finish "--kv-events under the sglang engine"

# 9. An engine that has nothing to run but a tier load in flight: whoever
#    waits on it looks again at the landing. Disaggregated serving with a
#    small decode pool: a transfer waiting on such a decode instance retried
#    one ulp later, forever. It ends, every request accounted for, the decode
#    side having loaded from its tier.
head -n 40 traces/requests/mooncake_conv.jsonl >"$work/h40.jsonl"
run simulate "$work/h40.jsonl" --model llama-3.1-8b --tp 4 --gpu h100-80gb --max-seq-tokens 131072 -q \
  --kv-memory 512MiB --offload cpu:1GiB --prefill-replicas 1 --decode-replicas 1 --report "$work/pd.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq ".requests.finished + .requests.skipped == 40 and .fleet.kv_transfer.requests == .requests.finished" "$work/pd.json") == true ]]' \
  "requests: $(jq -c .requests "$work/pd.json")"
check '[[ $(jq ".instances[1].offload.tiers.cpu.loaded > 0" "$work/pd.json") == true ]]' \
  "the decode side loaded nothing from its tier"
# A closed loop of one client: its one request loading from the tier is
# all the engine has, and the next request waits for it to end (the
# generator ran the engine one ulp further each time, forever).
run simulate "$trace" "${common[@]}" --offload cpu:64GiB --concurrency 1 --report "$work/closed.json"
check '[[ $rc -eq 0 ]]' "--concurrency 1: exit $rc: $(err_text)"
check '[[ $(jq ".requests.finished + .requests.skipped == 150 and .offload.tiers.cpu.loaded > 0" "$work/closed.json") == true ]]' \
  "--concurrency 1: $(jq -c "[.requests, .offload.tiers.cpu.loaded]" "$work/closed.json")"
# Without tiers: a decode instance whose blocks a slow transfer holds can
# run nothing until it lands (its request preempted): waiting, not the stall
# the P1 watchdog stops. Its clock moves to the landing without a step (it
# took ~27,000 empty ones): no more steps than output tokens.
for i in 0 1 2; do
  ids=$(seq -s, $((i * 1000)) $((i * 1000 + 39)))
  printf '{"timestamp":0,"input_length":20000,"output_length":3000,"hash_ids":[%s]}\n' "$ids"
done >"$work/long3.jsonl"
run simulate "$work/long3.jsonl" --model llama-3.1-8b --max-seq-tokens 131072 -q --pool-blocks 2501 \
  --prefill-replicas 1 --decode-replicas 1 --kv-transfer-gbps 1 --report "$work/slow.json"
check '[[ $rc -eq 0 ]]' "slow transfer: exit $rc: $(err_text)"
check '[[ $(jq ".requests.finished == 3 and .instances[1].scheduler.preemptions > 0 and .instances[1].scheduler.steps <= .instances[1].scheduler.output_tokens" "$work/slow.json") == true ]]' \
  "slow transfer: $(jq -c "[.requests, .instances[1].scheduler]" "$work/slow.json")"
finish "--offload with disaggregated prefill on a small pool, or one closed-loop client, or a slow transfer: the run ends"

# 10. Misuse: exit 2, one line naming the problem.
# 8. The memory bound counts the tiers (README, "Memory bounds"): under
#    KVREPLAY_MEMORY_LIMIT, tiers whose residency would pass it are exit 2
#    with one line naming them, before the run and with nothing written,
#    under every engine, per instance in a fleet, more under arc, and in
#    plan's sweep; tiers that fit run.
geometry=(--layers 1 --kv-heads 1 --head-dim 8 --max-seq-tokens 131072 -q)
tiny=("${geometry[@]}" --pool-blocks 2000 --page-tokens 16)
head -n 40 traces/requests/mooncake_conv.jsonl >"$work/m40.jsonl"
export KVREPLAY_MEMORY_LIMIT=100MiB
over() {  # over WHAT PATTERN [PAGE_TOKENS] ARGS...: exit 2, one line matching PATTERN, no report
  local what=$1 pattern=$2 page=16
  shift 2
  [[ $1 =~ ^[0-9]+$ ]] && { page=$1; shift; }
  set -- --pool-blocks 2000 --page-tokens "$page" "$@"
  rm -f "$work/over.json"
  run simulate "$work/m40.jsonl" "${geometry[@]}" --report "$work/over.json" "$@"
  check '[[ $rc -eq 2 ]]' "$what: exit $rc, not 2: $(err_text)"
  check '[[ $(wc -l <"$work/err") -eq 1 ]]' "$what: not one line: $(err_text)"
  check 'grep -q -- "$pattern" "$work/err"' "$what: no '$pattern' in: $(err_text)"
  check '[[ ! -e $work/over.json ]]' "$what: a report was written"
}
# A block here is 512 bytes: 1 GiB is 2097152 of them, 128 MiB 262144.
for engine in vllm generic; do
  over "$engine, cpu:1GiB" "^command line: --offload: a simulation of a pool of 2000 blocks with a cpu tier of 2097152 blocks needs .* bytes a tier block), over the memory limit of 100.00 MiB (KVREPLAY_MEMORY_LIMIT)" \
    --engine "$engine" --offload cpu:1GiB
  over "$engine, cpu and disk" "with a cpu tier of 16384 blocks, a disk tier of 2097152 blocks needs" \
    --engine "$engine" --offload cpu:8MiB,disk:1GiB
done
# The sglang host pool's pages cost less (a page here is one token, 32 bytes).
over "sglang, cpu:4GiB" "^command line: --offload: a simulation of a pool of 2000 blocks with a cpu tier of 134217728 pages needs .* bytes a tier page)" \
  1 --engine sglang --offload cpu:4GiB
over "arc" "with a cpu tier of 262144 blocks needs" --offload cpu:128MiB --offload-policy arc
over "a fleet" "^command line: --offload: a fleet of 2 instances of 2000 blocks with a cpu tier of 262144 blocks each needs" \
  --offload cpu:128MiB --replicas 2
over "--emit-trace" "with a cpu tier of 262144 blocks needs" --offload cpu:128MiB --offload-policy arc \
  --emit-trace "$work/over.kvtrace"
for policy in lru arc; do
  run simulate "$work/m40.jsonl" "${tiny[@]}" --offload cpu:16MiB --offload-policy "$policy" --report "$work/fits.json"
  check '[[ $rc -eq 0 ]]' "a 16 MiB tier under $policy: exit $rc: $(err_text)"
done
run simulate "$work/m40.jsonl" "${tiny[@]}" --offload cpu:128MiB --report "$work/fits.json"
check '[[ $rc -eq 0 ]]' "a 128 MiB lru tier: exit $rc: $(err_text)"
run plan "$work/m40.jsonl" --layers 1 --kv-heads 1 --head-dim 8 --kv-memory 1MiB --page-tokens 16 \
  --max-seq-tokens 131072 --no-search -q --offload cpu:1GiB --report "$work/plan.json"
check '[[ $rc -eq 2 ]]' "plan with a 1 GiB tier: exit $rc, not 2: $(err_text)"
check 'grep -q "offload tiers" "$work/err"' "plan's refusal names no tier: $(err_text)"
unset KVREPLAY_MEMORY_LIMIT
finish "the memory bound counts the offload tiers"

# 9. Runs that end with stores in flight (one output token each, so a
#    request's last step queues its stores; a disk link of 10 s latency) land
#    them at the end, under the generic and vllm engines: the KV events
#    (sent as stores land within the run) show fewer disk blocks than the
#    report's stored; the emitted trace replays with the simulation's
#    final_used, frees, allocations and per-tier stores, loads and drops; and
#    each tier's stored = resident_blocks + evicted, bytes_in = stored x
#    block_bytes.
head -n 20 traces/requests/mooncake_conv.jsonl | jq -c '.output_length = 1' >"$work/o1.jsonl"
for engine in generic vllm; do
  run simulate "$work/o1.jsonl" "${geometry[@]}" --pool-blocks 3000 --page-tokens 16 --engine "$engine" \
    --offload cpu:256KiB,disk:4MiB --offload-disk-latency-us 10000000 --kv-events "$work/$engine-end.events" \
    --emit-trace "$work/$engine-end.kvtrace" --report "$work/$engine-end.json"
  check '[[ $rc -eq 0 ]]' "$engine: exit $rc: $(err_text)"
  landed=$(jq "[.events[] | select(.type == \"BlockStored\" and .medium == \"DISK\") | .block_hashes | length] | add" "$work/$engine-end.events" | jq -s add)
  check '[[ $(jq ".offload.tiers.cpu.evicted > 0 and .offload.tiers.disk.stored > $landed" "$work/$engine-end.json") == true ]]' \
    "$engine: not a run that ends with stores in flight ($landed disk blocks landed within it): $(jq -c .offload.tiers "$work/$engine-end.json")"
  check '[[ $(jq "[.offload.tiers[] | .stored == .resident_blocks + .evicted and .bytes_in == .stored * $(jq .offload.block_bytes "$work/$engine-end.json")] | all" "$work/$engine-end.json") == true ]]' \
    "$engine: stored is not resident_blocks + evicted: $(jq -c .offload.tiers "$work/$engine-end.json")"
  run replay "$work/$engine-end.kvtrace" --backend cpu --verify -q --report "$work/$engine-end-replay.json"
  check '[[ $rc -eq 0 ]]' "$engine: the replay: exit $rc: $(err_text)"
  check '[[ $(jq -c "[.blocks.final_used, .blocks.frees, .blocks.allocations, [.offload.tiers.cpu, .offload.tiers.disk | .stored, .loaded, .evicted]]" "$work/$engine-end.json") == "$(jq -c "[.blocks.final_used, .blocks.frees, .blocks.allocations, [.cache_ops.tiers.cpu, .cache_ops.tiers.disk | .stores, .loads, .drops]]" "$work/$engine-end-replay.json")" ]]' \
    "$engine: the simulation and its replay differ: $(jq -c "[.blocks, .offload.tiers.cpu.stored, .offload.tiers.disk.stored]" "$work/$engine-end.json") against $(jq -c "[.blocks, .cache_ops.tiers]" "$work/$engine-end-replay.json")"
done
finish "stores in flight at the end land: the emitted trace replays with the same figures"

bad() {  # bad WHAT PATTERN ARGS...: the run exits 2 with one line matching PATTERN
  local what=$1 pattern=$2
  shift 2
  run simulate "$work/short.jsonl" "${common[@]}" "$@"
  check '[[ $rc -eq 2 ]]' "$what: exit $rc, not 2"
  check '[[ $(wc -l <"$work/err") -eq 1 ]]' "$what: not one line: $(err_text)"
  check 'grep -q -- "$pattern" "$work/err"' "$what: no '$pattern' in: $(err_text)"
}
bad "no size" "not TIER:SIZE" --offload cpu
bad "unknown tier" "unknown tier 'gpu'" --offload gpu:1GiB
bad "size 0" "above 0" --offload cpu:0
bad "bad size" "--offload: cpu" --offload cpu:lots
bad "tier twice" "given twice" --offload cpu:1GiB,cpu:2GiB
bad "empty item" "not TIER:SIZE" --offload cpu:1GiB,
bad "policy alone" "needs --offload" --offload-policy arc
bad "link alone" "needs --offload" --offload-cpu-gbps 10
bad "disk link, no disk" "no disk tier" --offload cpu:1GiB --offload-disk-gbps 10
bad "sglang disk" "^command line: --offload: the sglang engine keeps one cpu tier" --engine sglang --offload cpu:1GiB,disk:4GiB
bad "sglang arc" "^command line: --offload-policy: the sglang engine's host pool" --engine sglang --offload cpu:1GiB --offload-policy arc
bad "contiguous" "^command line: --offload: needs the paged allocator" --allocator contiguous-max --offload cpu:1GiB
bad "no prefix cache" "prefix cache" --no-prefix-cache --offload cpu:1GiB
bad "bad policy" "offload-policy" --offload cpu:1GiB --offload-policy mru
bad "nan link" "offload-cpu-gbps" --offload cpu:1GiB --offload-cpu-gbps nan
bad "events without the cache" "^command line: --kv-events: needs the prefix cache" --no-prefix-cache --kv-events "$work/x.jsonl"
bad "events, contiguous" "^command line: --kv-events: needs the paged allocator" --allocator contiguous-max --kv-events "$work/x.jsonl"
# A block here is 512 KiB (16 tokens x 32 layers x K and V x 2 of 8 KV heads x 128 x 2 bytes).
bad "tier under a block" "^command line: --offload: the cpu tier's 1.00 KiB hold no block of 512.00 KiB" --offload cpu:1KiB
bad "tier over 2^32 blocks" "^command line: --offload: the disk tier's .* over the most a tier indexes (4294967295)" --offload cpu:1GiB,disk:4096TiB
finish "--offload misuse: exit 2, one line"

echo "$passed passed, $failed failed"
((failed == 0))
