#!/usr/bin/env bash
# kvreplay convert from the command line:
#   - every file in tests/cli/bad_requests/ must fail with exit code 2, exactly the
#     stderr line given in expected.txt (FILENAME<TAB>EXPECTED_STDERR, the file named
#     as passed from that directory), and no output file (or temporary) left behind;
#   - the Azure start is kept as "start"; --sort orders a trace by arrival within
#     the memory limit;
#   - the real Mooncake trace (../shared/traces, when present) converts to 12,031
#     records, reads the same from stdin and gzip, and converts again byte-identically.
# Usage: run_convert_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

# Bad input: exit 2, one exact line on stderr, nothing left in the output folder.
cd "$root/tests/cli/bad_requests" || exit 1
while IFS=$'\t' read -r file expected; do
  [[ -z $file ]] && continue
  out="$tmp/bad/out.jsonl"
  rm -rf "$tmp/bad" && mkdir -p "$tmp/bad"
  stderr=$("$bin" convert "$file" -o "$out" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 ]]; then
    fail "$file: exit code $rc, expected 2"
  elif [[ $stderr != "$expected" ]]; then
    fail "$file: stderr"$'\n'"  got:      $stderr"$'\n'"  expected: $expected"
  elif [[ -n $(ls -A "$tmp/bad") ]]; then
    fail "$file: left $(ls -A "$tmp/bad") behind"
  else
    ok
  fi
done <expected.txt
# Every corpus file has an expectation.
for file in *; do
  [[ $file == expected.txt ]] && continue
  grep -q "^$file"$'\t' expected.txt || fail "$file: not in expected.txt"
done

# Bad input on stdin is named <stdin>.
stderr=$("$bin" convert - <azure_zero_generated.csv 2>&1 >/dev/null)
rc=$?
if [[ $rc -eq 2 && $stderr == "<stdin>:3: GeneratedTokens: 0 (must be >= 1)" ]]; then ok; else
  fail "stdin: exit $rc, stderr '$stderr'"
fi

# Request traces read gzip through the same byte source as kvtraces: members
# concatenated are one trace, plain bytes after them an input error.
printf '{"arrival": 0, "prompt": 10, "output": 2}\n{"arrival": 1, "prompt": 20, "output": 3}\n' \
  >"$tmp/two.jsonl"
{ head -n 1 "$tmp/two.jsonl" | gzip -c; tail -n 1 "$tmp/two.jsonl" | gzip -c; } >"$tmp/members.gz"
if "$bin" convert "$tmp/members.gz" -o "$tmp/members.jsonl" >/dev/null &&
  "$bin" convert "$tmp/two.jsonl" -o "$tmp/two_native.jsonl" >/dev/null &&
  [[ $(wc -l <"$tmp/members.jsonl") -eq 2 ]] && cmp -s "$tmp/members.jsonl" "$tmp/two_native.jsonl"
then ok; else
  fail "concatenated gzip members: not converted as one trace"
fi
{ head -n 1 "$tmp/two.jsonl" | gzip -c; tail -n 1 "$tmp/two.jsonl"; } >"$tmp/plain_tail.gz"
stderr=$("$bin" simulate "$tmp/plain_tail.gz" --kv-memory 1GiB -q 2>&1 >/dev/null)
rc=$?
if [[ $rc -eq 2 && $stderr == "$tmp/plain_tail.gz:1: file: bytes after the end of the gzip data are not another gzip member" ]]
then ok; else fail "simulate, plain bytes after gzip: exit $rc, '$stderr'"; fi

# Usage errors: exit 2.
"$bin" convert >/dev/null 2>&1
rc=$?
if [[ $rc -eq 2 ]]; then ok; else fail "no INPUT: exit $rc, expected 2"; fi
"$bin" convert empty.jsonl --format csv >/dev/null 2>&1
rc=$?
if [[ $rc -eq 2 ]]; then ok; else fail "--format csv: exit $rc, expected 2"; fi
if "$bin" convert --help | grep -q "Example"; then ok; else fail "convert --help shows no example"; fi

# A device is written in place, never replaced by a renamed temporary file.
printf '{"arrival": 0, "prompt": 1, "output": 1}\n' >"$tmp/one.jsonl"
if "$bin" convert "$tmp/one.jsonl" -o /dev/null >/dev/null && [[ -c /dev/null ]] &&
  [[ -z $(ls /dev/null.tmp.* 2>/dev/null) ]]; then ok; else fail "-o /dev/null"; fi

# The wall-clock start of a trace convert rebases (Azure: arrival 0 is the first
# row) is kept as the first record's "start", which the native reader accepts;
# converting the output again keeps it byte for byte, and simulate reads it.
azure="$root/traces/requests/azure_conv.csv"
"$bin" convert "$azure" -o "$tmp/azure.jsonl" >/dev/null
first=$(head -n 1 "$tmp/azure.jsonl")
if [[ $first == '{"arrival": 0, "start": "2023-11-16 18:15:46.6805900", "id": 2, '* ]] &&
  [[ $(grep -c '"start"' "$tmp/azure.jsonl") -eq 1 ]]; then ok; else
  fail "azure: the start is not kept: $first"
fi
"$bin" convert "$tmp/azure.jsonl" -o "$tmp/azure_again.jsonl" >/dev/null
if cmp -s "$tmp/azure.jsonl" "$tmp/azure_again.jsonl"; then ok; else
  fail "azure: converting the native output again changed it (start lost?)"
