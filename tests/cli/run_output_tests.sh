#!/usr/bin/env bash
# Outputs from the command line (README "Outputs"): the real binary on every
# subcommand that writes files.
#   - a device (a /dev/full or /dev/null node) is written in place and stays a
#     device; a write error on it exits 2 with one line;
#   - a symlink (a chain, a dangling one) is followed and stays a link; a FIFO is
#     written in place; an existing file keeps its permission bits;
#   - `-` (and a link to /proc/self/fd/1, as /dev/stdout is) is standard output,
#     parseable alone, the summary on stderr; two outputs on stdout are a usage
#     error;
#   - a write error on stdout (replay, validate, simulate, convert > /dev/full)
#     exits 2 with one line; with SIGPIPE ignored a closed pipe does too, else
#     SIGPIPE ends the run (141) and still removes every temporary;
#   - a failure of any output (a full device, a full tmpfs, a file size limit,
#     a folder that does not exist or may not be written) exits 2 with one line
#     and leaves NO output of the run: not the report that was fine, not a
#     temporary; a file that was there keeps its content;
#   - SIGINT, SIGTERM and SIGHUP in the middle of a run (the trace is a FIFO we
#     hold open, so the run waits for input) end it with 130, 143 and 129 and
#     leave no temporary.
# After every failure the output folder must be empty (or as it was).
#
# Device nodes are made with mknod in the test's own folder (as root), so a
# regression can never replace the system's /dev/full; without mknod the
# system's nodes are used only when not root, else those cases are skipped.
# Nothing under /dev is named as an output for the same reason.
# The full-disk case mounts a 64 KiB tmpfs (root only; skipped otherwise).
#
# Usage: run_output_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-outputs.XXXXXX") || exit 2
mounted=""
cleanup() {
  [[ -n $mounted ]] && umount "$mounted" 2>/dev/null
  exec 3>&-
  chmod -R u+w "$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The working folder is the scratch folder: whatever a broken binary makes of
# "-" or a relative path lands there, never in the repository.
cd "$work" || exit 2
skipped=0
skip() {
  skipped=$((skipped + 1))
  echo "SKIP: $1"
}

quick=$root/traces/quickstart.jsonl
out=$work/out  # every run's output folder
fresh() {
  chmod -R u+w "$out" 2>/dev/null
  rm -rf "$out"
  mkdir -p "$out"
}
run_out=$work/stdout run_err=$work/stderr  # for run (lib.sh): $work/out is a folder here
shown() { head -c 600 "$1" | tr '\n' '|'; }
listing() { ls -A "$out" | tr '\n' ' '; }
# expect_failure LINE: exit 2, stderr exactly LINE, stdout empty, $out empty.
expect_failure() {
  printf '%s\n' "$1" >"$work/expected"
  check '[[ $rc -eq 2 ]]' "exit code $rc, expected 2; stderr: $(shown "$work/stderr")"
  check 'cmp -s "$work/expected" "$work/stderr"' "stderr: $(shown "$work/stderr") expected: $1"
  check '[[ ! -s $work/stdout ]]' "stdout not empty: $(shown "$work/stdout")"
  check '[[ -z $(ls -A "$out") ]]' "left behind: $(listing)"
}
is_json() { jq -e . "$1" >/dev/null 2>&1; }

# Inputs: a request trace, and a kvtrace whose timeline is well over 64 KiB.
awk 'BEGIN { for (i = 0; i < 200; i++)
  printf "{\"arrival\": %.2f, \"prompt\": %d, \"output\": %d}\n", i * 0.5, 100 + i, 20 + i % 30 }' \
  >"$work/requests.jsonl"
{
  echo '{"kvtrace": 1, "config": {"layers": 1, "kv_heads": 1, "head_dim": 4, "pool_blocks": 4096}}'
  awk 'BEGIN { for (i = 0; i < 8; i++) printf "{\"op\": \"admit\", \"seq\": %d, \"prompt\": 20}\n", i;
               for (j = 0; j < 8000; j++) printf "{\"op\": \"decode\", \"seqs\": [%d]}\n", j % 8 }'
} >"$work/events.jsonl"

