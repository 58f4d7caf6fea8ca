#!/usr/bin/env bash
# Terminal manners (SPEC 6; README "Terminal output"):
#   - in a pipe or a file: no escape codes anywhere; progress only as plain lines,
#     one a step of 10% of the input read (KVREPLAY_PROGRESS=log shows them from
#     the start, as a long run would after 10 s), none for a short run, a run
#     reading a pipe, or --quiet;
#   - --quiet on replay, simulate, plan and compare prints no summary or table;
#   - --help on every subcommand (as the top-level help lists them) shows an example;
#   - on a terminal (a pty from util-linux `script`, else tmux; skipped when neither
#     exists): a progress line on stderr for a long run, redrawn with carriage returns
#     at most ~5 times a second and erased before the summary; colour in the summary
#     and the compare table unless NO_COLOR is set and non-empty; nothing with --quiet;
#     colour follows stdout, so `kvreplay ... | cat` on a terminal has progress but no
#     colour.
# A "long" run is made by feeding standard input through a pipe that pauses for a
# second, so the tests do not depend on the machine's speed.
#
# Usage: run_terminal_tests.sh KVREPLAY_BINARY REPO_ROOT
#   KVREPLAY_TERMINAL_TOOL=script|tmux|none forces the pty tool (none: skip those tests).
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-terminal.XXXXXX") || exit 2
tmux_socket=kvreplay-terminal-$$
cleanup() {
  tmux -L "$tmux_socket" kill-server 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cd "$root" || exit 2

skipped=0
has_escape() { grep -q $'\033' "$1"; }
shown() { head -c 400 "$1" | cat -v | tr '\n' '|'; }

# Inputs: a kvtrace of ~20k events and a request trace of 3000 requests (at a rate
# a 64 MiB pool keeps up with: an overloaded run warns on stderr), and "slow"
# commands that pipe them with a one-second pause after the first lines.
{
  echo '{"kvtrace": 1, "config": {"layers": 1, "kv_heads": 1, "head_dim": 4, "pool_blocks": 100000}}'
  awk 'BEGIN { for (i = 0; i < 200; i++) printf "{\"op\": \"admit\", \"seq\": %d, \"prompt\": 20}\n", i;
               for (j = 0; j < 20000; j++) printf "{\"op\": \"decode\", \"seqs\": [%d]}\n", j % 200 }'
} >"$work/events.jsonl"
awk 'BEGIN { for (i = 0; i < 3000; i++)
  printf "{\"arrival\": %.3f, \"prompt\": %d, \"output\": %d}\n", i * 0.05, 32 + i % 64, 4 + i % 16 }' \
  >"$work/requests.jsonl"
cat >"$work/slow_replay.sh" <<EOF
(head -n 50 "$work/events.jsonl"; sleep 1; tail -n +51 "$work/events.jsonl") |
  "$kvreplay" replay - --check off "\$@"
EOF
cat >"$work/slow_simulate.sh" <<EOF
(head -n 20 "$work/requests.jsonl"; sleep 1; tail -n +21 "$work/requests.jsonl") |
  "$kvreplay" simulate - --kv-memory 64MiB "\$@"
EOF
"$kvreplay" replay traces/quickstart.jsonl -q --report "$work/base.json"
"$kvreplay" replay traces/quickstart.jsonl -q --alloc-order fifo --report "$work/new.json"
# A baseline with a lower peak: comparing the real report against it is a regression.
sed 's/"peak_used": 56/"peak_used": 46/' "$work/base.json" >"$work/lower_peak.json"

# ---------------------------------------------------------------- not a terminal
bash "$work/slow_replay.sh" >"$work/out" 2>"$work/err"
rc=$?
check '[[ $rc -eq 0 ]]' "replay: exit $rc"
check '[[ ! -s $work/err ]]' "replay in a pipe wrote on stderr: $(shown "$work/err")"
check '! has_escape "$work/out"' "replay in a pipe: escape codes on stdout"
check 'grep -q "^kvreplay: - (kvtrace-jsonl, 20200 events) -> ok$" "$work/out"' \
  "replay summary: $(shown "$work/out")"
finish "replay in a pipe: no progress, no colour"

