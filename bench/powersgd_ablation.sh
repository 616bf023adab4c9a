#!/usr/bin/env bash
# What each part of bigbatch's PowerSGD buys (ddp.compression = powersgd):
# its rank (1, 2, 4, 8), error feedback, warm-started Q, and its factors in
# 16 bits (ddp.exchange_dtype = fp16) — in img/s and in accuracy, side by
# side in one run.
#   img/s:    the 26 M-parameter CNN (model.hidden = 350000) on 2 emulated
#             hosts x 1 rank at RATE (default 1gbit; root), as
#             bench/compression_bench.sh runs it, second epoch;
#   accuracy: configs/fast.toml (the main job's recipe) on 2 workers of this
#             host for its whole 3 epochs (train.stop_at_target = false), the
#             final test accuracy against the same recipe uncompressed, and
#             the main job's fp32 bytes over its bytes on the wire.
# Usage: bench/powersgd_ablation.sh [RATE] [SEED] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
seed=${2:-1}
out=${3:-runs/powersgd_ablation}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"

variants=("r1:--set ddp.powersgd_rank=1"
          "r2:--set ddp.powersgd_rank=2"
          "r4:--set ddp.powersgd_rank=4"
          "r8:--set ddp.powersgd_rank=8"
          "r4_no_error_feedback:--set ddp.powersgd_rank=4 --set ddp.powersgd_error_feedback=false"
          "r4_no_warm_start:--set ddp.powersgd_rank=4 --set ddp.powersgd_warm_start=false"
          "r4_fp16_wire:--set ddp.powersgd_rank=4 --set ddp.exchange_dtype=fp16"
          "r2_fp16_wire:--set ddp.powersgd_rank=2 --set ddp.exchange_dtype=fp16")

throughput() {  # name sets...
  local name=$1 dir="$out/speed_$1"
  shift
  scripts/emulated_cluster --hosts 2 --ranks-per-host 1 --rate "$rate" -- \
    build/apps/bigbatch train configs/default.toml --run-dir "$dir" --overwrite -q \
    --set data.dataset=synthetic --set run.threads=1 --set train.batch_size=64 \
    --set train.epochs=2 --set train.eval_every=100 --set data.eval_samples=256 \
    --set train.stop_at_target=false --set ckpt.every_epochs=0 \
    --set data.train_samples=1920 --set model.hidden=350000 "$@" >"$dir.log" 2>&1
  /usr/bin/python3 -c "import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]['img_s'])" \
    "$dir/metrics.csv"
}

accuracy() {  # name sets...
  local name=$1 dir="$out/acc_$1"
  shift
  build/apps/bigbatch train configs/fast.toml --workers 2 --run-dir "$dir" --overwrite -q \
    --set run.seed="$seed" --set train.stop_at_target=false "$@" >"$dir.log" 2>&1
  /usr/bin/python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
print(f\"{100 * s['final_accuracy']:.2f} {s['compression_ratio']:.2f}\")" "$dir/summary.json"
}

printf "%-24s %9s %10s %12s\n" variant "img/s big" "acc fast" "fp32/wire"
read -r acc ratio < <(accuracy fp32)
printf "%-24s %9s %9s%% %12s\n" "uncompressed (fp32)" "$(throughput fp32)" "$acc" "$ratio"
for v in "${variants[@]}"; do
  name=${v%%:*}
  # shellcheck disable=SC2086
  sets=(--set ddp.compression=powersgd --set ddp.powersgd_start_step=2 ${v#*:})
  speed=$(throughput "$name" "${sets[@]}")
  read -r acc ratio < <(accuracy "$name" "${sets[@]}")
  printf "%-24s %9s %9s%% %12s\n" "$name" "$speed" "$acc" "$ratio"
done
