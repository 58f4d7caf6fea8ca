#!/usr/bin/env bash
# `kvreplay simulate --concurrency C` and `--request-rate R` (SPEC 3.5) from
# the command line: a closed loop never has more than C requests in flight
# and has C at the start, one client sends each request when its previous
# one ends, Poisson arrivals are seeded (the same seed the same run, another
# seed another) with the mean gap 1/R, the report's load section counts
# every request and its throughput is over its window; --warmup-requests
# sends its requests first and measures only the rest; a fleet's clients
# span its instances; plan runs every cell under the generator; every misuse
# is exit 2.
#
# Usage: run_load_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_load_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-load.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
run_timeout=120
trace=traces/requests/mooncake_conv.jsonl
common=(--kv-memory 16GiB --max-seq-tokens 131072 -q)

# in_flight CSV: the most requests in flight at once, from --requests' arrival
# and end-to-end times (an arrival counted just after an end at the same time,
# the CSV's rounding allowed for).
in_flight() {
  awk -F, 'NR > 1 && $7 == "finished" { print $6 + 0.0001, 1; print $6 + $12 / 1000, -1 }' "$1" |
    sort -g | awk '{ n += $2; if (n > most) most = n } END { print most + 0 }'
}

# 1. A closed loop of 8 clients.
run simulate "$trace" "${common[@]}" --concurrency 8 --report "$work/c8.json" --requests "$work/c8.csv"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -r ".load.generator, .load.concurrency, .load.sent" "$work/c8.json" | tr "\n" " ") == "closed_loop 8 500 " ]]' \
  "load: not a closed loop of 8 that sent 500: $(jq -c .load "$work/c8.json")"
check '[[ $(jq ".load.finished + .requests.skipped == .load.sent" "$work/c8.json") == true ]]' \
  "finished and skipped are not the requests sent"
check '[[ $(in_flight "$work/c8.csv") == 8 ]]' "in flight at most: $(in_flight "$work/c8.csv"), not 8"
check '[[ $(awk -F, "NR > 1 && \$6 == 0" "$work/c8.csv" | wc -l) == 8 ]]' "not 8 requests sent at time 0"
check '[[ $(jq "(.load.requests_per_second * .load.window_s - .load.finished) | fabs < 1e-6" "$work/c8.json") == true ]]' \
  "requests_per_second is not finished / window_s"
check '[[ $(jq ".config.simulation.concurrency" "$work/c8.json") == 8 ]]' "config.simulation.concurrency"
finish "--concurrency 8: at most 8 in flight, 8 at the start, every request counted"

# 2. One client: each request is sent when the one before ends.
run simulate "$trace" "${common[@]}" --concurrency 1 --requests "$work/c1.csv"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(awk -F, "NR > 2 { gap = \$6 - (a + e / 1000); if (gap < 0) gap = -gap; if (gap > 0.002) bad++ } NR > 1 { a = \$6; e = \$12 } END { print bad + 0 }" "$work/c1.csv") == 0 ]]' \
  "a request was not sent when the one before it ended"
finish "--concurrency 1 sends each request as the previous ends"

# 3. Poisson arrivals: seeded, mean gap 1 / R.
run simulate "$trace" "${common[@]}" --request-rate 2 --load-seed 7 --report "$work/p7.json" --requests "$work/p7.csv"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
run simulate "$trace" "${common[@]}" --request-rate 2 --load-seed 7 --report "$work/p7b.json" --requests "$work/p7b.csv"
run simulate "$trace" "${common[@]}" --request-rate 2 --load-seed 8 --requests "$work/p8.csv"
check 'diff <(jq -S "del(.timing)" "$work/p7.json") <(jq -S "del(.timing)" "$work/p7b.json") >/dev/null && cmp -s "$work/p7.csv" "$work/p7b.csv"' \
  "the same seed gave another run"
