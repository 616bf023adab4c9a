#!/usr/bin/env bash
# Training throughput on a folder of JPEGs at 224x224, side by side in one
# script run: `bigbatch train` with data.dataset = "folder" on a generated
# folder of photo-like 500x375 JPEGs (bench/make_jpeg_folder.py, quality 90,
# 10 classes), random-resized crop to 224 and flip, one worker on every core
# (run.threads = all), for each of
#   model     resnet50 (ResNet-50 v1.5) | resnet (the small ResNet, widths 16-32-64)
#   pipeline  inline (data.*_threads = 0: each batch decoded on the training
#             thread) | threaded (1 read, 2 decode, 1 augment thread)
# STEPS steps of BATCH images each (epoch 1, so no decoded-image cache
# helps). Prints img/s and the data wait — the share of the training time
# each step waited for its batch (metrics.csv data_s / epoch_time_s).
# Usage: bench/image_train_bench.sh [STEPS] [BATCH] [FOLDER]
#        (defaults: 4 16 /tmp/bigbatch-jpeg-split; the folder is made if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
batch=${2:-16}
folder=${3:-/tmp/bigbatch-jpeg-split}
bin=build/apps/bigbatch
scripts/build --target bigbatch >/dev/null
/usr/bin/python3 -c 'import PIL, numpy' 2>/dev/null || {
  echo "installing python3-pil and python3-numpy (apt) for the folder generator" >&2
  ${SUDO:-$( [ "$(id -u)" = 0 ] || echo sudo)} apt-get install -y -q --no-install-recommends python3-pil python3-numpy >&2
}
if [ ! -d "$folder/train" ]; then
  /usr/bin/python3 bench/make_jpeg_folder.py "$folder/train" --images 1000 >&2
  /usr/bin/python3 bench/make_jpeg_folder.py "$folder/val" --images 100 --seed 2 >&2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf "%-9s %-9s %10s %10s %12s\n" model pipeline img/s data_wait step_s
for model in resnet50 resnet; do
  for pipeline in inline threaded; do
    threads=(--set data.read_threads=0 --set data.decode_threads=0 --set data.augment_threads=0)
    [ "$pipeline" = threaded ] &&
      threads=(--set data.read_threads=1 --set data.decode_threads=2 --set data.augment_threads=1)
    "$bin" train configs/default.toml --workers 1 --run-dir "$out/$model-$pipeline" --overwrite -q \
      --set data.dataset=folder --set data.path="$folder" --set model.name="$model" \
      --set model.image_size=224 --set train.batch_size="$batch" --set train.epochs=1 \
      --set data.train_samples=$((steps * batch)) --set data.eval_samples=16 \
      --set train.eval_batch_size=16 --set schedule.warmup_epochs=0 \
      --set train.stop_at_target=false --set ckpt.every_epochs=0 "${threads[@]}"
    /usr/bin/python3 - "$out/$model-$pipeline/metrics.csv" "$model" "$pipeline" "$steps" <<'EOF'
import csv, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
t, data = float(row["epoch_time_s"]), float(row["data_s"])
print(f"{sys.argv[2]:<9} {sys.argv[3]:<9} {float(row['img_s']):10.1f} {100 * data / t:9.1f}% "
      f"{t / int(sys.argv[4]):12.2f}")
EOF
  done
done
