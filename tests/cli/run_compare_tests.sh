#!/usr/bin/env bash
# `kvreplay compare` and scripts/gate from the command line (README "Comparing
# reports" and "Regression gate"): exit codes 0 / 1 / 2, refusals of reports of
# other traces or versions, thresholds from flags and files, replay and simulate
# reports, trace.sha256 equal for a file, its gzip copy and standard input, and
# the gate's update / compare / regression / missing-baseline paths.
#
# Usage: run_compare_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
for tool in jq gzip; do
  command -v "$tool" >/dev/null || { echo "run_compare_tests.sh: '$tool' is required" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-compare.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2

out_has() { grep -qF -- "$1" "$work/out"; }
err_has() { grep -qF -- "$1" "$work/err"; }

r=$work/reports
mkdir -p "$r"
"$kvreplay" replay traces/quickstart.jsonl -q --report "$r/quick.json"
"$kvreplay" replay traces/quickstart.jsonl -q --alloc-order fifo --report "$r/quick_fifo.json"
"$kvreplay" replay - -q --report "$r/quick_stdin.json" <traces/quickstart.jsonl
gzip -c traces/quickstart.jsonl >"$work/quick.jsonl.gz"
"$kvreplay" replay "$work/quick.jsonl.gz" -q --report "$r/quick_gz.json"
"$kvreplay" replay traces/fork_cow.jsonl -q --report "$r/fork.json"
"$kvreplay" replay traces/oom.jsonl -q --on-oom skip --pool-blocks 64 --report "$r/oom_big.json"
"$kvreplay" replay traces/oom.jsonl -q --on-oom skip --report "$r/oom_skip.json"
"$kvreplay" replay traces/oom.jsonl -q --on-oom fail --pool-blocks 64 --report "$r/oom_fail_ok.json"
"$kvreplay" replay traces/oom.jsonl -q --on-oom fail --report "$r/oom_fail.json" 2>/dev/null

# --- trace.sha256: the content, not the path or the compression
sha=$(sha256sum traces/quickstart.jsonl | cut -d' ' -f1)
for report in quick quick_stdin quick_gz quick_fifo; do
  check "[[ \$(jq -r .trace.sha256 '$r/$report.json') == '$sha' ]]" \
    "$report.json: trace.sha256 $(jq -r .trace.sha256 "$r/$report.json") is not sha256sum's $sha"
done
check "[[ \$(jq -r .trace.sha256 '$r/oom_fail.json') == \$(sha256sum traces/oom.jsonl | cut -d' ' -f1) ]]" \
  "a replay stopped by --on-oom fail hashes only part of its trace"
# The rest is read even after the replay stopped: a truncated gzip tail is an input error.
{ cat traces/oom.jsonl; for i in $(seq 20000); do echo '{"op": "check"}'; done; } |
  gzip -c >"$work/oom_tail.gz"
head -c "$(($(stat -c %s "$work/oom_tail.gz") - 30))" "$work/oom_tail.gz" >"$work/oom_cut.gz"
run replay "$work/oom_cut.gz" -q --report "$r/cut.json"
check '[[ $rc -eq 2 && ! -e $r/cut.json ]] && err_has "oom_cut.gz: file: truncated gzip data"' \
  "a truncated gzip after the oom point: exit $rc, $(err_text)"
finish "trace.sha256 is the hash of the decompressed trace"

# --- the same trace, another alloc order: no regression, the config change listed
run compare "$r/quick.json" "$r/quick_fifo.json"
check '[[ $rc -eq 0 ]]' "exit $rc, expected 0: $(err_text)"
check 'out_has "config: alloc_order: \"lifo\" -> \"fifo\""' "no config change line"
check 'out_has "no regression ("' "no verdict line"
check 'out_has "blocks.peak_used"' "no peak_used row"
check '[[ ! -s $work/err ]]' "stderr: $(err_text)"
cp "$work/out" "$work/first"
run compare "$r/quick.json" "$r/quick_fifo.json"
check 'cmp -s "$work/first" "$work/out"' "two runs printed different tables"
check '! grep -q $'"'"'\033'"'"' "$work/out"' "escape codes in a pipe"
finish "compare: same trace, other alloc order"

# --- stdin and gzip reports compare with the file's
for other in quick_stdin quick_gz; do
  run compare "$r/quick.json" "$r/$other.json"
  check '[[ $rc -eq 0 ]]' "$other: exit $rc, expected 0: $(err_text)"
done
finish "compare: stdin and gzip reports are of the same trace"

# --- regressions: exit 1, one stderr line each
run compare "$r/oom_big.json" "$r/oom_skip.json"
check '[[ $rc -eq 1 ]]' "oom.events up: exit $rc, expected 1"
check 'err_has "kvreplay compare: regression: oom.events: 0 -> 3"' "stderr: $(err_text)"
check 'out_has "REGRESSED"' "no REGRESSED in the table"
run compare "$r/oom_fail_ok.json" "$r/oom_fail.json"
check '[[ $rc -eq 1 ]]' "status ok -> oom: exit $rc, expected 1"
check 'err_has "regression: status: ok -> oom"' "stderr: $(err_text)"
jq '.cow.copies += 5' "$r/quick.json" >"$r/quick_more_cow.json"
run compare "$r/quick_more_cow.json" "$r/quick.json"
check '[[ $rc -eq 0 ]]' "an improvement: exit $rc, expected 0"
check 'out_has "better"' "no 'better' verdict"
finish "compare: regressions exit 1"

# --- thresholds: flags, a file, the flag winning, bad ones
jq '.fragmentation.waste_ratio_mean += 0.003' "$r/quick.json" >"$r/quick_waste.json"
run compare "$r/quick.json" "$r/quick_waste.json"
check '[[ $rc -eq 1 ]]' "waste +0.003 with the default 0.001: exit $rc, expected 1"
run compare "$r/quick.json" "$r/quick_waste.json" --threshold waste_ratio_mean=0.005
check '[[ $rc -eq 0 ]]' "--threshold waste_ratio_mean=0.005: exit $rc, expected 0"
echo '{"fragmentation.waste_ratio_mean": 0.005, "peak_used": "2%"}' >"$work/thresholds.json"
run compare "$r/quick.json" "$r/quick_waste.json" --thresholds "$work/thresholds.json"
check '[[ $rc -eq 0 ]]' "--thresholds FILE: exit $rc, expected 0"
check 'out_has "2%"' "the file's peak_used=2% is not shown"
run compare "$r/quick.json" "$r/quick_waste.json" --thresholds "$work/thresholds.json" \
  --threshold waste_ratio_mean=0.001
check '[[ $rc -eq 1 ]]' "--threshold over --thresholds: exit $rc, expected 1"
jq '.blocks.peak_used += 1' "$r/quick.json" >"$r/quick_peak.json"  # 56 -> 57: +1.8%
run compare "$r/quick.json" "$r/quick_peak.json"
check '[[ $rc -eq 1 ]]' "peak_used +1.8% with the default 1%: exit $rc, expected 1"
run compare "$r/quick.json" "$r/quick_peak.json" --threshold peak_used=2%
check '[[ $rc -eq 0 ]]' "peak_used=2%: exit $rc, expected 0"
run compare "$r/quick.json" "$r/quick_peak.json" --threshold peak_used=off
check '[[ $rc -eq 0 ]]' "peak_used=off: exit $rc, expected 0"
run compare "$r/quick.json" "$r/quick.json" --threshold peak_used=lots
check '[[ $rc -eq 2 ]] && err_has "is not a threshold"' "a bad value: exit $rc, $(err_text)"
run compare "$r/quick.json" "$r/quick.json" --threshold nonsense=1
check '[[ $rc -eq 2 ]] && err_has "unknown metric '"'"'nonsense'"'"'"' "an unknown metric: exit $rc"
run compare "$r/quick.json" "$r/quick.json" --threshold status=1
check '[[ $rc -eq 2 ]]' "status has no threshold: exit $rc"
echo '{"peak_used": true}' >"$work/bad_thresholds.json"
run compare "$r/quick.json" "$r/quick.json" --thresholds "$work/bad_thresholds.json"
check '[[ $rc -eq 2 ]] && err_has "bad_thresholds.json: peak_used:"' "a bad file: exit $rc, $(err_text)"
finish "compare: thresholds"

# --- violations always fail
jq '.status = "violation" | .invariants.violations = [{"event": 3, "line": 4, "invariant": "I1",
    "message": "planted"}]' "$r/quick.json" >"$r/quick_violation.json"
