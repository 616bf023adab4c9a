#!/bin/bash
# The device curve of `bigbatch plan` (src/plan/device_curve.h) against this
# machine's own CPU: `bigbatch bench step` measures one rank's training rate
# at each batch of a sweep; then, leaving one batch out at a time, plan fits
# a fixed cost per step plus a cost per image to the others and predicts the
# one left out. Prints measured, predicted and their ratio per batch, and the
# fit on every point with its residuals. Target (issue 71): within ±10 % at
# a batch left out of the fit.
#
#   bench/device_curve_check.sh [BIGBATCH] [BATCHES] [IMAGES] [ROUNDS]
#     BIGBATCH  the binary (build/apps/bigbatch)
#     BATCHES   the sweep (8,16,32,64,128,256)
#     IMAGES    images of the warm-up and of the timed epoch at every batch
#               (16384: a small batch's epoch is as long as a large one's)
#     ROUNDS    rounds of the whole sweep, interleaved; each batch's rate is
#               its median (3)
# MODEL (env): bench step's model, cnn (the default recipe's) or resnet; on
# 28 x 28 images, fp32, one thread (run.threads = 1: a rank of the main job).
set -euo pipefail
bin=${1:-build/apps/bigbatch}
batches=${2:-8,16,32,64,128,256}
images=${3:-16384}
rounds=${4:-3}
model=${MODEL:-cnn}
rows=""
for _ in $(seq 1 "$rounds"); do
  for b in ${batches//,/ }; do
    rows+=$("$bin" bench step --model "$model" --device cpu --precisions fp32 --size 28 --batch "$b" \
      --steps $((images / b)) --set run.threads=1 --json)$'\n'
  done
done
echo "# bench step --model $model --device cpu --precisions fp32 --size 28 --set run.threads=1: $images images an epoch, batches $batches, median of $rounds interleaved rounds ($(date -u +%FT%TZ))"
/usr/bin/python3 - "$bin" "$rows" "$model" <<'PY'
import json, subprocess, sys
import statistics
binary, text, model = sys.argv[1], sys.argv[2], sys.argv[3]
rates = {}
for r in map(json.loads, filter(None, text.splitlines())):
    if r.get("input") == "resident":
        rates.setdefault(r["batch"], []).append(r["img_s"])
points = [(b, statistics.median(v)) for b, v in sorted(rates.items())]
def predict(fit, batch):
    spec = ",".join(f"{rate}@{b}" for b, rate in fit)
    out = subprocess.run([binary, "plan", "--model", model, "--devices", "1", "--device-img-s", spec,
                          "--batch-per-device", str(batch), "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])
print(f"{'batch':>6} {'measured':>10} {'predicted':>10} {'ratio':>7}   (fitted on the other batches)")
worst = 0
for i, (b, rate) in enumerate(points):
    row = predict(points[:i] + points[i + 1:], b)
    ratio = row["device_img_s"] / rate
    worst = max(worst, abs(ratio - 1))
    print(f"{b:>6} {rate:>10.1f} {row['device_img_s']:>10.1f} {ratio:>7.3f}")
whole = predict(points, points[0][0])
print(f"all points: step = {1e3 * whole['device_fixed_s']:.3f} ms + {1e3 * whole['device_per_image_s']:.4f} ms x B")
print(f"worst left-out error {100 * worst:.1f} % (target: within 10 %)")
PY
