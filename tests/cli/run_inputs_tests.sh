#!/usr/bin/env bash
# Every input of every command (issue 55's classes of trust), on the real binary:
#   - no output replaces an input, whatever named the input: an argument, an
#     option (--cost-profile, --gpu-prices, --model-config), or a path written
#     inside another input (the config.json a calibrate CSV names), through a
#     hard link or a symlink too; checked when the output is opened and again
#     when the run commits. Exit 2, one line, every input intact, no new file;
#   - every input is read once: a FIFO given as --cost-profile, --gpu-prices
#     (good or bad) or as plan's trace (-j 1 and -j 2) ends, as a file does;
#   - integer options never wrap or saturate, number ranges print their
#     bounds as numbers, a load generator never sends past 2^33 s, and a set
#     KVREPLAY_MEMORY_LIMIT is a size above 0.
# Every command runs under `timeout 60`: 124 is a hang.
# Usage: run_inputs_tests.sh KVREPLAY ROOT
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cli_args kvreplay root -- "$@"
work=$(mktemp -d)
# A FIFO's writer that nobody opened is ended, so that no child outlives the test.
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 2
head -n 40 "$root/traces/requests/azure_conv.csv" >a.csv
cp "$root/src/model/presets/llama-3.1-8b.json" cfg.json
printf '{"h100-80gb": 2.5}\n' >prices.json
# A cost profile of one entry, written by calibrate itself.
cat >m.csv <<'CSV'
model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value,set,engine,precision,source
llama-3.1-8b,h100-80gb,1,512,64,1,4,ttft_ms,30,fit,vllm,bf16,test
llama-3.1-8b,h100-80gb,1,512,64,1,4,tpot_ms,7,fit,vllm,bf16,test
CSV
sed 's/^llama-3.1-8b,/cfg.json,/' m.csv >named.csv
timeout 60 "$kvreplay" calibrate m.csv --report prof.json -q -j 1 >/dev/null 2>err.txt
check '[[ $? -eq 0 && -s prof.json ]]' "calibrate m.csv --report prof.json failed: $(cat err.txt)"
finish "calibrate writes a cost profile to read back"
inputs=(a.csv cfg.json prices.json prof.json m.csv named.csv)

# refused EXPECT CMD...: exit 2, one line containing EXPECT, every input
# unchanged, no new file.
refused() {
  local expect=$1
  shift
  local before after rc
  before=$(ls -A | grep -v '^out.txt$\|^err.txt$' | sort; md5sum "${inputs[@]}")
  timeout 60 "$kvreplay" "$@" >out.txt 2>err.txt
  rc=$?
  after=$(ls -A | grep -v '^out.txt$\|^err.txt$' | sort; md5sum "${inputs[@]}")
  check '[[ $rc -eq 2 ]]' "exit $rc, expected 2 (124: a hang)"
  check '[[ $(wc -l <err.txt) -eq 1 ]]' "stderr is not one line: $(cat err.txt)"
  check 'grep -qF -- "$expect" err.txt' "stderr lacks '$expect': $(cat err.txt)"
  check '[[ "$before" == "$after" ]]' "files changed: $before /// $after"
  finish "refused: $*"
}

# --- inputs named by options --------------------------------------------------
refused "--report prices.json is" \
  plan a.csv --gpu h100-80gb --gpu-prices prices.json --no-search --report prices.json
refused "--html prices.json is" \
  plan a.csv --gpu h100-80gb --gpu-prices prices.json --no-search --html prices.json
refused "--report prices.json is" \
  simulate a.csv --gpu h100-80gb --gpu-prices prices.json --report prices.json
refused "--report prof.json is" calibrate m.csv --cost-profile prof.json --report prof.json -j 1
refused "--results prof.json is" calibrate m.csv --cost-profile prof.json --results prof.json -j 1
refused "--html prof.json is" \
  plan a.csv --kv-memory 8GiB --cost-profile prof.json --no-search --html prof.json
refused "--timeline prof.json is" \
  simulate a.csv --kv-memory 8GiB --cost-profile prof.json --timeline prof.json
refused "--report cfg.json is" \
  plan a.csv --model-config cfg.json --kv-memory 8GiB --no-search --report cfg.json
ln prof.json hard.json
ln -s prices.json link.json
inputs+=(hard.json link.json)
refused "--report hard.json is" calibrate m.csv --cost-profile prof.json --report hard.json -j 1
refused "--report link.json is" \
  plan a.csv --gpu h100-80gb --gpu-prices prices.json --no-search --report link.json