check '! cmp -s "$work/p7.csv" "$work/p8.csv"' "another seed gave the same arrivals"
sort -t, -k6,6g "$work/p7.csv" | awk -F, '$1 != "line"' >"$work/p7.sorted"
check '[[ $(head -n 1 "$work/p7.sorted" | cut -d, -f6) == 0.000000 ]]' "the first arrival is not at 0"
mean=$(awk -F, '{ last = $6 } END { print last / (NR - 1) }' "$work/p7.sorted")
check 'awk -v m="$mean" "BEGIN { exit !(m > 0.45 && m < 0.55) }"' "mean gap $mean s, not about 0.5 s"
check '[[ $(jq -r ".load.generator, .load.request_rate, .load.seed" "$work/p7.json" | tr "\n" " ") == "poisson 2 7 " ]]' \
  "load: $(jq -c .load "$work/p7.json")"
finish "--request-rate: seeded Poisson arrivals, mean gap 1/R"

# 4. Without a load option, no load section.
run simulate "$trace" "${common[@]}" --report "$work/plain.json"
check '[[ $(jq "has(\"load\")" "$work/plain.json") == false ]]' "a load section without a load option"
finish "no load section by default"

# 5. Misuse: exit 2 naming the option.
while IFS='|' read -r words expect; do
  read -r -a extra <<<"$words"
  run simulate "$trace" "${common[@]}" "${extra[@]}"
  check '[[ $rc -eq 2 ]] && grep -qF -- "$expect" "$work/err"' "${words}: exit $rc, not 2 naming '$expect': $(err_text)"
done <<EOF2
--concurrency 4 --request-rate 2|excludes
--load-seed 3|--load-seed seeds
--concurrency 0|--concurrency
--request-rate 0|--request-rate
--request-rate nan|--request-rate
--warmup-requests 2|--warmup-requests warms up a load generator
--concurrency 2 --warmup-requests -1|--warmup-requests
--concurrency 2 --warmup-requests 99999999999999999999999|not an integer
EOF2
finish "misused load options are refused"

# Synthetic traces: 40 requests alike in length, each prompt its own
# ("alike"); 12 requests whose prompts share seven of eight hash blocks
# ("shared").
for i in $(seq 0 39); do
  printf '{"timestamp": 0, "input_length": 1024, "output_length": 128, "hash_ids": [%d, %d]}\n' $((1000 + 2 * i)) $((1001 + 2 * i))
done >"$work/alike.jsonl"
for i in $(seq 0 11); do
  printf '{"timestamp": 0, "input_length": 4096, "output_length": 64, "hash_ids": [1, 2, 3, 4, 5, 6, 7, %d]}\n' $((100 + i))
done >"$work/shared.jsonl"
small=(--kv-memory 16GiB -q)

# 6. Warm-up: its requests first, all ended before the measured ones start;
# the window and the means are the measured requests'.
run simulate "$work/shared.jsonl" "${small[@]}" --concurrency 2 --warmup-requests 3 \
  --report "$work/w.json" --requests "$work/w.csv"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -r ".load.warmup.requests, .load.sent, .load.finished, .config.simulation.warmup_requests" "$work/w.json" | tr "\n" " ") == "3 9 9 3 " ]]' \
  "load: not 3 warm-up and 9 measured: $(jq -c .load "$work/w.json")"
end_s=$(jq .load.warmup.end_s "$work/w.json")
check '[[ $(jq ".load.window_start_s == .load.warmup.end_s and .load.warmup.end_s > 0" "$work/w.json") == true ]]' \
  "the window does not start at the warm-up's end: $(jq -c .load "$work/w.json")"
# Arrivals and ends from --requests: 3 requests arrive before the warm-up
# ends and all end by then; the other 9 arrive at it or later.
check '[[ $(awk -F, -v e="$end_s" "NR > 1 && \$6 + 1e-6 < e { n++; if (\$6 + \$12 / 1000 > e + 1e-6) late++ } END { print n + 0, late + 0 }" "$work/w.csv") == "3 0" ]]' \
  "warm-up requests: not 3 arriving and ending before $end_s s"
