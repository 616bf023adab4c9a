#!/bin/bash
# Three workers under mpirun with the allreduce tuned online (comm.allreduce
# = auto, comm.allreduce_tune = true, the defaults): on 3 ranks the
# candidate algorithms add in different orders, so a resumed run is
# bit-exact only if it keeps the algorithms the interrupted run chose. A
# run resumed from the uninterrupted run's own mid-epoch checkpoint (after
# tuning has chosen: 18 exchanges, 3 candidates x 6 calls) must end with
# the same weights (rank 0's model.pt, byte for byte) and the same
# per-epoch metrics.
#   resume_np3_test.sh BIGBATCH_BINARY CONFIG
set -u
bin=$1; config=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# 3072 images / (3 x 64) = 16 steps per epoch; checkpoints every 4 steps, all kept.
common=(--workers 3 --set data.train_samples=3072 --set data.eval_samples=600
        --set train.epochs=2 --set train.stop_at_target=false --set train.batch_size=64
        --set ckpt.every_steps=4 --set ckpt.keep=100)
"$bin" train "$config" "${common[@]}" --run-dir "$dir/reference" >"$dir/log" 2>&1 || {
  echo "FAIL: reference run"; cat "$dir/log"; exit 1; }
# The tuner's choices: summary.json's allreduce_tuned (train.log has them too).
tuned=$(/usr/bin/python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["allreduce_tuned"]))' \
  "$dir/reference/summary.json") || { echo "FAIL: no summary.json"; cat "$dir/log"; exit 1; }
[ -n "$tuned" ] || { echo "FAIL: the reference run's allreduce was not tuned"; cat "$dir/log"; exit 1; }
echo "$tuned"
ckpt="$dir/reference/checkpoints/ckpt-000000024.pt"
[ -f "$ckpt" ] || { echo "FAIL: no checkpoint of step 24"; ls "$dir/reference/checkpoints"; exit 1; }
mkdir -p "$dir/resumed/checkpoints"
cp "$ckpt" "$dir/resumed/checkpoints/"
"$bin" train "$config" "${common[@]}" -q --run-dir "$dir/resumed" \
  --resume "$dir/resumed/checkpoints" >"$dir/log2" 2>&1 || {
  echo "FAIL: the resumed run failed"; cat "$dir/log2"; exit 1; }
cmp "$dir/reference/model.pt" "$dir/resumed/model.pt" || { echo "FAIL: final weights differ"; exit 1; }
# Epoch 2, every column that is not a time.
cols() { tail -n 1 "$1" | cut -d, -f1-6,18-; }
diff <(cols "$dir/reference/metrics.csv") <(cols "$dir/resumed/metrics.csv") || {
  echo "FAIL: epoch 2's metrics differ"; exit 1; }
cols "$dir/resumed/metrics.csv"
echo "resume_np3_test: ok"
