#!/bin/bash
# An outside process SIGKILLs one rank of a 2-worker run mid-training (both
# ranks paused at step 3 — fault.kind = pause, a state the job reports —
# then the other let go on): the whole job must exit non-zero within LIMIT
# seconds (no hang), and the output must name the lost rank.
#   kill_rank_test.sh BIGBATCH_BINARY CONFIG LIMIT
set -u
. "$(dirname "$0")/job_control.sh"
bin=$1; config=$2; limit=${3:-60}
dir=$(mktemp -d)
log=$dir/log
mkdir -p "$dir/pause"
"$bin" train "$config" --workers 2 --run-dir "$dir/run" --set train.epochs=1 \
  --set data.train_samples=4096 --set data.eval_samples=1000 \
  --set fault.kind=pause --set fault.rank=-1 --set fault.step=3 --set fault.pause_dir="$dir/pause" \
  >"$log" 2>&1 &
launcher=$!
signal_paused_rank "$launcher" "$dir/pause" 9 || { echo "FAIL: no rank process found"; cat "$log"; exit 1; }
start=$(date +%s.%N)
wait_for_job "$launcher" "$limit" || {
  echo "FAIL: the job still runs ${limit} s after a rank was killed"; cat "$log"; exit 1; }
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$log"
echo "kill_rank_test: job exited with status $rc ${elapsed} s after the kill"
named=0
grep -Eq "rank [01].*(signal 9|Killed)|rank [01] did not" "$log" && named=1
rm -rf "$dir"
[ "$rc" -ne 0 ] || { echo "FAIL: exit status 0 after losing a rank"; exit 1; }
[ "$named" -eq 1 ] || { echo "FAIL: the lost rank is not named"; exit 1; }
echo "kill_rank_test: ok"
