#!/usr/bin/env bash
# Options tell the truth (SPEC 6):
#   - `plan --check every|N|end|off` reaches every simulation: the plan records
#     the policy (simulation.check) and each sweep point's number of checks
#     (cells[].invariant_checks), the number `simulate` makes at that point with
#     the same options; a fault planted in the simulations of one sweep point (or
#     of the search for the smallest KV memory) exits 1 naming that point, while
#     --check off runs no check and so does not see it;
#   - a misspelled command or option exits 2 with one line naming the closest
#     one (or the commands, or where to look, when none is close), nothing on
#     stdout; a stray argument that is no option keeps the parser's message.
#
# Usage: run_options_tests.sh KVREPLAY_BINARY PLAN_FAULT_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay plan_fault root -- "$@"
if ! command -v jq >/dev/null; then
  echo "run_options_tests.sh needs jq (scripts/bootstrap installs it)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-options.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
shown() { head -c 600 "$1" | tr '\n' '|'; }

# 80 requests of 36 to 99 prompt tokens; a 64 MiB pool (32 blocks of llama-3-8b)
# is short enough to preempt, 128 MiB is not.
awk 'BEGIN { for (i = 0; i < 80; i++)
  printf "{\"arrival\": %.3f, \"prompt\": %d, \"output\": %d}\n", i * 0.002, 36 + i % 64, 4 + i % 16 }' \
  >"$work/requests.jsonl"

# ------------------------------------------------------------ plan --check
for policy in every 7 end off; do
  run_cmd "$kvreplay" plan "$work/requests.jsonl" --kv-memory 64MiB,128MiB --no-search -q \
    --check "$policy" --report "$work/plan.json"
  check '[[ $rc -eq 0 ]]' "plan: exit $rc: $(shown "$work/err")"
  check '[[ $(jq -r .simulation.check "$work/plan.json") == "$policy" ]]' \
    "plan report: simulation.check is $(jq -c .simulation.check "$work/plan.json")"
  for memory in 64MiB 128MiB; do
    run_cmd "$kvreplay" simulate "$work/requests.jsonl" --kv-memory "$memory" -q --check "$policy" \
      --report "$work/simulate.json"
    want=$(jq .invariants.checks "$work/simulate.json")
    got=$(jq ".cells[] | select(.kv_memory == \"$memory\") | .invariant_checks" "$work/plan.json")
    check '[[ -n $got && $got == "$want" ]]' \
      "--kv-memory $memory: the plan made ${got:-no} checks, simulate $want"
    case $policy in
      off) check '[[ $want -eq 0 ]]' "--check off: $want checks" ;;
      end) check '[[ $want -eq 1 ]]' "--check end: $want checks" ;;
      *) check '[[ $want -gt 1 ]]' "--check $policy: $want checks" ;;
    esac
  done
  finish "plan --check $policy runs the checks simulate runs"
done
run_cmd "$kvreplay" plan "$work/requests.jsonl" --kv-memory 64MiB --check sometimes
check '[[ $rc -eq 2 && ! -s $work/out ]]' "plan --check sometimes: exit $rc"
check 'grep -q "check" "$work/err"' "plan --check sometimes: $(shown "$work/err")"
finish "plan --check with a bad policy"

# A block leaked after step 3 of the simulations at 128MiB: I1 fails at the next
# check. Exit 1, one line naming that sweep point (and not the other).
for policy in every 2 end; do
  run_cmd "$plan_fault" "$work/requests.jsonl" 64MiB,128MiB "$policy" 128MiB 3
  check '[[ $rc -eq 1 ]]' "exit $rc, expected 1: $(shown "$work/err")"
  check '[[ $(wc -l <"$work/err") -eq 1 ]]' "stderr: $(shown "$work/err")"
  check 'grep -q "^$work/requests.jsonl: invariant I1 violated at sweep point --model llama-3-8b --page-tokens 16 --kv-memory 128MiB: block [0-9]*: refcount" "$work/err"' \
    "stderr: $(shown "$work/err")"
  check '! grep -q "64MiB" "$work/err"' "names the sound point too: $(shown "$work/err")"
  finish "plan --check $policy: a violation in one sweep point exits 1 naming it"
done
run_cmd "$plan_fault" "$work/requests.jsonl" 64MiB,128MiB off 128MiB 3
check '[[ $rc -eq 0 && ! -s $work/err ]]' "exit $rc, expected 0 (nothing checked): $(shown "$work/err")"
finish "plan --check off: no check, no violation seen"
run_cmd "$plan_fault" "$work/requests.jsonl" 64MiB end search 3
check '[[ $rc -eq 1 ]]' "exit $rc, expected 1: $(shown "$work/err")"
check 'grep -q "^$work/requests.jsonl: invariant I1 violated while searching the smallest KV memory, at --model llama-3-8b --page-tokens 16 --pool-blocks [0-9]*: block [0-9]*: refcount" "$work/err"' \
  "stderr: $(shown "$work/err")"
finish "plan --check end: a violation in the search exits 1 naming the probe"

