#!/bin/bash
# A real Slurm (scripts/slurm_cluster: slurmctld, one slurmd per emulated
# host, munged; installed when missing) running examples/slurm/train.sbatch
# on 2 nodes:
#   1. the job uninterrupted: the reference model.pt;
#   2. the rank on the second node SIGKILLed from outside once the
#      checkpoint of step 10 is there: bigbatch's supervisor, inside the
#      allocation, restarts the job across both nodes from the newest
#      checkpoint; model.pt byte-identical to the reference, restarts.json
#      names rank 1 on the second node;
#   3. the job requeued from outside (`scontrol requeue`, as Slurm does on
#      a lost node or a preemption) once the checkpoint of step 10 is
#      there: Slurm starts the script again (Restarts=1), it resumes from
#      the newest checkpoint; model.pt byte-identical. Slurm holds a
#      requeued job ~2 minutes before it may start again (its EligibleTime);
#      the test releases it at once (`scontrol update StartTime=now`), as
#      an operator would;
#   4. Slurm's warning (SIGUSR1 to the batch script) mid-epoch: the ranks
#      checkpoint at one step and stop, the job requeues itself, and the
#      requeued job continues from that step; model.pt byte-identical;
#   5. under srun, a worker lost for good (--min-workers 1): the job
#      finishes on the first node, srun given that node by name;
#   and no process of any job left on either node.
# Exit status 77 (CTest: skipped, never passed) only when Slurm's packages
# are absent and cannot be installed; a daemon that does not start fails.
#   slurm_test.sh BIGBATCH_BINARY CONFIG
set -u
here=$(cd "$(dirname "$0")" && pwd)
root="$here/../.."
if [ "${1:-}" != "--inside" ]; then
  [ "$(id -u)" = 0 ] || { echo "FAIL: needs root (daemons, network namespaces); CI runs as root"; exit 1; }
  bin=$(realpath "$1") config=$(realpath "$2")
  "$root/scripts/slurm_cluster" --hosts 2 --rate 1gbit -- "$0" --inside "$bin" "$config"
  status=$?
  [ "$status" = 77 ] && echo "slurm_test: skipped: Slurm's packages are not installed here (above)"
  exit "$status"
fi
bin=$2 config=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
read -ra nodes <<<"$SLURM_CLUSTER_NODES"
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
  echo "== slurmctld"; tail -n 20 "$SLURM_CLUSTER_LOGS/slurmctld.log"
  exit 1
}
# What the job's ranks need: the binary, root's permission for mpirun.
export BIGBATCH=$bin OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--set data.train_samples=4096 --set data.eval_samples=1000 --set train.epochs=2
      --set train.stop_at_target=false --set train.batch_size=128 --set ckpt.every_steps=5
      --set run.threads=1 --set comm.timeout_s=10)
