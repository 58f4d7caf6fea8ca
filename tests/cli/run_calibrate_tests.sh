#!/usr/bin/env bash
# `kvreplay calibrate` and `--cost-profile` (SPEC 3.5) from the command line:
# a fit lowers the error it reports, the profile it writes reproduces its
# figures through --cost-profile, constants given on the command line are
# held, and every bad row or profile key is exit 2 naming FILE:LINE and the
# field, with nothing written.
#
# Usage: run_calibrate_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_calibrate_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-calibrate.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
run_timeout=300
example=bench/accuracy/example.csv

# 1. A fit: the error falls, the profile reproduces the fitted figures.
run calibrate "$example" --report "$work/profile.json" --results "$work/fit.csv"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check '[[ $(jq -r ".kvreplay_cost_profile, .profiles[0].gpu, .profiles[0].engine" "$work/profile.json" | tr "\n" " ") == "1 h100-80gb trtllm " ]]' \
  "profile: $(head -c 300 "$work/profile.json")"
check '[[ $(jq "[.profiles[0].constants[] | .source | length > 0] | all" "$work/profile.json") == true ]]' \
  "a constant without its source"
before=$(awk -F, 'NR > 1 { e = ($11 - $10) / $10; s += (e < 0 ? -e : e) } END { print s }' "$work/fit.csv")
after=$(awk -F, 'NR > 1 { e = ($12 - $10) / $10; s += (e < 0 ? -e : e) } END { print s }' "$work/fit.csv")
check 'awk -v b="$before" -v a="$after" "BEGIN { exit !(a < b) }"' "the fit did not lower the error: $before -> $after"
grep -q "^median |error| after:" "$work/out"
check '[[ $? -eq 0 ]] && grep -q "fewer rows (4) than constants" "$work/out"' \
  "no medians, or no word of the constants left unfitted: $(tail -3 "$work/out")"
# The profile through --cost-profile gives the fit's figures back.
run calibrate "$example" --no-fit --cost-profile "$work/profile.json" --results "$work/again.csv" -q
check '[[ $rc -eq 0 ]] && diff <(cut -d, -f1-10,12 "$work/fit.csv") <(cut -d, -f1-10,12 "$work/again.csv") >/dev/null' \
  "--cost-profile does not reproduce the fit: $(diff "$work/fit.csv" "$work/again.csv" | head -4)"
run simulate traces/requests/azure_conv.csv --model llama-3.1-8b-fp8 --gpu h100-80gb --engine trtllm -q \
  --cost-profile "$work/profile.json" --report "$work/report.json"
check '[[ $rc -eq 0 && $(jq -r .config.simulation.cost.profile "$work/report.json") == "$work/profile.json" ]] &&
       [[ $(jq ".config.simulation.cost.bandwidth_efficiency == $(jq .profiles[0].constants.bandwidth_efficiency.value "$work/profile.json")" "$work/report.json") == true ]]' \
  "simulate does not run the profile's constants: $(jq -c .config.simulation.cost "$work/report.json")"
finish "calibrate: a fit lowers the error and its profile reproduces it"

# 2. Constants given on the command line are held; --set picks rows.
run calibrate "$example" --step-overhead-ms 0.25 --report "$work/held.json" -q
check '[[ $rc -eq 0 && $(jq .profiles[0].constants.step_overhead_ms.value "$work/held.json") == 0.25 ]]' \
  "the held constant moved: $(jq -c .profiles[0].constants.step_overhead_ms "$work/held.json")"
run calibrate "$example" --set fit --no-fit -q
check '[[ $rc -eq 0 ]]' "--set fit: exit $rc: $(err_text)"
run calibrate "$example" --set check --no-fit -q
check '[[ $rc -eq 2 ]] && grep -qF "no row of set '"'"'check'"'"'" "$work/err"' "--set check: exit $rc: $(err_text)"
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB -q --report "$work/default.json"
check '[[ $(jq -r .config.simulation.cost.profile "$work/default.json") == shipped ]]' \
  "the default profile is not the shipped one: $(jq -c .config.simulation.cost "$work/default.json")"
finish "calibrate: held constants and --set"

