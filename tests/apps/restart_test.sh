#!/bin/bash
# --max-restarts on 2 workers, as a user's job meets failures:
#   1. a rank SIGKILLed from outside after the first checkpoints (the
#      ranks paused at a step by fault.kind = pause: the test acts on a
#      state the job reports, never after a time): the
#      supervisor ends every process of the attempt, restarts the job from
#      the newest checkpoint, and the run finishes with model.pt
#      byte-identical to an uninterrupted run's; summary.json lists the
#      failure under `restarts`, with the step it happened at and the steps
#      it cost; no process of the job is left; then three more trials
#      with a random rank killed at a random step, and one with rank 0
#      killed while its background checkpoint write is in flight
#      (fault.during = checkpoint, fault.attempts = 1): byte-identical too;
#      the same for a rank stopped with SIGSTOP: the stall is named (after
#      comm.timeout_s), the job ends, the supervisor kills the stopped rank
#      with the rest and restarts;
#   2. a failure that comes back every attempt (an injected exception at
#      the same step): the supervisor gives up after N restarts, exits 1 and
#      lists every failure; no process is left;
#   3. a job started by mpirun by hand, in the README's restart loop
#      (`--resume auto --overwrite` until it exits 0), a rank SIGKILLed:
#      the next round resumes, byte-identical;
#   4. --max-restarts with checkpoints off is refused before anything runs.
#   restart_test.sh BIGBATCH_BINARY CONFIG
set -u
bin=$1; config=$2
dir=$(mktemp -d)
source "$(dirname "$0")/job_control.sh"
fail() { echo "FAIL: $*"; [ -f "$dir/log" ] && cat "$dir/log"; exit 1; }
common=(--set data.train_samples=4096 --set data.eval_samples=1000
        --set train.epochs=2 --set train.stop_at_target=false --set train.batch_size=128
        --set ckpt.every_steps=5 --set comm.timeout_s=10 --workers 2 -q)
left_over() { pgrep -f -- "$1" >/dev/null; }
# Shared-memory segments (MPI's, ours) that a job left behind.
shm_before=$(ls /dev/shm | sort)
shm_left() { comm -13 <(echo "$shm_before") <(ls /dev/shm | sort) | grep .; }

# Every rank of the first attempt pauses at a step (fault.kind = pause,
# fault.attempts = 1: a state the job reports in PAUSE_DIR), so a signal
# lands while the job runs, on a machine of any speed; the next attempt
# does not pause.
# paused_at STEP PAUSE_DIR: the job's arguments for that.
paused_at() {
  echo "--set fault.kind=pause --set fault.rank=-1 --set fault.step=$1 --set fault.attempts=1 --set fault.pause_dir=$2"
}

# signal_paused SUPERVISOR PAUSE_DIR SIGNAL [WHICH]: once both ranks are
# paused, sends SIGNAL to one rank (a child of the supervisor's mpirun: the
# newest, or the oldest with WHICH = -o), then lets the other go on (into
# the exchange, where it meets the lost rank); sets `victim`.
signal_paused() {
  local which=${4:--n}
  for _ in $(seq 1 1200); do
    [ -f "$2/paused-rank-0" ] && [ -f "$2/paused-rank-1" ] && break
    kill -0 "$1" 2>/dev/null || fail "the job ended before its ranks paused"
    sleep 0.1
  done
  [ -f "$2/paused-rank-1" ] || fail "the ranks never paused"
  victim=$(pgrep -P "$(pgrep -P "$1" -n)" "$which")  # one of the supervisor's mpirun's ranks
  [ -n "$victim" ] || fail "no rank found"
  kill -"$3" "$victim"
  rm -f "$2"/paused-rank-*
  echo "SIG$3 to rank pid $victim while both ranks were paused"
}

# expect_recovered SUPERVISOR RUN_DIR: the job ends, exit 0, with the
# uninterrupted run's final weights.
expect_recovered() {
  wait_for_job "$1" 300 || fail "the supervised job in $2 hung"
  [ "$rc" -eq 0 ] || fail "the supervised job in $2 exited $rc"
  cmp "$dir/reference/model.pt" "$2/model.pt" || fail "$2: final weights differ from the uninterrupted run's"
}

# nothing_left RUN_DIR: no process of its job, no new shared-memory segment.
nothing_left() {
  left_over "$1" && fail "a process of the job in $1 is left"
  shm_left && fail "shared-memory segments are left (above)"
  return 0
}

"$bin" train "$config" "${common[@]}" --run-dir "$dir/reference" || fail "reference run"

