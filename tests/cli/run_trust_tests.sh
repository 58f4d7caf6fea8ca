#!/usr/bin/env bash
# Issue 28's rules of trust (SPEC §8), each repro run on the real binary:
#   - no output replaces an input or another output (file identity), for every
#     command and output flag; an empty path is a usage error;
#   - every FLOAT option refuses NaN and infinities;
#   - a full stderr is exit 2, never an abort;
#   - pools, kernel points and plan's standard input are bounded before they
#     grow (KVREPLAY_MEMORY_LIMIT), exit 2 with the figure and the limit;
#   - a config.json whose KV heads do not divide its heads is refused;
#   - CLI usage errors are one line.
# Usage: run_trust_tests.sh KVREPLAY ROOT
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cli_args kvreplay root -- "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
cp "$root/traces/requests/azure_conv.csv" a.csv
cp "$root/traces/quickstart.jsonl" q.jsonl
head -c 2000 a.csv | head -n 20 > small.csv

# refused CMD...: exit 2, one line naming both flags, every input unchanged, no new file.
refused() {
  local expect=$1
  shift
  local before after
  before=$(ls -A | sort; md5sum a.csv q.jsonl small.csv)
  "$kvreplay" "$@" >out.txt 2>err.txt
  local rc=$?
  after=$(ls -A | grep -v '^out.txt$\|^err.txt$' | sort; md5sum a.csv q.jsonl small.csv)
  before=$(echo "$before" | grep -v '^out.txt$\|^err.txt$')
  check '[[ $rc -eq 2 ]]' "$*: exit $rc, expected 2"
  check '[[ $(wc -l <err.txt) -eq 1 ]]' "$*: stderr is not one line: $(cat err.txt)"
  check 'grep -qF -- "$expect" err.txt' "$*: stderr lacks '$expect': $(cat err.txt)"
  check '[[ "$before" == "$after" ]]' "$*: files changed: $before /// $after"
  finish "refused: $*"
}

refused "--report a.csv is REQUESTS a.csv" simulate a.csv --kv-memory 8GiB --report a.csv
refused "--timeline ./a.csv is REQUESTS a.csv" simulate a.csv --kv-memory 8GiB --timeline ./a.csv
refused "--report q.jsonl is TRACE q.jsonl" replay q.jsonl --report q.jsonl
refused "--html a.csv is REQUESTS a.csv" plan a.csv --kv-memory 8GiB --no-search --html a.csv
refused "--output a.csv is INPUT a.csv" convert a.csv -o a.csv
ln -s a.csv link.csv
ln a.csv hard.csv
refused "--report link.csv is REQUESTS a.csv" simulate a.csv --kv-memory 8GiB --report link.csv
refused "--report hard.csv is REQUESTS a.csv" simulate a.csv --kv-memory 8GiB --report hard.csv
rm -f link.csv hard.csv
mkdir out
refused "are one file" simulate a.csv --kv-memory 8GiB --requests out/y.csv --report out/./y.csv
rmdir out
refused "--report: an empty value names nothing" simulate a.csv --kv-memory 8GiB --report ''
refused "--shard: an empty value names nothing" plan a.csv --kv-memory 8GiB --shard '' --report p.json
# standard input redirected from the file it would overwrite
before=$(md5sum a.csv)
"$kvreplay" simulate - --kv-memory 8GiB --report a.csv <a.csv >/dev/null 2>err.txt
rc=$?
check '[[ $rc -eq 2 ]]' "simulate - <a.csv --report a.csv: exit $rc"
check '[[ "$(md5sum a.csv)" == "$before" ]]' "a.csv changed through standard input"
finish "an output is never standard input's file"
# plan-merge: a part is an input
"$kvreplay" plan small.csv --kv-memory 8GiB,16GiB --no-search --shard 1/2 --report p1.json -q
"$kvreplay" plan small.csv --kv-memory 8GiB,16GiB --no-search --shard 2/2 --report p2.json -q
cp p1.json p1.bak
"$kvreplay" plan-merge p1.json p2.json --report p1.json >/dev/null 2>err.txt
rc=$?
check '[[ $rc -eq 2 ]]' "plan-merge --report p1.json: exit $rc"
check 'cmp -s p1.json p1.bak' "p1.json was replaced"
check 'grep -qF "is PARTS p1.json" err.txt' "message: $(cat err.txt)"
finish "plan-merge never replaces a part"
rm -f p1.json p2.json p1.bak
# two devices are fine
"$kvreplay" simulate small.csv --kv-memory 8GiB --report /dev/null --timeline /dev/null -q
check '[[ $? -eq 0 ]]' "two outputs on /dev/null refused"
finish "two outputs on one device are allowed"

# --- FLOAT options: NaN and infinities --------------------------------------
for option in --step-overhead-ms --compute-efficiency --bandwidth-efficiency --watermark \
  --slo-ttft-ms --slo-tpot-ms --gpu-memory-utilization --link-efficiency; do
  for value in nan -nan inf -inf 1e999 NaN; do
    timeout 20 "$kvreplay" simulate small.csv --kv-memory 8GiB "$option" "$value" >/dev/null 2>err.txt
    rc=$?
    check '[[ $rc -eq 2 ]]' "$option $value: exit $rc (124 is a hang)"
    check '[[ $(wc -l <err.txt) -eq 1 ]] && grep -q "^command line: $option" err.txt' \
      "$option $value: $(cat err.txt)"
  done
  finish "simulate $option refuses NaN and infinities"