# The first request misses the shared prefix; every later one hits it: the
# measured mean TTFT is below the whole run's.
check '[[ $(jq ".load.ttft_ms_mean < .latency.ttft_ms.mean" "$work/w.json") == true ]]' \
  "measured TTFT mean $(jq .load.ttft_ms_mean "$work/w.json") not below the run's $(jq .latency.ttft_ms.mean "$work/w.json")"
check '[[ $(jq "(.load.output_tokens_per_second * .load.window_s - .load.output_tokens) | fabs < 1e-6" "$work/w.json") == true ]]' \
  "output_tokens_per_second is not output_tokens / window_s"
run simulate "$work/shared.jsonl" "${small[@]}" --concurrency 2 --warmup-requests 12 --report "$work/wall.json"
check '[[ $rc -eq 0 && $(jq -c "[.load.sent, .load.output_tokens_per_second]" "$work/wall.json") == "[0,null]" ]]' \
  "all warm-up: exit $rc, $(jq -c .load "$work/wall.json")"
run simulate "$work/shared.jsonl" --kv-memory 16GiB --request-rate 5 --warmup-requests 4 --report "$work/wp.json"
check '[[ $rc -eq 0 && $(jq ".load.sent == 8 and .load.window_start_s == .load.warmup.end_s" "$work/wp.json") == true ]] && grep -q "after 4 warm-up requests" "$work/out"' \
  "Poisson warm-up: exit $rc, $(jq -c .load "$work/wp.json")"
finish "--warmup-requests: sent first, ended before the window, left out of its figures"

# A closed loop is never overloaded: 16 clients on 2 sequences at a time
# queue 14, and the run drains them after the last arrival, by design.
run simulate "$work/alike.jsonl" --kv-memory 16GiB --concurrency 16 --max-seqs 2 --report "$work/ov.json"
check '[[ $rc -eq 0 && $(jq ".overload.overloaded" "$work/ov.json") == false && $(jq ".overload.ratio > 1.1" "$work/ov.json") == true ]] && ! grep -q overloaded "$work/err"' \
  "closed loop called overloaded: exit $rc, $(jq -c .overload "$work/ov.json"), $(err_text)"
finish "a closed loop is never overloaded"

# 7. A fleet's clients: 2 replicas, round-robin, 2 clients on requests alike
# serve each client on its own instance: twice one instance's throughput
# with one client over half the requests, exactly; never more than 2 in
# flight across the fleet.
head -n 20 "$work/alike.jsonl" >"$work/alike20.jsonl"
run simulate "$work/alike20.jsonl" "${small[@]}" --concurrency 1 --report "$work/one.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
run simulate "$work/alike.jsonl" "${small[@]}" --concurrency 2 --replicas 2 --report "$work/two.json" \
  --requests "$work/two.csv"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -n --slurpfile a "$work/one.json" --slurpfile b "$work/two.json" "(\$b[0].load.output_tokens_per_second / \$a[0].load.output_tokens_per_second - 2) | fabs < 1e-9") == true ]]' \
  "2 replicas x 1 client each: $(jq .load.output_tokens_per_second "$work/two.json") tok/s, not twice $(jq .load.output_tokens_per_second "$work/one.json")"
check '[[ $(in_flight "$work/two.csv") == 2 ]]' "fleet: in flight at most $(in_flight "$work/two.csv"), not 2"
run simulate "$work/alike.jsonl" "${small[@]}" --concurrency 3 --prefill-replicas 1 --decode-replicas 2 \
  --warmup-requests 3 --report "$work/pd.json" --requests "$work/pd.csv"
check '[[ $rc -eq 0 && $(jq ".load.sent == 37 and .load.finished == 37" "$work/pd.json") == true ]]' \
  "--pd 1:2 closed loop: exit $rc, $(jq -c .load "$work/pd.json")"