refused "--report prof.json is" \
  plan a.csv --kv-memory 8GiB --cost-profile hard.json --no-search --report prof.json

# --- inputs named inside inputs -------------------------------------------------
refused "--report cfg.json is" calibrate named.csv --report cfg.json -j 1
refused "--results ./cfg.json is" calibrate named.csv --results ./cfg.json -j 1
refused "--report hard.json is" calibrate named.csv --report hard.json --cost-profile prof.json -j 1
rm -f hard.json link.json
inputs=(a.csv cfg.json prices.json prof.json m.csv named.csv)

# --- every input read once: FIFOs ---------------------------------------------
# feed FILE FIFO: writes FILE into FIFO once, in the background (a reader that
# opens the FIFO a second time waits for ever: the timeout says so).
feed() {
  rm -f "$2"
  mkfifo "$2"
  (timeout 120 cat "$1" >"$2") </dev/null 2>/dev/null &
}
feed prof.json prof.fifo
timeout 60 "$kvreplay" simulate a.csv --kv-memory 8GiB --cost-profile prof.fifo -q \
  --report r1.json 2>err.txt
check '[[ $? -eq 0 ]]' "--cost-profile FIFO: exit $? (124: a hang): $(cat err.txt)"
timeout 60 "$kvreplay" simulate a.csv --kv-memory 8GiB --cost-profile prof.json -q \
  --report r2.json 2>err.txt
check '[[ "$(jq -c .latency r1.json)" == "$(jq -c .latency r2.json)" ]]' \
  "a profile read from a FIFO gives other figures than the file"
finish "--cost-profile FIFO is read once"
feed prices.json prices.fifo
timeout 60 "$kvreplay" plan a.csv --gpu h100-80gb --gpu-prices prices.fifo --no-search -q \
  --report p1.json 2>err.txt
check '[[ $? -eq 0 ]]' "--gpu-prices FIFO: exit $? (124: a hang): $(cat err.txt)"
printf '{\n "h100-80gb": 2.5,\n "h999": 1\n}\n' >bad_prices.json
feed bad_prices.json prices.fifo
timeout 60 "$kvreplay" plan a.csv --gpu h100-80gb --gpu-prices prices.fifo --no-search -q 2>err.txt
rc=$?
check '[[ $rc -eq 2 ]]' "a bad --gpu-prices FIFO: exit $rc (124: a hang)"
check 'grep -q "prices.fifo:3: --gpu-prices: \"h999\": unknown GPU" err.txt' \
  "the line of the bad key, read from the FIFO: $(cat err.txt)"
finish "--gpu-prices FIFO is read once, its bad line named"
timeout 60 "$kvreplay" plan a.csv --kv-memory 4GiB,8GiB --no-search -q --report file.json 2>err.txt
for jobs in 1 2; do
  feed a.csv trace.fifo
  timeout 60 "$kvreplay" plan trace.fifo --kv-memory 4GiB,8GiB --no-search -q -j "$jobs" \
    --report fifo.json 2>err.txt
  rc=$?
  check '[[ $rc -eq 0 ]]' "plan FIFO -j $jobs: exit $rc (124: a hang): $(cat err.txt)"
  check '[[ "$(jq -c .cells fifo.json)" == "$(jq -c .cells file.json)" ]]' \
    "plan FIFO -j $jobs differs from plan FILE"
  finish "plan's trace on a FIFO is read once (-j $jobs)"
done
feed a.csv trace.fifo
timeout 60 "$kvreplay" plan trace.fifo --kv-memory 8GiB --no-search --replicas 2 --shard 1/2 \
  --report part.json 2>err.txt
rc=$?
check '[[ $rc -eq 2 ]] && grep -q "needs the trace" err.txt' "a sharded fleet plan of a FIFO: exit $rc: $(cat err.txt)"
finish "a sharded fleet plan refuses a FIFO trace"
# calibrate resolves its options for every workload: the profile is read once.
feed prof.json prof.fifo
timeout 60 "$kvreplay" calibrate m.csv -j 2 -q --no-fit --cost-profile prof.fifo \
  --results fifo.csv 2>err.txt
check '[[ $? -eq 0 ]]' "calibrate --cost-profile FIFO: exit $? (124: a hang): $(cat err.txt)"
timeout 60 "$kvreplay" calibrate m.csv -j 2 -q --no-fit --cost-profile prof.json \
  --results file.csv 2>err.txt
