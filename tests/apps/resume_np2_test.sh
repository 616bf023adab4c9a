#!/bin/bash
# Two workers under mpirun: a run stopped by an injected fault on rank 1 in
# the middle of epoch 2, resumed with --resume auto, ends with the same
# weights (rank 0's model.pt, BatchNorm statistics included) and the same
# per-epoch metrics as an uninterrupted run; its checkpoint also resumes on
# one worker, keeping the global batch. Further arguments go to every run
# (resume_np2_powersgd: with PowerSGD, whose error memory and Q matrices
# the checkpoints carry).
#   resume_np2_test.sh BIGBATCH_BINARY CONFIG [--set KEY=VALUE ...]
set -u
bin=$1; config=$2; shift 2
dir=$(mktemp -d)
common=(--set data.train_samples=4096 --set data.eval_samples=1000
        --set train.epochs=2 --set train.stop_at_target=false --set train.batch_size=128
        --set ckpt.every_steps=5 "$@")
two=(--workers 2 -q)
# 4096 / 256 = 16 steps per epoch; the fault at step 23 leaves the mid-epoch
# checkpoint of step 20 as the newest.
"$bin" train "$config" "${common[@]}" "${two[@]}" --run-dir "$dir/reference" || { echo "FAIL: reference run"; exit 1; }
"$bin" train "$config" "${common[@]}" "${two[@]}" --run-dir "$dir/resumed" \
  --set fault.kind=throw --set fault.rank=1 --set fault.step=23 >"$dir/log1" 2>&1
[ $? -ne 0 ] || { echo "FAIL: the faulty run exited 0"; cat "$dir/log1"; exit 1; }
ls "$dir/resumed/checkpoints"
grep -q "ckpt-000000020.pt" "$dir/resumed/checkpoints/latest" || { echo "FAIL: latest is not step 20"; exit 1; }
# The same checkpoint on 1 worker keeps the global batch of 256 with 2
# accumulation steps, and says so.
mkdir -p "$dir/one"
cp -r "$dir/resumed/checkpoints" "$dir/one/"
"$bin" train "$config" "${common[@]}" --workers 1 --run-dir "$dir/one" \
  --resume "$dir/one/checkpoints" >"$dir/log-one" 2>&1 || { echo "FAIL: resume on 1 worker"; cat "$dir/log-one"; exit 1; }
grep -q "written by 2 rank(s): global batch 256 kept with 2 accumulation step(s)" "$dir/log-one" || {
  echo "FAIL: the world-size change is not reported"; cat "$dir/log-one"; exit 1; }
if [[ " $* " == *"ddp.compression=powersgd"* ]]; then
  grep -q "PowerSGD's error memory carried over, each rank taking 1/1 of the ranks' sum" "$dir/log-one" || {
    echo "FAIL: the error memory's carry is not reported"; cat "$dir/log-one"; exit 1; }
fi
"$bin" train "$config" "${common[@]}" "${two[@]}" --run-dir "$dir/resumed" --resume auto >"$dir/log2" 2>&1 || {
  echo "FAIL: the resumed run failed"; cat "$dir/log2"; exit 1; }
cmp "$dir/reference/model.pt" "$dir/resumed/model.pt" || { echo "FAIL: final weights differ"; exit 1; }
# Metrics: every column that is not a time.
cols() { cut -d, -f1-6,18- "$1"; }
diff <(cols "$dir/reference/metrics.csv") <(cols "$dir/resumed/metrics.csv") || {
  echo "FAIL: metrics differ"; exit 1; }
cols "$dir/resumed/metrics.csv"
rm -rf "$dir"
echo "resume_np2_test: ok"