fi
if "$bin" simulate "$tmp/azure.jsonl" --kv-memory 8GiB -q; then ok; else
  fail "simulate does not read a native trace with a start"
fi
if [[ $("$bin" convert "$root/traces/requests/mooncake_conv.jsonl" | grep -c '"start"') -eq 0 ]]
then ok; else fail "mooncake (no wall clock) got a start"; fi

# --sort: a trace whose arrivals go backwards is refused with the command that
# sorts it; --sort orders it by arrival (stable: ties keep their order), the
# Azure start then the earliest row; nothing is sorted in a second pass.
cat >"$tmp/unsorted.csv" <<'CSV'
TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.5,10,1
2023-11-16 18:15:45,20,2
2023-11-16 18:15:50,30,3
2023-11-16 18:15:45,40,4
CSV
stderr=$("$bin" simulate "$tmp/unsorted.csv" --kv-memory 1GiB -q 2>&1)
rc=$?
if [[ $rc -eq 2 && $stderr == "$tmp/unsorted.csv:3: TIMESTAMP: 2023-11-16 18:15:45 goes backwards (previous TIMESTAMP was 2023-11-16 18:15:46.5); sort it by arrival first: kvreplay convert --sort $tmp/unsorted.csv -o sorted.jsonl" ]]
then ok; else fail "simulate, unsorted: exit $rc, '$stderr'"; fi
summary=$("$bin" convert "$tmp/unsorted.csv" --sort -o "$tmp/sorted.jsonl")
rc=$?
expected='{"arrival": 0, "start": "2023-11-16 18:15:45", "id": 3, "prompt": 20, "output": 2}
{"arrival": 0, "id": 5, "prompt": 40, "output": 4}
{"arrival": 1.5, "id": 2, "prompt": 10, "output": 1}
{"arrival": 5, "id": 4, "prompt": 30, "output": 3}'
if [[ $rc -eq 0 && $(cat "$tmp/sorted.jsonl") == "$expected" &&
  $summary == "converted 4 requests (azure -> native, sorted by arrival) to $tmp/sorted.jsonl" ]]
then ok; else fail "convert --sort: exit $rc, '$summary': $(cat "$tmp/sorted.jsonl")"; fi
if "$bin" simulate "$tmp/sorted.jsonl" --kv-memory 1GiB -q; then ok; else
  fail "the sorted trace does not simulate"
fi
printf '{"arrival": 3, "prompt": 1, "output": 1}\n{"arrival": 1, "id": "b", "prompt": 2, "output": 1}\n{"arrival": 1, "id": "c", "prompt": 3, "output": 1}\n' |
  "$bin" convert - --sort >"$tmp/native_sorted.jsonl"
if [[ $(cut -d, -f2 "$tmp/native_sorted.jsonl" | tr '\n' '|') == ' "id": "b"| "id": "c"| "id": 1|' ]]
then ok; else fail "convert --sort on stdin: $(cat "$tmp/native_sorted.jsonl")"; fi
# Its memory is checked as it grows: over the limit is exit 2 and no output.
stderr=$(KVREPLAY_MEMORY_LIMIT=1KiB "$bin" convert "$azure" --sort -o "$tmp/limited.jsonl" 2>&1)
rc=$?
if [[ $rc -eq 2 && $stderr == "$azure:"*": --sort: sorting (the whole trace in memory, "*" requests so far) needs "*", over the memory limit of 1.00 KiB (KVREPLAY_MEMORY_LIMIT)" &&
  ! -e $tmp/limited.jsonl ]]
then ok; else fail "convert --sort over the memory limit: exit $rc, '$stderr'"; fi
if "$bin" convert --help | grep -q -- "--sort"; then ok; else fail "convert --help lacks --sort"; fi

# The real Mooncake trace.
mooncake="$root/../shared/traces/mooncake/conversation_trace.jsonl"
if [[ -f $mooncake ]]; then
  summary=$("$bin" convert "$mooncake" -o "$tmp/mooncake.jsonl")
  rc=$?
  if [[ $rc -eq 0 && $summary == "converted 12031 requests (mooncake -> native) to $tmp/mooncake.jsonl" ]]
  then ok; else fail "mooncake: exit $rc, '$summary'"; fi
  lines=$(wc -l <"$tmp/mooncake.jsonl")
  if [[ $lines -eq 12031 ]]; then ok; else fail "mooncake: $lines lines, expected 12031"; fi
  if command -v jq >/dev/null; then
    count=$(jq -s 'length' "$tmp/mooncake.jsonl")
    if [[ $count -eq 12031 ]]; then ok; else fail "mooncake: jq counts $count records"; fi
    mean=$(jq -s 'map(.prompt) | add / length | floor' "$tmp/mooncake.jsonl")
    if [[ $mean -eq 12035 ]]; then ok; else fail "mooncake: mean prompt $mean, expected 12035"; fi
  fi
  "$bin" convert "$tmp/mooncake.jsonl" -o "$tmp/again.jsonl" >/dev/null
  if cmp -s "$tmp/mooncake.jsonl" "$tmp/again.jsonl"; then ok; else
    fail "mooncake: converting the native output again changed it"
  fi
  gzip -c "$mooncake" >"$tmp/mooncake.jsonl.gz"
  if "$bin" convert - <"$tmp/mooncake.jsonl.gz" | cmp -s - "$tmp/mooncake.jsonl"; then ok; else
    fail "mooncake: gzip on stdin converts differently"
  fi
else
  echo "skipped: $mooncake is absent"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