# 3. Bad rows: FILE:LINE: FIELD, exit 2, nothing written.
bad() {  # bad NAME ROW EXPECTED
  local name=$1 want=$3
  printf 'model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value\n%s\n%s\n' \
    "llama-3.1-8b,h100-80gb,1,128,128,1,2,tpot_ms,7" "$2" >"$work/$1.csv"
  run calibrate "$work/$name.csv" --report "$work/$name.json"
  check '[[ $rc -eq 2 && ! -e $work/$name.json ]] && grep -qF -- "$work/$name.csv:3: $want" "$work/err"' \
    "$name: exit $rc: $(err_text)"
}
bad metric "llama-3.1-8b,h100-80gb,1,128,128,1,2,tbt_ms,7" "metric: 'tbt_ms' is none of"
bad value "llama-3.1-8b,h100-80gb,1,128,128,1,2,tpot_ms,-3" "value: '-3' is not a positive number"
bad nan "llama-3.1-8b,h100-80gb,1,128,128,1,2,tpot_ms,nan" "value: 'nan' is not a positive number"
bad tp "llama-3.1-8b,h100-80gb,0,128,128,1,2,tpot_ms,7" "tp: '0' is not an integer from 1 to 64"
bad gpu "llama-3.1-8b,h1000,1,128,128,1,2,tpot_ms,7" "gpu: unknown GPU"
bad model "llama-9,h100-80gb,1,128,128,1,2,tpot_ms,7" "model: 'llama-9' is neither a preset"
bad short "llama-3.1-8b,h100-80gb,1,128" "row: 4 fields, expected at least 9"
bad tpot1 "llama-3.1-8b,h100-80gb,1,128,1,1,2,tpot_ms,7" \
  "output_tokens: 1 output token has no time per output token (a tpot_ms row needs at least 2)"
bad tiny "llama-3.1-8b,h100-80gb,1,128,128,1,2,ttft_ms,1e-308" \
  "value: '1e-308' is out of range: a measured ttft_ms is from 0.001 to 1e9"
bad huge "llama-3.1-8b,h100-80gb,1,128,128,1,2,output_tok_s,1e10" "value: '1e10' is out of range"
# A run that fails (here a prompt no pool holds) names its row too.
bad never "llama-3.1-8b,h100-80gb,1,16000000,16,1,2,ttft_ms,7" \
  "row: llama-3.1-8b on h100-80gb TP1, 16000000/16 tokens, concurrency 1: "
printf 'model,gpu,tp\n' >"$work/header.csv"
run calibrate "$work/header.csv"
check '[[ $rc -eq 2 ]] && grep -qF "$work/header.csv:1: header: expected model,gpu,tp," "$work/err"' \
  "a bad header: exit $rc: $(err_text)"
run calibrate "$example" --report "$example"
check '[[ $rc -eq 2 ]] && grep -qF "never replaces an input" "$work/err"' "the input overwritten: exit $rc: $(err_text)"
# A UTF-8 byte order mark before the header is read, as a spreadsheet writes it.
printf '\xEF\xBB\xBFmodel,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value\r\n%s\r\n' \
  "llama-3.1-8b,h100-80gb,1,128,128,1,2,tpot_ms,7" >"$work/bom.csv"
run calibrate "$work/bom.csv" --no-fit -q
check '[[ $rc -eq 0 ]]' "a BOM before the header: exit $rc: $(err_text)"
# An endless line: refused once 16 MiB of it are read, not held whole first.
run_cmd bash -c 'tr "\0" x </dev/zero | "$0" calibrate - --report "$1"' "$kvreplay" "$work/endless.json"
check '[[ $rc -eq 2 && $(cat "$work/err") == "-:1: row: past 16 MiB of input: not a measurement file" && ! -e $work/endless.json ]]' \
  "an endless line: exit $rc: $(err_text)"
finish "calibrate: every bad row is FILE:LINE: FIELD, exit 2, nothing written"

# 4. Bad profiles: FILE:LINE: the key, exit 2.
bad_profile() {  # bad_profile NAME JSON EXPECTED
  local name=$1 want=$3
  printf '%s\n' "$2" >"$work/$name.json"
  run simulate traces/requests/azure_conv.csv --kv-memory 16GiB -q --cost-profile "$work/$name.json"
  check '[[ $rc -eq 2 ]] && grep -qF -- "$want" "$work/err"' "$name: exit $rc: $(err_text)"
}
bad_profile unknown '{"kvreplay_cost_profile": 1,
 "profiles": [{"gpu": "*", "engine": "*",
   "constants": {"bandwith_efficiency": {"value": 0.5, "source": "x"}}}]}' \
  "$work/unknown.json:3: cost profile: bandwith_efficiency: unknown constant"