# 1. SIGKILL one rank while the job is at step 12 (the checkpoint of step
# 10 written).
mkdir -p "$dir/restarted.pause"
"$bin" train "$config" "${common[@]}" --run-dir "$dir/restarted" --max-restarts 2 \
  $(paused_at 12 "$dir/restarted.pause") >"$dir/log" 2>&1 &
supervisor=$!
signal_paused "$supervisor" "$dir/restarted.pause" KILL
expect_recovered "$supervisor" "$dir/restarted"
grep -q "restart 1 of 2 from the checkpoint of step" "$dir/log" || fail "the restart was not reported"
/usr/bin/python3 - "$dir/restarted/summary.json" <<'PY' || fail "summary.json lacks the restart"
import json, sys
r = json.load(open(sys.argv[1]))["restarts"]
print("restarts:", r)
assert len(r) == 1 and r[0]["attempt"] == 1 and r[0]["resumed_from_step"] >= 10, r
f = r[0]
assert f["failed_at_step"] >= f["resumed_from_step"], f
assert f["steps_lost"] == f["failed_at_step"] - f["resumed_from_step"] and f["steps_lost"] < 10, f
PY
# Its time to train runs on the wall clock from the first attempt's
# run_start to the last attempt's run_stop, the restart included.
/usr/bin/python3 - "$dir/restarted" <<'PY' || fail "train_time_s does not span the attempts"
import glob, json, re, sys
def times(key):
    for path in glob.glob(sys.argv[1] + "/mlperf.log*"):
        for line in open(path):
            if f'"key": "{key}"' in line:
                yield int(re.search(r'"time_ms": (\d+)', line).group(1))
wall = (max(times("run_stop")) - min(times("run_start"))) / 1000
reported = json.load(open(sys.argv[1] + "/summary.json"))["train_time_s"]
print(f"train_time_s {reported:.2f} s, first run_start to last run_stop {wall:.2f} s")
assert abs(reported - wall) < 0.5, (reported, wall)
PY
nothing_left "$dir/restarted"

# One MLPerf log for the job (include/bigbatch/launch/job_mlperf_log.h): the first attempt's
# run_start, the last one's run_stop, a bigbatch_restart line between, and
# the time between them is train_time_s; the attempts' own logs are kept.
# Then the time from the failed attempt's end to the next one's run_start.
/usr/bin/python3 - "$dir/restarted" <<'PY' || fail "the job's MLPerf log"
import json, sys
def events(path):
    return [json.loads(l.split(":::MLLOG ", 1)[1]) for l in open(path) if l.startswith(":::MLLOG ")]
d = sys.argv[1]
job, first, last = events(d + "/mlperf.log"), events(d + "/mlperf.log.1"), events(d + "/mlperf.log.2")
keys = [e["key"] for e in job]
assert keys.count("run_start") == 1 and keys.count("run_stop") == 1, keys
assert keys.count("bigbatch_restart") == 1 and keys.index("run_start") < keys.index("bigbatch_restart"), keys
stop = next(e for e in job if e["key"] == "run_stop")
# (status aborted: 2 epochs of 4,096 images do not reach the target)
assert stop == next(e for e in last if e["key"] == "run_stop") and job[-1] is stop, stop
start = next(e for e in job if e["key"] == "run_start")
assert start == next(e for e in first if e["key"] == "run_start"), "run_start is not the first attempt's"
took = (stop["time_ms"] - start["time_ms"]) / 1000
reported = json.load(open(d + "/summary.json"))["train_time_s"]
print(f"mlperf.log: one run_start, one run_stop, {took:.2f} s between them; train_time_s {reported:.2f} s")
assert abs(took - reported) < 0.5, (took, reported)
ended = json.load(open(d + "/restarts.json"))[0]["ended_at_unix_ms"]
again = next(e for e in last if e["key"] == "run_start")["time_ms"]
print(f"restart time (attempt's end to the next run_start): {(again - ended) / 1000:.2f} s")
PY

# 1a. Three more kills, each of a random rank at a random step (6..31 of
# 32: the job paused there).
for trial in 1 2 3; do
  at=$((6 + RANDOM % 26)); which=$([ $((RANDOM % 2)) = 0 ] && printf -- -n || printf -- -o)
  mkdir -p "$dir/random$trial.pause"
  "$bin" train "$config" "${common[@]}" --run-dir "$dir/random$trial" --max-restarts 1 \
    $(paused_at "$at" "$dir/random$trial.pause") >"$dir/log" 2>&1 &
  supervisor=$!
  signal_paused "$supervisor" "$dir/random$trial.pause" KILL "$which"
  expect_recovered "$supervisor" "$dir/random$trial"
  /usr/bin/python3 -c "import json,sys; f=json.load(open(sys.argv[1]))[0]; print('trial $trial: failed at step', f['failed_at_step'], 'resumed from', f['resumed_from_step'])" \
    "$dir/random$trial/restarts.json" || fail "trial $trial: no restarts.json"
  nothing_left "$dir/random$trial"
