#!/usr/bin/env bash
# Speculative decoding (--speculative METHOD:K) and attention data
# parallelism (--dp-attention N, --ep N) from the command line (SPEC 3.5):
# every engine runs drafts with its invariants checked at every step and
# emits the same output tokens, fewer steps and a faster TPOT; the report's
# acceptance is the one asked for; --requests counts each request's drafts;
# the draft's layer takes its share of the pool; attention replicas multiply
# an MLA model's pool and record themselves; every misuse is exit 2.
#
# Usage: run_mechanisms_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
command -v jq >/dev/null || { echo "run_mechanisms_tests.sh: 'jq' is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-mechanisms.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
run_timeout=120
trace=$work/azure.csv
head -n "$(trace_lines 301 101)" traces/requests/azure_conv.csv >"$trace"
common=(--model llama-3.1-8b --gpu h100-80gb --concurrency 16 --check every -q)

# 1. Every engine with and without drafts.
for engine in vllm sglang trtllm generic; do
  run simulate "$trace" "${common[@]}" --engine "$engine" --report "$work/plain.json"
  plain_rc=$rc
  run simulate "$trace" "${common[@]}" --engine "$engine" --speculative eagle3:3 \
    --spec-acceptance-length 2.5 --report "$work/spec.json" --requests "$work/spec.csv"
  spec_rc=$rc
  check '[[ $plain_rc -eq 0 && $spec_rc -eq 0 ]]' "$engine: exit $plain_rc / $spec_rc: $(err_text)"
  check '[[ $(jq ".invariants.violations | length" "$work/spec.json") == 0 ]]' \
    "$engine: violations under drafts: $(jq -c .invariants "$work/spec.json")"
  check '[[ $(jq -s ".[0].scheduler.output_tokens == .[1].scheduler.output_tokens" "$work/plain.json" "$work/spec.json") == true ]]' \
    "$engine: output tokens differ: $(jq -s -c "[.[].scheduler.output_tokens]" "$work/plain.json" "$work/spec.json")"
  check '[[ $(jq -s ".[1].scheduler.steps < .[0].scheduler.steps and .[1].latency.tpot_ms.p50 < .[0].latency.tpot_ms.p50" "$work/plain.json" "$work/spec.json") == true ]]' \
    "$engine: drafts did not cut steps and TPOT: $(jq -s -c "[.[] | [.scheduler.steps, .latency.tpot_ms.p50]]" "$work/plain.json" "$work/spec.json")"
  # The measured mean acceptance length is the one asked for (its last steps
  # cut short by the output's end pull it a little lower).
  check '[[ $(jq ".speculative.mean_acceptance_length > 2.3 and .speculative.mean_acceptance_length <= 2.5" "$work/spec.json") == true ]]' \
    "$engine: acceptance: $(jq -c .speculative "$work/spec.json")"
  check '[[ $(jq -r ".config.simulation.speculative | [.method, .num_speculative_tokens] | join(\":\")" "$work/spec.json") == eagle3:3 ]]' \
    "$engine: config: $(jq -c .config.simulation.speculative "$work/spec.json")"
  # --requests: drafted and accepted a request, summing to the report's.
  check '[[ $(head -1 "$work/spec.csv" | awk -F, "{print \$(NF-1), \$NF}") == "drafted accepted" ]]' \
    "$engine: header: $(head -1 "$work/spec.csv")"
  sums=$(awk -F, 'NR > 1 { d += $(NF-1); a += $NF } END { print d, a }' "$work/spec.csv")
  want=$(jq -r '"\(.speculative.num_draft_tokens) \(.speculative.num_accepted_tokens)"' "$work/spec.json")
  check '[[ "$sums" == "$want" ]]' "$engine: --requests sums $sums, report $want"
  # The draft's layer holds KV in the same pool: 33 layers a token, fewer blocks.
  check '[[ $(jq -s ".[1].config.layers == .[0].config.layers + 1 and .[1].config.pool_blocks < .[0].config.pool_blocks" "$work/plain.json" "$work/spec.json") == true ]]' \
    "$engine: draft KV: $(jq -s -c "[.[].config | [.layers, .pool_blocks]]" "$work/plain.json" "$work/spec.json")"
done
finish "speculative decoding: every engine, invariants clean, acceptance as asked, drafts in --requests"

# 2. ngram has no draft model: no KV layer; the same seed the same run.
run simulate "$trace" "${common[@]}" --speculative ngram:4 --spec-acceptance 0.6 --report "$work/n1.json"
check '[[ $rc -eq 0 && $(jq .config.layers "$work/n1.json") == 32 ]]' "ngram: exit $rc, layers $(jq .config.layers "$work/n1.json")"
run simulate "$trace" "${common[@]}" --speculative ngram:4 --spec-acceptance 0.6 --report "$work/n2.json"
check 'cmp -s <(jq -S "del(.timing)" "$work/n1.json") <(jq -S "del(.timing)" "$work/n2.json")' "ngram: two runs differ"
run simulate "$trace" "${common[@]}" --speculative ngram:4 --spec-acceptance 0.6 --spec-seed 9 --report "$work/n3.json"
check '[[ $(jq -s ".[0].speculative.num_accepted_tokens != .[1].speculative.num_accepted_tokens" "$work/n1.json" "$work/n3.json") == true ]]' \
  "--spec-seed changed nothing"
finish "speculative decoding: ngram keeps the pool; seeded draws repeat"

# 3. Attention replicas: DeepSeek-V3's MLA latent is no longer on every GPU.
ds=(--model deepseek-v3 --gpu h200 --tp 8 --engine sglang --concurrency 32 -q)
run simulate "$trace" "${ds[@]}" --report "$work/tp8.json"
tp_rc=$rc
run simulate "$trace" "${ds[@]}" --dp-attention 8 --ep 8 --report "$work/dp8.json"
check '[[ $tp_rc -eq 0 && $rc -eq 0 ]]' "dp-attention: exit $tp_rc / $rc: $(err_text)"
check '[[ $(jq -s ".[1].config.pool_blocks > 6 * .[0].config.pool_blocks" "$work/tp8.json" "$work/dp8.json") == true ]]' \
  "pool: $(jq -s -c "[.[].config.pool_blocks]" "$work/tp8.json" "$work/dp8.json")"
check '[[ $(jq -s ".[1].config.weights_bytes_per_gpu > .[0].config.weights_bytes_per_gpu" "$work/tp8.json" "$work/dp8.json") == true ]]' \
  "weights: the attention is whole on each replica: $(jq -s -c "[.[].config.weights_bytes_per_gpu]" "$work/tp8.json" "$work/dp8.json")"
check '[[ $(jq -r "[.config.dp_attention, .config.ep] | join(\" \")" "$work/dp8.json") == "8 8" && $(jq ".config | has(\"dp_attention\")" "$work/tp8.json") == false ]]' \
  "config: $(jq -c "[.config.dp_attention, .config.ep]" "$work/dp8.json")"
check '[[ $(jq ".sglang.new_token_ratio.init" "$work/dp8.json") != $(jq ".sglang.new_token_ratio.init" "$work/tp8.json") ]]' \
  "schedule_conservativeness x 0.3 under attention replicas: $(jq -c .sglang.new_token_ratio "$work/dp8.json")"
finish "attention data parallelism: replicas' pools together, attention weights whole, recorded"

# 4. Misuse: exit 2 naming the option.
misuse() {  # misuse WANT ARGS...
  local want=$1
  shift
  run simulate "$trace" "${common[@]}" "$@"
  check '[[ $rc -eq 2 ]] && grep -qF -- "$want" "$work/err"' "$*: exit $rc: $(err_text)"
}
misuse "unknown method 'medusa'" --speculative medusa:3
misuse "K must be a whole number from 1 to 16" --speculative eagle:0
misuse "needs its acceptance" --speculative eagle:3
misuse "give one of --spec-acceptance" --speculative eagle:3 --spec-acceptance 0.5 --spec-acceptance-length 2
misuse "K + 1 = 4 expected" --speculative eagle:3 --spec-acceptance-dist 0.5,0.5
misuse "need --speculative METHOD:K" --spec-acceptance 0.5
misuse "the mean acceptance length lies from 1" --speculative eagle:2 --spec-acceptance-length 3.5
misuse "do not divide --tp 8" --tp 8 --dp-attention 3
misuse "expert parallelism needs a model with routed experts" --tp 2 --ep 2
finish "speculative decoding and attention replicas: misuse is exit 2"

echo "$passed passed, $failed failed"
((failed == 0))
