#!/usr/bin/env bash
# Mixed precision, side by side in one script run (this machine is noisy:
# compare within a run). For each model (the default CNN, 35.7 k parameters,
# and a 696 k-parameter ResNet [32,64,128]x[2,2,2]), 2 ranks x 1 thread,
# batch 64 per rank, synthetic 1x28x28 data, one variant after another,
# `rounds` times in turn (ABCD ABCD ...), each figure the mean over rounds:
#   fp32          fp32 compute, fp32 on the wire
#   fp16_wire     fp16 on the wire (pre-divided, fp32 accumulate) + dynamic loss scaling
#   bf16_wire     bf16 on the wire
#   bf16_compute  bf16 convolutions/matmuls (autocast) on fp32 masters, fp32 on the wire
# Reported from each run's second epoch of `steps` steps (the first warms
# up): img/s, forward and backward ms per step, exposed communication (the
# time a step waited on the exchange) as a share of the epoch, min and max
# over the ranks, and the gradient bytes each rank hands to the allreduce
# per step (summary.json exchange_bytes_per_step).
# Usage: bench/amp_bench.sh [steps] [rounds] [models]   (defaults: 100 2 "cnn resnet")
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-100}
rounds=${2:-2}
models=${3:-cnn resnet}
batch=64
scripts/build --target bigbatch >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # name model_args...
  local name=$1
  shift
  build/apps/bigbatch train configs/default.toml --workers 2 --run-dir "$out/$name" \
    --overwrite -q --set data.dataset=synthetic --set run.threads=1 \
    --set train.batch_size=$batch --set train.epochs=2 --set train.eval_every=100 \
    --set data.eval_samples=1024 --set train.stop_at_target=false \
    --set data.train_samples=$((steps * batch * 2)) "$@"
  local bytes
  bytes=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["exchange_bytes_per_step"])' \
          "$out/$name/summary.json")
  awk -F, -v steps="$steps" -v bytes="$bytes" 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
    $1 == 2 {printf "%.1f %.3f %.3f %.4f %.4f %d\n", $c["img_s"], 1000 * $c["forward_s"] / steps,
             1000 * $c["backward_s"] / steps, $c["comm_wait_min_s"] / $c["epoch_time_s"],
             $c["comm_wait_max_s"] / $c["epoch_time_s"], bytes}' "$out/$name/metrics.csv"
}

variants=(fp32 fp16_wire bf16_wire bf16_compute)
args_of() {
  case $1 in
    fp32) echo "" ;;
    fp16_wire) echo "--set ddp.exchange_dtype=fp16" ;;
    bf16_wire) echo "--set ddp.exchange_dtype=bf16" ;;
    bf16_compute) echo "--set amp.precision=bf16" ;;
  esac
}

printf "%-7s %-13s %9s %8s %10s %11s %12s %12s %14s\n" model variant img_s vs_fp32 fwd_ms/step \
  bwd_ms/step exposed_min exposed_max wire_B/step
for model in $models; do
  if [ "$model" = cnn ]; then margs=(--set model.name=cnn); else
    margs=(--set model.name=resnet --set "model.widths=[32,64,128]" --set "model.blocks=[2,2,2]"); fi
  : > "$out/$model.txt"
  for ((r = 0; r < rounds; r++)); do
    for v in "${variants[@]}"; do
      # shellcheck disable=SC2046
      echo "$v $(run "$model-$v" "${margs[@]}" $(args_of "$v"))" >> "$out/$model.txt"
    done
  done
  awk -v m="$model" '{n[$1]++; for (k = 2; k <= 7; k++) s[$1, k] += $k}
    END {
      split("fp32 fp16_wire bf16_wire bf16_compute", order, " ")
      base = s["fp32", 2] / n["fp32"]
      for (i = 1; i <= 4; i++) {
        v = order[i]
        printf "%-7s %-13s %9.0f %7.2fx %10.2f %11.2f %11.1f%% %11.1f%% %14d\n", m, v,
               s[v, 2] / n[v], (s[v, 2] / n[v]) / base, s[v, 3] / n[v], s[v, 4] / n[v],
               100 * s[v, 5] / n[v], 100 * s[v, 6] / n[v], s[v, 7] / n[v]
      }
    }' "$out/$model.txt"
done
