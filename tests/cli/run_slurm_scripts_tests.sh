#!/usr/bin/env bash
# scripts/slurm/ passes arguments as data, without a cluster: the words after
# `--`, the --out folder and the binary's path reach kvreplay byte for byte
# through run-local (its shards run as background jobs of bash, no GNU
# parallel) and through submit-plan (a stub `sbatch` on PATH records its argv
# and runs the jobs as Slurm would, filename patterns of --output included):
# quotes, $(...), backticks, {}, {= perl =}, :::, %, a newline, an empty word.
# Nothing they hold is run (no PWNED file appears). A `%` in --out is not an
# sbatch pattern (submit-plan doubles it); a backslash, which Slurm would drop,
# is refused (exit 2, nothing submitted). run-local with the real binary writes
# the unsharded plan's files byte for byte; a failing shard stops the run
# (exit 1, its log shown, no plan) and starts no further shard; `--kvreplay
# NAME` runs the NAME it checked in the current folder, not one on PATH.
#
# Usage: run_slurm_scripts_tests.sh KVREPLAY_BINARY REPO_ROOT
set -uo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_args kvreplay root -- "$@"
root=$(cd "$root" && pwd) || exit 2

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-slurm-scripts.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
run_local=$root/scripts/slurm/run-local
submit_plan=$root/scripts/slurm/submit-plan

# Words that a shell, GNU parallel's templates or sbatch's filename patterns
# would read: each must arrive as it is.
# shellcheck disable=SC2016,SC1003 # meant literally
hostile=(
  'x{= system("touch PWNED") =}' '{}' '{1}' '{#}' '{%}' '{/}' ':::' '::::' ':::+'
  '$(touch PWNED-dollar)' '`touch PWNED-backtick`' "it's" '"q"' ';touch PWNED-semi'
  '| touch PWNED-pipe' '> PWNED-redirect' '*' '?' '~' '%' '%a' '%j' '%%' '50%'
  'a b  c' $'line\nbreak' $'tab\there' '\' '\n' '' ' ' '-' '--' '-j' '--shard'
)
# The folder and the binary's folder hold what would be read specially, too.
# shellcheck disable=SC2016 # meant literally
odd='o {} {= system("touch PWNED-dir") =} ::: $(x) `y` 50%a %j %%'

# A stub kvreplay: writes its argv, NUL-separated, to $STUB_ARGV/N (N counts
# its runs), creates the files --report and --html name, and exits
# $STUB_FAIL_RC when --shard is $STUB_FAIL_SHARD.
stub_dir="$work/bin $odd"
mkdir -p "$stub_dir"
stub=$stub_dir/kvreplay
cat >"$stub" <<'EOF'
#!/usr/bin/env bash
n=$(mktemp "$STUB_ARGV/run.XXXXXX")
printf '%s\0' "$@" >"$n"
shard='' prev=''
for a in "$@"; do
  case $prev in
    --report|--html) : >"$a" ;;
    --shard) shard=$a ;;
  esac
  prev=$a
done
if [[ -n ${STUB_FAIL_SHARD:-} && $shard == "$STUB_FAIL_SHARD/"* ]]; then
  echo "stub: shard $shard fails as told" >&2
  exit "${STUB_FAIL_RC:-2}"
fi
[[ $1 == plan-merge ]] && echo "stub table"
exit 0
EOF
chmod +x "$stub"

# argv_of FILE: the NUL-separated words of FILE, as printf %q, one a line.
argv_of() {
  local word
  while IFS= read -r -d '' word; do printf '%q\n' "$word"; done <"$1"
}
# expected WORDS...: the same rendering of WORDS.
expected() {
  local word
  for word in "$@"; do printf '%q\n' "$word"; done
}
find_run() {  # find_run WORD1 WORD2: prints the file of the stub run whose argv holds both words
  # The words are read whole before grep sees them: `argv_of | grep -q` under
  # pipefail fails when grep matches and exits while argv_of still writes (SIGPIPE),
  # which a loaded machine made happen (a hostile word is --shard itself).
  local f words
  for f in "$STUB_ARGV"/run.*; do
    words=$(argv_of "$f")
    if grep -qxF -- "$(printf '%q' "$1")" <<<"$words" &&
      grep -qxF -- "$(printf '%q' "$2")" <<<"$words"; then
      echo "$f"
      return
    fi
  done
}
no_pwned() {  # no_pwned: nothing under $work named PWNED* (removed, for the next case)
  local found
  found=$(find "$work" -name 'PWNED*' | head -3 | tr '\n' ' ')
  check "[[ -z \"\$found\" ]]" "a word was run as a command: $found"
  find "$work" -name 'PWNED*' -delete
}