check '[[ $(in_flight "$work/pd.csv") -le 3 ]]' "--pd 1:2: in flight at most $(in_flight "$work/pd.csv"), above 3"
# One client, disaggregated, a request the decode instance can never fit
# (more blocks than its pool): it is refused on admission, before its
# prefill, and the client is free then, so no request queues behind it.
{
  printf '{"timestamp": 0, "input_length": 1024, "output_length": 32, "hash_ids": [1, 2]}\n'
  printf '{"timestamp": 0, "input_length": 32000, "output_length": 2000, "hash_ids": [%s]}\n' "$(seq -s, 100 162)"
  printf '{"timestamp": 0, "input_length": 1024, "output_length": 32, "hash_ids": [3, 4]}\n'
} >"$work/refused.jsonl"
run simulate "$work/refused.jsonl" --model llama-3.1-8b --kv-memory 4GiB --max-seq-tokens 131072 -q \
  --concurrency 1 --prefill-replicas 1 --decode-replicas 1 --report "$work/refused.json" --requests "$work/refused.csv"
check '[[ $rc -eq 0 && $(jq ".requests.skipped" "$work/refused.json") == 1 ]]' "refused: exit $rc, $(jq -c .requests "$work/refused.json")"
check '[[ $(awk -F, "NR > 1 && \$7 == \"finished\" && \$9 > 100" "$work/refused.csv" | wc -l) == 0 ]]' \
  "one client: a request queued behind the refused one's prefill: $(cat "$work/refused.csv")"
finish "--concurrency over a fleet: the clients span the instances"

# 8. plan runs every cell under the generator: a cell's figures are
# simulate's with the same options, and not those of the trace's times.
run plan "$work/alike.jsonl" --model llama-3.1-8b --kv-memory 4GiB --concurrency 4 --no-search -q --report "$work/pl.json"
check '[[ $rc -eq 0 && $(jq .simulation.concurrency "$work/pl.json") == 4 ]]' "plan --concurrency: exit $rc: $(err_text)"
run simulate "$work/alike.jsonl" --model llama-3.1-8b --kv-memory 4GiB --concurrency 4 -q --report "$work/pls.json"
check '[[ $(jq -n --slurpfile p "$work/pl.json" --slurpfile s "$work/pls.json" "\$p[0].cells[0].output_tokens_per_second == \$s[0].scheduler.output_tokens_per_second") == true ]]' \
  "plan's cell is not simulate --concurrency 4's"
run plan "$work/alike.jsonl" --model llama-3.1-8b --kv-memory 4GiB --no-search -q --report "$work/pl0.json"
check '[[ $(jq -n --slurpfile p "$work/pl.json" --slurpfile q "$work/pl0.json" "\$p[0].cells[0].output_tokens_per_second != \$q[0].cells[0].output_tokens_per_second") == true ]]' \
  "plan --concurrency 4 gave the trace's own times' figures"
run plan "$work/alike.jsonl" --model llama-3.1-8b --kv-memory 4GiB --warmup-requests 2 -q
check '[[ $rc -eq 2 ]] && grep -qF -- "--warmup-requests warms up" "$work/err"' "plan --warmup-requests alone: exit $rc: $(err_text)"
finish "plan --concurrency: every cell closed-loop"

# 9. Load as the benchmark clients send it: --burstiness, a ramp, the random
# datasets' length spread, --measure-after; and their misuse, exit 2.
run simulate "$trace" "${common[@]}" --request-rate 4 --burstiness 0.5 --load-seed 1 --report "$work/b.json" \
  --requests "$work/b.csv"
check '[[ $rc -eq 0 && $(jq -r ".load.generator, .load.burstiness" "$work/b.json" | tr "\n" " ") == "gamma 0.5 " ]]' \
  "burstiness: exit $rc, $(jq -c .load "$work/b.json")"
run simulate "$trace" "${common[@]}" --request-rate 4 --load-seed 1 --requests "$work/b1.csv"
check '! cmp -s <(cut -d, -f6 "$work/b.csv") <(cut -d, -f6 "$work/b1.csv")' "--burstiness 0.5 gave Poisson's arrivals"
run simulate "$trace" "${common[@]}" --ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 20 \
  --report "$work/ramp.json" --requests "$work/ramp.csv"
