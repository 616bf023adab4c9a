# Sourced by the tests that act on a running `bigbatch train --workers N`
# job from outside, as a user or a scheduler would.

# job_ranks LAUNCHER_PID: the pids of the job's ranks, oldest first — the
# launcher's descendants that MPI started as ranks (OMPI_COMM_WORLD_RANK in
# their environment). The launcher runs mpirun as its child, and mpirun
# the ranks; matching by command line could hit another test's bigbatch.
job_ranks() {
  local queue=("$1") pid child
  while [ ${#queue[@]} -gt 0 ]; do
    pid=${queue[0]}; queue=("${queue[@]:1}")
    for child in $(pgrep -P "$pid"); do
      queue+=("$child")
      tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=' &&
        echo "$child"
    done
  done | sort -n
}

# newest_rank LAUNCHER_PID: sets `victim` (the newest rank's pid) and
# `victim_rank` (its MPI rank); returns 1 when the job has no rank.
newest_rank() {
  victim=$(job_ranks "$1" | tail -n 1)
  [ -n "$victim" ] || return 1
  victim_rank=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
}

# signal_a_rank LAUNCHER_PID LOG SIGNAL: waits until training has started
# (the first exchange logged "allreduce:" to LOG), then sends SIGNAL to one
# rank; sets `victim` (its pid) and `victim_rank` (its MPI rank).
signal_a_rank() {
  local launcher=$1 log=$2 signal=$3
  for _ in $(seq 1 600); do
    grep -q "allreduce:" "$log" 2>/dev/null && break
    sleep 0.1
  done
  newest_rank "$launcher" || return 1
  kill -"$signal" "$victim"
}

# signal_paused_rank LAUNCHER_PID PAUSE_DIR SIGNAL: waits until every rank
# has paused (fault.kind = pause, fault.rank = -1: a marker in PAUSE_DIR per
# rank), sends SIGNAL to one rank, then lets the others go on (they meet
# the lost rank in the next exchange); sets `victim` and `victim_rank`.
# Nothing here waits for a time: the job is at the same step on a machine
# of any speed.
signal_paused_rank() {
  local launcher=$1 pause=$2 signal=$3 ranks paused=0
  for _ in $(seq 1 1200); do
    ranks=$(ls "$pause" 2>/dev/null | grep -c '^paused-rank-')
    [ "$ranks" -ge 2 ] && [ "$ranks" -ge "$(job_ranks "$launcher" | wc -l)" ] && { paused=1; break; }
    kill -0 "$launcher" 2>/dev/null || return 1
    sleep 0.1
  done
  # Not every rank paused in 120 s: a hang to report, not a rank to signal.
  [ "$paused" -eq 1 ] || { echo "signal_paused_rank: the ranks did not all pause in 120 s" >&2; return 1; }
  newest_rank "$launcher" || return 1
  kill -"$signal" "$victim"
  rm -f "$pause"/paused-rank-*
}

# wait_for_job LAUNCHER_PID LIMIT: waits up to LIMIT seconds for the job to
# end; sets `rc` to its exit status, or kills it and returns 1 (a hang).
wait_for_job() {
  local launcher=$1 limit=$2
  for _ in $(seq 1 $((limit * 10))); do
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$launcher" 2>/dev/null; then
    pkill -9 -P "$launcher"; kill -9 "$launcher"
    return 1
  fi
  wait "$launcher"; rc=$?
}