# ------------------------------------------------------------ misspellings
# expect_usage_error MESSAGE ARGS...: exit 2, stderr exactly MESSAGE, no stdout.
expect_usage_error() {
  local message=$1
  shift
  run_cmd "$kvreplay" "$@"
  printf '%s\n' "$message" >"$work/expected"
  check '[[ $rc -eq 2 ]]' "exit $rc, expected 2"
  check '[[ ! -s $work/out ]]' "stdout: $(shown "$work/out")"
  check 'cmp -s "$work/err" "$work/expected"' "stderr: $(shown "$work/err")"
  finish "kvreplay $*"
}
expect_usage_error "command line: unknown command 'replai'; did you mean 'replay'?" replai x
expect_usage_error "command line: unknown command 'simulte'; did you mean 'simulate'?" \
  simulte traces/quickstart.jsonl --kv-memory 1GiB
expect_usage_error "command line: unknown command 'plna'; did you mean 'plan'?" plna x
expect_usage_error "command line: unknown command 'frobnicate' (commands: 'replay', 'validate', \
'convert', 'simulate', 'plan', 'plan-merge', 'calibrate', 'capacity', 'compare', 'events', \
'kernels')" frobnicate
expect_usage_error \
  "command line: unknown option '--reprot' of 'kvreplay replay'; did you mean '--report'?" \
  replay --reprot "$work/report.json" traces/quickstart.jsonl
expect_usage_error \
  "command line: unknown option '--chek' of 'kvreplay replay'; did you mean '--check'?" \
  replay traces/quickstart.jsonl --chek=every
expect_usage_error \
  "command line: unknown option '--kv-mem' of 'kvreplay simulate'; did you mean '--kv-memory'?" \
  simulate "$work/requests.jsonl" --kv-mem 1GiB
# Before the parser's own complaint (no --kv-memory): the misspelling is the cause.
expect_usage_error \
  "command line: unknown option '--chekc' of 'kvreplay plan'; did you mean '--check'?" \
  plan "$work/requests.jsonl" --chekc every
expect_usage_error \
  "command line: unknown option '--treshold' of 'kvreplay compare'; did you mean '--threshold'?" \
  compare a.json b.json --treshold peak_used=1%
expect_usage_error "command line: unknown option '--verison' of 'kvreplay'; did you mean '--version'?" \
  --verison
expect_usage_error \
  "command line: unknown option '-x' of 'kvreplay replay' (see kvreplay replay --help)" \
  replay traces/quickstart.jsonl -x
test -e "$work/report.json"
check '[[ $? -ne 0 ]]' "a report was written"
finish "no report after a usage error"
# A stray positional is no misspelling: the parser's message stands.
run_cmd "$kvreplay" replay traces/quickstart.jsonl traces/oom.jsonl
check '[[ $rc -eq 2 ]] && grep -q "not expected: traces/oom.jsonl" "$work/err"' \
  "exit $rc: $(shown "$work/err")"
finish "kvreplay replay A B: the parser's message"

# vLLM's and SGLang's spellings of the shared options, and a Hugging Face id
# for --model: the same run as kvreplay's own names, byte for byte but for
# the model as named.
head -n 101 traces/requests/azure_conv.csv >"$work/azure.csv"
ours=(--model llama-3.1-8b --gpu h100-80gb --max-seqs 8 --max-batched-tokens 4096 --page-tokens 32
  --tp 2 --max-seq-tokens 8192 --kv-cache-dtype fp8 --gpu-memory-utilization 0.85 -q)
theirs=(--model meta-llama/Llama-3.1-8B-Instruct --gpu h100-80gb --max-num-seqs 8
  --max-num-batched-tokens 4096 --block-size 32 --tensor-parallel-size 2 --max-model-len 8192
  --kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.85 -q)
run_cmd "$kvreplay" simulate "$work/azure.csv" "${ours[@]}" --report "$work/ours.json"
ours_rc=$rc
run_cmd "$kvreplay" simulate "$work/azure.csv" "${theirs[@]}" --report "$work/theirs.json"
check '[[ $ours_rc -eq 0 && $rc -eq 0 ]]' "exit $ours_rc / $rc: $(shown "$work/err")"
check 'cmp -s <(jq -S "del(.timing, .config.model)" "$work/ours.json") <(jq -S "del(.timing, .config.model)" "$work/theirs.json")' \
  "the spellings gave another run: $(diff <(jq -S "del(.timing)" "$work/ours.json") <(jq -S "del(.timing)" "$work/theirs.json") | head -5 | tr '\n' '|')"
check '[[ $(jq -r .config.model_source "$work/theirs.json") == preset:llama-3.1-8b ]]' \
  "model_source: $(jq -r .config.model_source "$work/theirs.json")"
# --kv-cache-dtype auto keeps the model's; SGLang's --page-size and --tp-size too.
run_cmd "$kvreplay" simulate "$work/azure.csv" --model llama-3.1-8b-fp8 --gpu h100-80gb --kv-cache-dtype auto \
  --engine sglang --page-size 1 --tp-size 2 --context-length 8192 -q --report "$work/sg.json"
check '[[ $rc -eq 0 && $(jq -r "[.config.dtype, .config.page_tokens, .config.tp] | join(\" \")" "$work/sg.json") == "fp8 1 2" ]]' \
  "sglang spellings: exit $rc, $(jq -c "[.config.dtype, .config.page_tokens, .config.tp]" "$work/sg.json" 2>/dev/null)"
finish "vLLM's and SGLang's option spellings and Hugging Face ids run as kvreplay's names"

echo "$passed passed, $failed failed"
((failed == 0))