# The example asks 2 CPUs a task; the emulated nodes have this process's
# CPUs (nproc: fewer under taskset), and a job asking more would pend.
cpus=$(nproc); [ "$cpus" -gt 2 ] && cpus=2
sbatch_job() {  # sbatch_job NAME [ARGS...]: submits the example; sets `job`
  local name=$1; shift
  job=$(sbatch --parsable --cpus-per-task="$cpus" -o "$dir/$name.out" \
        "$root/examples/slurm/train.sbatch" "$config" "$dir/$name" \
        "${args[@]}" "$@") || fail "sbatch refused the job"
}
# The ranks pause at step 12 (fault.kind = pause; the checkpoint of step 10
# written): what the test does to the job lands mid-training, on a machine
# of any speed. paused NAME: those arguments; wait_paused NAME [NEWER]:
# until both ranks' markers are there (newer than file NEWER).
paused() { mkdir -p "$dir/$1.pause"; echo "--set fault.kind=pause --set fault.rank=-1 --set fault.step=12 --set fault.pause_dir=$dir/$1.pause"; }
wait_paused() {
  for _ in $(seq 1 3000); do
    if [ -n "${2:-}" ]; then
      [ "$(find "$dir/$1.pause" -name 'paused-rank-*' -newer "$2" | wc -l)" -ge 2 ] && return 0
    else
      [ -f "$dir/$1.pause/paused-rank-0" ] && [ -f "$dir/$1.pause/paused-rank-1" ] && return 0
    fi
    sleep 0.1
  done
  fail "the ranks of $1 never paused"
}
state_of() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_job() {  # wait_job ID: until it has ended (requeues included); sets `state`
  for _ in $(seq 1 3000); do
    state=$(state_of "$1")
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) return 0 ;; esac
    # A job the partition can never run: fail now, naming why.
    scontrol show job "$1" 2>/dev/null | grep -q "Reason=PartitionConfig" &&
      fail "job $1 can never start: $(scontrol show job "$1" | grep -o 'Reason=[^ ]*')"
    sleep 0.1
  done
  fail "job $1 did not end within 300 s (state $state)"
}
# release JOB: lets a requeued job start at once, as an operator would
# (Slurm holds it ~2 minutes, and what that hold covers must be waited for
# here): every slurmstepd of the job's previous start gone from the nodes —
# a step's PMIx directory, named after the job and step, is removed only
# when its slurmstepd ends, seconds after the requeue, and the same step of
# the new start cannot be made beside it — and not within the second of
# the requeue: slurmd takes a credential made in the same second as the
# job's revocation for a revoked one (Slurm's timestamps are whole seconds).
release() {
  local requeued pid busy
  requeued=$(date +%s)
  for _ in $(seq 1 600); do
    busy=0
    for n in "${nodes[@]}"; do
      for pid in $(ip netns pids "$n" 2>/dev/null); do
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "^slurmstepd: \[$1\." && busy=1
      done
    done
    [ "$busy" = 0 ] && [ "$(date +%s)" -gt "$((requeued + 1))" ] && break
    sleep 0.1
  done
  [ "$busy" = 0 ] || fail "job $1's previous start still has a slurmstepd 60 s after its requeue"
  scontrol update JobId="$1" StartTime=now || fail "cannot release job $1's hold"
}
ranks_on() {  # the job's ranks in node N's namespace
  local pid
  for pid in $(ip netns pids "${nodes[$1]}" 2>/dev/null); do
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "bigbatch train" && echo "$pid"
  done
}

# 1. The reference.
sbatch_job reference
wait_job "$job"
[ "$state" = COMPLETED ] || fail "the reference job ended $state"
[ -f "$dir/reference/model.pt" ] || fail "the reference job wrote no model.pt"
echo "reference job $job: $state"

nothing_left() {
  local n
  for n in 0 1; do
    [ -z "$(ranks_on $n)" ] || fail "a rank of a job is left on ${nodes[$n]}"
  done
}