run compare "$r/quick.json" "$r/quick_violation.json" --threshold peak_used=off
check '[[ $rc -eq 1 ]]' "a violation: exit $rc, expected 1"
check 'err_has "regression: invariants.violations: 1 in NEW (first: I1 at event 3: planted)"' \
  "stderr: $(err_text)"
finish "compare: a violation always fails"

# --- refusals: exit 2, one clear line
run compare "$r/quick.json" "$r/fork.json"
check '[[ $rc -eq 2 ]]' "other trace: exit $rc, expected 2"
check 'err_has "are reports of different traces: trace.sha256"' "stderr: $(err_text)"
check '[[ ! -s $work/out ]]' "a table for incomparable reports"
cp "$r/fork.json" "$work/quick_named.json"  # a different trace under a familiar path
jq '.trace.path = "traces/quickstart.jsonl"' "$r/fork.json" >"$work/fork_renamed.json"
run compare "$r/quick.json" "$work/fork_renamed.json"
check '[[ $rc -eq 2 ]]' "the same path, other content: exit $rc, expected 2"
jq '.kvreplay_report = 2' "$r/quick.json" >"$work/v2.json"
run compare "$r/quick.json" "$work/v2.json"
check '[[ $rc -eq 2 ]] && err_has "reports of different versions (kvreplay_report 1 and 2)"' \
  "other version: exit $rc, $(err_text)"