done

# 1b. Rank 0 killed while it writes a checkpoint in the background: the
# fault holds the write of step 30 after its first chunk (a torn temporary
# file) and kills the rank there; the resume is from the one before, step
# 25 (the atomic write leaves the partial file unseen), exact.
"$bin" train "$config" "${common[@]}" --run-dir "$dir/inwrite" --max-restarts 1 \
  --set fault.kind=sigkill --set fault.rank=0 --set fault.step=30 --set fault.during=checkpoint \
  --set fault.attempts=1 >"$dir/log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "the job killed in a checkpoint write exited $rc"
cmp "$dir/reference/model.pt" "$dir/inwrite/model.pt" || fail "inwrite: final weights differ from the uninterrupted run's"
grep -q "injecting fault 'sigkill' on rank 0 at step 30 (during checkpoint" "$dir/log" || fail "the write was not interrupted"
/usr/bin/python3 - "$dir/inwrite/restarts.json" <<'PY' || fail "the kill in the write did not resume from an earlier checkpoint"
import json, sys
f = json.load(open(sys.argv[1]))[0]
print("killed in the write of step 30; resumed from", f["resumed_from_step"])
assert f["resumed_from_step"] == 25 and f["rank"] == 0, f
PY
nothing_left "$dir/inwrite"

# 1c. SIGSTOP one rank: a stall, named, then the same recovery.
mkdir -p "$dir/stalled.pause"
"$bin" train "$config" "${common[@]}" --run-dir "$dir/stalled" --max-restarts 1 \
  $(paused_at 12 "$dir/stalled.pause") >"$dir/log" 2>&1 &
supervisor=$!
signal_paused "$supervisor" "$dir/stalled.pause" STOP
expect_recovered "$supervisor" "$dir/stalled"
grep -q "stopped answering\|no sign of life\|stalled" "$dir/log" || fail "the stall was not named"
kill -0 "$victim" 2>/dev/null && fail "the stopped rank is still there"
nothing_left "$dir/stalled"

# 2. A failure every attempt: give up after 1 restart, listing both.
"$bin" train "$config" "${common[@]}" --run-dir "$dir/doomed" --max-restarts 1 \
  --set fault.kind=throw --set fault.rank=1 --set fault.step=23 >"$dir/log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a job failing every attempt exited $rc, not 1"
grep -q "the job failed 2 time(s), giving up after 1 restart(s)" "$dir/log" || fail "no give-up message"
[ "$(grep -c '^  attempt [12]: exit status' "$dir/log")" -eq 2 ] || fail "the failures are not listed"
nothing_left "$dir/doomed"

# 3. A job started by mpirun by hand, in the restart loop of
# docs/RELIABILITY.md: a rank SIGKILLed while paused at step 12; the
# loop's next round resumes (its --overwrite unused: there is a
# checkpoint) to the same weights. (The loop here numbers its rounds in
# BIGBATCH_RESTART_COUNT, as the supervisor does, so that only the first
# pauses.)
mkdir -p "$dir/loop.pause"
( for attempt in 1 2 3 4; do
    BIGBATCH_RESTART_COUNT=$((attempt - 1)) mpirun --allow-run-as-root -np 2 "$bin" train "$config" \
      "${common[@]}" --set run.threads=1 --run-dir "$dir/loop" --resume auto --overwrite \
      $(paused_at 12 "$dir/loop.pause") && break
  done ) >"$dir/log" 2>&1 &
loop=$!
for _ in $(seq 1 1200); do [ -f "$dir/loop.pause/paused-rank-1" ] && break; sleep 0.1; done
victim=$(pgrep -f -- "--run-dir $dir/loop " | while read -r p; do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && echo "$p"; done | head -1)
[ -n "$victim" ] || fail "the loop's rank 1 not found"
kill -KILL "$victim"
rm -f "$dir/loop.pause"/paused-rank-*
expect_recovered "$loop" "$dir/loop"
[ -f "$dir/loop/mlperf.log.1" ] || fail "the loop's second round did not resume (no earlier mlperf.log kept)"
nothing_left "$dir/loop"

# 4. Nothing to restart from.
"$bin" train "$config" --max-restarts 1 --set ckpt.every_epochs=0 --run-dir "$dir/none" >"$dir/log" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "with checkpoints off" "$dir/log" || fail "checkpoints off was not refused"
[ -e "$dir/none" ] && fail "a refused run created its directory"
rm -rf "$dir"
echo "restart_test: ok"