bash "$work/slow_simulate.sh" >"$work/out" 2>"$work/err"
rc=$?
check '[[ $rc -eq 0 ]]' "simulate: exit $rc: $(shown "$work/err")"
check '[[ ! -s $work/err ]]' "simulate in a pipe wrote on stderr: $(shown "$work/err")"
check '! has_escape "$work/out"' "simulate in a pipe: escape codes on stdout"
check 'grep -q "^simulation " "$work/out"' "no simulate summary"
finish "simulate in a pipe: no progress, no colour"

"$kvreplay" compare "$work/base.json" "$work/new.json" >"$work/out" 2>"$work/err"
check '! has_escape "$work/out" && [[ ! -s $work/err ]]' "compare in a pipe: escape codes or stderr"
NO_COLOR= "$kvreplay" replay traces/quickstart.jsonl >"$work/out" 2>"$work/err"
check '! has_escape "$work/out"' "NO_COLOR empty, in a pipe: escape codes"
finish "compare and summary in a pipe: no colour"

# Progress in a pipe (CI logs): a plain line each time the share of the input read
# passes a multiple of 10%, with the percentage and an ETA; only after the run has
# taken 10 s, so a short run prints nothing. KVREPLAY_PROGRESS=log shows the lines
# from the start (whatever the run's length), =off never.
"$kvreplay" replay "$work/events.jsonl" --check off >"$work/out" 2>"$work/err"
check '[[ ! -s $work/err ]]' "a short replay of a file in a pipe wrote on stderr: $(shown "$work/err")"
for command in replay validate; do
  args=(--check off)
  [[ $command == validate ]] && args=()
  KVREPLAY_PROGRESS=log "$kvreplay" $command "$work/events.jsonl" "${args[@]}" >"$work/out" 2>"$work/err"
  rc=$?
  check '[[ $rc -eq 0 ]]' "$command with KVREPLAY_PROGRESS=log: exit $rc"
  check '! grep -q $'"'"'[\r\033]'"'"' "$work/err"' "$command: carriage returns or escapes in a log: $(shown "$work/err")"
  check '[[ $(grep -cvE "^kvreplay $command: [0-9,]+ events \([0-9,]+ events/s\), [0-9]+%(, ETA [0-9.]+ (s|min|h))?\$" "$work/err") -eq 0 ]]' \
    "$command: a line not of progress: $(shown "$work/err")"
  mapfile -t percents < <(sed -E 's/.*, ([0-9]+)%.*/\1/' "$work/err")
  check '((${#percents[@]} >= 5))' "$command: ${#percents[@]} progress lines for a 637 KB trace: $(shown "$work/err")"
  previous=0
  for p in "${percents[@]}"; do  # one line a step of 10%, in order, never 0% or 100%
    check '((p / 10 > previous / 10 && p < 100))' "$command: ${p}% after ${previous}%"
    previous=$p
  done
done
gzip -c "$work/events.jsonl" >"$work/events.jsonl.gz"
KVREPLAY_PROGRESS=log "$kvreplay" replay - --check off <"$work/events.jsonl.gz" >/dev/null 2>"$work/err"
check 'grep -qE "^kvreplay replay: .*, [0-9]+%" "$work/err"' "gzip on stdin from a file: no progress: $(shown "$work/err")"
KVREPLAY_PROGRESS=log "$kvreplay" simulate "$work/requests.jsonl" --kv-memory 64MiB >"$work/out" 2>"$work/err"
check 'grep -qE "^kvreplay simulate: [0-9,]+ requests, [0-9,]+ finished, virtual time [0-9.]+ s, [0-9]+%" "$work/err"' \
  "simulate with KVREPLAY_PROGRESS=log: $(shown "$work/err")"
KVREPLAY_PROGRESS=log bash "$work/slow_replay.sh" >"$work/out" 2>"$work/err"
check '[[ ! -s $work/err ]]' "reading a pipe, the fraction is unknown: $(shown "$work/err")"
KVREPLAY_PROGRESS=log "$kvreplay" replay "$work/events.jsonl" -q >"$work/out" 2>"$work/err"
check '[[ ! -s $work/out && ! -s $work/err ]]' "--quiet with KVREPLAY_PROGRESS=log: $(shown "$work/err")"
finish "progress in a pipe: a line every 10% with an ETA, none for short runs, pipes or --quiet"