jq 'del(.trace.sha256)' "$r/quick.json" >"$work/old.json"
run compare "$work/old.json" "$r/quick.json"
check '[[ $rc -eq 2 ]] && err_has "old.json: no trace.sha256"' "no hash: exit $rc, $(err_text)"
run compare "$r/quick.json" "$work/missing.json"
check '[[ $rc -eq 2 ]] && err_has "missing.json: cannot open"' "missing file: exit $rc, $(err_text)"
echo '{"kvreplay_report": 1,' >"$work/broken.json"
run compare "$r/quick.json" "$work/broken.json"
check '[[ $rc -eq 2 ]] && err_has "broken.json:1: not valid JSON: expected a key, got end of input"' "broken JSON: exit $rc, $(err_text)"
run compare "$r/quick.json"
check '[[ $rc -eq 2 ]]' "one argument: exit $rc, expected 2"
finish "compare: refusals"

# --- hostile files: bounded, strict reading; reports lacking what is gated
# Every run is bounded by `timeout`: an unbounded reader took gigabytes on /dev/zero.
bounded() { timeout -k 5 60 "$kvreplay" "$@" >"$work/out" 2>"$work/err"; rc=$?; }
bounded compare /dev/zero /dev/zero
check '[[ $rc -eq 2 ]] && err_has "kvreplay compare: /dev/zero:1: not valid JSON: unexpected byte 0x00"' \
  "/dev/zero: exit $rc (124: it did not end), $(err_text)"
# 65 MiB of whitespace on stdin: refused at the 64 MiB cap, not read to its end.
head -c $((65 << 20)) /dev/zero | tr '\0' ' ' >"$work/spaces"
bounded compare "$r/quick.json" - <"$work/spaces"
check '[[ $rc -eq 2 ]] && err_has "kvreplay compare: -: larger than 64 MiB, far more than a kvreplay report"' \
  "65 MiB on stdin: exit $rc, $(err_text)"
rm -f "$work/spaces"
jq '.blocks.peak_used = 1e300' "$r/quick.json" | sed 's/1e+300/1e400/' >"$work/overflow.json"
check 'grep -q 1e400 "$work/overflow.json"' "no 1e400 planted"
bounded compare "$r/quick.json" "$work/overflow.json"
check '[[ $rc -eq 2 ]] && err_has "overflow.json:"' "1e400: exit $rc (134: an uncaught exception), $(err_text)"
check 'err_has "blocks.peak_used" || err_has "number 1e400 is out of range"' "1e400: $(err_text)"
printf '{"peak_used": 1e400}\n' >"$work/overflow_thresholds.json"
bounded compare "$r/quick.json" "$r/quick.json" --thresholds "$work/overflow_thresholds.json"
check '[[ $rc -eq 2 ]] && err_has "overflow_thresholds.json:1: not valid JSON: number 1e400 is out of range"' \
  "--thresholds with 1e400: exit $rc, $(err_text)"
