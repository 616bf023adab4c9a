#!/bin/bash
# What frequent checkpoints cost the default recipe (configs/default.toml,
# 2 workers, 1 epoch: 469 steps of global batch 128): ROUNDS rounds, each
# running in turn
#   none        ckpt.every_epochs = 0 (only the final checkpoint),
#   background  ckpt.every_steps = 50, ckpt.background = true (the default),
#   sync        ckpt.every_steps = 50, ckpt.background = false,
# interleaved so that the machine's drift hits every mode alike. Per mode:
# the median of train_time_s / steps (run_start to run_stop, the epoch's
# evaluation and the final checkpoint in every mode), its ratio to none, and
# the seconds the steps waited for checkpoints (summary.json's
# checkpoint_wait_s) per checkpoint and as a share of the training time.
#   bench/checkpoint_cost.sh [ROUNDS] [EVERY_STEPS]   (from the repo root)
set -u
rounds=${1:-5}; every=${2:-50}
bin=build/apps/bigbatch; config=configs/default.toml
dir=$(mktemp -d)
modes=(none background sync)
declare -A opts=(
  [none]="--set ckpt.every_epochs=0"
  [background]="--set ckpt.every_epochs=0 --set ckpt.every_steps=$every --set ckpt.background=true"
  [sync]="--set ckpt.every_epochs=0 --set ckpt.every_steps=$every --set ckpt.background=false"
)
for r in $(seq 1 "$rounds"); do
  for m in "${modes[@]}"; do
    # shellcheck disable=SC2086
    "$bin" train "$config" --workers 2 --set train.epochs=1 --set train.stop_at_target=false \
      ${opts[$m]} --run-dir "$dir/$m-$r" -q || { echo "FAIL: $m round $r"; exit 1; }
  done
done
/usr/bin/python3 - "$dir" "$rounds" "${modes[@]}" <<'PY'
import json, statistics, sys
d, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def runs(m):
    return [json.load(open(f"{d}/{m}-{r}/summary.json")) for r in range(1, rounds + 1)]
step = {m: statistics.median(s["train_time_s"] / s["steps"] for s in runs(m)) for m in modes}
print("| mode | checkpoints | ms per step (median of %d) | ÷ none | wait per checkpoint, ms | wait ÷ training time |" % rounds)
print("|---|---|---|---|---|---|")
for m in modes:
    s = runs(m)
    n = s[0]["checkpoints"]
    wait = statistics.median(x["checkpoint_wait_s"] for x in s)
    share = statistics.median(x["checkpoint_wait_s"] / x["train_time_s"] for x in s)
    print(f"| {m} | {n} | {1000 * step[m]:.2f} | {step[m] / step['none']:.3f} | "
          f"{1000 * wait / n:.2f} | {100 * share:.2f} % |")
PY
rm -rf "$dir"