# Device nodes.
mkdir -p "$work/dev"
full="" null=""
if mknod "$work/dev/full" c 1 7 2>/dev/null && mknod "$work/dev/null" c 1 3 2>/dev/null; then
  full=$work/dev/full
  null=$work/dev/null
elif [[ $(id -u) -ne 0 ]]; then
  full=/dev/full
  null=/dev/null
fi
enospc="No space left on device"

# --- Devices are written in place ----------------------------------------
if [[ -n $full ]]; then
  device_case() {  # device_case NAME OUTPUT-WHAT ARGS... (the device is $full)
    local name=$1 what=$2
    shift 2
    fresh
    run "$@"
    expect_failure "kvreplay: cannot write $what $full: $enospc"
    check '[[ -c $full ]]' "$full is no longer a character device"
    finish "$name"
  }
  device_case "replay --report FULL" "the report" replay "$quick" --report "$full"
  device_case "replay --timeline FULL" "the timeline" replay "$quick" --timeline "$full"
  device_case "replay --html FULL" "the HTML report" replay "$quick" --html "$full"
  device_case "simulate --report FULL" "the report" \
    simulate "$work/requests.jsonl" --kv-memory 1GiB --report "$full"
  # It aborted with exit code 134 once (an exception from a failed write).
  device_case "simulate --timeline FULL" "the timeline" \
    simulate "$work/requests.jsonl" --kv-memory 1GiB --timeline "$full"
  device_case "plan --report FULL" "the plan" \
    plan "$work/requests.jsonl" --kv-memory 1GiB --no-search --report "$full"
  device_case "plan --html FULL" "the HTML report" \
    plan "$work/requests.jsonl" --kv-memory 1GiB --no-search --html "$full"
  device_case "convert -o FULL" "the output" convert "$work/requests.jsonl" -o "$full"
  # -q: the table is printed as the sweep goes, before the report is written.
  device_case "kernels --report FULL" "the report" kernels --backend cpu --batch 1 --context 16 \
    --page-tokens 16 --iters 1 --warmup 0 -q --report "$full"

  fresh
  run replay "$quick" --report "$null" --timeline "$null" --html "$null"
  check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
  check '[[ -c $null ]]' "$null is no longer a character device"
  check 'grep -q -- "-> ok" "$work/stdout"' "no summary on stdout: $(shown "$work/stdout")"
  finish "replay to a null device"

  fresh
  run convert "$work/requests.jsonl" -o "$null"
  check '[[ $rc -eq 0 && -c $null ]]' "exit code $rc, or $null replaced"
  finish "convert -o NULL"
else
  skip "device cases: root without mknod (the system's /dev/full is not risked)"
fi

# --- Symlinks are followed; the link stays a link --------------------------
fresh
mkdir "$out/real"
printf 'old\n' >"$out/real/report.json"
chmod 640 "$out/real/report.json"
ln -s real/report.json "$out/middle"
ln -s "$out/middle" "$out/link"
run replay "$quick" --report "$out/link" -q
check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
check '[[ -L $out/link && -L $out/middle ]]' "a link was replaced"
check 'is_json "$out/real/report.json"' "the target is not the report"
check '[[ $(stat -c %a "$out/real/report.json") == 640 ]]' \
  "mode $(stat -c %a "$out/real/report.json"), expected 640"
check '[[ $(ls -A "$out/real") == report.json ]]' "left in real/: $(ls -A "$out/real")"
finish "replay --report through a chain of symlinks"

fresh
ln -s made.jsonl "$out/link"
run convert "$work/requests.jsonl" -o "$out/link"
check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
check '[[ -L $out/link ]]' "the link was replaced"
check '[[ $(wc -l <"$out/made.jsonl") -eq 200 ]]' "the dangling link's target was not written"
check '[[ $(listing) == "link made.jsonl " ]]' "folder: $(listing)"
finish "convert -o a dangling symlink"

