#!/usr/bin/env bash
# Every example runs as written (SPEC 6; README), from the repository root.
#
# The examples are extracted, never listed here:
#   - from `kvreplay --help` and `kvreplay COMMAND --help` for every command the
#     top-level help lists: the two-space-indented lines under "Example:" or
#     "Examples:" (a line ending in a backslash goes on on the next one);
#   - from README.md and traces/README.md: every line of a fenced code block that
#     runs kvreplay (at its start, or after a pipe, `&&` or `;`).
# Each source's examples run in order, as `bash -o pipefail -c LINE`, in a fresh
# scratch copy of the repository (so an example may read what an earlier one of
# the same source wrote, and none writes into the checkout), with the binary under
# test on PATH as `kvreplay` and standard input from /dev/null. Each must exit 0,
# unless `expected` below says otherwise and why. Examples that name ../shared run
# when the checkout has ../shared/traces beside it, and are skipped (saying so)
# otherwise; `kvreplay kernels` on the default CUDA backend is skipped on a machine
# with a device (scripts/gpu-check times it there) and must exit 2 saying why
# without one.
#
# Usage: run_examples_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
if [[ ! -x $kvreplay ]]; then
  echo "not an executable: $kvreplay" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-examples.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT

# Examples that exit with something other than 0 on purpose: the exact line, then
# the exit code and why, as "CODE|why".
declare -A expected=(
  ["kvreplay compare fifo.json lifo.json --quiet"]="1|README: an allocator change that regresses the layout"
)
# Examples left out, with the reason: the exact line. Each must still exist, so
# the list cannot go stale. (None today: the published-figure reproductions on
# ../shared take seconds.)
declare -A excluded=()

mkdir -p "$work/bin" "$work/pristine/repo"
ln -s "$kvreplay" "$work/bin/kvreplay"
# The repository's files, build outputs left out: what git tracks or would track
# (a checkout), else (no git) the folder the examples read.
if (cd "$root" && git ls-files -z -co --exclude-standard >"$work/files" 2>/dev/null) &&
  [[ -s $work/files ]]; then
  (cd "$root" && tar --null -T "$work/files" --ignore-failed-read -cf - 2>/dev/null) |
    tar -C "$work/pristine/repo" -xf - || exit 2
else
  cp -R "$root/traces" "$work/pristine/repo/" || exit 2
fi
has_shared=0
if [[ -d $root/../shared/traces ]]; then
  has_shared=1
  ln -s "$(cd "$root/../shared" && pwd)" "$work/pristine/shared"
fi
has_device=0
"$kvreplay" --version | grep -q "device(s)" && has_device=1

# help_examples FILE: the example lines of a --help text, one a line.
help_examples() {
  awk '
    /^Examples?:[[:space:]]*$/ { on = 1; next }
    on && /^  / {
      line = $0
      sub(/^[[:space:]]+/, "", line)
      command = continued ? command " " line : line
      if (command ~ /\\$/) { sub(/[[:space:]]*\\$/, "", command); continued = 1; next }
      continued = 0
      print command
      next
    }
    { on = 0; continued = 0 }
  ' "$1"
}
# readme_examples FILE: the lines of its fenced code blocks that run kvreplay.
readme_examples() {
  awk '
    /^[[:space:]]*```/ { on = !on; next }
    on && /(^|[|;&][[:space:]]*)kvreplay[[:space:]]/ {
      line = $0
      sub(/^[[:space:]]+/, "", line)
      print line
    }
  ' "$1"
}

total=0 skipped=0
# run_examples SOURCE FILE: runs the examples listed in FILE, one test each.
run_examples() {
  local source=$1 list=$2 line scratch want rc reason
  scratch=$work/run/$source
  rm -rf "$scratch"
  mkdir -p "$scratch"
  cp -R "$work/pristine/." "$scratch/"
  cat "$list" >>"$work/all"
  while IFS= read -r line; do
    [[ -z $line ]] && continue
    total=$((total + 1))
    if [[ -n ${excluded[$line]:-} ]]; then
      echo "SKIP ($source): $line: ${excluded[$line]}"
      skipped=$((skipped + 1))
      continue
    fi
    if [[ $line == *../shared/* ]] && ((!has_shared)); then
      echo "SKIP ($source): $line: needs ../shared/traces beside the checkout"
      skipped=$((skipped + 1))
      continue
    fi
    want=0
    reason=
    if [[ -n ${expected[$line]:-} ]]; then
      want=${expected[$line]%%|*}
      reason=${expected[$line]#*|}
    fi
    if [[ $line =~ (^|[|;&][[:space:]]*)kvreplay[[:space:]]+kernels ]] &&
      [[ $line != *"--backend cpu"* && $line != *--help* ]]; then
      if ((has_device)); then
        echo "SKIP ($source): $line: times the GPU (scripts/gpu-check runs it)"
        skipped=$((skipped + 1))
        continue
      fi
      want=2
      reason="no CUDA device here"
    fi
    (cd "$scratch/repo" && PATH=$work/bin:$PATH bash -o pipefail -c "$line" \
      </dev/null >"$work/out" 2>"$work/err")
    rc=$?
    check '[[ $rc -eq $want ]]' \
      "exit $rc, expected $want${reason:+ ($reason)}: $(head -c 600 "$work/err")"
    if [[ $reason == "no CUDA device here" ]]; then
      check 'grep -qi "cuda" "$work/err"' "no line saying why: $(head -c 600 "$work/err")"
    fi
    finish "$source: $line"
  done <"$list"
}

# --help: the top level and every command it lists.
"$kvreplay" --help >"$work/help" 2>&1
mapfile -t commands < <(awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }
                             on && /^[^ ]/ { on = 0 }' "$work/help")
check '((${#commands[@]} >= 7))' "the top-level help lists ${#commands[@]} commands"
finish "the top-level help lists the commands"
help_examples "$work/help" >"$work/list.top"
check '[[ -s $work/list.top ]]' "kvreplay --help shows no example"
finish "kvreplay --help has examples"
run_examples "kvreplay --help" "$work/list.top"
for command in "${commands[@]}"; do
  "$kvreplay" "$command" --help >"$work/help.$command" 2>&1
  help_examples "$work/help.$command" >"$work/list.$command"
  check 'grep -q "kvreplay $command" "$work/list.$command"' \
    "kvreplay $command --help shows no example of kvreplay $command"
  finish "kvreplay $command --help has examples"
  run_examples "kvreplay $command --help" "$work/list.$command"
done

# The READMEs.
for readme in README.md traces/README.md; do
  readme_examples "$root/$readme" >"$work/list.readme"
  check '[[ -s $work/list.readme ]]' "$readme: no kvreplay command found"
  finish "$readme has examples"
  run_examples "$readme" "$work/list.readme"
done

for line in "${!excluded[@]}" "${!expected[@]}"; do
  check 'grep -qxF -- "$line" "$work/all"' "listed above but no longer an example: $line"
  finish "listed example still exists: $line"
done

echo "$total examples: $((total - skipped)) run, $skipped skipped"
echo "$passed passed, $failed failed"
((failed == 0))
