#!/bin/bash
# Weak scaling of data-parallel training: the default recipe's model and
# per-worker batch (64 images, 1 thread per worker) on N workers of this
# machine, synthetic data (no I/O), 3 epochs of 8192 images per worker;
# img/s from each run's summary.json. Writes CSV (workers,img_s,
# global_batch,threads_per_rank) and scaling.png via `bigbatch plot`.
#   bench/scaling.sh [OUT_DIR] [WORKERS...]   (default: runs/scaling, 1 2)
set -eu
out=${1:-runs/scaling}
shift || true
workers=("$@"); [ ${#workers[@]} -gt 0 ] || workers=(1 2)
mkdir -p "$out"
csv=$out/scaling.csv
echo "workers,img_s,global_batch,threads_per_rank" > "$csv"
for n in "${workers[@]}"; do
  build/apps/bigbatch train configs/default.toml --workers "$n" --run-dir "$out/np$n" --overwrite -q \
    --set data.dataset=synthetic --set data.train_samples=$((8192 * n)) --set data.eval_samples=1024 \
    --set train.epochs=3 --set train.stop_at_target=false --set run.threads=1 \
    --set ckpt.every_epochs=0
  /usr/bin/python3 -c "import json,sys; s=json.load(open('$out/np$n/summary.json')); print(f\"{s['world_size']},{s['throughput_img_s']:.1f},{s['global_batch_size']},{s['threads_per_rank']}\")" >> "$csv"
done
cat "$csv"
build/apps/bigbatch plot "$csv" -o "$out"
