#!/bin/bash
# An outside process SIGKILLs one rank of a 2-worker run mid-training: the
# whole job must exit non-zero within LIMIT seconds (no hang), and the
# output must name the lost rank.
#   kill_rank_test.sh BIGBATCH_BINARY CONFIG LIMIT
set -u
. "$(dirname "$0")/job_control.sh"
bin=$1; config=$2; limit=${3:-60}
dir=$(mktemp -d)
log=$dir/log
"$bin" train "$config" --workers 2 --run-dir "$dir/run" --set train.epochs=3 \
  --set data.train_samples=20000 --set data.eval_samples=1000 >"$log" 2>&1 &
launcher=$!
signal_a_rank "$launcher" "$log" 9 || { echo "FAIL: no rank process found"; cat "$log"; exit 1; }
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
