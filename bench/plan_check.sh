#!/bin/bash
# `bigbatch plan` against this machine, in one run:
#   1. a 2-rank allreduce sweep (ring, halving_doubling, recursive_doubling,
#      1 KiB..16 MiB) and `plan --calibrate` on it: α and β of the intra-node
#      level (shared memory between two processes);
#   2. the default recipe on ONE worker with 1 thread (real Fashion-MNIST,
#      EPOCHS epochs, no early stop): one device's img/s at batch 64;
#   3. `plan` for 2 devices on one node with the fitted link: predicted img/s;
#   4. the same recipe on TWO workers, 1 thread each: measured img/s;
# and prints predicted ÷ measured (the acceptance: within ±15 %).
#   bench/plan_check.sh [OUT_DIR] [EPOCHS]   (default: runs/plan_check, 2)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/plan_check}
epochs=${2:-2}
bin=build/apps/bigbatch
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"

mpirun -np 2 --bind-to none "$bin" bench allreduce --json --no-memcpy \
  --algorithms ring,halving_doubling,recursive_doubling --min-bytes 1K --max-bytes 16M \
  > "$out/allreduce.jsonl"
"$bin" plan --calibrate "$out/allreduce.jsonl" | tee "$out/fit.txt"
"$bin" plan --calibrate "$out/allreduce.jsonl" --json > "$out/fit.jsonl"
read -r lat gbps < <($py -c "
import json
rows = [json.loads(l) for l in open('$out/fit.jsonl')]
r = [r for r in rows if r['algorithm'] == 'all'][0]
print(r['latency_us'], r['gbps'])")

train() {  # train WORKERS DIR
  "$bin" train configs/default.toml --workers "$1" --run-dir "$2" --overwrite -q \
    --set train.epochs="$epochs" --set train.stop_at_target=false --set run.threads=1 \
    --set ckpt.every_epochs=0
}
rate() { $py -c "import json; print(json.load(open('$1/summary.json'))['throughput_img_s'])"; }

train 1 "$out/np1"
one=$(rate "$out/np1")
"$bin" plan --model cnn --devices 2 --devices-per-node 2 --device-img-s "$one" \
  --batch-per-device 64 --intra-gbps "$gbps" --intra-latency-us "$lat" --fusion-mb 1 \
  --epochs "$epochs" --dataset-size 60000 --eval-size 10000 | tee "$out/plan.txt"
"$bin" plan --model cnn --devices 2 --devices-per-node 2 --device-img-s "$one" \
  --batch-per-device 64 --intra-gbps "$gbps" --intra-latency-us "$lat" --fusion-mb 1 \
  --epochs "$epochs" --dataset-size 60000 --eval-size 10000 --json > "$out/plan.json"
train 2 "$out/np2"
$py - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
one = json.load(open(f"{out}/np1/summary.json"))["throughput_img_s"]
two = json.load(open(f"{out}/np2/summary.json"))["throughput_img_s"]
plan = json.load(open(f"{out}/plan.json"))
pred = plan["img_s"]
print(f"1 worker measured      {one:10.1f} img/s (the plan's --device-img-s)")
print(f"2 workers predicted    {pred:10.1f} img/s (step {plan['step_time_s']*1e3:.2f} ms: "
      f"exposed exchange {plan['exposed_exchange_s']*1e3:.3f} ms, sync {plan['sync_s']*1e3:.3f} ms)")
print(f"2 workers measured     {two:10.1f} img/s")
print(f"predicted / measured   {pred / two:10.3f}")
EOF