# run_local_case NAME OUT KVREPLAY: run-local with the hostile words, then
# every word must have reached every shard and the merge as it is.
export STUB_ARGV=$work/argv
mkdir -p "$work/cwd" "$work/plain bin"
cp "$stub" "$work/plain bin/kvreplay"
run_local_case() {
  local name=$1 out=$2 bin=$3 i f want
  rm -rf "$STUB_ARGV" && mkdir -p "$STUB_ARGV"
  (cd "$work/cwd" && "$run_local" --shards 3 --jobs 2 --out "$out" --kvreplay "$bin" -- \
    "${hostile[@]}") >"$work/stdout" 2>"$work/stderr"
  rc=$?
  check "[[ $rc == 0 ]]" "run-local exits $rc: $(head -c 600 "$work/stderr")"
  for i in 1 2 3; do
    f=$(find_run --shard "$i/3")
    want=$(expected plan "${hostile[@]}" --shard "$i/3" --report "$out/part-$i.json" -j 1 -q)
    check "[[ -n '$f' && \$(argv_of '$f') == \"\$want\" ]]" \
      "shard $i's words differ: got $([[ -n $f ]] && argv_of "$f" | head -c 400 | tr '\n' ' ')"
    check "[[ -e \"\$out/shard-$i.log\" ]]" "shard $i left no shard-$i.log in the --out folder"
  done
  f=$(find_run plan-merge --html)
  want=$(expected plan-merge "$out/part-1.json" "$out/part-2.json" "$out/part-3.json" \
    --report "$out/plan.json" --html "$out/plan.html")
  check "[[ -n '$f' && \$(argv_of '$f') == \"\$want\" ]]" "the merge's words differ"
  check "[[ \$(cat \"\$out/plan.txt\" 2>/dev/null) == 'stub table' ]]" "no plan.txt in the --out folder"
  check "[[ \$(ls '$STUB_ARGV' | wc -l) == 4 ]]" \
    "the binary ran $(ls "$STUB_ARGV" | wc -l) times, not 3 shards and a merge"
  no_pwned
  finish "$name"
}
# The words after --, with a plain folder and binary (the issue's repro).
run_local_case run_local_args_are_data "$work/plain" "$work/plain bin/kvreplay"
# The folder and the binary's path hold the same kind of words.
out="$work/$odd"
run_local_case run_local_paths_are_data "$out" "$stub"

# --- run-local, a failing shard: exit 1, its log shown, no plan; with --jobs 1
# the shards after it never start.
rm -rf "$STUB_ARGV" && mkdir -p "$STUB_ARGV"
fout="$work/fail"
STUB_FAIL_SHARD=2 "$run_local" --shards 4 --jobs 1 --out "$fout" --kvreplay "$work/plain bin/kvreplay" -- \
  trace.csv >"$work/stdout" 2>"$work/stderr"
rc=$?
check "[[ $rc == 1 ]]" "run-local with a failing shard exits $rc, not 1"
check "grep -qF 'shard 2/4 fails as told' '$work/stderr'" \
  "run-local does not show the failed shard's log: $(head -c 300 "$work/stderr")"
check "[[ ! -e \"\$fout/plan.txt\" && ! -e \"\$fout/plan.json\" ]]" "a plan was written after a shard failed"
check "[[ ! -e \"\$fout/shard-3.log\" && ! -e \"\$fout/shard-4.log\" ]]" "shards ran after one failed"
check "[[ \$(ls '$STUB_ARGV' | wc -l) == 2 ]]" "the binary ran $(ls "$STUB_ARGV" | wc -l) times, not 2"
finish run_local_failing_shard_stops

# --- run-local's usage errors: exit 2, one reason.
usage_case() {  # usage_case WHY ARGS...
  local why=$1
  shift
  "$run_local" "$@" >"$work/stdout" 2>"$work/stderr"
  rc=$?
  check "[[ $rc == 2 ]] && grep -qF -e \"\$why\" '$work/stderr'" \
    "run-local $*: exit $rc, expected 2 and '$why': $(head -c 300 "$work/stderr")"
}
plain="$work/plain bin/kvreplay"
mkdir -p "$work/earlier" && : >"$work/earlier/part-1.json"
usage_case "--jobs needs a positive whole number" --shards 2 --jobs 0 --out "$work/u" --kvreplay "$plain" -- t
usage_case "--shards needs a positive whole number" --shards x --out "$work/u" --kvreplay "$plain" -- t
usage_case "no trace" --shards 2 --out "$work/u" --kvreplay "$plain" --
usage_case "earlier run's part-1.json" --shards 3 --out "$work/earlier" --kvreplay "$plain" -- t
finish run_local_usage