printf '{"peak_used": "2%%", "peak_used": "off"}\n' >"$work/duplicate_thresholds.json"
bounded compare "$r/quick.json" "$r/quick.json" --thresholds "$work/duplicate_thresholds.json"
check '[[ $rc -eq 2 ]] && err_has "duplicate_thresholds.json:1: not valid JSON: duplicate key '"'"'peak_used'"'"'"' \
  "--thresholds with a duplicate key: exit $rc, $(err_text)"
{ cat "$r/quick.json"; echo '{}'; } >"$work/two_documents.json"
bounded compare "$r/quick.json" "$work/two_documents.json"
check '[[ $rc -eq 2 ]] && err_has "two_documents.json:" && err_has "after the document"' \
  "two documents: exit $rc, $(err_text)"
# What compare gates must be there, with its type: each used to be "no regression".
for edit in 'del(.status)' '.status = 1' 'del(.blocks)' '.blocks = 5' 'del(.invariants)' \
  '.invariants = "none"' '.invariants.violations = 0' '.blocks.peak_used = "56"' \
  'del(.fragmentation.waste_ratio_mean)' 'del(.oom)'; do
  jq "$edit" "$r/quick.json" >"$work/edited.json"
  bounded compare "$r/quick.json" "$work/edited.json"
  check '[[ $rc -eq 2 && ! -s $work/out ]] && err_has "edited.json: "' \
    "NEW with $edit: exit $rc, $(err_text)"
  bounded compare "$work/edited.json" "$r/quick.json"
  check '[[ $rc -eq 2 ]] && err_has "edited.json: "' "BASE with $edit: exit $rc, $(err_text)"
done
jq 'del(.status)' "$r/quick.json" >"$work/no_status.json"
bounded compare "$r/quick.json" "$work/no_status.json"
check 'err_has "kvreplay compare: $work/no_status.json: status: missing"' "no status: $(err_text)"
jq '.blocks.peak_used = "56"' "$r/quick.json" >"$work/text_peak.json"
bounded compare "$r/quick.json" "$work/text_peak.json"
check 'err_has "kvreplay compare: $work/text_peak.json: blocks.peak_used: expected a number, got string"' \
  "a string peak_used: $(err_text)"
# A gzip report with plain bytes after it is refused too (the traces' byte source).
{ gzip -c "$r/quick.json"; echo junk; } >"$work/quick_trailing.json.gz"
bounded compare "$r/quick.json" "$work/quick_trailing.json.gz"
check '[[ $rc -eq 2 ]] && err_has "quick_trailing.json.gz: bytes after the end of the gzip data are not another gzip member"' \
  "gzip with trailing bytes: exit $rc, $(err_text)"
finish "compare: hostile files are refused with exit 2, naming the file and key"

# --- --quiet: no table, the verdict in the exit code and on stderr
run compare "$r/quick.json" "$r/quick_fifo.json" --quiet
check '[[ $rc -eq 0 && ! -s $work/out && ! -s $work/err ]]' "quiet, no regression: exit $rc"
run compare "$r/oom_big.json" "$r/oom_skip.json" -q
check '[[ $rc -eq 1 && ! -s $work/out ]] && err_has "regression: oom.events"' "quiet, regression: exit $rc"
finish "compare: --quiet"

# --- simulate reports: simulation metrics compared, stdin equal to the file
awk 'BEGIN { for (i = 0; i < 200; i++)
  printf "{\"arrival\": %.3f, \"prompt\": %d, \"output\": %d, \"prefix\": \"sys\", \"prefix_tokens\": 64}\n",
         i * 0.01, 64 + (i * 37) % 200, 8 + (i * 11) % 40 }' >"$work/requests.jsonl"
"$kvreplay" simulate "$work/requests.jsonl" --kv-memory 1GiB -q --report "$r/sim.json"
"$kvreplay" simulate - --kv-memory 1GiB -q --report "$r/sim_stdin.json" <"$work/requests.jsonl"
"$kvreplay" simulate "$work/requests.jsonl" --kv-memory 24MiB -q --report "$r/sim_small.json" \
  2>/dev/null  # warns of the requests too large for 24 MiB
run compare "$r/sim.json" "$r/sim_stdin.json"
check '[[ $rc -eq 0 ]]' "simulate, stdin vs file: exit $rc: $(err_text)"
check 'out_has "simulate reports of one trace"' "kind not named"
check 'out_has "prefix_cache.hit_rate" && out_has "scheduler.preemptions"' "simulation rows missing"
run compare "$r/sim.json" "$r/sim_small.json"
check '[[ $rc -eq 1 ]] && err_has "regression: scheduler.preemptions: "' \
  "a smaller pool preempts: exit $rc, $(err_text)"