done
timeout 20 "$kvreplay" plan small.csv --kv-memory 8GiB --slo-ttft-ms 100 --slo-attainment nan >/dev/null 2>err.txt
check '[[ $? -eq 2 ]]' "plan --slo-attainment nan accepted"
finish "plan --slo-attainment refuses NaN"

# --- stderr on a full device --------------------------------------------------
if [[ -w /dev/full ]]; then
  "$kvreplay" simulate a.csv --kv-memory 8GiB --max-seq-tokens 100 -q 2>/dev/full
  rc=$?
  check '[[ $rc -eq 2 ]]' "a warning on a full stderr: exit $rc (134 is an abort)"
  "$kvreplay" simulate a.csv --kv-memory 8GiB --bogus 2>/dev/full
  rc=$?
  check '[[ $rc -eq 2 ]]' "a usage error on a full stderr: exit $rc"
  finish "a full stderr is exit 2"
fi

# --- memory bounds ------------------------------------------------------------
KVREPLAY_MEMORY_LIMIT=1GiB "$kvreplay" replay q.jsonl --pool-blocks 100000000 -q 2>err.txt
check '[[ $? -eq 2 ]]' "replay: huge pool accepted"
check 'grep -q "over the memory limit of 1.00 GiB (KVREPLAY_MEMORY_LIMIT)" err.txt' "$(cat err.txt)"
printf '{"kvtrace": 1, "config": {"model": "llama-3-8b", "pool_blocks": 200000000}}\n' >huge.jsonl
KVREPLAY_MEMORY_LIMIT=2GiB "$kvreplay" replay huge.jsonl -q 2>err.txt
check '[[ $? -eq 2 ]]' "replay: huge pool in a header accepted"
check 'grep -q "^huge.jsonl:1: config.pool_blocks: a pool of 200000000 blocks needs" err.txt' "$(cat err.txt)"
KVREPLAY_MEMORY_LIMIT=1GiB "$kvreplay" simulate a.csv --pool-blocks 40000000 -q 2>err.txt
check '[[ $? -eq 2 ]]' "simulate: a pool over the limit accepted"
check 'grep -q "a simulation of a pool of 40000000 blocks needs" err.txt' "$(cat err.txt)"
"$kvreplay" kernels --backend cpu --batch 262144 --context 16384 2>err.txt
check '[[ $? -eq 2 ]]' "kernels: a point past the pool ceiling accepted"
check 'grep -q "more than kvreplay keeps in memory" err.txt' "$(cat err.txt)"
KVREPLAY_MEMORY_LIMIT=1GiB "$kvreplay" kernels --backend cpu --batch 65536 --context 16384 2>err.txt
check '[[ $? -eq 2 ]]' "kernels: a point over the limit accepted"
KVREPLAY_MEMORY_LIMIT=lots "$kvreplay" replay q.jsonl -q 2>err.txt
rc=$?
check '[[ $rc -eq 2 ]] && grep -q "^environment: KVREPLAY_MEMORY_LIMIT" err.txt' "exit $rc: $(cat err.txt)"
finish "memory bounds before the run"
# plan - stops at the first bad record, not after spooling everything
start=$(date +%s)
yes | head -c 50000000 | "$kvreplay" plan - --kv-memory 8GiB --no-search -q >/dev/null 2>err.txt
rc=$?
check '[[ $rc -eq 2 ]]' "plan - on garbage: exit $rc"
check 'grep -q "^<stdin>:1:" err.txt' "$(cat err.txt)"
cat a.csv | "$kvreplay" plan - --kv-memory 8GiB --no-search --report p.json -q
check '[[ $? -eq 0 ]]' "plan - of a good trace failed"
"$kvreplay" plan a.csv --kv-memory 8GiB --no-search --report f.json -q
check '[[ "$(jq -c .cells p.json)" == "$(jq -c .cells f.json)" ]]' "plan - differs from plan FILE"
finish "plan - is checked as it is spooled"

# --- model configs ----------------------------------------------------------------
cat >bad.json <<'JSON'
{"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 3,
 "vocab_size": 1000, "max_position_embeddings": 4096, "intermediate_size": 1024}
JSON
"$kvreplay" simulate small.csv --model-config bad.json --kv-memory 1GiB 2>err.txt
check '[[ $? -eq 2 ]]' "KV heads that do not divide the heads accepted"
check 'grep -q "^bad.json: num_key_value_heads: 3 does not divide num_attention_heads 8" err.txt' "$(cat err.txt)"
finish "a config.json with impossible head counts is refused"

# --- usage errors are one line ---------------------------------------------------
for args in "simulate" "simulate a.csv --kv-memory 8GiB --engine foo" "replay q.jsonl --check sometimes" \
  "simulate a.csv --kv-memory 8GiB --max-seqs abc"; do
  # shellcheck disable=SC2086
  "$kvreplay" $args >/dev/null 2>err.txt
  rc=$?
  check '[[ $rc -eq 2 && $(wc -l <err.txt) -eq 1 ]] && grep -q "^command line: " err.txt' \
    "$args: exit $rc: $(cat err.txt)"
done
finish "usage errors are one line"

echo "$passed passed, $failed failed"
((failed == 0))