# --- run-local --kvreplay NAME (no slash) runs ./NAME, the file it checked, not
# a NAME found on PATH.
rm -rf "$STUB_ARGV" && mkdir -p "$STUB_ARGV" "$work/path"
printf '#!/bin/sh\ntouch "%s/PWNED-path"\n' "$work" >"$work/path/kvreplay"
chmod +x "$work/path/kvreplay"
(cd "$work/plain bin" && PATH=$work/path:$PATH "$run_local" --shards 1 --out "$work/bare" \
  --kvreplay kvreplay -- t) >"$work/stdout" 2>"$work/stderr"
rc=$?
check "[[ $rc == 0 ]]" "run-local --kvreplay kvreplay exits $rc: $(head -c 300 "$work/stderr")"
check "[[ \$(ls '$STUB_ARGV' | wc -l) == 2 ]]" "--kvreplay kvreplay did not run ./kvreplay"
no_pwned
finish run_local_binary_without_slash

# --- run-local with the real binary: the unsharded plan's files, byte for byte.
mkdir -p "$work/in put"
cp "$root/traces/requests/azure_conv.csv" "$work/in put/azure conv.csv"
# shellcheck disable=SC2054 # comma-separated lists of the plan's options
sweep=(--kv-memory 1GiB,2GiB,4GiB --page-tokens 16,32)
mkdir -p "$work/ref"
"$kvreplay" plan "$work/in put/azure conv.csv" "${sweep[@]}" --report "$work/ref/plan.json" \
  --html "$work/ref/plan.html" >"$work/ref/plan.txt" 2>"$work/ref/stderr"
rc=$?
check "[[ $rc == 0 ]]" "the unsharded plan exits $rc: $(head -c 300 "$work/ref/stderr")"
rout="$work/real {} 50%a"
"$run_local" --shards 3 --jobs 2 --out "$rout" --kvreplay "$kvreplay" -- \
  "$work/in put/azure conv.csv" "${sweep[@]}" >"$work/stdout" 2>"$work/stderr"
rc=$?
check "[[ $rc == 0 ]]" "run-local exits $rc: $(head -c 600 "$work/stderr")"
for file in plan.json plan.html plan.txt; do
  check "cmp -s '$work/ref/$file' \"\$rout/$file\"" "run-local's $file differs from the unsharded plan's"
done
finish run_local_real_plan

