#!/usr/bin/env bash
# Golden report tests: replays every case of tests/golden/cases.txt and checks
#   - the exit code;
#   - the JSON report, "timing" deleted, against tests/golden/NAME.json;
#   - the --timeline CSV against tests/golden/NAME.timeline.csv, byte for byte, when present;
#   - the report against another case's (same-as): other alloc orders, stdin, gzip;
#   - determinism: a second run gives a byte-identical report apart from "timing".
# Usage: run_golden.sh KVREPLAY_BINARY REPO_ROOT
# With KVREPLAY_GOLDEN_UPDATE=1 it (re)writes the golden files of plain-file cases instead of
# comparing them. Do that only after checking the figures by hand (traces/README.md).
# The last line of output is 'N passed, M failed'; the exit status is non-zero on any failure.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 KVREPLAY_BINARY REPO_ROOT" >&2
  exit 2
fi
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$2" && pwd)"
golden_dir="$root/tests/golden"
update="${KVREPLAY_GOLDEN_UPDATE:-0}"

for tool in jq gzip diff cmp awk; do
  if ! command -v "$tool" >/dev/null; then
    echo "run_golden.sh: '$tool' is required" >&2
    exit 2
  fi
done
if [[ ! -x "$bin" ]]; then
  echo "run_golden.sh: $bin is not an executable" >&2
  exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-golden.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$root"  # traces are named relative to the root, and trace.path shows them so

passed=0
failed=0

trim() {
  local s="$1"
  s="${s#"${s%%[![:space:]]*}"}"
  s="${s%"${s##*[![:space:]]}"}"
  printf '%s' "$s"
}

# The report text with its top-level "timing" object cut out, bytes otherwise untouched
# (the report is written with a 2-space indent, so the object spans '  "timing": {' .. '  }').
strip_timing() {
  awk '
    skip && /^  }/ { skip = 0; next }
    skip { next }
    /^  "timing": \{/ { skip = 1; next }
    { print }
  ' "$1"
}

# Normalised JSON for comparison: both sides go through the same jq, so number formatting
# differences between jq versions cannot fail a test.
normalised() { # FILE [JQ_FILTER]
  jq -S "${2:-.}" "$1"
}

# Replays one case into DIR: report.json, timeline.csv, stdout, stderr; prints the exit code.
replay() { # DIR INPUT ARGS...
  local dir="$1" input="$2"
  shift 2
  mkdir -p "$dir"
  local mode="file" path="$input"
  case "$input" in
    stdin:*) mode="stdin" path="${input#stdin:}" ;;
    gzip:*) mode="gzip" path="${input#gzip:}" ;;
    gzip-stdin:*) mode="gzip-stdin" path="${input#gzip-stdin:}" ;;
  esac
  local out=(--report "$dir/report.json" --timeline "$dir/timeline.csv" "$@")
  local rc=0
  case "$mode" in
    file) "$bin" replay "$path" "${out[@]}" >"$dir/stdout" 2>"$dir/stderr" || rc=$? ;;
    stdin) "$bin" replay - "${out[@]}" <"$path" >"$dir/stdout" 2>"$dir/stderr" || rc=$? ;;
    gzip)
      local gz
      gz="$dir/$(basename "$path").gz"
      gzip -c "$path" >"$gz"
      "$bin" replay "$gz" "${out[@]}" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
      ;;
    gzip-stdin)
      gzip -c "$path" | "$bin" replay - "${out[@]}" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
      ;;
  esac
  echo "$rc"
}

