#!/bin/bash
# Time to 92 % Fashion-MNIST test accuracy on 2 workers: bigbatch recipes
# against PyTorch DDP (gloo, 2 ranks x 1 thread, tcmalloc) running the
# standard recipe (bench/pytorch_train.py: the default recipe's model,
# batch 128, SGD Nesterov 0.9, 0.5-epoch warmup, cosine over 10 epochs,
# label smoothing 0.1, flips), side by side in one run: for each seed,
# PyTorch then each recipe, so drift of the machine hits all alike.
# PYTORCH_RECIPE=fast runs PyTorch on configs/fast.toml's recipe instead
# (bench/pytorch_train.py --recipe fast): the same model and schedule on
# both sides, what the system gives apart from what the recipe gives.
#
#   bench/time_to_accuracy.sh "SEEDS" RECIPE.toml...
#   e.g. bench/time_to_accuracy.sh "1 2 3" configs/default.toml tune/default/best.toml
#        PYTORCH_RECIPE=fast bench/time_to_accuracy.sh "1 2 3" configs/fast.toml
#
# Every time is run_start (the barrier before the first step) to the end of
# the evaluation that first reaches 92 %; each run stops there (a run that
# never reaches it counts its whole time and is marked). Prints one row per
# run, then per system the mean and its ratio to PyTorch's mean.
set -eu
cd "$(dirname "$0")/.."
seeds=$1; shift
recipes=("$@")
[ ${#recipes[@]} -gt 0 ] || { echo "usage: $0 \"SEEDS\" RECIPE.toml..." >&2; exit 2; }
bin=build/apps/bigbatch
pytorchRecipe=${PYTORCH_RECIPE:-default}
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
out=$(mktemp -d)
rows=$out/rows
printf "%-28s %4s %6s %9s %8s %8s\n" system seed epochs "to 92 %" reached "wall s"
for seed in $seeds; do
  start=$(date +%s.%N)
  env ${tcmalloc:+LD_PRELOAD=$tcmalloc} OMP_NUM_THREADS=1 /usr/bin/python3 bench/pytorch_train.py \
    --recipe "$pytorchRecipe" --seed "$seed" > "$out/pt$seed.log" 2>&1
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  read -r t e ok < <(tail -1 "$out/pt$seed.log" | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
print(r["time_to_target_s"] if r["reached_target"] else r["train_time_s"], r["epochs"], r["reached_target"])')
  printf "%-28s %4s %6s %9.1f %8s %8.1f\n" pytorch_ddp "$seed" "$e" "$t" "$ok" "$wall" | tee -a "$rows"
  for recipe in "${recipes[@]}"; do
    name=$(basename "$(dirname "$recipe")")/$(basename "$recipe" .toml)
    run=$out/run-$seed-${#name}-$RANDOM
    start=$(date +%s.%N)
    "$bin" train "$recipe" --set run.seed="$seed" --run-dir "$run" -q > "$run.log" 2>&1
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    read -r t e ok < <(/usr/bin/python3 -c "
import json
r = json.load(open('$run/summary.json'))
print(r['time_to_target_s'] if r['reached_target'] else r['train_time_s'], r['epochs'], r['reached_target'])")
    printf "%-28s %4s %6s %9.1f %8s %8.1f\n" "$name" "$seed" "$e" "$t" "$ok" "$wall" | tee -a "$rows"
  done
done
echo
/usr/bin/python3 - "$rows" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
means = {}
for r in rows:
    means.setdefault(r[0], []).append(float(r[3]))
base = sum(means["pytorch_ddp"]) / len(means["pytorch_ddp"])
for system, v in means.items():
    m = sum(v) / len(v)
    print(f"mean {system:28s} {m:7.1f} s over {len(v)} seed(s)  ratio to PyTorch {m / base:.3f}")
EOF
rm -rf "$out"