# --- submit-plan through a stub sbatch that runs the jobs as Slurm would.
# It records each call's argv (NUL-separated) in $SBATCH_ARGV/call-N, prints
# job id 100+N, and runs the script at once: an --array=1-N job once per task
# with SLURM_ARRAY_TASK_ID, a job whose afterok dependency failed not at all.
# Its output goes where Slurm's filename pattern says: a backslash anywhere
# turns patterns off (and is dropped), %% is %, %a the task, %A and %j the id.
mkdir -p "$work/sbin"
cat >"$work/sbin/sbatch" <<'EOF'
#!/usr/bin/env bash
n=1
while [[ -e $SBATCH_ARGV/call-$n ]]; do n=$((n + 1)); done
printf '%s\0' "$@" >"$SBATCH_ARGV/call-$n"
id=$((100 + n))
array='' output="slurm-%j.out" chdir=$PWD dep=''
while [[ $1 == -* ]]; do
  case $1 in
    --array=*) array=${1#--array=} ;;
    --output=*) output=${1#--output=} ;;
    --chdir=*) chdir=${1#--chdir=} ;;
    --dependency=afterok:*) dep=${1#--dependency=afterok:} ;;
    --cpus-per-task=*) export SLURM_CPUS_PER_TASK=${1#--cpus-per-task=} ;;
  esac
  shift
done
script=$1
shift
# expand PATTERN TASK: Slurm's batch filename pattern (slurmstepd fname.c).
expand() {
  local p=$1 r='' c
  if [[ $p == *\\* ]]; then printf '%s' "${p//\\/}"; return; fi
  while [[ -n $p ]]; do
    c=${p:0:1}
    if [[ $c == % ]]; then
      case ${p:1:1} in
        %) r+=%; p=${p:2}; continue ;;
        a) r+=$2; p=${p:2}; continue ;;
        A|j) r+=$id; p=${p:2}; continue ;;
      esac
    fi
    r+=$c
    p=${p:1}
  done
  printf '%s' "$r"
}
[[ $output == /* ]] || output=$chdir/$output
if [[ -n $dep ]] && [[ -e $SBATCH_ARGV/failed-$dep ]]; then
  echo "$id"
  exit 0
fi
if [[ -n $array ]]; then
  for ((t = ${array%-*}; t <= ${array#*-}; t++)); do
    (cd "$chdir" && SLURM_ARRAY_TASK_ID=$t bash "$script" "$@") >"$(expand "$output" "$t")" 2>&1 ||
      : >"$SBATCH_ARGV/failed-$id"
  done
else
  (cd "$chdir" && bash "$script" "$@") >"$(expand "$output" '')" 2>&1 || : >"$SBATCH_ARGV/failed-$id"
fi
echo "$id"
EOF
chmod +x "$work/sbin/sbatch"
export SBATCH_ARGV=$work/sbatch-argv
rm -rf "$STUB_ARGV" && mkdir -p "$STUB_ARGV" "$SBATCH_ARGV"
sout="$work/slurm $odd"
(cd "$work/cwd" && PATH=$work/sbin:$PATH "$submit_plan" --shards 2 --out "$sout" --kvreplay "$stub" \
  --time 10 -- "${hostile[@]}") >"$work/stdout" 2>"$work/stderr"
rc=$?
check "[[ $rc == 0 ]]" "submit-plan exits $rc: $(head -c 600 "$work/stderr")"
check "grep -q '^shards: job 101 ' '$work/stdout' && grep -q '^merge: job 102 ' '$work/stdout'" \
  "submit-plan printed no job ids: $(head -c 300 "$work/stdout")"
# The array's sbatch words: its options, the script, then its arguments as given.
want=$(expected --parsable "--chdir=$work/cwd" --time=10 --job-name=kvreplay-plan --array=1-2 \
  --cpus-per-task=1 "--output=${sout//%/%%}/shard-%a.log" "$root/scripts/slurm/plan-shard.sbatch" \
  "$stub" 2 "$sout" "${hostile[@]}")
check "[[ \$(argv_of '$SBATCH_ARGV/call-1' 2>/dev/null) == \"\$want\" ]]" \
  "the array's sbatch words differ: got $(argv_of "$SBATCH_ARGV/call-1" | head -c 600 | tr '\n' ' ')"
want=$(expected --parsable "--chdir=$work/cwd" --time=10 --job-name=kvreplay-plan-merge \
  --dependency=afterok:101 --kill-on-invalid-dep=yes "--output=${sout//%/%%}/merge.log" \
  "$root/scripts/slurm/plan-merge.sbatch" "$stub" 2 "$sout")
check "[[ \$(argv_of '$SBATCH_ARGV/call-2' 2>/dev/null) == \"\$want\" ]]" \
  "the merge's sbatch words differ: got $(argv_of "$SBATCH_ARGV/call-2" | head -c 600 | tr '\n' ' ')"
for i in 1 2; do
  f=$(find_run --shard "$i/2")
  want=$(expected plan "${hostile[@]}" --shard "$i/2" --report "$sout/part-$i.json" -j 1 -q)
  check "[[ -n '$f' && \$(argv_of '$f') == \"\$want\" ]]" "array task $i's kvreplay words differ"
  check "[[ -e \"\$sout/shard-$i.log\" ]]" "array task $i's log is not \$out/shard-$i.log (a % of --out read as a pattern)"
done
check "[[ -e \"\$sout/merge.log\" ]]" "the merge's log is not in the --out folder"
check "[[ \$(cat \"\$sout/plan.txt\" 2>/dev/null) == 'stub table' ]]" "no plan.txt in the --out folder"
no_pwned
finish submit_plan_args_are_data

# --- submit-plan refuses a --out with a backslash: exit 2, nothing submitted or made.
rm -rf "$SBATCH_ARGV" && mkdir -p "$SBATCH_ARGV"
PATH=$work/sbin:$PATH "$submit_plan" --shards 2 --out "$work/back\\slash" --kvreplay "$stub" -- t \
  >"$work/stdout" 2>"$work/stderr"
rc=$?
check "[[ $rc == 2 ]] && grep -qF 'holds a backslash' '$work/stderr'" \
  "submit-plan --out with a backslash: exit $rc, expected 2 and 'holds a backslash': $(head -c 300 "$work/stderr")"
check "[[ -z \$(ls '$SBATCH_ARGV') ]]" "submit-plan called sbatch for a --out it cannot keep"
check "[[ ! -e '$work/back\\slash' ]]" "submit-plan made the --out folder it refused"
finish submit_plan_refuses_backslash

echo "$passed passed, $failed failed"
((failed == 0))
