#!/usr/bin/env bash
# `kvreplay simulate --replicas N --router POLICY` (SPEC 3.6) from the command
# line: --replicas 1 is byte-identical to no flag (every output), a fleet's
# report keeps the totals and adds fleet and instances (summed counts equal
# the instances'), --router-log has one row per request with the header
# naming each instance, --requests and --timeline gain an instance column,
# --gpu-hour-usd prices the run, disaggregated prefill and decode move each
# prompt's KV (bytes = blocks x block bytes) with every pool checked, and every misuse of the fleet options is a
# usage error (exit 2) naming the option.
#
# Usage: run_fleet_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_fleet_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-fleet.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
run_timeout=600  # a sanitizer build runs the 3-replica page (two simulations) in minutes
# The Mooncake sample's 500 requests (its first 200 under the sanitizers).
requests=$(trace_lines 500 200)
trace=$work/mooncake.jsonl
head -n "$requests" traces/requests/mooncake_conv.jsonl >"$trace"
common=(--kv-memory 16GiB --max-seq-tokens 131072 -q)

# 1. --replicas 1 changes nothing: report, requests and timeline byte for byte.
run simulate "$trace" "${common[@]}" --report "$work/a.json" --requests "$work/a.csv" \
  --timeline "$work/a.tl"
rc_a=$rc
run simulate "$trace" "${common[@]}" --replicas 1 --report "$work/b.json" --requests "$work/b.csv" \
  --timeline "$work/b.tl"
check '[[ $rc_a -eq 0 && $rc -eq 0 ]]' "exit codes $rc_a and $rc, expected 0"
check 'diff <(jq -S "del(.timing)" "$work/a.json") <(jq -S "del(.timing)" "$work/b.json") >/dev/null' \
  "--replicas 1 changed the report"
check 'cmp -s "$work/a.csv" "$work/b.csv" && cmp -s "$work/a.tl" "$work/b.tl"' \
  "--replicas 1 changed --requests or --timeline"
check '[[ $(jq "has(\"fleet\") or has(\"instances\")" "$work/b.json") == false ]]' \
  "--replicas 1 added fleet keys"
finish "--replicas 1 is byte-identical to no flag"

# 2. A fleet's report: totals equal the instances' sums, the fleet section.
run simulate "$trace" "${common[@]}" --replicas 3 --router prefix-aware --check every \
  --report "$work/f.json" --router-log "$work/route.csv" --requests "$work/f.csv" \
  --timeline "$work/f.tl" --gpu-hour-usd 2 --slo-ttft-ms 5000 --html "$work/f.html"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
# The fleet's page: one chart line per instance, an instances table row each.
check 'grep -q "\"kind\":\"fleet\"" "$work/f.html"' "--html: not a fleet page"
check '[[ $(grep -o "\"name\":\"[0-9] mixed\"" "$work/f.html" | sort -u | wc -l) == 3 ]]' \
  "--html: not 3 instances in the page's data"
check '[[ $(grep -c "^<tr><td>[0-9]</td><td>mixed</td>" "$work/f.html") == 3 ]]' "--html: not 3 instance rows"
# Beside the router's hit rate, one pool of the fleet's memory (3 pools' blocks).
check 'grep -q "one pool as large as the fleet ($(($(jq .config.pool_blocks "$work/f.json") * 3)) blocks)" "$work/f.html"' \
  "--html: no card of one pool holding the fleet's blocks"
check '[[ $(jq ".fleet.replicas, (.instances | length), .fleet.gpus" "$work/f.json" | tr "\n" " ") == "3 3 3 " ]]' \
  "fleet.replicas, instances and gpus are not 3"
check '[[ $(jq ".fleet.router.policy" "$work/f.json") == "\"prefix-aware\"" ]]' "router policy"
for key in requests.finished prefix_cache.hit_tokens prefix_cache.query_tokens scheduler.steps \
  scheduler.output_tokens blocks.allocations invariants.checks; do
  check "[[ \$(jq \"[.instances[].$key] | add\" \"\$work/f.json\") == \$(jq \".$key\" \"\$work/f.json\") ]]" \
    "$key is not the sum of the instances'"
done
check '[[ $(jq ".requests.total" "$work/f.json") == $requests && $(jq ".requests.finished" "$work/f.json") == $requests ]]' \
  "not $requests requests finished"
