#!/bin/bash
# Dynamic loss scaling with fp16 on the wire, 2 workers under mpirun:
#  1. a scale of 2^24 overflows fp16 in the exchange: steps are skipped, the
#     scale backs off (metrics.csv: skipped_steps, loss_scale) and training
#     still learns;
#  2. stopped mid-epoch and resumed, the run ends with the same weights and
#     the same skipped steps and scales (the scaler state is checkpointed);
#  3. overflowing at the scale's floor is a divergence: a non-zero exit whose
#     message names the floor.
#   loss_scale_np2_test.sh BIGBATCH_BINARY CONFIG
set -u
bin=$1; config=$2
dir=$(mktemp -d)
common=(--workers 2 -q --set data.train_samples=4096 --set data.eval_samples=1000
        --set train.epochs=2 --set train.stop_at_target=false --set train.batch_size=128
        --set ddp.exchange_dtype=fp16 --set amp.init_scale=16777216 --set amp.growth_interval=8
        --set ckpt.every_steps=5)
"$bin" train "$config" "${common[@]}" --run-dir "$dir/reference" || { echo "FAIL: reference run"; exit 1; }
cat "$dir/reference/metrics.csv"
/usr/bin/python3 - "$dir/reference" <<'PY' || exit 1
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/metrics.csv")))
skipped = sum(int(r["skipped_steps"]) for r in rows)
scales = [float(r["loss_scale"]) for r in rows]
ok = True
if skipped < 1:
    print("FAIL: no step was skipped at loss scale 2^24 with fp16 on the wire"); ok = False
for s in scales:
    if not (1 <= s <= 2**24) or abs(math.log2(s) - round(math.log2(s))) > 1e-9:
        print("FAIL: loss_scale", s, "is not a power of two in [1, 2^24]"); ok = False
# 32 steps in all: far from converged, but learning despite the skips.
if float(rows[-1]["test_acc"]) < 0.3 or float(rows[1]["train_loss"]) >= float(rows[0]["train_loss"]):
    print("FAIL: not learning: test accuracy", rows[-1]["test_acc"], "losses",
          rows[0]["train_loss"], rows[1]["train_loss"]); ok = False
print("skipped", skipped, "scales", scales)
sys.exit(0 if ok else 1)
PY
# 4096 / 256 = 16 steps per epoch; the fault at step 23 leaves step 20's checkpoint.
"$bin" train "$config" "${common[@]}" --run-dir "$dir/resumed" \
  --set fault.kind=throw --set fault.rank=1 --set fault.step=23 >"$dir/log1" 2>&1
[ $? -ne 0 ] || { echo "FAIL: the faulty run exited 0"; cat "$dir/log1"; exit 1; }
"$bin" train "$config" "${common[@]}" --run-dir "$dir/resumed" --resume auto >"$dir/log2" 2>&1 || {
  echo "FAIL: the resumed run failed"; cat "$dir/log2"; exit 1; }
cmp "$dir/reference/model.pt" "$dir/resumed/model.pt" || { echo "FAIL: final weights differ after resume"; exit 1; }
cols() { cut -d, -f1-6,18- "$1"; }
diff <(cols "$dir/reference/metrics.csv") <(cols "$dir/resumed/metrics.csv") || {
  echo "FAIL: metrics (skipped steps, loss scale) differ after resume"; exit 1; }
# At the floor an overflow is not the scale's fault.
"$bin" train "$config" "${common[@]}" --run-dir "$dir/floor" --set amp.min_scale=16777216 \
  >"$dir/log3" 2>&1
[ $? -ne 0 ] || { echo "FAIL: an overflow at the loss-scale floor exited 0"; cat "$dir/log3"; exit 1; }
grep -q "non-finite gradient at epoch 1 step 1 .*at the loss-scale floor 1.67772e+07" "$dir/log3" || {
  echo "FAIL: the error does not name the floor"; cat "$dir/log3"; exit 1; }
rm -rf "$dir"
echo "loss_scale_np2_test: ok"
