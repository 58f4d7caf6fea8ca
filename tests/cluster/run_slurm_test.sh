#!/usr/bin/env bash
# A sharded plan on a real single-node Slurm cluster: starts munged, slurmctld
# and slurmd (Debian's packages) configured in a scratch folder, on ports of its
# own; submits a plan through scripts/slurm/submit-plan as a job array of 3
# shards and a dependent merge job; waits for both; checks that every array task
# wrote its part and its log and that the merge wrote plan.json, plan.html and
# plan.txt; and compares them byte for byte with the unsharded plan. Then: a plan
# whose shards fail cancels its merge job (no plan, nothing left queued); bad
# usage of submit-plan submits nothing; scripts/slurm/run-local (no Slurm)
# writes the same files as the cluster. The trace's path holds a space, so
# the plan's options are checked to reach every shard word for word; the
# folders hold a `%a`, which must stay itself in the logs' paths (not an
# sbatch pattern); the failing shards' bad value holds $(...), {} and %, and
# their log must quote it as given.
#
# Needs root (slurmd runs jobs as their user) and slurmctld, slurmd,
# slurm-client and munge (KVREPLAY_SLURM_TESTS=1 scripts/bootstrap).
# Without them the test says why and exits 77 (skipped), unless CI=true or
# KVREPLAY_SLURM_TESTS=1 (.ci/run sets both): then it fails. A cluster that
# does not start fails, with the tail of each daemon's log. The daemons are
# stopped by PID and waited for on every exit, and the scratch folder removed.
#
# Usage: run_slurm_test.sh KVREPLAY REPO_ROOT
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 KVREPLAY REPO_ROOT" >&2
  exit 2
fi
kvreplay=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$2" && pwd)
required=0
[[ ${CI:-} == true || ${KVREPLAY_SLURM_TESTS:-} == 1 ]] && required=1

