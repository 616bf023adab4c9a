#!/bin/bash
# A rank that stops answering, as a user meets it:
#   sigstop   3 workers, the default exchange; an outside process stops one
#             rank (SIGSTOP) mid-training (the ranks paused at step 3 for it,
#             fault.kind = pause, then let go on). The job must end non-zero within
#             LIMIT seconds naming that rank as stalled (no sign of life,
#             its last phase and step) — never blaming another host, on a
#             job that has one.
#   deadline  2 workers, shared-memory exchange (a deadline of its own);
#             rank 1 hangs in compute: the collective's own TimeoutError
#             ends the job, with the heartbeat's diagnosis, before the stall
#             watchdog would; mlperf.log ends with run_stop, status aborted.
#   watchdog  2 workers, MPI_Allreduce (no deadline); rank 1 hangs: the
#             stall watchdog ends the job past its margin, naming rank 1,
#             and still writes run_stop (aborted) to mlperf.log.
# comm.timeout_s = 5 in all three.
#   stall_test.sh BIGBATCH_BINARY CONFIG MODE [LIMIT]
set -u
. "$(dirname "$0")/job_control.sh"
bin=$1; config=$2; mode=$3; limit=${4:-60}
dir=$(mktemp -d)
log=$dir/log
cleanup() { [ -n "${victim:-}" ] && kill -9 "$victim" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $mode: $*"; cat "$log"; exit 1; }
common=(--run-dir "$dir/run" --set comm.timeout_s=5 --set data.eval_samples=1000)
case $mode in
  sigstop)
    mkdir -p "$dir/pause"
    "$bin" train "$config" "${common[@]}" --workers 3 --set data.train_samples=4096 \
      --set train.epochs=1 --set fault.kind=pause --set fault.rank=-1 --set fault.step=3 \
      --set fault.pause_dir="$dir/pause" >"$log" 2>&1 &
    launcher=$!
    signal_paused_rank "$launcher" "$dir/pause" STOP || fail "no rank process found"
    rank=$victim_rank
    echo "stall_test: stopped rank $rank (pid $victim)"
    start=$(date +%s.%N)
    wait_for_job "$launcher" "$limit" || fail "still running $limit s after the stop"
    ;;
  deadline|watchdog)
    algorithm=shm
    [ "$mode" = watchdog ] && algorithm=mpi
    start=$(date +%s.%N)
    timeout -k 5 "$limit" "$bin" train "$config" "${common[@]}" --workers 2 \
      --set data.train_samples=4096 --set train.epochs=2 --set comm.allreduce=$algorithm \
      --set fault.kind=hang --set fault.rank=1 --set fault.step=3 >"$log" 2>&1
    rc=$?
    [ "$rc" -ne 124 ] || fail "still running after $limit s"
    ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$log"
echo "stall_test: $mode: exit status $rc, $elapsed s"
[ "$rc" -ne 0 ] || fail "exit status 0"
case $mode in
  sigstop)
    grep -q "stopped answering: rank $rank (no sign of life for" "$log" ||
      fail "the stopped rank $rank is not named as stalled"
    ! grep -q "another host" "$log" || fail "blames another host on a one-host job"
    ;;
  deadline)
    grep -Eq "rank 1 did not .*; stopped answering: rank 1 \(in the compute of step 3" "$log" ||
      fail "no named deadline error with the heartbeat's diagnosis"
    ! grep -q "stall watchdog" "$log" || fail "the watchdog fired before the collective's deadline"
    ;;
  watchdog)
    grep -q "stall watchdog: .* stopped answering: rank 1 (in the compute of step 3" "$log" ||
      fail "the watchdog did not name rank 1"
    ;;
esac
if [ "$mode" != sigstop ]; then
  last=$(tail -n 1 "$dir/run/mlperf.log")
  echo "$last" | grep -q '"key": "run_stop".*"status": "aborted"' ||
    fail "mlperf.log does not end with run_stop (aborted): $last"
fi
echo "stall_test: ok $mode"