check '[[ $(jq "[.instances[].routed.requests] | add" "$work/f.json") == $requests ]]' "routed requests do not add up"
check '[[ $(jq ".invariants.violations | length" "$work/f.json") == 0 && $(jq ".status" "$work/f.json") == "\"ok\"" ]]' \
  "violations or status"
check 'jq -e "[.instances[].requests.finished] | all(. > 0)" "$work/f.json" >/dev/null' "an idle instance"
check 'jq -e ".cost_usd.usd_per_hour == 6 and .cost_usd.gpus == 3 and (.cost_usd.usd_per_million_output_tokens > 0)" "$work/f.json" >/dev/null' \
  "cost_usd: $(jq -c .cost_usd "$work/f.json")"
# The hit rate is the fleet's hits over its queries.
check 'jq -e "(.prefix_cache.hit_tokens / .prefix_cache.query_tokens - .prefix_cache.hit_rate) | fabs < 1e-12" "$work/f.json" >/dev/null' \
  "hit_rate is not hit_tokens / query_tokens"
finish "a fleet's report: totals, fleet and instances"

# 3. The router log: a header naming each instance, one row per request.
check '[[ $(head -1 "$work/route.csv") == "line,id,arrival_s,instance,cached_blocks_0,cached_blocks_1,cached_blocks_2,cost_0,cost_1,cost_2" ]]' \
  "header: $(head -1 "$work/route.csv")"
check '[[ $(($(wc -l <"$work/route.csv") - 1)) == $requests ]]' "not $requests rows"
check '[[ $(tail -n +2 "$work/route.csv" | cut -d, -f4 | sort | uniq -c | wc -l) == 3 ]]' \
  "not every instance chosen"
# The instance each row names is the one --requests reports.
check 'diff <(tail -n +2 "$work/route.csv" | cut -d, -f1,4 | sort) <(tail -n +2 "$work/f.csv" | awk -F, "{print \$1\",\"\$NF}" | sort) >/dev/null' \
  "--router-log and --requests disagree on where requests went"
check '[[ $(head -1 "$work/f.tl" | cut -d, -f1-2) == "instance,step" ]]' "timeline header"
check '[[ $(tail -n +2 "$work/f.tl" | wc -l) == $(jq ".scheduler.steps" "$work/f.json") ]]' \
  "timeline rows are not the steps"
finish "--router-log, --requests and --timeline name the instance"

# 4. Round-robin: request k to instance k mod 3.
run simulate "$trace" "${common[@]}" --replicas 3 --router-log "$work/rr.csv"
check '[[ $rc -eq 0 ]]' "exit $rc"
check '[[ $(tail -n +2 "$work/rr.csv" | awk -F, "{ if (\$4 != (NR - 1) % 3) bad++ } END { print bad + 0 }") == 0 ]]' \
  "round-robin did not send request k to k mod 3"
check '[[ $(head -1 "$work/rr.csv") == "line,id,arrival_s,instance,cost_0,cost_1,cost_2" ]]' \
  "round-robin header: $(head -1 "$work/rr.csv")"
finish "round-robin from the command line"

# 5. Disaggregated: prompts on 2 prefill instances, decode on 1, every pool
# checked at every step; the transfer's bytes are its blocks times the
# block's bytes; the user's latencies count every request once.
run simulate "$trace" "${common[@]}" --prefill-replicas 2 --decode-replicas 1 --check every \
  --kv-transfer-gbps 25 --report "$work/pd.json" --requests "$work/pd.csv" --router prefix-aware \
  --router-log "$work/pdr.csv"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
# The router chooses among the 2 prefill instances: its log names those.
check '[[ $(head -1 "$work/pdr.csv") == "line,id,arrival_s,instance,cached_blocks_0,cached_blocks_1,cost_0,cost_1" ]]' \
  "P/D router log header: $(head -1 "$work/pdr.csv")"
check '[[ $(tail -n +2 "$work/pdr.csv" | awk -F, "NF != 8" | wc -l) == 0 && $(tail -n +2 "$work/pdr.csv" | wc -l) == $requests ]]' \
  "P/D router log rows are not $requests of 8 fields"
# Overload is judged on the user's arrivals, not on when the KV landed.
check '[[ $(jq .overload.last_arrival_s "$work/pd.json") == $(jq .overload.last_arrival_s "$work/a.json") ]]' \
  "overload.last_arrival_s $(jq .overload.last_arrival_s "$work/pd.json"), the trace's is $(jq .overload.last_arrival_s "$work/a.json")"