# unavailable REASON: this machine cannot run the test: skipped, or failed where required.
unavailable() {
  if ((required)); then
    echo "FAIL: $1 (required here: CI=true or KVREPLAY_SLURM_TESTS=1)"
    exit 1
  fi
  echo "SKIP: $1"
  exit 77
}
missing=()
for tool in munged mungekey munge unmunge slurmctld slurmd sbatch squeue sinfo scancel; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
((${#missing[@]} == 0)) ||
  unavailable "not installed: ${missing[*]}; run KVREPLAY_SLURM_TESTS=1 scripts/bootstrap"
(($(id -u) == 0)) || unavailable "needs root to start slurmd and munged (running as $(id -un))"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-slurm.XXXXXX") || exit 2
# munged refuses a socket whose folders others cannot enter.
chmod 755 "$work"
mkdir -p "$work/munge" "$work/state" "$work/spool" "$work/in put" "$work/ref"
chmod 700 "$work/state" "$work/spool"

failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}
# logs: the tail of every daemon's and job's log, for a failure.
logs() {
  local log
  # A daemon's .out is its stderr: under -D, its log and what came before it.
  for log in "$work"/*.out "$work"/out*/*.log; do
    [[ -s $log ]] || continue
    echo "--- ${log#"$work"/} (last 15 lines)"
    tail -n 15 "$log"
  done
}
# cluster_fail REASON: the cluster did not come up, or lost a daemon.
cluster_fail() {
  echo "FAIL: $1"
  logs
  exit 1
}

pids=()  # the daemons, stopped in this order: slurmd, slurmctld, munged
declare -A daemon=()  # PID -> name
# stop PID: TERM, up to 10 s to exit, then KILL; waits for it (no zombie).
stop() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return; }
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
cleanup() {
  local i
  if [[ -n ${ctld_pid:-} ]] && kill -0 "$ctld_pid" 2>/dev/null; then
    # Jobs first, so that no job step outlives slurmd: cancel, then up to 20 s.
    scancel --quiet --user=root 2>/dev/null
    for ((i = 0; i < 40; i++)); do
      [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.5
    done
  fi
  local pid
  for pid in "${pids[@]}"; do stop "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP  # through cleanup, too

# A TCP port no socket uses (IPv4 or IPv6, /proc/net), below the ephemeral
# range: Slurm's defaults (6817, 6818) would clash with a cluster already here.
listening=$(awk 'NR > 1 { split($2, a, ":"); print strtonum("0x" a[2]) }' \
  /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
free_port() {
  local port
  while :; do
    port=$((10000 + RANDOM % 20000))
    grep -qx "$port" <<<"$listening" || { echo "$port"; return; }
  done
}
ctld_port=$(free_port)
listening+=$'\n'$ctld_port
slurmd_port=$(free_port)

# --- munge
socket=$work/munge/munge.socket
mungekey -c -k "$work/munge/munge.key" >"$work/mungekey.out" 2>&1 ||
  cluster_fail "mungekey could not create a key"
munged -F --key-file="$work/munge/munge.key" --socket="$socket" --pid-file="$work/munge/munged.pid" \
  --log-file="$work/munged.log" --seed-file="$work/munge/munged.seed" >"$work/munged.out" 2>&1 &
pids=($!)
daemon[$!]=munged
munge_ok=0
for ((i = 0; i < 100; i++)); do
  kill -0 "${pids[0]}" 2>/dev/null || cluster_fail "munged exited at start"
  if munge -n -S "$socket" 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1; then
    munge_ok=1
    break
  fi
  sleep 0.1
done
((munge_ok)) || cluster_fail "munged gave no credential in 10 s"

# --- slurm.conf: this host as controller and its only node, with every path in $work.
host=$(hostname -s)
cpus=$(nproc)
memory=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.8) }' /proc/meminfo)  # MiB, below the total
export SLURM_CONF=$work/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=kvreplay-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=kvreplay Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
# (No kill_invalid_depend: submit-plan's merge job asks for it itself.)

slurmctld -D >"$work/slurmctld.out" 2>&1 &
ctld_pid=$!
pids=("$ctld_pid" "${pids[@]}")
daemon[$ctld_pid]=slurmctld
slurmd -D >"$work/slurmd.out" 2>&1 &
pids=($! "${pids[@]}")
daemon[$!]=slurmd
start=$SECONDS
state=
for ((i = 0; i < 120; i++)); do
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || cluster_fail "${daemon[$pid]} exited at start"
  done
  state=$(sinfo -h -N -o %t 2>/dev/null)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || cluster_fail "the node is not idle after 60 s (sinfo: '${state:-no answer}')"
echo "cluster up in $((SECONDS - start)) s: $host, $cpus CPUs, ports $ctld_port/$slurmd_port"

# wait_jobs IDS: until none of the jobs (comma-separated ids) is pending,
# starting, running or completing, up to 150 s.
wait_jobs() {
  local i left pid
  for ((i = 0; i < 150; i++)); do
    left=$(squeue -h -r -j "$1" -t PD,CF,R,CG -o '%i %T %r' 2>&1) || cluster_fail "squeue: $left"
    [[ -z $left ]] && return 0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null || cluster_fail "${daemon[$pid]} exited while jobs ran"
    done
    sleep 1
  done
  cluster_fail "jobs $1 still queued after 150 s: $left"
}
# states ID: "TASK STATE" lines of a finished job or array, one per task (slurmctld
# keeps finished jobs for MinJobAge, 300 s by default).
states() {
  squeue -h -r -j "$1" -t all -o '%i %T' 2>&1 | sort
}

# --- the sharded plan on the cluster
cp "$root/traces/requests/azure_conv.csv" "$work/in put/azure conv.csv"
cd "$work" || exit 2
trace="in put/azure conv.csv"
# shellcheck disable=SC2054 # comma-separated lists of the plan's options
sweep=(--kv-memory 1GiB,2GiB,4GiB --page-tokens 16,32)
out="$work/out cluster 50%a"
if ! "$root/scripts/slurm/submit-plan" --shards 3 --out "$out" --kvreplay "$kvreplay" \
  --partition kvreplay --time 10 -- "$trace" "${sweep[@]}" >"$work/submit.txt" 2>&1; then
  cluster_fail "submit-plan failed: $(cat "$work/submit.txt")"
fi
cat "$work/submit.txt"
array=$(awk '$1 == "shards:" { print $3 }' "$work/submit.txt")
merge=$(awk '$1 == "merge:" { print $3 }' "$work/submit.txt")
[[ $array =~ ^[0-9]+$ && $merge =~ ^[0-9]+$ ]] ||
  cluster_fail "submit-plan printed no job ids: $(cat "$work/submit.txt")"
start=$SECONDS
wait_jobs "$array,$merge"
echo "array and merge done in $((SECONDS - start)) s"

got=$(states "$array" | tr '\n' ' ')
[[ $got == "${array}_1 COMPLETED ${array}_2 COMPLETED ${array}_3 COMPLETED " ]] ||
  fail "array tasks: '$got', expected tasks 1 to 3 COMPLETED"
got=$(states "$merge")
[[ $got == "$merge COMPLETED" ]] || fail "merge job: '$got', expected COMPLETED"
for i in 1 2 3; do
  [[ -s $out/part-$i.json ]] || fail "array task $i wrote no part-$i.json"
  [[ -e $out/shard-$i.log ]] || fail "array task $i left no shard-$i.log"
done
[[ -e $out/part-4.json || -e $out/shard-4.log ]] && fail "a 4th array task ran"
[[ -e $out/merge.log ]] || fail "the merge job left no merge.log"
"$kvreplay" plan "$trace" "${sweep[@]}" --report ref/plan.json --html ref/plan.html \
  >ref/plan.txt 2>ref/stderr || fail "the unsharded plan failed: $(head -c 500 ref/stderr)"
for file in plan.json plan.html plan.txt; do
  if [[ ! -s $out/$file ]]; then
    fail "the merge wrote no $file"
  elif ! cmp "ref/$file" "$out/$file"; then
    fail "the merged $file differs from the unsharded plan's"
  fi
done
((failed)) && logs

# --- shards that fail: the merge job is cancelled, not left pending.
bad="$work/out bad %j"
# shellcheck disable=SC2016 # meant literally
bogus='bogus $(touch PWNED) {} 50%a'
if "$root/scripts/slurm/submit-plan" --shards 2 --out "$bad" --kvreplay "$kvreplay" -- \
  "$trace" --kv-memory "$bogus" >"$work/submit-bad.txt" 2>&1; then
  array=$(awk '$1 == "shards:" { print $3 }' "$work/submit-bad.txt")
  merge=$(awk '$1 == "merge:" { print $3 }' "$work/submit-bad.txt")
  wait_jobs "$array,$merge"
  got=$(states "$array" | tr '\n' ' ')
  [[ $got == "${array}_1 FAILED ${array}_2 FAILED " ]] ||
    fail "failed shards: array tasks '$got', expected tasks 1 and 2 FAILED"
  got=$(states "$merge")
  [[ $got == "$merge CANCELLED" ]] || fail "failed shards: merge job '$got', expected CANCELLED"
  for file in part-1.json part-2.json plan.json plan.txt; do
    [[ -e $bad/$file ]] && fail "failed shards: $file was written"
  done
  grep -qF -e "'$bogus'" "$bad/shard-1.log" 2>/dev/null ||
    fail "failed shards: shard-1.log does not quote the value as given: $(head -c 300 "$bad/shard-1.log" 2>&1)"
  [[ -e $work/PWNED ]] && fail "failed shards: a word of the plan's options was run as a command"
else
  fail "submit-plan refused a plan whose error only the shards can see: $(cat "$work/submit-bad.txt")"
fi

# --- bad usage: exit 2, nothing submitted.
before=$(squeue -h -o %i | wc -l)
# usage WHY ARGS...: submit-plan ARGS must exit 2 saying WHY.
usage() {
  local why=$1 rc
  shift
  "$root/scripts/slurm/submit-plan" "$@" >"$work/usage.txt" 2>&1
  rc=$?
  if ((rc != 2)) || ! grep -qF -e "$why" "$work/usage.txt"; then
    fail "submit-plan $*: exit $rc, expected 2 and '$why': $(cat "$work/usage.txt")"
  fi
}
usage "positive whole number" --shards 0 --out "$work/u" --kvreplay "$kvreplay" -- "$trace"
usage "--out DIR is required" --shards 2 --kvreplay "$kvreplay" -- "$trace"
usage "no trace" --shards 2 --out "$work/u" --kvreplay "$kvreplay" --
usage "not an executable" --shards 2 --out "$work/u" --kvreplay /nonexistent -- "$trace"
usage "unknown option --bogus" --shards 2 --out "$work/u" --bogus -- "$trace"
usage "earlier run's part-1.json" --shards 2 --out "$out" --kvreplay "$kvreplay" -- "$trace"
(($(squeue -h -o %i | wc -l) == before)) || fail "bad usage of submit-plan submitted a job"

# --- the same plan without Slurm: run-local.
local_out="$work/out local 50%a {}"
if "$root/scripts/slurm/run-local" --shards 3 --out "$local_out" --kvreplay "$kvreplay" --jobs 2 -- \
  "$trace" "${sweep[@]}" >"$work/local.txt" 2>&1; then
  # (Not the parts: each records its own command line, --report included.)
  for file in plan.json plan.html plan.txt; do
    cmp "$out/$file" "$local_out/$file" || fail "run-local's $file differs from the cluster's"
  done
else
  fail "run-local failed: $(tail -c 600 "$work/local.txt")"
fi

if ((failed)); then
  echo "FAIL"
  exit 1
fi
echo "PASS: a 3-shard plan on Slurm, merged, is byte-identical to the unsharded plan"