bad_profile range '{"kvreplay_cost_profile": 1,
 "profiles": [{"gpu": "*", "engine": "*",
   "constants": {"bandwidth_efficiency": {"value": 1.5, "source": "x"}}}]}' \
  "$work/range.json:3: cost profile: bandwidth_efficiency: 1.5 is outside --bandwidth-efficiency's range"
bad_profile source '{"kvreplay_cost_profile": 1,
 "profiles": [{"gpu": "*", "engine": "*", "constants": {"step_overhead_ms": {"value": 1}}}]}' \
  "$work/source.json:2: cost profile: step_overhead_ms: expected {\"value\": NUMBER, \"source\""
bad_profile gpu '{"kvreplay_cost_profile": 1, "profiles": [{"gpu": "h1000", "constants": {}}]}' \
  "$work/gpu.json:1: cost profile: gpu: \"h1000\": unknown GPU"
bad_profile version '{"profiles": []}' "$work/version.json:1: cost profile: kvreplay_cost_profile: missing"
run simulate traces/requests/azure_conv.csv --kv-memory 16GiB -q --cost-model linear --cost-profile "$work/profile.json"
check '[[ $rc -eq 2 ]] && grep -qF -- "--cost-profile is a constant of the roofline" "$work/err"' \
  "--cost-profile with --cost-model linear: exit $rc: $(err_text)"
finish "--cost-profile: every bad key is FILE:LINE, exit 2"

# 5. A profile fitted on one GPU kind leaves the others as shipped, and the
# report says where each constant came from.
run simulate traces/requests/azure_conv.csv --model llama-3.1-8b-fp8 --gpu h200 --engine trtllm -q \
  --report "$work/h200-shipped.json"
run simulate traces/requests/azure_conv.csv --model llama-3.1-8b-fp8 --gpu h200 --engine trtllm -q \
  --cost-profile "$work/profile.json" --report "$work/h200-fitted.json"
check '[[ $rc -eq 0 ]]' "exit $rc: $(err_text)"
check 'diff <(jq -S "del(.config.simulation.cost.profile, .timing, .trace)" "$work/h200-shipped.json") \
            <(jq -S "del(.config.simulation.cost.profile, .timing, .trace)" "$work/h200-fitted.json") >/dev/null' \
  "an h100-80gb fit moved the h200 figures: $(diff <(jq -S .config.simulation.cost "$work/h200-shipped.json") <(jq -S .config.simulation.cost "$work/h200-fitted.json") | head -6)"
run simulate traces/requests/azure_conv.csv --model llama-3.1-8b-fp8 --gpu h100-80gb --engine trtllm -q \
  --cost-profile "$work/profile.json" --step-overhead-ms 0.3 --report "$work/h100-fitted.json"
check '[[ $(jq -r .config.simulation.cost.sources.bandwidth_efficiency "$work/h100-fitted.json") == "fitted by kvreplay calibrate to $example"* ]]' \
  "the fitted constant's source: $(jq -c .config.simulation.cost.sources "$work/h100-fitted.json" | head -c 300)"
check '[[ $(jq -r .config.simulation.cost.sources.step_overhead_ms "$work/h100-fitted.json") == "command line (--step-overhead-ms)" ]]' \
  "the command line's constant's source: $(jq -c .config.simulation.cost.sources.step_overhead_ms "$work/h100-fitted.json")"
check '[[ $(jq -r .config.simulation.cost.sources.bandwidth_efficiency "$work/h200-fitted.json") != "fitted by kvreplay calibrate to $example"* ]]' \
  "the h200 run took the h100 fit's source"
finish "calibrate: a profile of one GPU kind leaves another's figures as shipped; the report names each constant's source"

# 6. The figures benchmark clients print, how they were measured, and a fit's warnings.
{
  echo "model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value,engine,client,measure_after,range_ratio,range_style,kv_dtype"
  for m in ttft_ms:60 ttft_p50_ms:55 ttft_p99_ms:90 tpot_ms:8 tpot_p99_ms:9 itl_ms:8 e2e_ms:900 e2e_p50_ms:880 e2e_p99_ms:990 output_tok_s:400; do
    echo "llama-3.1-8b,h100-80gb,1,1000,100,4,40,${m%%:*},${m##*:},vllm,vllm-bench-serve,4,0.2,vllm,"
  done
  echo "llama-3.1-8b,h100-80gb,1,1000,100,4,40,tpot_ms,8,sglang,sglang-bench-serving,,0.5,sglang,fp8"
} >"$work/clients.csv"
run calibrate "$work/clients.csv" --no-fit --results "$work/clients-results.csv"
check '[[ $rc -eq 0 && $(wc -l <"$work/clients-results.csv") -eq 12 ]]' "exit $rc: $(err_text)"
check '[[ $(awk -F, "NR > 1 && \$11 > 0" "$work/clients-results.csv" | wc -l) -eq 11 ]]' "a figure not simulated"
# p99 above p50 above... the median TTFT at or below the p99.
check 'awk -F, "\$9 == \"ttft_p50_ms\" { p50 = \$11 } \$9 == \"ttft_p99_ms\" { p99 = \$11 } END { exit !(p50 <= p99) }" "$work/clients-results.csv"' \
  "TTFT p50 above p99: $(grep ttft "$work/clients-results.csv")"
