#!/bin/bash
# The "bigbatch" backend when something goes wrong, as a user meets it:
#   kill      a rank SIGKILLed from outside once every rank has run 20
#             allreduces (a marker each wrote): the job ends non-zero within
#             TIMEOUT + 10 s, naming rank 1; no process is left
#   stop      a rank SIGSTOPped the same way (alive to the kernel, silent):
#             the survivor raises a Python exception naming rank 1 (the
#             collective's deadline, the heartbeat's diagnosis), and the job
#             ends within TIMEOUT + 10 s; no process is left
#   mismatch  the ranks' 5th allreduce differs in size: every rank raises
#             one exception naming each rank's call; the job ends
#   raise     rank 1 raises an ordinary Python exception (a bug): the job
#             ends with its traceback well before the group's timeout
#             (120 s here; the peers would otherwise wait in the step's
#             allreduce that long); no process is left
#   nompi     the script started without a launcher: init_process_group
#             raises, naming the fix
# With HOSTS=2, kill and stop run across two emulated hosts
# (scripts/emulated_cluster: one rank per network namespace). LAUNCHER
# torchrun starts the ranks with torchrun instead of mpirun (no MPI: the
# group runs on UCX; across hosts one torchrun per host over ssh,
# scripts/torchrun_hosts).
#   failure_test.sh PYTHONPATH MODE [HOSTS] [LAUNCHER]
set -u
pythonpath=$1; mode=$2; hosts=${3:-1}; launcher=${4:-mpirun}
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/emulated_cluster"
dir=$(mktemp -d)
timeout_s=8
limit=$((timeout_s + 10))
if [ "$mode" = raise ]; then timeout_s=120; limit=60; fi
fail() { echo "FAIL: $mode: $*"; cat "$dir/log" 2>/dev/null; exit 1; }
trap 'pkill -9 -f "ranks_loop.py $dir" 2>/dev/null; rm -rf "$dir"' EXIT
export PYTHONPATH=$pythonpath
# The interpreter and torchrun: Debian's (PyTorch 1.13) unless the test
# names PyTorch 2.x's (scripts/setup-torch2's environment).
python=${BIGBATCH_TEST_PYTHON:-/usr/bin/python3}
torchrun=${BIGBATCH_TEST_TORCHRUN:-torchrun}
py=("$python" "$here/ranks_loop.py" "$dir" "$timeout_s")

if [ "$mode" = nompi ]; then
  "${py[@]}" >"$dir/log" 2>&1 && fail "exited 0"
  grep -q "start the script with torchrun --nproc_per_node N SCRIPT or mpirun -np N python3 SCRIPT" "$dir/log" ||
    fail "the refusal does not name the fix"
  echo "failure_test: ok nompi"; exit 0
fi

start_job() {  # start_job [MODE]: the job in the background; sets `job`
  if [ "$launcher" = torchrun ] && [ "$hosts" -gt 1 ]; then
    "$cluster" --hosts "$hosts" --launcher -- "$here/../../scripts/torchrun_hosts" \
      --env PYTHONPATH="$pythonpath" -- "${py[@]:1}" "$@" >"$dir/log" 2>&1 &
  elif [ "$launcher" = torchrun ]; then
    local port
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$torchrun" --nproc_per_node 2 --master_port "$port" --redirects 2 --tee 2 "${py[@]:1}" "$@" \
      >"$dir/log" 2>&1 &
  elif [ "$hosts" -gt 1 ]; then
    "$cluster" --hosts "$hosts" -- env PYTHONPATH="$pythonpath" "${py[@]}" "$@" >"$dir/log" 2>&1 &
  else
    mpirun --allow-run-as-root --oversubscribe -np 2 "${py[@]}" "$@" >"$dir/log" 2>&1 &
  fi
  job=$!
}
# ends_within SECONDS: the job ends in time (rc: its status); else it is killed.
ends_within() {
  local t0=$(date +%s.%N)
  for _ in $(seq 1 $(($1 * 10))); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then kill -9 "$job"; pkill -9 -f "ranks_loop.py $dir"; return 1; fi
  wait "$job"; rc=$?
  elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
}
nothing_left() {
  sleep 0.5
  pgrep -f "ranks_loop.py $dir" >/dev/null && fail "a rank outlived the job"
  return 0
}

