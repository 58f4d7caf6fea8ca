#!/usr/bin/env bash
# CLI contract tests (SPEC 2.1 and 6).
#
# Bad input: every file in tests/cli/bad/ makes `replay` and `validate` exit 2
# with exactly the one stderr line given for it in tests/cli/bad/expected.txt
# (FILENAME<TAB>MESSAGE; the tests run from tests/cli/bad, so FILE in the
# message is the bare file name), nothing on stdout, and no --report or
# --timeline file (nor a leftover temporary) behind.
# Usage errors exit 2; --help and --version exit 0; "-" reads standard input.
#
# Usage: run_cli_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
bad=$root/tests/cli/bad
if [[ ! -x $kvreplay ]]; then
  echo "not an executable: $kvreplay" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-cli.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
report=$work/report.json
timeline=$work/timeline.csv
shopt -s nullglob


# run ARGS... (lib.sh) runs kvreplay with the report, the timeline and their
# temporaries gone first.
before_run() { rm -f "$report" "$timeline" "$report".tmp.* "$timeline".tmp.*; }
run_stdin() {  # run_stdin FILE ARGS...
  local input=$1
  shift
  run "$@" <"$input"
}
stderr_text() { head -c 2000 "$work/err"; }
no_outputs() {  # true when no report, timeline or temporary of either exists
  local left=("$report"* "$timeline"*)
  ((${#left[@]} == 0))
}
# expect_input_error MESSAGE: exit 2, stderr is exactly MESSAGE and a newline,
# stdout empty, no report or timeline.
expect_input_error() {
  printf '%s\n' "$1" >"$work/expected"
  check '[[ $rc -eq 2 ]]' "exit code $rc, expected 2"
  check 'cmp -s "$work/expected" "$work/err"' \
    "stderr: $(stderr_text | sed -n '1,3p' | tr '\n' '|') expected: $1"
  check '[[ ! -s $work/out ]]' "stdout not empty: $(head -c 200 "$work/out")"
  check 'no_outputs' "left behind: $(cd "$work" && ls report.json* timeline.csv* 2>/dev/null | tr '\n' ' ')"
}
# expect_usage_error: exit 2, something on stderr, nothing on stdout, no outputs.
expect_usage_error() {
  check '[[ $rc -eq 2 ]]' "exit code $rc, expected 2"
  check '[[ -s $work/err ]]' "no message on stderr"
  check '[[ ! -s $work/out ]]' "stdout not empty: $(head -c 200 "$work/out")"
  check 'no_outputs' "left behind: $(cd "$work" && ls report.json* timeline.csv* 2>/dev/null | tr '\n' ' ')"
}
one_line() { [[ $(wc -l <"$work/err") -eq 1 ]]; }

# --- The bad-input corpus -------------------------------------------------
if [[ ! -f $bad/expected.txt ]]; then
  echo "missing $bad/expected.txt" >&2
  exit 2
fi
declare -A expected=()
while IFS=$'\t' read -r name message; do
  [[ -z $name ]] && continue
  expected[$name]=$message
done <"$bad/expected.txt"

cd "$bad" || exit 2
for file in *; do
  [[ $file == expected.txt ]] && continue
  if [[ -z ${expected[$file]+set} ]]; then
    problems+=("no line for it in expected.txt")
    finish "corpus $file"
    continue
  fi
  message=${expected[$file]}

  run replay "$file" --report "$report" --timeline "$timeline"
  expect_input_error "$message"
  finish "replay $file"

  run validate "$file"
  expect_input_error "$message"
  finish "validate $file"
done
for name in "${!expected[@]}"; do
  if [[ ! -e $bad/$name ]]; then
    problems+=("expected.txt names a file that does not exist")
    finish "corpus $name"
  fi
done

# Standard input names the trace <stdin>.
run_stdin "$bad/unknown_seq.jsonl" replay - --report "$report" --timeline "$timeline"
expect_input_error "<stdin>:3: seq: 42 is not admitted"
finish "replay - (bad input on stdin)"

# --- Usage errors ---------------------------------------------------------
good=$work/good.jsonl
cat >"$good" <<'EOF'
{"kvtrace": 1, "config": {"model": "llama-3-8b", "pool_blocks": 64, "max_seq_tokens": 256}}
{"op": "prefix", "id": "sys", "tokens": 20, "t": 0}
{"op": "admit", "seq": 0, "prompt": 40, "prefix": "sys", "t": 0.5}
{"op": "fork", "seq": 0, "child": 1}
{"op": "decode", "seqs": [0, 1], "t": 1}
{"op": "free", "seq": 0}
{"op": "check"}
EOF

usage_case() {  # usage_case NAME ARGS...
  local name=$1
  shift
  run "$@"
  expect_usage_error
  finish "usage: $name"
}
usage_case "unknown flag" replay "$good" --bogus --report "$report"
usage_case "missing TRACE" replay --report "$report"
usage_case "missing TRACE (validate)" validate
usage_case "--check bogus" replay "$good" --check bogus --report "$report"
usage_case "--check 0" replay "$good" --check 0 --report "$report"
usage_case "--on-oom bogus" replay "$good" --on-oom bogus --report "$report"
usage_case "--page-tokens 0" replay "$good" --page-tokens 0 --report "$report"
usage_case "--pool-blocks 0" replay "$good" --pool-blocks 0 --report "$report"
usage_case "unknown subcommand" bogus "$good"
usage_case "extra positional" replay "$good" "$good" --report "$report"

run replay "$good" --kv-memory 12XB --report "$report" --timeline "$timeline"
expect_usage_error
check 'one_line' "stderr is not one line: $(stderr_text | tr '\n' '|')"
check 'grep -q "^command line: --kv-memory: .*12XB" "$work/err"' \
  "stderr: $(stderr_text) (expected 'command line: --kv-memory: ...12XB...')"
finish "usage: --kv-memory 12XB"

run replay "$good" --pool-blocks 8 --kv-memory 1GiB --report "$report" --timeline "$timeline"
expect_usage_error
check 'one_line' "stderr is not one line: $(stderr_text | tr '\n' '|')"
check 'grep -q "^command line: --pool-blocks: " "$work/err"' \
  "stderr: $(stderr_text) (expected 'command line: --pool-blocks: ...')"
finish "usage: --pool-blocks and --kv-memory"

run validate "$good" --model no-such-model
expect_usage_error
check 'grep -q "^command line: --model: unknown model" "$work/err"' "stderr: $(stderr_text)"
finish "usage: --model unknown"

for sub in replay validate; do
  missing=$work/no-such-trace.jsonl
  if [[ $sub == replay ]]; then
    run replay "$missing" --report "$report" --timeline "$timeline"
  else
    run validate "$missing"
  fi
  expect_usage_error
  check 'one_line' "stderr is not one line: $(stderr_text | tr '\n' '|')"
  check 'grep -qF "$missing" "$work/err"' "stderr does not name the file: $(stderr_text)"
  finish "$sub: nonexistent file"
done

# --- Help, version, standard input, accepted variants ---------------------
for sub in replay validate; do
  run "$sub" --help
  check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0"
  check 'grep -q "Example" "$work/out"' "no 'Example' in the help"
  finish "$sub --help"
done

run --version
check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0"
check '[[ $(head -c 9 "$work/out") == "kvreplay " ]]' "stdout: $(head -c 200 "$work/out")"
finish "--version"

run_stdin "$good" replay - --report "$report" --timeline "$timeline"
check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0; stderr: $(stderr_text)"
check '[[ -s $report && -s $timeline ]]' "no report or timeline"
check 'grep -q "\"status\": \"ok\"" "$report"' "report status is not ok"
check '[[ $(wc -l <"$timeline") -eq 7 ]]' "timeline has $(wc -l <"$timeline") lines, expected 7"
temporaries=("$work"/*.tmp.*)
check '((${#temporaries[@]} == 0))' "temporary files left behind: ${temporaries[*]}"
finish "replay - (stdin)"

run_stdin "$good" validate -
check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0; stderr: $(stderr_text)"
check 'grep -qx "<stdin>: valid kvtrace-jsonl, 6 events" "$work/out"' "stdout: $(head -c 200 "$work/out")"
finish "validate - (stdin)"

gzip -c "$good" >"$work/good.jsonl.gz"
run_stdin "$work/good.jsonl.gz" validate -
check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0; stderr: $(stderr_text)"
finish "validate - (gzip on stdin)"

# Concatenated gzip members are one stream (as gzip -d reads them); plain bytes
# after the last member are an input error, on stdin too.
{ head -n 3 "$good" | gzip -c; tail -n +4 "$good" | gzip -c; } >"$work/members.jsonl.gz"
run validate "$work/members.jsonl.gz"
check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0; stderr: $(stderr_text)"
check 'grep -qx "$work/members.jsonl.gz: valid kvtrace-jsonl, 6 events" "$work/out"' \
  "stdout: $(head -c 200 "$work/out")"
run replay "$work/members.jsonl.gz" --report "$report" -q
check '[[ $rc -eq 0 ]] && [[ $(jq -r .trace.sha256 "$report") == $(sha256sum <"$good" | cut -d" " -f1) ]]' \
  "replay: exit $rc, or trace.sha256 is not the whole trace's; stderr: $(stderr_text)"
finish "gzip: concatenated members read as one trace"

{ head -n 3 "$good" | gzip -c; tail -n +4 "$good"; } >"$work/plain_tail.jsonl.gz"
run_stdin "$work/plain_tail.jsonl.gz" replay - --report "$report" --timeline "$timeline"
expect_input_error "<stdin>:3: file: bytes after the end of the gzip data are not another gzip member"
finish "gzip: plain bytes after the gzip data on stdin"

# CRLF line endings are accepted.
sed 's/$/\r/' "$good" >"$work/crlf.jsonl"
run validate "$work/crlf.jsonl"
check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0; stderr: $(stderr_text)"
finish "validate CRLF"

# A UTF-8 byte order mark at the start is skipped.
{ printf '\xef\xbb\xbf'; cat "$good"; } >"$work/bom.jsonl"
run validate "$work/bom.jsonl"
check '[[ $rc -eq 0 ]]' "exit code $rc, expected 0; stderr: $(stderr_text)"
finish "validate UTF-8 BOM"

echo "$passed passed, $failed failed"
((failed == 0))