badcol() {  # badcol NAME COLUMNS VALUES EXPECTED
  local name=$1 want=$4
  printf 'model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value,%s\n%s\n' "$2" \
    "llama-3.1-8b,h100-80gb,1,128,128,1,4,tpot_ms,7,$3" >"$work/$name.csv"
  run calibrate "$work/$name.csv" --no-fit -q
  check '[[ $rc -eq 2 ]] && grep -qF -- "$work/$name.csv:2: $want" "$work/err"' "$name: exit $rc: $(err_text)"
}
badcol after measure_after 4 "measure_after: 4 leaves none of the 4 requests measured"
badcol ratio range_ratio 1.5 "range_ratio: '1.5' is not a number from 0 to 1"
badcol style range_style uniform "range_style: 'uniform' is neither vllm nor sglang"
badcol kv kv_dtype fp4 "kv_dtype: "
# An engine no rule names (a note, say) is simulated with --engine's default.
printf 'model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value,engine\n%s\n' \
  "llama-3.1-8b,h100-80gb,1,128,128,1,4,tpot_ms,7,in-house" >"$work/engine.csv"
run calibrate "$work/engine.csv" --no-fit -q
check '[[ $rc -eq 0 ]]' "an engine column of no engine: exit $rc: $(err_text)"
# A row no constant can meet (1 us to the first token) drives the fixed costs to
# the end of their range: the fit says so, under --quiet too.
printf 'model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value\n%s\n' \
  "llama-3.1-8b,h100-80gb,1,128,16,1,2,ttft_ms,0.001" >"$work/bound.csv"
run calibrate "$work/bound.csv" -q --report "$work/bound.json"
check '[[ $rc -eq 0 ]] && grep -q "^kvreplay calibrate: warning: h100-80gb/vllm: .* ended at the end of its range" "$work/err"' \
  "no warning of a constant at its bound: $(err_text)"
finish "calibrate: percentiles, E2E and ITL, the clients' columns, warnings of a constant at its bound"

# 7. Two workloads of a million requests (~1.5 GiB) under `ulimit -v` 400 MB,
# -j 2: exit 2, one line, nothing written; never std::terminate (exit 134).
# The memory bound refuses them before they run (the limit is ulimit -v's);
# a worker that runs out all the same ends the same way, with the
# out-of-memory line (calibrate_test's bad_alloc under -j 2 covers that
# path). Skipped where the binary cannot run under `ulimit -v` at all.
if (ulimit -v 400000 && "$kvreplay" --version) >/dev/null 2>&1; then
  printf 'model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value\n%s\n%s\n' \
    "llama-3.1-8b,h100-80gb,1,16,2,1000000,1000000,ttft_ms,7" \
    "llama-3.1-8b,h100-80gb,1,32,2,1000000,1000000,ttft_ms,7" >"$work/heavy.csv"
  mkdir -p "$work/heavy"
  run_cmd bash -c 'ulimit -v 400000 && exec "$0" calibrate "$1" -j 2 --report "$2" --results "$3"' \
    "$kvreplay" "$work/heavy.csv" "$work/heavy/profile.json" "$work/heavy/results.csv"
  check '[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]]' "exit $rc: $(err_text)"
  check 'grep -q "^$work/heavy.csv:3: requests: simulating 2 workloads at once (-j 2) needs .* over the memory limit of .* (ulimit -v)$" "$work/err" ||
         grep -qx "kvreplay calibrate: out of memory (nothing written): simulate fewer workloads at once (-j)" "$work/err"' \
    "neither the memory bound's line nor the out-of-memory line: $(err_text)"
  check '[[ -z $(ls -A "$work/heavy") && ! -s $work/out ]]' "wrote $(ls -A "$work/heavy") or to stdout"
  finish "calibrate -j 2 over the memory limit: exit 2, one line, nothing written"
fi

echo "$passed passed, $failed failed"
((failed == 0))