check 'cmp -s fifo.csv file.csv' "calibrate with a FIFO profile differs from the file"
finish "calibrate --cost-profile FIFO is read once"
# A config.json a calibrate CSV names, as a FIFO.
feed cfg.json named.fifo
sed 's/^llama-3.1-8b,/named.fifo,/' m.csv >fifo_named.csv
timeout 60 "$kvreplay" calibrate fifo_named.csv -j 2 -q --no-fit --results named.csv.out 2>err.txt
check '[[ $? -eq 0 ]]' "a FIFO config.json in a calibrate CSV: exit $? (124: a hang): $(cat err.txt)"
finish "a FIFO config.json named in a calibrate CSV is read once"
# The same FIFO named twice is read once.
timeout 60 "$kvreplay" simulate a.csv --kv-memory 8GiB -q --report r1.json 2>err.txt
feed r1.json r1.fifo
timeout 60 "$kvreplay" compare r1.fifo r1.fifo >out.txt 2>err.txt
check '[[ $? -eq 0 ]]' "compare FIFO FIFO: exit $? (124: a hang): $(cat err.txt)"
finish "compare given one FIFO twice reads it once"
timeout 60 "$kvreplay" plan a.csv --kv-memory 4GiB,8GiB --no-search -q --shard 1/2 \
  --report part1.json 2>err.txt
feed part1.json part.fifo
timeout 60 "$kvreplay" plan-merge part.fifo part.fifo -q 2>err.txt
rc=$?
check '[[ $rc -eq 2 ]] && grep -q "are both shard 1/2" err.txt' \
  "plan-merge FIFO FIFO: exit $rc (124: a hang): $(cat err.txt)"
finish "plan-merge given one FIFO twice reads it once"
kill $(jobs -p) 2>/dev/null
rm -f trace.fifo prices.fifo prof.fifo named.fifo r1.fifo part.fifo

# --- calibrate's workloads are in the memory bound before they run -----------------
printf '%s\n' 'model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value' \
  'llama-3.1-8b,h100-80gb,1,16,2,1000000,1000000,output_tok_s,50000' >huge.csv
inputs+=(huge.csv)
KVREPLAY_MEMORY_LIMIT=60MiB refused "huge.csv:2: requests: simulating 1 workload at once" \
  calibrate huge.csv -j 2 -q --report huge.json

# --- integer options never wrap -------------------------------------------------
for value in -1 18446744073709551616 0x10 010 1e3 ' 5'; do
  refused "command line: --router-seed" \
    simulate a.csv --kv-memory 8GiB --replicas 2 --router power-of-two --router-seed "$value"
  refused "command line: --load-seed" \
    simulate a.csv --kv-memory 8GiB --request-rate 5 --load-seed "$value"
done
refused "command line: --pool-blocks" simulate a.csv --pool-blocks -1
refused "command line: --page-tokens" plan a.csv --kv-memory 8GiB --page-tokens 16,-16 --no-search
timeout 60 "$kvreplay" simulate a.csv --kv-memory 8GiB --replicas 2 --router power-of-two \
  --router-seed 18446744073709551615 -q --report seed.json 2>err.txt
check '[[ $? -eq 0 ]]' "the largest seed refused: $(cat err.txt)"
finish "--router-seed takes 2^64 - 1"

# --- number ranges print their bounds ---------------------------------------------
refused "command line: --request-rate: value 1e-300 not in range 1e-09 to 1e+09" \
  simulate a.csv --kv-memory 8GiB --request-rate 1e-300
refused "not in range 0 to 1" plan a.csv --kv-memory 8GiB --slo-ttft-ms 100 --slo-attainment 2

# --- a load generator never sends past 2^33 s ------------------------------------
refused "past the 2^33 s" simulate a.csv --kv-memory 8GiB --request-rate 1e-9
refused "past the 2^33 s" simulate a.csv --kv-memory 8GiB --replicas 2 --request-rate 1e-9

# --- KVREPLAY_MEMORY_LIMIT, when set, is a size above 0 -----------------------------
for value in 0 '' 0GiB; do
  KVREPLAY_MEMORY_LIMIT=$value timeout 60 "$kvreplay" simulate a.csv --kv-memory 8GiB -q 2>err.txt
  rc=$?
  check '[[ $rc -eq 2 ]]' "KVREPLAY_MEMORY_LIMIT='$value': exit $rc"
  check 'grep -q "^environment: KVREPLAY_MEMORY_LIMIT: .* is not a memory limit" err.txt' \
    "KVREPLAY_MEMORY_LIMIT='$value': $(cat err.txt)"
  finish "KVREPLAY_MEMORY_LIMIT='$value' is refused, never 'no limit'"
done

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
