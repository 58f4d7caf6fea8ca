#!/usr/bin/env bash
# `kvreplay simulate --concurrency C` and `--request-rate R` (SPEC 3.5) from
# the command line: a closed loop never has more than C requests in flight
# and has C at the start, one client sends each request when its previous
# one ends, Poisson arrivals are seeded (the same seed the same run, another
# seed another) with the mean gap 1/R, the report's load section counts
# every request and its throughput is over its window; every misuse is exit 2.
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
--concurrency 2 --replicas 2|--concurrency: a load generator drives one instance
EOF2
finish "misused load options are refused"

echo "$passed passed, $failed failed"
((failed == 0))
