#!/usr/bin/env bash
# Users get told what to do (README "What it does", "Regression gate"):
#   - replay and validate given a request trace (native, Mooncake, Azure,
#     BurstGPT; gzip too) say to use simulate, exit 2; simulate given a kvtrace
#     says to use replay;
#   - simulate and plan given a trace out of order print the convert --sort line
#     that fixes it, and that line, run as printed, makes a trace they read;
#   - simulate's summary prints durations in ms, s, min or h, never an exponent
#     or hours in ms;
#   - the README names files that exist: every path it gives under traces/ or
#     scripts/, and every --manifest of its gate examples, which run.
# Usage: run_guidance_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-guidance.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2

# ---------------------------------------------------------------- the wrong command
printf '{"arrival": 0.5, "prompt": 10, "output": 2}\n' >"$work/native.jsonl"
printf 'Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n' \
  >"$work/burstgpt.csv"
gzip -c traces/requests/azure_conv.csv >"$work/azure.csv.gz"
for pair in "traces/requests/mooncake_conv.jsonl mooncake" "traces/requests/azure_conv.csv azure" \
  "$work/native.jsonl native" "$work/burstgpt.csv burstgpt" "$work/azure.csv.gz azure"; do
  read -r trace format <<<"$pair"
  for command in replay validate; do
    stderr=$("$kvreplay" "$command" "$trace" 2>&1 >/dev/null)
    rc=$?
    check '[[ $rc -eq 2 ]]' "$command $trace: exit $rc"
    check '[[ $stderr == "$trace:1: kvtrace: this is a request trace ($format): use kvreplay simulate" ]]' \
      "$command $trace: '$stderr'"
  done
done
stderr=$("$kvreplay" replay - <"$work/azure.csv.gz" 2>&1 >/dev/null)
check '[[ $stderr == "<stdin>:1: kvtrace: this is a request trace (azure): use kvreplay simulate" ]]' \
  "replay - (gzip Azure): '$stderr'"
stderr=$("$kvreplay" simulate traces/quickstart.jsonl --kv-memory 1GiB 2>&1 >/dev/null)
rc=$?
check '[[ $rc -eq 2 && $stderr == "traces/quickstart.jsonl:1: format: this is a kvtrace event trace, not a request trace (replay it with kvreplay replay)" ]]' \
  "simulate on a kvtrace: exit $rc, '$stderr'"
finish "replay and validate on a request trace say simulate; simulate on a kvtrace says replay"

# ---------------------------------------------------------------- a trace out of order
printf '{"arrival": 2, "prompt": 10, "output": 2}\n{"arrival": 1, "prompt": 20, "output": 2}\n' \
  >"$work/unsorted.jsonl"
hint="; sort it by arrival first: kvreplay convert --sort $work/unsorted.jsonl -o sorted.jsonl"
stderr=$("$kvreplay" simulate "$work/unsorted.jsonl" --kv-memory 1GiB 2>&1 >/dev/null)
rc=$?
check '[[ $rc -eq 2 && $stderr == "$work/unsorted.jsonl:2: arrival: 1 goes backwards (previous arrival was 2)$hint" ]]' \
  "simulate: exit $rc, '$stderr'"
stderr=$("$kvreplay" plan "$work/unsorted.jsonl" --kv-memory 1GiB --no-search -q 2>&1 >/dev/null)
rc=$?
check '[[ $rc -eq 2 && $stderr == *"goes backwards (previous arrival was 2)$hint" ]]' \
  "plan: exit $rc, '$stderr'"
# The line as printed fixes it.
fix=${stderr##*sort it by arrival first: }
(cd "$work" && PATH="$(dirname "$kvreplay"):$PATH" bash -c "$fix" >/dev/null)
check '[[ -f $work/sorted.jsonl ]] && "$kvreplay" simulate "$work/sorted.jsonl" --kv-memory 1GiB -q' \
  "the printed fix '$fix' does not make a trace simulate reads"
finish "simulate and plan on a trace out of order print the line that sorts it"

# ---------------------------------------------------------------- durations
# An overloaded run: TTFT in minutes, TPOT in ms; never an exponent, never ms
# beyond 10 s.
awk 'BEGIN { for (i = 0; i < 3000; i++)
  printf "{\"arrival\": %.3f, \"prompt\": %d, \"output\": %d}\n", i * 0.001, 2000 + i % 64, 200 + i % 16 }' \
  >"$work/overloaded.jsonl"
"$kvreplay" simulate "$work/overloaded.jsonl" --kv-memory 2GiB >"$work/out" 2>/dev/null
number='[0-9]+(\.[0-9]+)?'
unit="$number (ms|s|min|h)"
for label in TTFT TPOT queueing end-to-end; do
  check 'grep -Eq "^  $label +p50 $unit, p90 $unit, p95 $unit, p99 $unit, mean $unit\$" "$work/out"' \
    "$label: $(grep "^  $label " "$work/out")"
done
check 'grep -Eq "^  TTFT +p50 $number min, " "$work/out"' "TTFT not in minutes: $(grep "^  TTFT" "$work/out")"
check '! grep -Eq "[0-9]e[+-]?[0-9]" "$work/out"' "an exponent: $(grep -E '[0-9]e[+-]?[0-9]' "$work/out")"
check '! grep -Eq "[0-9]{5,}(\.[0-9]+)? ms" "$work/out"' "ms past 10 s: $(grep -E '[0-9]{5,}(\.[0-9]+)? ms' "$work/out")"
finish "simulate's summary: durations in ms, s, min or h"

# ---------------------------------------------------------------- the README's files
for readme in README.md traces/README.md; do
  while read -r path; do
    [[ $path == *NAME* ]] && continue  # a placeholder (tests/golden/NAME.json)
    check '[[ -e $path ]]' "$readme names $path, which does not exist"
  done < <(grep -oE '(^|[^A-Za-z0-9_./-])(traces|scripts)/[A-Za-z0-9_./+-]*[A-Za-z0-9_]' "$readme" |
    sed -E 's#^[^a-z]##' | sort -u)
done
mapfile -t manifests < <(grep -E '^scripts/gate ' README.md | grep -oE -- '--manifest [^ ]+' |
  cut -d' ' -f2 | sort -u)
check '((${#manifests[@]} > 0))' "the README gives no --manifest example"
for manifest in "${manifests[@]}"; do
  check '[[ -f $manifest ]]' "README: --manifest $manifest does not exist"
done
# The README's simulate gate example, run as written (baselines, then a check);
# under the sanitizers its cases run on the first 100 lines of their traces.
gate_manifest=traces/requests/gate.manifest
if [[ ${KVREPLAY_SANITIZED:-} == 1 ]]; then
  mkdir -p "$work/short"
  while read -r name command trace options; do
    [[ -z $name || $name == \#* ]] && continue
    head -n 100 "$trace" >"$work/short/${trace##*/}"
    echo "$name $command $work/short/${trace##*/} $options"
  done <"$gate_manifest" >"$work/short.manifest"
  gate_manifest=$work/short.manifest
fi
check 'scripts/gate --update --baselines "$work/sim-baselines" --manifest "$gate_manifest" --traces "" --kvreplay "$kvreplay" --quiet >/dev/null' \
  "scripts/gate --update on $gate_manifest failed"
check 'scripts/gate --baselines "$work/sim-baselines" --manifest "$gate_manifest" --traces "" --kvreplay "$kvreplay" --quiet >/dev/null' \
  "scripts/gate on $gate_manifest: not the baselines it just wrote"
finish "the README names files that exist, and its gate example runs"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