case "$mode" in
  kill|stop)
    start_job
    for _ in $(seq 1 1200); do [ -f "$dir/ready-0" ] && [ -f "$dir/ready-1" ] && break; sleep 0.1; done
    [ -f "$dir/ready-1" ] || fail "the ranks never ran 20 allreduces"
    victim=$(pgrep -f "ranks_loop.py $dir" | while read -r p; do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_)?RANK=1" && echo "$p"; done | head -1)
    [ -n "$victim" ] || fail "rank 1's process not found"
    [ "$mode" = kill ] && kill -9 "$victim" || kill -STOP "$victim"
    if [ "$mode" = stop ] && [ "$launcher" = torchrun ]; then
      # The survivor names rank 1 and exits within the limit; the stopped
      # rank's end is torchrun's: on one host its agent sends SIGTERM, which
      # a stopped process takes only when the 30 s grace ends in SIGKILL;
      # across hosts (static rendezvous) host 1's agent never learns that
      # host 0's worker failed, and the scheduler ends the job — here the
      # test kills the stopped rank, and host 1's agent then exits.
      for _ in $(seq 1 $((limit * 10))); do
        grep -Eq "stopped answering: rank 1|rank 1 did not" "$dir/log" && break; sleep 0.1
      done
      grep -Eq "stopped answering: rank 1|rank 1 did not" "$dir/log" ||
        fail "the survivor did not name rank 1 within $limit s"
      if [ "$hosts" -gt 1 ]; then
        kill -KILL "$victim"; ends_within 60 || fail "the job did not end once the stopped rank was killed"
      else
        ends_within 60 || fail "torchrun did not end the job 60 s after the survivor named rank 1"
      fi
    else
      ends_within "$limit" || fail "the job still ran $limit s after rank 1 was ${mode}ped"
    fi
    [ "$rc" -ne 0 ] || fail "the job exited 0"
    if [ "$mode" = stop ]; then
      grep -q "Traceback" "$dir/log" || fail "no Python exception in the survivor"
      grep -Eq "rank 1 (did not|stopped answering)|stopped answering: rank 1" "$dir/log" ||
        fail "the exception does not name rank 1"
    else
      grep -Eq "rank 1 .*(signal 9|Killed)|process rank 1 .*exited on signal 9|rank 1 (did not|stopped answering)|stopped answering: rank 1|rank +: 1 \(local_rank: [0-9]+\)" "$dir/log" ||
        fail "the output does not name rank 1"
    fi
    nothing_left
    ;;
  mismatch)
    start_job mismatch
    ends_within "$limit" || fail "the job still ran $limit s after a mismatched call"
    [ "$rc" -ne 0 ] || fail "the job exited 0"
    grep -q "rank 0: allreduce (SUM) of 100 Float element(s); rank 1: allreduce (SUM) of 101 Float element(s)" \
      "$dir/log" || fail "the exception does not name each rank's call"
    nothing_left
    ;;
  raise)
    start_job raise
    ends_within "$limit" || fail "the job still ran $limit s after rank 1 raised (group timeout ${timeout_s} s)"
    [ "$rc" -ne 0 ] || fail "the job exited 0"
    grep -q "ValueError: a bug in rank 1's script" "$dir/log" || fail "no traceback of rank 1's exception"
    grep -q "ended with an uncaught ValueError; ending every rank of the job" "$dir/log" ||
      fail "no word that the job is being ended"
    nothing_left
    ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac
cat "$dir/log" | tail -5
echo "failure_test: ok $mode (hosts $hosts, $launcher, ended ${elapsed:-?} s after)"
