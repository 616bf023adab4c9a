#!/bin/bash
# `bigbatch tune` as a user drives it, on real Fashion-MNIST (2 workers per
# trial, 2,048 images, 3-epoch budget, rungs at 1 and 3 epochs):
#  1. the tune is SIGKILLed from outside once two jobs have settled: within
#     a few seconds no trial process of it is left (mpirun and ranks die
#     with it);
#  2. --resume finishes it: the rows settled before the kill are kept as
#     they were, and no settled job runs again (one log header per job
#     started: the settled rows + the seed re-run + the one in flight);
#  3. best.toml is a ready recipe (`bigbatch train` runs it), best.json
#     parses, `bigbatch plot` draws the trials;
#  4. bad input: an unknown key in --param, a real range on a whole-number
#     key, --objective time with --parallel 2, and --resume with other
#     settings exit 1 naming the problem.
#   tune_test.sh BIGBATCH_BINARY CONFIG
set -u
bin=$1; config=$2
dir=$(mktemp -d)
tune=$dir/tune
fail() { echo "FAIL: $*"; cat "$dir/log" 2>/dev/null; rm -rf "$dir"; exit 1; }
common=("$config" --param optim.lr=0.05:0.3:log --param schedule.warmup_epochs=0.2,0.5
        --set run.workers=2 --set data.train_samples=2048 --set data.eval_samples=1000
        --set train.epochs=3 --set train.stop_at_target=false
        --min-epochs 1 --eta 3 --seeds 1 --dir "$tune")
args=("${common[@]}" --trials 4)

"$bin" tune "${args[@]}" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  rows=0
  [ -f "$tune/results.csv" ] && rows=$(($(wc -l <"$tune/results.csv") - 1))
  [ "$rows" -ge 2 ] && break
  kill -0 $pid 2>/dev/null || fail "the tune ended before two jobs settled"
  sleep 0.2
done
[ "$rows" -ge 2 ] || fail "two jobs did not settle within 120 s"
kill -9 $pid
wait $pid 2>/dev/null
for _ in $(seq 50); do
  pgrep -f "$tune/trial" >/dev/null || break
  sleep 0.2
done
pgrep -fa "$tune/trial" && fail "trial processes outlived the killed tune by 10 s"
settled=$(wc -l <"$tune/results.csv")
head -n "$settled" "$tune/results.csv" >"$dir/before.csv"
echo "tune_test: killed after $((settled - 1)) settled job(s)"

"$bin" tune "${args[@]}" --resume >"$dir/log" 2>&1 || fail "--resume exited non-zero"
cat "$dir/log"
head -n "$settled" "$tune/results.csv" | cmp -s - "$dir/before.csv" ||
  fail "the rows settled before the kill changed"
ran=$(($(grep -v ',carried,' "$tune/results.csv" | wc -l) - 1))
seeds=$(($(wc -l <"$tune/seeds.csv") - 1))
started=$(cat "$tune"/logs/*.log | grep -c '^== ')
echo "tune_test: $ran job(s) run, $seeds seed re-run(s), $started start(s)"
[ "$seeds" -eq 1 ] || fail "expected one seed re-run, got $seeds"
[ "$started" -eq $((ran + seeds + 1)) ] ||
  fail "$started job starts for $ran settled jobs + $seeds seed run + 1 in flight at the kill"

grep -q '# bigbatch tune' "$tune/best.toml" || fail "best.toml marks no tuned key"
grep -q '^\[tune\]' "$tune/best.toml" && fail "best.toml kept a [tune] table"
"$bin" train "$tune/best.toml" --set run.workers=1 --set train.epochs=1 \
  --set data.train_samples=512 --set data.eval_samples=500 --run-dir "$dir/best-run" -q \
  >"$dir/log" 2>&1 || fail "best.toml does not train"
/usr/bin/python3 -c "
import json, sys
b = json.load(open('$tune/best.json'))
assert len(b['runs']) == 2 and all(r['ok'] for r in b['runs']), b
assert 0.5 < b['mean_accuracy'] <= 1 and b['min_accuracy'] <= b['max_accuracy'], b
assert all(r['complete'] for r in b['runs']) and b['mean_over_runs'] == 2, b
assert all(v.split('=')[0] in ('optim.lr', 'schedule.warmup_epochs') for v in b['values']), b
" || fail "best.json"
"$bin" plot "$tune" -o "$dir/plots" >"$dir/log" 2>&1 || fail "plot of the tune directory"
[ -s "$dir/plots/accuracy.png" ] || fail "no accuracy.png"

"$bin" tune "$config" --param optim.nope=1:2 --dir "$dir/bad" >"$dir/log" 2>&1
[ $? -eq 1 ] && grep -q "optim.nope" "$dir/log" || fail "an unknown --param key is not named"
"$bin" tune "$config" --param train.batch_size=32:128 --dir "$dir/bad" >"$dir/log" 2>&1
[ $? -eq 1 ] && grep -q "lo:hi:int" "$dir/log" || fail "a real range on a whole-number key is not refused"
"$bin" tune "$config" --param optim.lr=0.05:0.3:log --objective time --parallel 2 \
  --dir "$dir/bad" >"$dir/log" 2>&1
[ $? -eq 1 ] && grep -q -- "--parallel 1 with --objective time" "$dir/log" ||
  fail "--objective time with --parallel 2 is not refused"
[ -e "$dir/bad" ] && fail "a refused tune created its directory"
"$bin" tune "${common[@]}" --trials 5 --resume >"$dir/log" 2>&1
[ $? -eq 1 ] && grep -q "trials" "$dir/log" || fail "--resume with other settings is not refused"
rm -rf "$dir"
echo "tune_test: ok"
