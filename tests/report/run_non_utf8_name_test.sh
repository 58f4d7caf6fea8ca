#!/usr/bin/env bash
# A trace whose file name is not UTF-8 (byte 0xFF) replays with --report and
# --html: the JSON report stays valid JSON (the byte becomes U+FFFD) instead of
# kvreplay aborting while writing it. Usage: run_non_utf8_name_test.sh KVREPLAY REPO_ROOT
set -uo pipefail
kvreplay=$1
root=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-name.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
name=$work/$(printf 'trace\xff.jsonl')
cp "$root/traces/fork_cow.jsonl" "$name"
"$kvreplay" replay "$name" --report "$work/r.json" --html "$work/r.html" -q
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: exit $rc"
  exit 1
fi
path=$(jq -r .trace.path "$work/r.json") || { echo "FAIL: the report is not JSON"; exit 1; }
if [[ $path != "$work/trace"$'\xef\xbf\xbd'".jsonl" ]]; then
  echo "FAIL: trace.path is '$path'"
  exit 1
fi
grep -q 'data-drawn' "$work/r.html" || { echo "FAIL: no HTML page"; exit 1; }
echo "ok: $path"
