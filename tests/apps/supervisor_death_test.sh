#!/bin/bash
# The job does not outlive its supervisor (`bigbatch train --max-restarts`),
# whatever ends it. A 2-worker job pauses both ranks at step 3 (fault.kind =
# pause: a state the job reports, so nothing here depends on the machine's
# speed), and then:
#   1. the supervisor is SIGKILLed (as the OOM killer would): the job ends
#      (mpirun gets SIGTERM from the kernel, PR_SET_PDEATHSIG, and the
#      ranks see their supervisor gone: either alone would do; each alone is
#      shown by launch_test's JobProcess.TheJobGetsSigtermWhenItsStarterIsKilled
#      and train_test's SupervisorWatch test);
#   2. the supervisor and mpirun are SIGKILLed together: the ranks see
#      their supervisor gone (BIGBATCH_SUPERVISOR, a pidfd) and end
#      themselves (what they say goes to mpirun's pipe, gone with it:
#      train_test's SupervisorWatch.ARankEndsItselfWhenItsSupervisorIsGone
#      shows the watch alone);
#   3. the supervisor gets SIGHUP (its terminal gone): it ends the job with
#      SIGTERM, starts no other attempt, and exits 128 + 1.
# In each, no process of the job is left within 30 s.
#   supervisor_death_test.sh BIGBATCH_BINARY CONFIG
set -u
bin=$1; config=$2
dir=$(mktemp -d)
fail() { echo "FAIL: $*"; [ -f "$dir/log" ] && cat "$dir/log"; pkill -9 -f -- "$dir/" ; exit 1; }
trap 'pkill -9 -f -- "$dir/" 2>/dev/null; rm -rf "$dir"' EXIT

# start NAME: the supervised job, paused at step 3 on both ranks; sets `sup`.
start() {
  mkdir -p "$dir/$1-pause"
  "$bin" train "$config" --workers 2 --max-restarts 2 --run-dir "$dir/$1" -q \
    --set data.train_samples=2048 --set data.eval_samples=500 --set train.epochs=1 \
    --set fault.kind=pause --set fault.rank=-1 --set fault.step=3 \
    --set fault.pause_dir="$dir/$1-pause" >"$dir/log" 2>&1 &
  sup=$!
  for _ in $(seq 1 1200); do
    [ -f "$dir/$1-pause/paused-rank-0" ] && [ -f "$dir/$1-pause/paused-rank-1" ] && return 0
    kill -0 "$sup" 2>/dev/null || fail "$1: the job ended before its ranks paused"
    sleep 0.1
  done
  fail "$1: the ranks never paused"
}
# gone NAME: no process of the job within 30 s.
gone() {
  for _ in $(seq 1 300); do
    pgrep -f -- "$dir/$1" >/dev/null || return 0
    sleep 0.1
  done
  pgrep -af -- "$dir/$1"
  fail "$1: processes of the job outlived its supervisor by 30 s (above)"
}

start killed
kill -9 "$sup"
gone killed
echo "1. supervisor SIGKILLed: the job ended"

start both
mpirun_pid=$(pgrep -P "$sup" | head -1)
[ -n "$mpirun_pid" ] || fail "both: mpirun not found"
kill -9 "$sup" "$mpirun_pid"
gone both
echo "2. supervisor and mpirun SIGKILLed: the ranks ended themselves"

start hungup
kill -HUP "$sup"
wait "$sup"; rc=$?
[ "$rc" -eq 129 ] || fail "hungup: the supervisor exited $rc, not 129"
grep -q "interrupted (signal 1); not restarting" "$dir/log" || fail "hungup: no 'not restarting'"
[ "$(grep -c "injecting fault 'pause'" "$dir/log")" -eq 2 ] || fail "hungup: another attempt started"
gone hungup
echo "3. SIGHUP: the job ended, no restart"
echo "supervisor_death_test: ok"
