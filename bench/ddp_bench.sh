#!/usr/bin/env bash
# Data-parallel throughput, side by side in one script run (this machine is
# noisy: compare within a run). For each model (the default CNN, 35.7 k
# parameters, and a 696 k-parameter ResNet [32,64,128]x[2,2,2]):
#   bigbatch      2 ranks x 1 thread, batch 64 per rank, synthetic 1x28x28 data
#   ceiling       2 x the img/s of 1 rank x 1 thread training alone, same batch
#   independent   two such 1-rank runs at once, pinned to the two cores, no
#                 exchange: what sharing the L3 and memory bus alone costs
#   pytorch_ddp   PyTorch DistributedDataParallel (gloo), same model, batch,
#                 threads and allocator (tcmalloc via LD_PRELOAD)
# bigbatch figures are its second epoch of `steps` steps (the first warms up);
# exposed communication = the time a rank's step waited on the exchange.
# The machine's speed drifts by 5-20 % within minutes, so each model runs
# `rounds` times, its four measurements per round back to back, and the
# last line per model is the median of every column over the rounds (the
# ratios are medians of the per-round ratios).
# Usage: bench/ddp_bench.sh [steps] [models] [rounds]   (defaults: 100 "cnn resnet" 3)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-100}
models=${2:-cnn resnet}
rounds=${3:-3}
batch=64
scripts/build --target bigbatch >/dev/null
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bigbatch_run() {  # name workers model_args...
  local name=$1 workers=$2
  shift 2
  build/apps/bigbatch train configs/default.toml --workers "$workers" --run-dir "$out/$name" \
    --overwrite -q --set data.dataset=synthetic --set run.threads=1 \
    --set train.batch_size=$batch --set train.epochs=2 --set train.eval_every=100 \
    --set data.eval_samples=1024 --set train.stop_at_target=false \
    --set data.train_samples=$((steps * batch * workers)) "$@"
  # Epoch 2: img/s, and the exposed communication as a share of the epoch.
  awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next} $1 == 2 {
      printf "%.0f %.4f %.4f\n", $c["img_s"], $c["comm_wait_min_s"] / $c["epoch_time_s"],
             $c["comm_wait_max_s"] / $c["epoch_time_s"]}' "$out/$name/metrics.csv"
}

printf "%-7s %-6s %9s %9s %12s %12s %8s %11s %15s %12s %12s\n" model round bigbatch ceiling \
  independent pytorch_ddp vs_ddp vs_ceiling vs_independent exposed_min exposed_max
for model in $models; do
  if [ "$model" = cnn ]; then margs=(--set model.name=cnn); else
    margs=(--set model.name=resnet --set "model.widths=[32,64,128]" --set "model.blocks=[2,2,2]"); fi
  : > "$out/rows"
  for round in $(seq "$rounds"); do
    read -r bb emin emax < <(bigbatch_run "$model-2" 2 "${margs[@]}")
    read -r one _ _ < <(bigbatch_run "$model-1" 1 "${margs[@]}")
    # Each subshell pins itself (and so its bigbatch) to one core.
    (taskset -p -c 0 $BASHPID >/dev/null; bigbatch_run "$model-i0" 1 "${margs[@]}" > "$out/i0") &
    (taskset -p -c 1 $BASHPID >/dev/null; bigbatch_run "$model-i1" 1 "${margs[@]}" > "$out/i1") &
    wait
    ind=$(cat "$out/i0" "$out/i1" | awk '{s += $1} END {print s}')
    pt=$(env ${tcmalloc:+LD_PRELOAD=$tcmalloc} OMP_NUM_THREADS=1 /usr/bin/python3 bench/pytorch_ddp.py \
         --model "$model" --batch $batch --steps "$steps" --ranks 2 --threads 1 |
         /usr/bin/python3 -c 'import json,sys; print(round(json.loads(sys.stdin.readline())["img_s"]))')
    awk -v bb="$bb" -v one="$one" -v pt="$pt" -v emin="$emin" -v emax="$emax" -v ind="$ind" 'BEGIN {
      print bb, 2 * one, ind, pt, bb / pt, bb / (2 * one), bb / ind, 100 * emin, 100 * emax}' \
      >> "$out/rows"
    tail -1 "$out/rows" | awk -v m="$model" -v r="$round" '{
      printf "%-7s %-6s %9.0f %9.0f %12.0f %12.0f %7.2fx %10.2fx %14.2fx %11.1f%% %11.1f%%\n",
             m, r, $1, $2, $3, $4, $5, $6, $7, $8, $9}'
  done
  # Median of each column over the rounds.
  for col in $(seq 9); do sort -g -k"$col,$col" "$out/rows" | awk -v c="$col" \
    '{v[NR] = $c} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; done |
    paste -sd' ' | awk -v m="$model" '{
      printf "%-7s %-6s %9.0f %9.0f %12.0f %12.0f %7.2fx %10.2fx %14.2fx %11.1f%% %11.1f%%\n",
             m, "median", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
done