check 'out_has "config: kv_memory: "' "kv_memory change not listed"
run compare "$r/sim.json" "$r/quick.json"
check '[[ $rc -eq 2 ]]' "simulate vs replay report of other traces: exit $rc"
finish "compare: simulate reports"

# --- every figure by name, defaults that fire, and the machine formats
# peak_in_use is gated by default (peak_used stops at the pool once a cache fills it).
jq '.blocks.peak_in_use += 50' "$r/sim.json" >"$r/sim_in_use.json"
run compare "$r/sim.json" "$r/sim_in_use.json" -q
check '[[ $rc -eq 1 ]] && err_has "regression: blocks.peak_in_use: "' "peak_in_use: exit $rc, $(err_text)"
# The p90s and E2E's p99 are gated too.
jq '.latency.e2e_ms.p90 *= 1.2' "$r/sim.json" >"$r/sim_e2e.json"
run compare "$r/sim.json" "$r/sim_e2e.json" -q
check '[[ $rc -eq 1 ]] && err_has "regression: latency.e2e_ms.p90: "' "e2e p90: exit $rc, $(err_text)"
# Any number by its dotted path: an increase worse, or a decrease with -VALUE.
jq '.tokens.peak_logical += 100' "$r/quick.json" >"$r/quick_logical.json"
run compare "$r/quick.json" "$r/quick_logical.json" --threshold tokens.peak_logical=1% -q
check '[[ $rc -eq 1 ]] && err_has "regression: tokens.peak_logical: 1601 -> 1701"' \
  "a dotted path: exit $rc, $(err_text)"
run compare "$r/quick_logical.json" "$r/quick.json" --threshold tokens.peak_logical=-1% -q
check '[[ $rc -eq 1 ]] && err_has "regression: tokens.peak_logical: 1701 -> 1601"' \
  "a dotted path, a decrease worse: exit $rc, $(err_text)"
run compare "$r/quick.json" "$r/quick_logical.json" --threshold tokens.peak_logical=-1% -q
check '[[ $rc -eq 0 ]]' "a dotted path, an increase better under -VALUE: exit $rc, $(err_text)"
run compare "$r/quick.json" "$r/quick.json" --threshold tokens.nothing_here=1%
check '[[ $rc -eq 2 ]] && err_has "tokens.nothing_here: missing (given a threshold by --threshold)"' \
  "a path the report lacks: exit $rc, $(err_text)"
run compare "$r/quick.json" "$r/quick.json" --threshold peak_nothing=1%
check '[[ $rc -eq 2 ]] && err_has "unknown metric '"'"'peak_nothing'"'"'"' "an unknown bare name: exit $rc, $(err_text)"
# JUnit: one test case a row, a failure a regression; stderr names the case.
run compare "$r/sim.json" "$r/sim_in_use.json" --format junit --name sim-case
check '[[ $rc -eq 1 ]] && head -1 "$work/out" | grep -qF "<?xml version=\"1.0\""' "junit: exit $rc"
cases=$(grep -c "<testcase " "$work/out")
failures=$(grep -c "<failure " "$work/out")
check '[[ $failures -eq 1 ]] && grep -qF "tests=\"$cases\" failures=\"1\"" "$work/out" && [[ $(grep -c "</testcase>" "$work/out") -eq $cases ]]' \
  "junit: $cases cases, $failures failures: $(head -3 "$work/out" | tr '\n' '|')"
check 'grep -qF "<testsuite name=\"sim-case\"" "$work/out" && err_has "kvreplay compare: sim-case: regression: blocks.peak_in_use"' \
  "junit: the case is not named: $(err_text)"
# GitHub annotations: an ::error a regression, a ::notice at the end.
run compare "$r/sim.json" "$r/sim_in_use.json" --format github --name sim-case
check '[[ $rc -eq 1 && $(grep -c "^::error title=sim-case%3A blocks.peak_in_use regressed::" "$work/out") -eq 1 ]] && tail -1 "$work/out" | grep -q "^::notice "' \
  "github: exit $rc, $(head -c 300 "$work/out" | tr '\n' '|')"
# JSON: every row, the regressions, the verdict.
run compare "$r/sim.json" "$r/sim_in_use.json" --format json
check '[[ $rc -eq 1 && $(jq -r ".regressed, (.rows | length > 10), (.rows[] | select(.metric == \"blocks.peak_in_use\") | .verdict)" "$work/out" | tr "\n" " ") == "true true regressed " ]]' \
  "json: exit $rc, $(head -c 200 "$work/out")"