# --- FIFOs are written in place --------------------------------------------
fresh
mkfifo "$out/report.fifo" "$out/timeline.fifo"
# A bounded wait: a binary that replaces a FIFO instead of opening it would
# leave its reader waiting forever.
timeout 60 cat "$out/report.fifo" >"$work/got_report" &
report_reader=$!
timeout 60 cat "$out/timeline.fifo" >"$work/got_timeline" &
timeline_reader=$!
run simulate "$work/requests.jsonl" --kv-memory 1GiB --report "$out/report.fifo" \
  --timeline "$out/timeline.fifo" -q
wait "$report_reader" "$timeline_reader"
check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
check '[[ -p $out/report.fifo && -p $out/timeline.fifo ]]' "a FIFO was replaced"
check 'is_json "$work/got_report"' "the report read from the FIFO is not JSON"
check '[[ $(head -c 5 "$work/got_timeline") == step, && $(wc -l <"$work/got_timeline") -gt 1000 ]]' \
  "the timeline read from the FIFO: $(shown "$work/got_timeline")"
check '[[ $(listing) == "report.fifo timeline.fifo " ]]' "folder: $(listing)"
finish "simulate --report and --timeline into FIFOs"

# --- Existing files: replaced whole, permission bits kept --------------------
fresh
printf 'x%.0s' {1..5000} >"$out/r.json"
chmod 604 "$out/r.json"
run replay "$quick" --report "$out/r.json" -q
check '[[ $rc -eq 0 ]] && is_json "$out/r.json"' "exit code $rc, or not JSON"
check '[[ $(stat -c %a "$out/r.json") == 604 ]]' "mode $(stat -c %a "$out/r.json"), expected 604"
check '[[ $(listing) == "r.json " ]]' "folder: $(listing)"
finish "replay --report over an existing file"

# --- Standard output ---------------------------------------------------------
# Our own link where /dev/stdout leads, so a regression cannot replace /dev/stdout.
ln -s /proc/self/fd/1 "$work/stdout-link"
for path in - "$work/stdout-link"; do
  fresh
  run replay "$quick" --report "$path"
  check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
  check '[[ $(jq -s length "$work/stdout" 2>/dev/null) == 1 ]]' \
    "stdout is not one JSON document: $(shown "$work/stdout")"
  check '[[ $(jq -r .status "$work/stdout" 2>/dev/null) == ok ]]' "no status ok"
  check 'grep -q -- "-> ok" "$work/stderr"' "the summary is not on stderr: $(shown "$work/stderr")"
  finish "replay --report $path"
done

fresh
run simulate "$work/requests.jsonl" --kv-memory 1GiB --report - --html "$out/h.html"
check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
check '[[ $(jq -r .requests.finished "$work/stdout" 2>/dev/null) == 200 ]]' \
  "stdout: $(shown "$work/stdout")"
check 'grep -q "^simulation" "$work/stderr"' "the summary is not on stderr"
check '[[ $(listing) == "h.html " ]]' "folder: $(listing)"
finish "simulate --report -"

fresh
run plan "$work/requests.jsonl" --kv-memory 1GiB,2GiB --no-search --report -
check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
check '[[ $(jq ".cells | length" "$work/stdout" 2>/dev/null) == 2 ]]' "stdout: $(shown "$work/stdout")"
check 'grep -q "^model" "$work/stderr"' "the table is not on stderr"
finish "plan --report -"

fresh
run kernels --backend cpu --batch 1 --context 16 --page-tokens 16 --iters 1 --warmup 0 --report -
check '[[ $rc -eq 0 ]]' "exit code $rc; stderr: $(shown "$work/stderr")"
check '[[ $(jq .kvreplay_kernels "$work/stdout" 2>/dev/null) == 1 ]]' "stdout: $(shown "$work/stdout")"
check 'grep -q "^copy roof" "$work/stderr"' "the table is not on stderr"
finish "kernels --report -"

fresh
run replay "$quick" --report - --timeline "$out/t.csv" --html -
expect_failure "command line: the report and the HTML report both write to standard output"
finish "two outputs on stdout"

fresh
run replay "$quick" --report "$out/r.json" --html "$out/r.json"
expect_failure "command line: --report $out/r.json and --html $out/r.json are one file (nothing written)"
finish "two outputs on one file"

