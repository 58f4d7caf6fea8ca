#!/usr/bin/env bash
# Sharded plans (docs/SCALE.md): `plan --shard I/N` parts merged by
# `plan-merge` give exactly the unsharded plan's table, report and HTML, with
# and without the search, for any N (more shards than units too), in any order
# of the parts; plan-merge refuses (exit 2, naming the part) parts of another
# trace, sweep or version, a missing or repeated shard, a file that is no part,
# and a sweep that resolves differently at merge time; --shard's own usage
# errors; and plan reads a trace on stdin (plain or gzip) once for all its
# simulations.
#
# Usage: run_plan_shard_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_plan_shard_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-shard.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2

run_timeout=120

azure=$root/traces/requests/azure_conv.csv
mooncake=$root/traces/requests/mooncake_conv.jsonl

# The unsharded plan, then N shards merged, for each sweep: the table (stdout),
# stderr, the report and the HTML must be byte-identical.
sharded_equals_whole() {  # NAME N [PLAN ARGS...]
  local name=$1 n=$2
  shift 2
  rm -rf "$work/s" && mkdir "$work/s"
  "$kvreplay" plan "$@" --report "$work/s/whole.json" --html "$work/s/whole.html" \
    >"$work/s/whole.txt" 2>"$work/s/whole.err"
  local whole_rc=$?
  check "[[ $whole_rc == 0 ]]" "the unsharded plan exits $whole_rc: $(head -c 300 "$work/s/whole.err")"
  local i
  for ((i = 1; i <= n; i++)); do
    run plan "$@" --shard "$i/$n" --report "$work/s/part-$i.json" -q
    check "[[ $rc == 0 ]]" "shard $i/$n exits $rc: $(err_text)"
    check "[[ \$(jq -r .kvreplay_plan_part '$work/s/part-$i.json') == 1 ]]" "part $i is no partial plan"
  done
  # The parts given last first: their order must not matter.
  local parts=()
  for ((i = n; i >= 1; i--)); do parts+=("$work/s/part-$i.json"); done
  "$kvreplay" plan-merge "${parts[@]}" --report "$work/s/merged.json" --html "$work/s/merged.html" \
    >"$work/s/merged.txt" 2>"$work/s/merged.err"
  rc=$?
  check "[[ $rc == 0 ]]" "plan-merge exits $rc: $(head -c 300 "$work/s/merged.err")"
  local f
  for f in json html txt err; do
    check "cmp -s '$work/s/whole.$f' '$work/s/merged.$f'" "the merged .$f differs from the unsharded plan's"
  done
  # The shards shared the work out: each cell was simulated in exactly one part.
  local cells
  cells=$(cat "$work"/s/part-*.json | jq -s '[.[].cells[].index] | sort | . == ([range(0; length)])')
  check "[[ $cells == true ]]" "the parts do not hold each cell exactly once"
  check "[[ \$(jq '.cells | length' '$work/s/whole.json') == \$(cat '$work'/s/part-*.json | jq -s '[.[].cells[]] | length') ]]" \
    "the parts hold another number of cells than the plan"
  finish "$name"
}

sharded_equals_whole "three shards of a sweep with the search" 3 \
  "$azure" --kv-memory 1GiB,2GiB,4GiB --page-tokens 16,32
sharded_equals_whole "one shard is the whole plan" 1 "$azure" --kv-memory 1GiB,2GiB --page-tokens 16
sharded_equals_whole "more shards than units (empty parts)" 5 \
  "$azure" --kv-memory 1GiB,2GiB --page-tokens 16,32
sharded_equals_whole "cells dealt one by one without the search" 4 \
  "$mooncake" --kv-memory 2GiB,4GiB,8GiB --page-tokens 16,32 --no-search --max-seq-tokens 131072
sharded_equals_whole "deployments, SLOs and skipped requests" 3 \
  "$azure" --model llama-3.1-8b,qwen3-8b --gpu h100-80gb,a100-80gb --max-seq-tokens 2048 \
  --slo-ttft-ms 500 --no-search

