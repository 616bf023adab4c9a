#!/bin/bash
# A rerun in the directory of an earlier run is a new run, with checkpoints
# of its own. A 3-epoch run leaves checkpoints up to step 48; the same
# --run-dir with --overwrite and 1 epoch removes them (said in one line),
# and its own checkpoints stay — none pruned in favour of the old run's
# higher steps, `latest` naming a file that exists. A third run there that
# fails (a thrown fault at step 13, after step 12's checkpoint) is resumed
# by `--resume auto` from its own checkpoint, to the uninterrupted run's
# weights; and `--resume auto` with another configuration is refused,
# naming the keys, where `--resume PATH` continues with them. --overwrite
# removes the earlier run's other files too (model.pt, train.log's lines,
# restarts.json, mlperf.log.N), and in a ckpt.dir shared by two runs only
# its own run's checkpoints.
#   overwrite_test.sh BIGBATCH_BINARY CONFIG
set -u
bin=$1; config=$2
dir=$(mktemp -d)
fail() { echo "FAIL: $*"; for f in "$dir"/log*; do echo "== $f"; cat "$f"; done; exit 1; }
# 1024 images, 64 per step: 16 steps an epoch; a checkpoint every 4 steps.
common=(--workers 1 --set data.train_samples=1024 --set data.eval_samples=500
        --set ckpt.every_steps=4 --set ckpt.keep=2 --set train.stop_at_target=false)