# --- Write errors on standard output -----------------------------------------
if [[ -n $full ]]; then
  stdout_case() {  # stdout_case NAME LINE ARGS...: stdout is the full device
    local name=$1 line=$2
    shift 2
    fresh
    "$kvreplay" "$@" >"$full" 2>"$work/stderr"
    rc=$?
    : >"$work/stdout"
    expect_failure "$line"
    finish "$name"
  }
  stdout_line="kvreplay: cannot write to standard output: $enospc"
  stdout_case "replay > FULL" "$stdout_line" replay "$quick"
  stdout_case "validate > FULL" "$stdout_line" validate "$quick"
  stdout_case "simulate > FULL" "$stdout_line" simulate "$work/requests.jsonl" --kv-memory 1GiB
  stdout_case "plan > FULL" "$stdout_line" plan "$work/requests.jsonl" --kv-memory 1GiB --no-search
  stdout_case "convert > FULL" "kvreplay: cannot write the output to standard output: $enospc" \
    convert "$work/requests.jsonl"
  fresh
  "$kvreplay" replay "$quick" --report "$work/base.json" -q
  stdout_case "compare > FULL" "$stdout_line" compare "$work/base.json" "$work/base.json"
  stdout_case "help > FULL" "$stdout_line"
  stdout_case "replay --report - > FULL" \
    "kvreplay: cannot write the report to standard output: $enospc" \
    replay "$quick" --report - --html "$out/h.html"
fi

# A closed pipe: SIGPIPE ends the run (141), or exit 2 when SIGPIPE is ignored;
# either way the other outputs' temporaries are gone.
fresh
"$kvreplay" replay "$work/events.jsonl" --timeline - --report "$out/r.json" -q 2>"$work/stderr" |
  head -c 10 >/dev/null
rc=${PIPESTATUS[0]}
check '[[ $rc -eq 141 ]]' "exit code $rc, expected 141; stderr: $(shown "$work/stderr")"
check '[[ -z $(ls -A "$out") ]]' "left behind: $(listing)"
finish "replay --timeline - into a closed pipe"

fresh
(
  trap '' PIPE
  "$kvreplay" replay "$work/events.jsonl" --timeline - --report "$out/r.json" -q \
    2>"$work/stderr" | head -c 10 >/dev/null
  exit "${PIPESTATUS[0]}"
)
rc=$?
: >"$work/stdout"
expect_failure "kvreplay: cannot write the timeline to standard output: Broken pipe"
finish "replay --timeline - into a closed pipe, SIGPIPE ignored"

# --- One output fails: no output of the run is left --------------------------
if [[ -n $full ]]; then
  fresh
  run replay "$quick" --report "$out/r.json" --timeline "$out/t.csv" --html "$full"
  printf '%s\n' "kvreplay: cannot write the HTML report $full: $enospc" >"$work/expected"
  check '[[ $rc -eq 2 ]]' "exit code $rc, expected 2"
  check 'cmp -s "$work/expected" "$work/stderr"' "stderr: $(shown "$work/stderr")"
  check '[[ -z $(ls -A "$out") ]]' "left behind: $(listing)"
  finish "replay: report fine, HTML failed at commit"

  fresh
  printf 'the previous run\n' >"$out/r.json"
  run simulate "$work/requests.jsonl" --kv-memory 1GiB --report "$out/r.json" --html "$full"
  check '[[ $rc -eq 2 ]]' "exit code $rc, expected 2"
  check '[[ $(cat "$out/r.json") == "the previous run" ]]' "the previous report was replaced"
  check '[[ $(listing) == "r.json " ]]' "folder: $(listing)"
  finish "simulate: the previous report survives a failed run"
fi

fresh
run replay "$quick" --report "$out/r.json" --html "$out/missing/h.html"
expect_failure "kvreplay: cannot write the HTML report $out/missing/h.html: No such file or directory"
finish "replay --html into a folder that does not exist"

