#!/bin/bash
# An outside process SIGKILLs one rank of a 2-worker run mid-training: the
# whole job must exit non-zero within LIMIT seconds (no hang), and the
# output must name the lost rank.
#   kill_rank_test.sh BIGBATCH_BINARY CONFIG LIMIT
set -u
bin=$1; config=$2; limit=${3:-60}
dir=$(mktemp -d)
log=$dir/log
"$bin" train "$config" --workers 2 --run-dir "$dir/run" --set train.epochs=3 \
  --set data.train_samples=20000 --set data.eval_samples=1000 >"$log" 2>&1 &
launcher=$!
# Wait for training to start (the first collective has run), then kill rank 1.
for _ in $(seq 1 600); do
  grep -q "allreduce:" "$log" 2>/dev/null && break
  sleep 0.1
done
# The launcher became mpirun (same PID); its newest child is a rank. (Matching
# by command line could hit another test's bigbatch running in parallel.)
victim=$(pgrep -P "$launcher" -n)
[ -n "$victim" ] || { echo "FAIL: no rank process found"; cat "$log"; exit 1; }
kill -9 "$victim"
start=$(date +%s.%N)
for _ in $(seq 1 $((limit * 10))); do
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$launcher" 2>/dev/null; then
  echo "FAIL: the job still runs ${limit} s after a rank was killed"
  pkill -9 -P "$launcher"; kill -9 "$launcher"; cat "$log"; exit 1
fi
wait "$launcher"; rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$log"
echo "kill_rank_test: job exited with status $rc ${elapsed} s after the kill"
named=0
grep -Eq "rank [01].*(signal 9|Killed)|rank [01] did not" "$log" && named=1
rm -rf "$dir"
[ "$rc" -ne 0 ] || { echo "FAIL: exit status 0 after losing a rank"; exit 1; }
[ "$named" -eq 1 ] || { echo "FAIL: the lost rank is not named"; exit 1; }
echo "kill_rank_test: ok"
