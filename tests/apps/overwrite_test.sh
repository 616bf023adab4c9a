#!/bin/bash
# A rerun in the directory of an earlier run is a new run, with checkpoints
# of its own. A 3-epoch run leaves checkpoints up to step 48; the same
# --run-dir with --overwrite and 1 epoch removes them (said in one line),
# and its own checkpoints stay — none pruned in favour of the old run's
# higher steps, `latest` naming a file that exists. A third run there that
# fails (a thrown fault at step 13, after step 12's checkpoint) is resumed
# by `--resume auto` from its own checkpoint, to the uninterrupted run's
# weights; and `--resume auto` with another configuration is refused,
# naming the keys, where `--resume PATH` continues with them.
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
"$bin" train "$config" "${common[@]}" --set train.epochs=1 --run-dir "$dir/run" --overwrite \
  --set fault.kind=throw --set fault.rank=0 --set fault.step=13 >"$dir/log3" 2>&1 &&
  fail "the faulty run exited 0"
[ "$(steps_in "$dir/run")" = "8 12 " ] || fail "the failed run left checkpoints at steps $(steps_in "$dir/run")"
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
rm -rf "$dir"
echo "overwrite_test: ok"
