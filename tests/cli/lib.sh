# Shared by the CLI test scripts (sourced): a test records problems with
# `check`, then `finish NAME` counts it as passed or failed and prints the
# problems of a failed one. Each script prints "N passed, M failed" last.
passed=0
failed=0
problems=()  # of the current test
check() {  # check CONDITION_TEXT WHAT: records a problem when the condition is false
  if ! eval "$1"; then problems+=("$2"); fi
}
finish() {  # finish NAME
  if ((${#problems[@]} == 0)); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $1"
    local p
    for p in "${problems[@]}"; do echo "    $p"; done
  fi
  problems=()
}

# cli_args NAME... -- "$@": the script's arguments, one per NAME, each set as
# that variable and made absolute (the scripts cd about); a wrong count prints
# the usage and exits 2.
cli_args() {
  local names=()
  while [[ $1 != -- ]]; do names+=("$1"); shift; done
  shift
  if [[ $# -ne ${#names[@]} ]]; then
    echo "usage: $(basename "$0") ${names[*]^^} (KVREPLAY: the binary; ROOT: the repository)" >&2
    exit 2
  fi
  local name value
  for name in "${names[@]}"; do
    value=$1
    shift
    [[ $value == /* ]] || value=$PWD/$value
    printf -v "$name" '%s' "$value"
  done
}

# Running the command under test. Each script sets `work` (its temporary folder)
# and, for `run`, `kvreplay`; optionally
#   run_timeout  seconds before the command is ended (rc 124; default none)
#   run_out, run_err  where stdout and stderr go (default $work/out, $work/err)
#   before_run   a function called before every run (to remove stale outputs)
# run_cmd COMMAND ARGS...: runs it; sets rc.
run_cmd() {
  if declare -F before_run >/dev/null; then before_run; fi
  local out=${run_out:-$work/out} err=${run_err:-$work/err}
  if [[ -n ${run_timeout:-} ]]; then
    timeout -k 5 "$run_timeout" "$@" >"$out" 2>"$err"
  else
    "$@" >"$out" 2>"$err"
  fi
  rc=$?
}
# run ARGS...: runs kvreplay ARGS...; sets rc.
run() { run_cmd "$kvreplay" "$@"; }
# err_text [BYTES]: the start of the last run's stderr (600 bytes) on one line.
err_text() { head -c "${1:-600}" "${run_err:-$work/err}" | tr '\n' '|'; }
# key FILTER: jq's raw answer from $work/report.json.
key() { jq -r "$1" "$work/report.json"; }

# trace_lines N M: N, or M under the sanitizers (KVREPLAY_SANITIZED=1, which CTest
# sets in a sanitizer build, where every run is many times slower): how many
# lines of a trace a slow script runs. The checks are the same either way.
trace_lines() {
  if [[ ${KVREPLAY_SANITIZED:-} == 1 ]]; then echo "$2"; else echo "$1"; fi
}