check 'jq -e ".status == \"ok\" and .requests.finished == $requests and (.invariants.violations | length) == 0" "$work/pd.json" >/dev/null' \
  "status, finished or violations: $(jq -c "{status, requests}" "$work/pd.json")"
check '[[ $(jq -c "[.instances[].role]" "$work/pd.json") == "[\"prefill\",\"prefill\",\"decode\"]" ]]' \
  "roles: $(jq -c "[.instances[].role]" "$work/pd.json")"
check 'jq -e ".fleet.prefill == 2 and .fleet.decode == 1 and .fleet.gpus == 3" "$work/pd.json" >/dev/null' "fleet.prefill, decode, gpus"
check 'jq -e ".fleet.kv_transfer | .bytes == .blocks * .block_bytes and .requests == $requests and .blocks > 0 and .gbps == 25" "$work/pd.json" >/dev/null' \
  "kv_transfer: $(jq -c ".fleet.kv_transfer | {bytes, blocks, block_bytes, requests}" "$work/pd.json")"
# Each transfer takes at least its latency and at most every byte at 25 GB/s.
check 'jq -e ".fleet.kv_transfer | .ms.p50 >= 0.02 and .ms.max <= 0.02 + .bytes / 25e9 * 1e3" "$work/pd.json" >/dev/null' \
  "kv_transfer.ms out of bounds"
check 'jq -e "[.instances[] | select(.role == \"prefill\") | .requests.finished] | add == $requests" "$work/pd.json" >/dev/null' \
  "the prefill instances did not finish $requests prompts"
check 'jq -e ".latency.ttft_ms.count == $requests and .latency.e2e_ms.count == $requests and .invariants.checks > 0" "$work/pd.json" >/dev/null' \
  "latencies do not count each request once"
check '[[ $(tail -n +2 "$work/pd.csv" | wc -l) == $requests ]]' "--requests: not $requests rows"
# The user sees a request from its own arrival: TTFT covers prefill, transfer and the first decode step.
check '[[ $(tail -n +2 "$work/pd.csv" | awk -F, "\$10 + 0 <= 0.02 { bad++ } END { print bad + 0 }") == 0 ]]' \
  "a TTFT below the transfer latency"
finish "disaggregated prefill and decode, invariants checked on each pool"

# 6. Misuse: each a usage error naming the option.
misuse() {  # misuse EXPECTED_TEXT ARGS...
  local expected=$1
  shift
  run simulate "$trace" --kv-memory 8GiB "$@"
  check '[[ $rc -eq 2 ]]' "$* exited $rc, expected 2"
  check 'grep -qF -- "$expected" "$work/err"' "$*: stderr lacks '$expected': $(err_text)"
}
misuse "--router routes requests among replicas" --router least-kv
misuse "--router-log routes requests among replicas" --router-log "$work/x.csv"
misuse "--router-temperature is an option of --router prefix-aware" --replicas 2 --router-temperature 1
misuse "--router-approx-ttl-s is an option of --router-view approximate" --replicas 2 \
  --router prefix-aware --router-approx-ttl-s 5
misuse "--router" --replicas 2 --router nearest
misuse "--replicas" --replicas 0
misuse "--gpu-hour-usd" --gpu-hour-usd nan
misuse "--prefill-replicas needs --decode-replicas too" --prefill-replicas 2
misuse "with --prefill-replicas and --decode-replicas give one or the other" --replicas 2 \
  --prefill-replicas 1 --decode-replicas 1
misuse "the sglang engine cannot receive KV" --engine sglang --prefill-replicas 1 --decode-replicas 1
misuse "drop --no-prefix-cache" --prefill-replicas 1 --decode-replicas 1 --no-prefix-cache
misuse "prefix cache, which needs --allocator paged" --prefill-replicas 1 --decode-replicas 1 \
  --allocator contiguous-max
misuse "--kv-transfer-gbps is an option of --prefill-replicas" --replicas 2 --kv-transfer-gbps 10
misuse "--kv-transfer-latency-us" --prefill-replicas 1 --decode-replicas 1 --kv-transfer-latency-us -1
misuse "hybrid groups cannot receive KV yet" --model gemma-3-27b --prefill-replicas 1 \
  --decode-replicas 1
check '[[ ! -e "$work/x.csv" ]]' "a refused run left an output"
finish "fleet options misused: exit 2, the option named"

echo "$passed passed, $failed failed"
((failed == 0))