steps_in() { ls "$1/checkpoints" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.pt$/\1/p' | sort -n | tr '\n' ' '; }

"$bin" train "$config" "${common[@]}" --set train.epochs=3 --run-dir "$dir/run" >"$dir/log1" 2>&1 ||
  fail "the 3-epoch run failed"
[ "$(steps_in "$dir/run")" = "44 48 " ] || fail "the first run left checkpoints at steps $(steps_in "$dir/run")"

"$bin" train "$config" "${common[@]}" --set train.epochs=1 --run-dir "$dir/run" --overwrite \
  >"$dir/log2" 2>&1 || fail "the run with --overwrite failed"
grep -q "^--overwrite: removed the earlier run's 2 checkpoint(s) from $dir/run/checkpoints" "$dir/log2" ||
  fail "--overwrite did not say it removed the earlier checkpoints"
[ "$(steps_in "$dir/run")" = "12 16 " ] || fail "after --overwrite the checkpoints are at steps $(steps_in "$dir/run")"
latest=$(cat "$dir/run/checkpoints/latest")
[ -f "$dir/run/checkpoints/$latest" ] || fail "latest names '$latest', which does not exist"

# A failure, then --resume auto: the new run's own checkpoint (step 12).
# The earlier run's files go with --overwrite: its model.pt (which `bigbatch
# export` would otherwise export beside the new config), train.log's lines,
# a supervisor's restarts.json and attempt logs.
echo '[]' >"$dir/run/restarts.json"
echo 'an earlier attempt' >"$dir/run/mlperf.log.1"
"$bin" train "$config" "${common[@]}" --set train.epochs=1 --run-dir "$dir/run" --overwrite \
  --set fault.kind=throw --set fault.rank=0 --set fault.step=13 >"$dir/log3" 2>&1 &&
  fail "the faulty run exited 0"
[ "$(steps_in "$dir/run")" = "8 12 " ] || fail "the failed run left checkpoints at steps $(steps_in "$dir/run")"
for f in model.pt restarts.json mlperf.log.1; do
  [ -e "$dir/run/$f" ] && fail "--overwrite kept the earlier run's $f"
done
grep -q "checkpoint of step 12" "$dir/run/train.log" || fail "train.log has no line of this run"
grep -q "checkpoint of step 48" "$dir/run/train.log" && fail "train.log still holds the first run's lines"
"$bin" export "$dir/run" "$dir/exported.pt" >"$dir/log3e" 2>&1 &&
  fail "bigbatch export exported weights from a run that did not finish"
grep -q "holds no model.pt" "$dir/log3e" || fail "export did not say the run holds no model.pt"
"$bin" train "$config" "${common[@]}" --set train.epochs=1 --run-dir "$dir/run" --resume auto \
  >"$dir/log4" 2>&1 || fail "the resumed run failed"
grep -q "resuming from $dir/run/checkpoints/ckpt-000000012.pt" "$dir/log4" ||
  fail "--resume auto did not continue from the new run's step 12"
"$bin" train "$config" "${common[@]}" --set train.epochs=1 --run-dir "$dir/straight" >"$dir/log5" 2>&1 ||
  fail "the uninterrupted run failed"
cmp "$dir/run/model.pt" "$dir/straight/model.pt" || fail "the resumed run's weights differ from the uninterrupted run's"

# Another configuration: auto refuses and names the key; PATH continues.
"$bin" train "$config" "${common[@]}" --set train.epochs=2 --set optim.lr=0.2 --run-dir "$dir/run" \
  --resume auto >"$dir/log6" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "--resume auto of another configuration exited $rc, not 1"
grep -q "another configuration wrote (train.epochs (1 -> 2), optim.lr (0.1 -> 0.2))" "$dir/log6" ||
  fail "the refusal does not name the keys that differ"
grep -q -- "--resume $dir/run/checkpoints/ckpt-000000016.pt" "$dir/log6" || fail "the refusal does not give the fix"
"$bin" train "$config" "${common[@]}" --set train.epochs=2 --run-dir "$dir/run" \
  --resume "$dir/run/checkpoints/ckpt-000000016.pt" >"$dir/log7" 2>&1 || fail "--resume PATH with a change failed"
grep -q "config changed since the checkpoint (the continuation is not bit-exact): train.epochs (1 -> 2)" "$dir/log7" ||
  fail "--resume PATH did not report the change"
# A ckpt.dir shared by two runs: each checkpoint says which run wrote it.
# --overwrite of run B removes none of run A's; a new run B is refused
# there, naming A (its own would take A's names); --resume auto of B never
# takes A's; --overwrite of A removes only A's own.
shared=(--set ckpt.dir="$dir/shared" --set train.epochs=1)
"$bin" train "$config" "${common[@]}" "${shared[@]}" --run-dir "$dir/a" >"$dir/log8" 2>&1 ||
  fail "run A into the shared ckpt.dir failed"
[ "$(ls "$dir/shared" | grep -c '^ckpt-[0-9]*\.pt$')" = 2 ] || fail "run A left $(ls "$dir/shared") in the shared ckpt.dir"
"$bin" train "$config" "${common[@]}" "${shared[@]}" --run-dir "$dir/b" --overwrite >"$dir/log9" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "run B into another run's ckpt.dir exited $rc, not 1"
grep -q "holds checkpoints of another run ($dir/a)" "$dir/log9" || fail "the refusal does not name run A"
[ "$(ls "$dir/shared" | grep -c '^ckpt-[0-9]*\.pt$')" = 2 ] || fail "run B's --overwrite removed run A's checkpoints"
"$bin" train "$config" "${common[@]}" "${shared[@]}" --run-dir "$dir/b" --resume auto >"$dir/log10" 2>&1 &&
  fail "--resume auto of run B took run A's checkpoint"
grep -q "which another run wrote ($dir/a)" "$dir/log10" || fail "--resume auto of B does not name run A"
"$bin" train "$config" "${common[@]}" "${shared[@]}" --run-dir "$dir/a" --overwrite >"$dir/log11" 2>&1 ||
  fail "run A again with --overwrite failed"
grep -q "^--overwrite: removed the earlier run's 2 checkpoint(s) from $dir/shared" "$dir/log11" ||
  fail "--overwrite of run A did not remove its own checkpoints"
rm -rf "$dir"
echo "overwrite_test: ok"
