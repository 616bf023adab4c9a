#!/bin/bash
# An outside process SIGKILLs one rank of a 2-worker run mid-training (both
# ranks paused at step 3 — fault.kind = pause, a state the job reports —
# then the other let go on): the whole job must exit non-zero within LIMIT
# seconds (no hang), and the output must name the rank that was killed —
# the one the test signalled, not the survivor.
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
# The rank the test killed, and no other: naming the survivor would be
# wrong (the message must say who was lost).
named=0
grep -Eq "rank $victim_rank .*(signal 9|Killed)|rank $victim_rank did not|stopped answering: rank $victim_rank" "$log" && named=1
other=$((1 - victim_rank))
wrong=0
grep -Eq "rank $other .*(signal 9|Killed)|rank $other did not|stopped answering: rank $other" "$log" && wrong=1
rm -rf "$dir"
[ "$rc" -ne 0 ] || { echo "FAIL: exit status 0 after losing a rank"; exit 1; }
[ "$named" -eq 1 ] || { echo "FAIL: the lost rank ($victim_rank) is not named"; exit 1; }
[ "$wrong" -eq 0 ] || { echo "FAIL: the surviving rank $other is named as the lost one"; exit 1; }
echo "kill_rank_test: ok"