# --quiet: nothing on stdout (and, in a pipe, nothing on stderr either).
bash "$work/slow_replay.sh" --quiet >"$work/out" 2>"$work/err"
check '[[ ! -s $work/out && ! -s $work/err ]]' "replay --quiet: $(shown "$work/out")"
bash "$work/slow_simulate.sh" -q >"$work/out" 2>"$work/err"
check '[[ ! -s $work/out && ! -s $work/err ]]' "simulate -q: $(shown "$work/out")"
"$kvreplay" plan "$work/requests.jsonl" --kv-memory 64MiB --no-search -q >"$work/out" 2>"$work/err"
check '[[ $? -eq 0 && ! -s $work/out && ! -s $work/err ]]' "plan -q: $(shown "$work/out")"
"$kvreplay" compare "$work/base.json" "$work/new.json" --quiet >"$work/out" 2>"$work/err"
check '[[ $? -eq 0 && ! -s $work/out && ! -s $work/err ]]' "compare --quiet: $(shown "$work/out")"
finish "--quiet on replay, simulate, plan and compare"

# --help with an example on every subcommand the top-level help lists.
"$kvreplay" --help >"$work/help"
mapfile -t subcommands < <(awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }
                                on && /^[^ ]/ { on = 0 }' "$work/help")
check '((${#subcommands[@]} >= 6))' "top-level help lists ${#subcommands[@]} subcommands"
for required in replay validate simulate plan convert compare; do
  check '[[ " ${subcommands[*]} " == *" '"$required"' "* ]]' "top-level help lacks $required"
done
for sub in "${subcommands[@]}"; do
  "$kvreplay" "$sub" --help >"$work/out" 2>&1
  rc=$?
  check '[[ $rc -eq 0 ]]' "$sub --help: exit $rc"
  check 'grep -q "^Examples\?:" "$work/out" && grep -q "^  kvreplay '"$sub"'" "$work/out"' \
    "$sub --help has no example of kvreplay $sub"
done
check 'grep -q "^  kvreplay" "$work/help"' "top-level help has no example"
finish "--help with an example on every subcommand (${subcommands[*]})"

# ---------------------------------------------------------------- a terminal
tool=${KVREPLAY_TERMINAL_TOOL:-}
if [[ -z $tool ]]; then
  if command -v script >/dev/null && script --version 2>/dev/null | grep -q util-linux; then
    tool=script
  elif command -v tmux >/dev/null; then
    tool=tmux
  else
    tool=none
  fi
fi

# in_terminal OUT COMMAND...: runs the command with a pty as stdin, stdout and stderr
# (environment as given), leaves what the terminal received in OUT (CR LF line ends),
# and returns its exit status.
in_terminal() {
  local out=$1
  shift
  printf '%q ' "$@" >"$work/command.sh"
  case $tool in
    script)
      script -qec "bash $work/command.sh" /dev/null </dev/null >"$out"
      ;;
    tmux)
      rm -f "$work/tmux.rc"
      # The command waits until the pane's output is piped to the file.
      tmux -L "$tmux_socket" new-session -d -x 200 -y 50 \
        "sleep 0.5; bash $work/command.sh; echo \$? >$work/tmux.rc"
      tmux -L "$tmux_socket" pipe-pane -o "cat >$out"
      local waited=0
      while [[ ! -s $work/tmux.rc ]] && ((waited < 600)); do
        sleep 0.1
        waited=$((waited + 1))
      done
      sleep 0.2
      tmux -L "$tmux_socket" kill-server 2>/dev/null
      return "$(cat "$work/tmux.rc" 2>/dev/null || echo 99)"
      ;;
  esac
}

if [[ $tool == none ]]; then
  echo "SKIP: terminal tests (neither util-linux script nor tmux is installed)"
  skipped=1