run compare "$r/sim.json" "$r/sim.json" --format xml
check '[[ $rc -eq 2 ]]' "--format xml: exit $rc"
finish "compare: every figure by its path, defaults that fire, json, junit and github"

# --- the gate: update, compare, regressions, a missing baseline
gate() {  # gate ARGS...: sets rc; output in $work/out
  "$root/scripts/gate" --kvreplay "$kvreplay" "$@" >"$work/out" 2>"$work/err"
  rc=$?
}
gate --update --baselines "$work/base"
check '[[ $rc -eq 0 ]]' "--update: exit $rc: $(err_text)"
for name in fork_cow prefix_partial prefix_drop oom_fail oom_skip document quickstart churn; do
  check '[[ -s $work/base/'"$name"'.json ]]' "no baseline $name.json"
done
check '! grep -q "\"timing\"" "$work"/base/*.json' "baselines keep the timing object"
check 'jq -e . "$work/base/quickstart.json" >/dev/null' "a baseline is not valid JSON"
cp -r "$work/base" "$work/base_first"
gate --update --baselines "$work/base"
check 'diff -r "$work/base_first" "$work/base" >/dev/null' "baselines differ between two updates"
gate --baselines "$work/base"
check '[[ $rc -eq 0 ]] && out_has "gate: 9 cases: 9 passed, 0 regressed, 0 errors"' \
  "gate: exit $rc, $(tail -n 1 "$work/out")"
gate --baselines "$work/base" --replay-args "--alloc-order lowest" --quiet
check '[[ $rc -eq 0 ]]' "gate, another alloc order: exit $rc"
check '[[ $(wc -l <"$work/out") -eq 1 ]]' "--quiet printed more than the last line"
# An allocator change is visible: baselines under fifo, then the default lifo
# regresses the layout of churn and of offload_tiers (whose loaded blocks land
# elsewhere), and nothing else.
gate --update --baselines "$work/fifo_base" --replay-args "--alloc-order fifo"
gate --baselines "$work/fifo_base"
check '[[ $rc -eq 1 ]] && out_has "REGRESSED churn" && out_has "REGRESSED offload_tiers" &&
       out_has "2 regressed" &&
       err_has "layout.runs_per_seq_mean"' \
  "lifo against fifo baselines: exit $rc, $(tail -n 1 "$work/out")"
jq '.blocks.peak_used -= 5' "$work/base/quickstart.json" >"$work/q.json" &&
  mv "$work/q.json" "$work/base/quickstart.json"
gate --baselines "$work/base"
check '[[ $rc -eq 1 ]] && out_has "REGRESSED quickstart" && out_has "1 regressed"' \
  "a planted regression: exit $rc, $(tail -n 1 "$work/out")"
gate --baselines "$work/base" --threshold peak_used=20%
check '[[ $rc -eq 0 ]]' "--threshold passed through: exit $rc"
rm "$work/base/document.json"
gate --baselines "$work/base" --threshold peak_used=20%
check '[[ $rc -eq 2 ]] && err_has "ERROR document: no baseline"' "a missing baseline: exit $rc"
printf 'sim simulate %s --kv-memory 64MiB\n' "$work/requests.jsonl" >"$work/manifest"
gate --manifest "$work/manifest" --traces "" --update --baselines "$work/sim_base"
check '[[ $rc -eq 0 && -s $work/sim_base/sim.json ]]' "simulate case --update: exit $rc, $(err_text)"
gate --manifest "$work/manifest" --traces "" --baselines "$work/sim_base" \
  --simulate-args "--evict lfu"
check '[[ $rc -eq 0 || $rc -eq 1 ]] && out_has "config: simulation.evict: \"lru\" -> \"lfu\""' \
  "simulate case with --simulate-args: exit $rc"
printf 'bad replay\n' >"$work/bad_manifest"
gate --manifest "$work/bad_manifest" --baselines "$work/base"
check '[[ $rc -eq 2 ]] && err_has "bad_manifest:1: expected NAME replay|simulate TRACE"' \
  "a bad manifest line: exit $rc, $(err_text)"
gate --baselines "$work/base" --bogus
check '[[ $rc -eq 2 ]]' "an unknown option: exit $rc"
finish "scripts/gate"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