fail() { # NAME WHY [DETAIL_FILE]
  echo "FAIL $1: $2"
  if [[ $# -ge 3 && -s "$3" ]]; then sed -n '1,40p' "$3" | sed 's/^/    /'; fi
  failed=$((failed + 1))
}

run_case() { # NAME INPUT ARGS EXIT SAME_AS
  local name="$1" input="$2" args_text="$3" want_exit="$4" same_as="$5"
  local args=()
  read -r -a args <<<"$args_text"
  local dir="$work/$name"

  local rc
  rc="$(replay "$dir/run1" "$input" "${args[@]}")"
  if [[ "$rc" != "$want_exit" ]]; then
    fail "$name" "exit code $rc, expected $want_exit" "$dir/run1/stderr"
    return
  fi
  if [[ ! -s "$dir/run1/report.json" ]]; then
    fail "$name" "no report written" "$dir/run1/stderr"
    return
  fi
  local report="$dir/run1/report.json"
  local golden="$golden_dir/$name.json" golden_csv="$golden_dir/$name.timeline.csv"

  if [[ "$update" == "1" && "$input" != *:* ]]; then
    jq 'del(.timing)' "$report" >"$golden"
    echo "UPDATED tests/golden/$name.json"
    if [[ -f "$golden_csv" ]]; then
      cp "$dir/run1/timeline.csv" "$golden_csv"
      echo "UPDATED tests/golden/$name.timeline.csv"
    fi
  fi
  if [[ -f "$golden" ]]; then
    if ! diff -u <(normalised "$golden") <(normalised "$report" 'del(.timing)') \
      >"$dir/golden.diff"; then
      fail "$name" "report differs from tests/golden/$name.json (-golden +actual)" \
        "$dir/golden.diff"
      return
    fi
  elif [[ -z "$same_as" ]]; then
    fail "$name" "no golden file tests/golden/$name.json and no same-as case"
    return
  fi
  if [[ -f "$golden_csv" ]]; then
    if ! diff -u "$golden_csv" "$dir/run1/timeline.csv" >"$dir/timeline.diff"; then
      fail "$name" "timeline differs from tests/golden/$name.timeline.csv" "$dir/timeline.diff"
      return
    fi
  fi

  if [[ -n "$same_as" ]]; then
    local other="$work/$same_as/run1/report.json"
    if [[ ! -s "$other" ]]; then
      fail "$name" "same-as case '$same_as' has no report (it must come earlier in cases.txt)"
      return
    fi
    local ignore=".timing"
    [[ "$input" == *:* ]] && ignore+=", .trace.path"
    [[ " $args_text " == *" --alloc-order "* ]] && ignore+=", .config.alloc_order"
    if ! diff -u <(normalised "$other" "del($ignore)") <(normalised "$report" "del($ignore)") \
      >"$dir/same_as.diff"; then
      fail "$name" "report differs from case $same_as's apart from $ignore" "$dir/same_as.diff"
      return
    fi
  fi

  # Determinism: a second run, byte-identical apart from the timing object.
  rc="$(replay "$dir/run2" "$input" "${args[@]}")"
  if [[ "$rc" != "$want_exit" ]]; then
    fail "$name" "second run: exit code $rc, expected $want_exit" "$dir/run2/stderr"
    return
  fi
  local first_text second_text
  first_text="$(strip_timing "$report")"
  second_text="$(strip_timing "$dir/run2/report.json")"
  if [[ "$input" == gzip:* ]]; then  # each run has its own temp copy of the trace
    first_text="${first_text//"$dir/run1/"/}"
    second_text="${second_text//"$dir/run2/"/}"
  fi
  if [[ "$first_text" != "$second_text" ]]; then
    diff -u <(printf '%s\n' "$first_text") <(printf '%s\n' "$second_text") \
      >"$dir/determinism.diff" || true
    fail "$name" "two runs gave different reports (apart from timing)" "$dir/determinism.diff"
    return
  fi
  if ! cmp -s "$dir/run1/timeline.csv" "$dir/run2/timeline.csv"; then
    fail "$name" "two runs gave different timelines"
    return
  fi

  echo "PASS $name"
  passed=$((passed + 1))
}

while IFS= read -r line || [[ -n "$line" ]]; do
  line="$(trim "$line")"
  [[ -z "$line" || "$line" == \#* ]] && continue
  IFS='|' read -r name input args want_exit same_as extra <<<"$line"
  name="$(trim "$name")"
  input="$(trim "$input")"
  args="$(trim "$args")"
  want_exit="$(trim "$want_exit")"
  same_as="$(trim "${same_as:-}")"
  if [[ -z "$name" || -z "$input" || -z "$want_exit" || -n "$(trim "${extra:-}")" ]]; then
    fail "${name:-?}" "malformed line in cases.txt: $line"
    continue
  fi
  run_case "$name" "$input" "$args" "$want_exit" "$same_as"
done <"$golden_dir/cases.txt"

echo "$passed passed, $failed failed"
[[ "$failed" -eq 0 && "$passed" -gt 0 ]]