# 2. A rank on the second node killed: restarted inside the allocation
# (the first attempt pauses: fault.attempts = 1) — with each launcher:
# mpirun (Open MPI starts its daemons on the nodes with srun; a rank's
# parent is Open MPI's orted), and srun itself starting the ranks (PMIx; a
# rank's parent is Slurm's slurmstepd).
killed_case() {  # killed_case NAME PARENT [bigbatch train options...]
  local name=$1 parent=$2 step victim started v
  shift 2
  sbatch_job "$name" $(paused "$name") --set fault.attempts=1 "$@"
  wait_paused "$name"
  step=$(sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.pt$/\1/p' "$dir/$name/checkpoints/latest")
  victim=$(ranks_on 1)
  [ -n "$victim" ] || fail "no rank found on ${nodes[1]}"
  for v in $victim; do
    started=$(ps -o comm= -p "$(ps -o ppid= -p "$v" | tr -d ' ')")
    [ "$started" = "$parent" ] ||
      fail "$name: a rank on ${nodes[1]} (pid $v of: $victim; $(ps -o pid,ppid,args -p "$v")) was started by '$started', not $parent"
  done
  kill -9 $victim
  rm -f "$dir/$name.pause"/paused-rank-*
  echo "$name: SIGKILL to rank pid $victim (started by $started) on ${nodes[1]} after the checkpoint of step $step"
  wait_job "$job"
  [ "$state" = COMPLETED ] || fail "job $job ($name) ended $state after the kill"
  grep -q "restart 1 of 3 from the checkpoint of step" "$dir/$name.out" || fail "$name: no restart reported"
  cmp "$dir/reference/model.pt" "$dir/$name/model.pt" ||
    fail "job $job ($name): final weights differ from the uninterrupted job's"
  /usr/bin/python3 - "$dir/$name/restarts.json" <<'EOF' || fail "$name: restarts.json"
import json, sys
r = json.load(open(sys.argv[1]))
print("restarts.json:", r)
assert len(r) == 1 and r[0]["rank"] == 1 and r[0]["resumed_from_step"] >= 10, r
assert r[0]["steps_lost"] == r[0]["failed_at_step"] - r[0]["resumed_from_step"] >= 0, r
EOF
  nothing_left
  echo "job $job ($name): rank 1 killed after step $step, restarted inside the allocation, byte-identical"
}
killed_case killed orted
killed_case killed_srun slurmstepd --launcher srun

# 3. The job requeued: Slurm starts the script again, which resumes (and
# pauses again at step 12: released once its ranks say so).
sbatch_job requeued $(paused requeued)
wait_paused requeued
step=$(sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.pt$/\1/p' "$dir/requeued/checkpoints/latest")
touch "$dir/requeued.mark"
scontrol requeue "$job" || fail "scontrol requeue $job"
requeuedAt=$(date +%s.%N)
echo "job $job requeued after the checkpoint of step $step"
for _ in $(seq 1 600); do [ "$(state_of "$job")" = PENDING ] && break; sleep 0.05; done
scontrol show job "$job" | grep -o "EligibleTime=[^ ]*"
release "$job"
for _ in $(seq 1 1200); do grep -q "start 2 on" "$dir/requeued.out" 2>/dev/null && break; sleep 0.05; done
grep -q "start 2 on" "$dir/requeued.out" || fail "job $job was not started again"
wait_paused requeued "$dir/requeued.mark"
rm -f "$dir/requeued.pause"/paused-rank-*
echo "job $job started again $(echo "$(date +%s.%N) - $requeuedAt" | bc) s after the requeue"
wait_job "$job"
[ "$state" = COMPLETED ] || fail "job $job ended $state after the requeue"
restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
[ "$restarts" = 1 ] || fail "Slurm counts $restarts restart(s) of job $job, expected 1"
grep -q "resuming from .*ckpt-0*$step.pt" "$dir/requeued.out" || fail "the second start did not resume from the checkpoint of step $step"
cmp "$dir/reference/model.pt" "$dir/requeued/model.pt" ||
  fail "job $job: final weights differ from the uninterrupted job's"
nothing_left
grep -E "start [12] on|resuming from" "$dir/requeued.out"
# 4. Slurm's warning before a preemption or the time limit: SIGUSR1 to the
# batch script (`scancel --signal=USR1 --batch`, what `#SBATCH
# --signal=B:USR1@90` sends), mid-epoch — with each launcher. The script is
# bigbatch: it passes the signal on, the ranks agree on a step (the vote
# after step 12 read after the next one, or later if the signal travels
# longer), checkpoint it and stop, and bigbatch has the job requeued itself
# (`scontrol requeue`); Slurm starts it again and it continues from that
# step's checkpoint — no step lost, the same model.pt byte for byte.
preempted_case() {  # preempted_case NAME [bigbatch train options...]
  local name=$1 at
  shift
  sbatch_job "$name" $(paused "$name") "$@"
  wait_paused "$name"
  scancel --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job"
  rm -f "$dir/$name.pause"/paused-rank-*
  echo "$name: SIGUSR1 to job $job's batch script while its ranks are at step 12"
  for _ in $(seq 1 1200); do grep -q "is requeued" "$dir/$name.out" 2>/dev/null && break; sleep 0.05; done
  at=$(sed -n 's/^stopped at step \([0-9]*\) (epoch 1) on request.*/\1/p' "$dir/$name.out")
  [ -n "$at" ] && [ "$at" -ge 12 ] && [ "$at" -lt 32 ] || fail "job $job ($name) did not stop mid-run on the signal"
  grep -q "the job stopped on request (SIGUSR1) at a checkpoint and Slurm job $job is requeued" "$dir/$name.out" ||
    fail "job $job ($name) did not requeue itself"
  for _ in $(seq 1 600); do [ "$(state_of "$job")" = PENDING ] && break; sleep 0.05; done
  release "$job"
  wait_job "$job"
  [ "$state" = COMPLETED ] || fail "job $job ($name) ended $state after its requeue"
  restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
  [ "$restarts" = 1 ] || fail "Slurm counts $restarts restart(s) of job $job, expected 1"
  grep -q "resuming from .*ckpt-0*$at.pt" "$dir/$name.out" ||
    fail "the requeued job $job ($name) did not resume from the checkpoint of step $at"
  cmp "$dir/reference/model.pt" "$dir/$name/model.pt" ||
    fail "job $job ($name): final weights differ from the uninterrupted job's"
  nothing_left
  echo "job $job ($name): stopped on SIGUSR1 at step $at, requeued itself, resumed, byte-identical"
}
preempted_case preempted
preempted_case preempted_srun --launcher srun

# 5. A worker lost for good under srun (--min-workers 1): the rank on the
# second node killed in the first attempt and again in the attempt right
# after its restart (both pause at step 12: fault.attempts = 2). The job
# goes on with one worker, and srun is told where: the first node, by name
# (--distribution=arbitrary --nodelist=...), so the lost node is left out.
shrunk_case() {
  local name=shrunk_srun victim attempt
  sbatch_job "$name" $(paused "$name") --set fault.attempts=2 --launcher srun --min-workers 1
  for attempt in 1 2; do
    if [ "$attempt" = 1 ]; then wait_paused "$name"; else wait_paused "$name" "$dir/$name.mark"; fi
    victim=$(ranks_on 1)
    [ -n "$victim" ] || fail "$name: no rank found on ${nodes[1]} in attempt $attempt"
    touch "$dir/$name.mark"
    kill -9 $victim
    rm -f "$dir/$name.pause"/paused-rank-*
    echo "$name: SIGKILL to rank pid $victim on ${nodes[1]} in attempt $attempt"
  done
  wait_job "$job"
  [ "$state" = COMPLETED ] || fail "job $job ($name) ended $state after losing a worker"
  grep -q "the job goes on with 1 of 2 workers" "$dir/$name.out" || fail "$name: the job did not shrink"
  grep -q -- "the next attempts run with .*--nodelist=${nodes[0]}\b" "$dir/$name.out" ||
    fail "$name: srun was not given the first node alone"
  ! grep -q -- "--nodelist=.*${nodes[1]}" "$dir/$name.out" || fail "$name: the lost node was kept"
  grep -q "restart 2 of 3 from the checkpoint of step" "$dir/$name.out" || fail "$name: no third attempt"
  [ -f "$dir/$name/model.pt" ] || fail "$name: no model.pt"
  nothing_left
  grep -E "taken as lost|left out" "$dir/$name.out"
  echo "job $job ($name): a worker lost twice, the job finished on 1 worker, on ${nodes[0]} only"
}
shrunk_case

echo "slurm_test: ok (a killed rank restarted inside the allocation under mpirun and under srun, a requeued job resumed, a job warned by SIGUSR1 checkpointed and requeued itself: all byte-identical; a worker lost for good under srun left out by node)"