if [[ $(id -u) -ne 0 ]]; then
  fresh
  mkdir "$out/locked"
  chmod 555 "$out/locked"
  run replay "$quick" --report "$out/r.json" --html "$out/locked/h.html"
  printf '%s\n' "kvreplay: cannot write the HTML report $out/locked/h.html: Permission denied" \
    >"$work/expected"
  check '[[ $rc -eq 2 ]]' "exit code $rc, expected 2"
  check 'cmp -s "$work/expected" "$work/stderr"' "stderr: $(shown "$work/stderr")"
  check '[[ $(listing) == "locked " && -z $(ls -A "$out/locked") ]]' "left behind: $(listing)"
  finish "replay --html into a folder that may not be written"
else
  skip "a folder that may not be written: root may write any folder"
fi

# A file size limit: write() fails with EFBIG in the middle of the timeline.
fresh
(
  ulimit -f 16
  trap '' XFSZ
  exec "$kvreplay" simulate "$work/requests.jsonl" --kv-memory 1GiB --report "$out/r.json" \
    --timeline "$out/t.csv" -q >"$work/stdout" 2>"$work/stderr"
)
rc=$?
expect_failure "kvreplay: cannot write the timeline $out/t.csv: File too large"
finish "simulate --timeline past the file size limit"

# A full disk: a 64 KiB tmpfs.
mkdir -p "$work/small"
if mount -t tmpfs -o size=64k kvreplay-test "$work/small" 2>/dev/null; then
  mounted=$work/small
  saved_out=$out
  out=$work/small
  run simulate "$work/requests.jsonl" --kv-memory 1GiB --report "$out/r.json" \
    --timeline "$out/t.csv" -q
  expect_failure "kvreplay: cannot write the timeline $out/t.csv: $enospc"
  finish "simulate --timeline onto a full disk"
  out=$saved_out
  umount "$mounted" && mounted=""
else
  skip "full disk: cannot mount a tmpfs (not root)"
fi

# --- Signals in the middle of a run -------------------------------------------
# The trace is a FIFO held open read-write by this shell, so kvreplay opens it at
# once and then waits for input; the outputs are opened (temporaries made)
# before the trace. Job control gives the background job the default SIGINT.
set -m
signal_case() {  # signal_case SIGNAL STATUS SUBCOMMAND ARGS...
  local signal=$1 status=$2
  shift 2
  fresh
  rm -f "$work/in.fifo"
  mkfifo "$work/in.fifo"
  exec 3<>"$work/in.fifo"
  "$kvreplay" "$@" >"$work/stdout" 2>"$work/stderr" &
  local pid=$!
  if [[ $1 == replay ]]; then head -n 20 "$work/events.jsonl" >&3; else head -n 20 "$work/requests.jsonl" >&3; fi
  # The temporaries are unnamed (O_TMPFILE): the process holds them open in $out.
  local tries=0
  opened() { ls -l "/proc/$pid/fd" 2>/dev/null | grep -qF -- "$out/"; }
  while ! opened && kill -0 "$pid" 2>/dev/null && ((tries++ < 200)); do
    sleep 0.05
  done
  check 'opened' "no temporary file open while running"
  kill -s "$signal" "$pid"
  wait "$pid" 2>/dev/null
  rc=$?
  exec 3>&-
  check '[[ $rc -eq $status ]]' "exit status $rc, expected $status; stderr: $(shown "$work/stderr")"
  check '[[ -z $(ls -A "$out") ]]' "left behind: $(listing)"
  finish "$1 killed by SIG$signal"
}
replay_args=(replay "$work/in.fifo" --report "$out/r.json" --timeline "$out/t.csv" --html "$out/h.html" -q)
signal_case INT 130 "${replay_args[@]}"
signal_case TERM 143 "${replay_args[@]}"
signal_case HUP 129 "${replay_args[@]}"
signal_case TERM 143 simulate "$work/in.fifo" --format native --kv-memory 1GiB --report "$out/r.json" \
  --timeline "$out/t.csv" -q
signal_case INT 130 convert "$work/in.fifo" --format native -o "$out/c.jsonl"
signal_case KILL 137 "${replay_args[@]}"
signal_case KILL 137 convert "$work/in.fifo" --format native -o "$out/c.jsonl"
set +m

echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