# A part says what it is: format, version, shard, trace, sweep.
rm -rf "$work/p" && mkdir "$work/p"
sweep=("$azure" --kv-memory 1GiB,2GiB,4GiB --page-tokens 16,32)
for i in 1 2 3; do "$kvreplay" plan "${sweep[@]}" --shard "$i/3" --report "$work/p/$i.json" -q; done
check "[[ \$(jq -c .shard '$work/p/2.json') == '{\"count\":3,\"index\":2}' ]]" "part 2 does not say shard 2/3"
check "[[ \$(jq -r .trace.sha256 '$work/p/2.json') == \$(jq -r .trace.sha256 '$work/p/3.json') ]]" \
  "an empty part does not carry the trace's sha256"
check "[[ \$(jq -r '.trace.sha256' '$work/p/1.json') == \$(sha256sum '$azure' | cut -c1-64) ]]" \
  "a part's trace.sha256 is not the trace's"
check "[[ \$(jq -r '.command | index(\"--shard\")' '$work/p/1.json') != null ]]" "a part does not record its command line"
run plan "${sweep[@]}" --shard 1/3 --report "$work/p/again.json"
check "[[ $rc == 0 && \$(cat '$work/out') == *'shard 1/3'* ]]" "a shard does not say what it ran: $(cat "$work/out")"
finish "a part records its shard, trace and command"

refused() {  # NAME TEXT PLAN-MERGE ARGS...: exit 2 with TEXT on stderr, nothing written
  local name=$1 text=$2
  shift 2
  rm -f "$work/merged.json"
  run plan-merge "$@" --report "$work/merged.json"
  check "[[ $rc == 2 ]]" "exit $rc, not 2"
  check "[[ \$(cat '$work/err') == *'$text'* ]]" "stderr does not say '$text': $(err_text)"
  check "[[ \$(wc -l <'$work/err') == 1 ]]" "not one line on stderr: $(err_text)"
  check "[[ ! -e '$work/merged.json' ]]" "a report was written"
  finish "plan-merge refuses $name"
}
refused "a missing shard" "shard 3/3 is missing" "$work/p/1.json" "$work/p/2.json"
refused "a repeated shard" "are both shard 1/3" "$work/p/1.json" "$work/p/again.json" "$work/p/2.json" "$work/p/3.json"
"$kvreplay" plan "$mooncake" --kv-memory 1GiB,2GiB,4GiB --page-tokens 16,32 --max-seq-tokens 131072 \
  --shard 3/3 --report "$work/p/other-trace.json" -q
refused "a part of another trace" "plans of different traces" "$work/p/1.json" "$work/p/2.json" "$work/p/other-trace.json"
"$kvreplay" plan "${sweep[@]}" --watermark 0.02 --shard 3/3 --report "$work/p/other-sweep.json" -q
refused "a part of another sweep" "parts of different sweeps" "$work/p/1.json" "$work/p/2.json" "$work/p/other-sweep.json"
"$kvreplay" plan "${sweep[@]}" --shard 3/4 --report "$work/p/of-four.json" -q
refused "a part of another split" "one of 4" "$work/p/1.json" "$work/p/2.json" "$work/p/of-four.json"
jq '.kvreplay = "0.0.1"' "$work/p/3.json" >"$work/p/old.json"
refused "a part of another version" "written by kvreplay 0.0.1" "$work/p/1.json" "$work/p/2.json" "$work/p/old.json"
"$kvreplay" plan "${sweep[@]}" --no-search --report "$work/p/whole.json" -q
refused "a report that is no part" "not a partial plan" "$work/p/whole.json"
jq '.cells = []' "$work/p/1.json" >"$work/p/no-cells.json"
refused "a part that lost its cells" "no part holds the cell" "$work/p/no-cells.json" "$work/p/2.json" "$work/p/3.json"
jq '.cells[0].report.blocks = "x"' "$work/p/1.json" >"$work/p/garbled.json"
refused "a part with garbled figures" "garbled.json: cells[0].report.blocks.peak_used: missing" "$work/p/garbled.json" "$work/p/2.json" "$work/p/3.json"
printf '{"kvreplay_plan_part": 1, ' >"$work/p/truncated.json"
refused "a truncated part" "truncated.json" "$work/p/truncated.json"