check '[[ $rc -eq 0 && $(jq -c ".load.ramp_up" "$work/ramp.json") == "{\"end_rps\":20,\"requests\":500,\"start_rps\":1,\"strategy\":\"linear\"}" ]]' \
  "ramp: exit $rc, $(jq -c .load "$work/ramp.json")"
# The first 50 arrivals span far longer than the last 50 (1 against 20 a second at the ends).
check 'awk -F, "NR > 1 { a[NR - 1] = \$6 } END { n = NR - 1; exit !((a[51] - a[1]) > 4 * (a[n] - a[n - 50])) }" "$work/ramp.csv"' \
  "the ramp does not climb"
run simulate "$work/alike.jsonl" "${small[@]}" --concurrency 4 --random-range-ratio 0.5 --report "$work/rr.json" \
  --requests "$work/rr.csv"
check '[[ $rc -eq 0 && $(awk -F, "NR > 1 { print \$4 }" "$work/rr.csv" | sort -u | wc -l) -gt 5 ]]' \
  "--random-range-ratio: the outputs did not spread: exit $rc, $(awk -F, "NR > 1 { print \$4 }" "$work/rr.csv" | sort -u | head -3)"
# SGLang's default R = 0 is a spread too, over [1, L]: given, it is not "no spread".
run simulate "$work/alike.jsonl" "${small[@]}" --concurrency 4 --random-range-ratio 0 \
  --range-ratio-style sglang --report "$work/rr0.json" --requests "$work/rr0.csv"
check '[[ $rc -eq 0 && $(awk -F, "NR > 1 { print \$4 }" "$work/rr0.csv" | sort -u | wc -l) -gt 5 && $(jq -c .load.random_range_ratio "$work/rr0.json") == "{\"ratio\":0,\"style\":\"sglang\"}" ]]' \
  "--random-range-ratio 0 --range-ratio-style sglang did not spread: exit $rc, $(jq -c .load.random_range_ratio "$work/rr0.json")"
run simulate "$work/alike.jsonl" "${small[@]}" --concurrency 4 --measure-after 8 --report "$work/ma.json"
check '[[ $rc -eq 0 && $(jq ".load.sent == 32 and .load.measure_after == 8 and .load.warmup.requests == 0" "$work/ma.json") == true ]]' \
  "--measure-after: exit $rc, $(jq -c .load "$work/ma.json")"
misuse() {  # misuse WANT ARGS...
  local want=$1
  shift
  run simulate "$trace" "${common[@]}" "$@"
  check '[[ $rc -eq 2 ]] && grep -qF -- "$want" "$work/err"' "$*: exit $rc: $(err_text)"
}
misuse "--burstiness shapes --request-rate's gaps" --burstiness 2
misuse "--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps" --ramp-up-strategy linear --ramp-up-start-rps 1
misuse "--ramp-up-strategy is a load generator of its own" --ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 2 --request-rate 3
misuse "--ramp-up-strategy exponential needs --ramp-up-start-rps above 0" --ramp-up-strategy exponential --ramp-up-start-rps 0 --ramp-up-end-rps 2
misuse "--ramp-up-start-rps and --ramp-up-end-rps need --ramp-up-strategy" --ramp-up-end-rps 2
misuse "--measure-after belongs to a load generator" --measure-after 3
misuse "--random-range-ratio belongs to a load generator" --random-range-ratio 0.1
misuse "--range-ratio-style says whose --random-range-ratio" --concurrency 2 --range-ratio-style sglang
misuse "--random-range-ratio: value 1.5 not in range 0 to 1" --concurrency 2 --random-range-ratio 1.5
finish "load as the clients send it: gamma gaps, a ramp, spread lengths, --measure-after; misuse is exit 2"

echo "$passed passed, $failed failed"
((failed == 0))