else
  # Progress on a terminal, erased before the summary; colour in the summary.
  in_terminal "$work/tty" env -u NO_COLOR TERM=xterm bash "$work/slow_replay.sh"
  rc=$?
  text=$(cat "$work/tty")
  check '[[ $rc -eq 0 ]]' "replay on a terminal: exit $rc"
  check '[[ $text == *$'"'"'\r'"'"'"replay: "*" events ("*" events/s)"* ]]' \
    "no progress line: $(shown "$work/tty")"
  check '[[ $text == *"events/s)"*$'"'"'\r'"'"'"   "*$'"'"'\r'"'"'"kvreplay: - (kvtrace-jsonl, 20200 events) -> "* ]]' \
    "the progress line is not erased before the summary: $(shown "$work/tty")"
  draws=$(grep -o "replay: [0-9,]* events" "$work/tty" | wc -l)
  check '((draws >= 1 && draws <= 10))' "$draws progress redraws for a ~1 s run (at most ~5 a second)"
  check 'grep -q $'"'"'\033\[32mok\033\[0m'"'"' "$work/tty"' "no colour in the summary: $(shown "$work/tty")"
  finish "replay on a terminal: progress line and colour"

  in_terminal "$work/tty" env NO_COLOR=1 TERM=xterm bash "$work/slow_replay.sh"
  check '! has_escape "$work/tty"' "NO_COLOR=1: escape codes: $(shown "$work/tty")"
  check 'grep -q "events/s)" "$work/tty"' "NO_COLOR=1 should keep the progress line"
  in_terminal "$work/tty" env NO_COLOR= TERM=xterm "$kvreplay" replay traces/quickstart.jsonl
  check 'has_escape "$work/tty"' "NO_COLOR empty must not disable colour"
  in_terminal "$work/tty" env -u NO_COLOR TERM=dumb "$kvreplay" replay traces/quickstart.jsonl
  check '! has_escape "$work/tty"' "TERM=dumb: escape codes"
  finish "NO_COLOR (non-empty disables colour) and TERM=dumb"

  in_terminal "$work/tty" env -u NO_COLOR TERM=xterm KVREPLAY_PROGRESS=off bash "$work/slow_replay.sh"
  check '! grep -q "events/s)" "$work/tty"' "KVREPLAY_PROGRESS=off on a terminal: $(shown "$work/tty")"
  in_terminal "$work/tty" env -u NO_COLOR TERM=xterm bash "$work/slow_replay.sh" --quiet
  check '[[ ! -s $work/tty ]]' "replay --quiet on a terminal printed: $(shown "$work/tty")"
  in_terminal "$work/tty" env -u NO_COLOR TERM=xterm bash "$work/slow_simulate.sh" --quiet
  check '[[ ! -s $work/tty ]]' "simulate --quiet on a terminal printed: $(shown "$work/tty")"
  finish "--quiet on a terminal: no progress either"

  in_terminal "$work/tty" env -u NO_COLOR TERM=xterm bash "$work/slow_simulate.sh"
  text=$(cat "$work/tty")
  check '[[ $text == *$'"'"'\r'"'"'"simulate: "*" requests, "*" finished, virtual time "*" s"* ]]' \
    "no simulate progress: $(shown "$work/tty")"
  check 'grep -q $'"'"'\033\[1msimulation\033\[0m'"'"' "$work/tty"' "no colour in the simulate summary"
  finish "simulate on a terminal: progress line and colour"

  # stdout piped, stderr a terminal: progress yes, colour no.
  printf 'bash %q | cat\n' "$work/slow_replay.sh" >"$work/piped.sh"
  in_terminal "$work/tty" env -u NO_COLOR TERM=xterm bash "$work/piped.sh"
  check 'grep -q "events/s)" "$work/tty"' "no progress with stdout piped: $(shown "$work/tty")"
  check '! has_escape "$work/tty"' "colour with stdout piped"
  finish "stdout piped on a terminal: progress, no colour"

  in_terminal "$work/tty" env -u NO_COLOR TERM=xterm "$kvreplay" compare \
    "$work/lower_peak.json" "$work/base.json"
  check 'grep -q $'"'"'\033\[1;31mREGRESSED\033\[0m'"'"' "$work/tty"' \
    "no coloured REGRESSED in the compare table: $(shown "$work/tty")"
  in_terminal "$work/tty" env NO_COLOR=yes TERM=xterm "$kvreplay" compare \
    "$work/lower_peak.json" "$work/base.json"
  check '! has_escape "$work/tty" && grep -q REGRESSED "$work/tty"' "NO_COLOR compare table"
  finish "compare on a terminal: colour unless NO_COLOR"
fi

echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