# A model's config.json edited between the shards and the merge: the sweep
# resolves differently, so the parts' figures are not this sweep's.
cat >"$work/config.json" <<'EOF'
{"model_type": "llama", "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
 "hidden_size": 1024, "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 8192}
EOF
for i in 1 2; do
  "$kvreplay" plan "$azure" --model-config "$work/config.json" --kv-memory 1GiB --page-tokens 16,32 \
    --shard "$i/2" --report "$work/p/cfg-$i.json" -q
done
run plan-merge "$work/p/cfg-1.json" "$work/p/cfg-2.json" --report "$work/merged.json" -q
check "[[ $rc == 0 ]]" "the merge of a --model-config sweep exits $rc: $(err_text)"
sed -i 's/"num_hidden_layers": 8/"num_hidden_layers": 16/' "$work/config.json"
refused "a sweep that resolves differently at merge time" "resolves differently here" \
  "$work/p/cfg-1.json" "$work/p/cfg-2.json"

usage() {  # NAME TEXT PLAN ARGS...: plan exits 2 naming TEXT
  local name=$1 text=$2
  shift 2
  run plan "$@"
  check "[[ $rc == 2 ]]" "exit $rc, not 2"
  check "[[ \$(cat '$work/err') == *'$text'* ]]" "stderr does not say '$text': $(err_text)"
  finish "plan --shard refuses $name"
}
for bad in 0/3 4/3 3 a/b 1/0 /3 2/; do
  usage "--shard $bad" "is not I/N" "$azure" --kv-memory 1GiB --shard "$bad" --report "$work/x.json"
done
usage "no --report" "needs --report" "$azure" --kv-memory 1GiB --shard 1/2
usage "--html" "not with --shard" "$azure" --kv-memory 1GiB --shard 1/2 --report "$work/x.json" \
  --html "$work/x.html"

# plan on standard input: read once into a temporary file every simulation
# reads (the figures are those of the file; the report names "-").
"$kvreplay" plan "${sweep[@]}" --report "$work/file.json" -q
"$kvreplay" plan - "${sweep[@]:1}" --report "$work/stdin.json" -q <"$azure"
rc=$?
check "[[ $rc == 0 ]]" "plan - exits $rc"
jq 'del(.trace.path)' "$work/file.json" >"$work/file.cmp"
jq 'del(.trace.path)' "$work/stdin.json" >"$work/stdin.cmp"
check "cmp -s '$work/file.cmp' '$work/stdin.cmp'" "plan on stdin differs from plan on the file"
check "[[ \$(jq -r .trace.path '$work/stdin.json') == - ]]" "the report does not name stdin '-'"
gzip -c "$azure" | "$kvreplay" plan - --kv-memory 1GiB --no-search --report "$work/gz.json" -q
check "[[ \$(jq '.cells[0].finished' '$work/gz.json') == 1000 ]]" "plan on gzip stdin did not finish 1,000 requests"
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,x,44\n' |
  "$kvreplay" plan - --kv-memory 1GiB >"$work/out" 2>"$work/err"
rc=$?
check "[[ $rc == 2 && \$(cat '$work/err') == '<stdin>:2: ContextTokens: '* ]]" \
  "a bad line on stdin is not named <stdin>:2: exit $rc, $(err_text)"
check "[[ -z \$(ls \"\${TMPDIR:-/tmp}\" | grep kvreplay-stdin) ]]" "plan left its copy of stdin behind"
finish "plan reads a trace on stdin once"

echo "$passed passed, $failed failed"
((failed == 0))
