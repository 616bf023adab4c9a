#!/bin/bash
# `bigbatch plan` against a step across emulated hosts (root): on 2 hosts x
# 1 rank joined by a RATE link (scripts/emulated_cluster, tbf), in one run:
#   1. an allreduce sweep across the hosts (ring, recursive_doubling,
#      1 KiB..1 MiB) and `plan --calibrate` on it: the inter-node α and β;
#   2. the default recipe on one worker with 1 thread (SAMPLES images, 1
#      epoch): one device's img/s at batch 64;
#   3. `plan --model cnn --devices 2 --devices-per-node 1` with that rate and
#      the fitted link: the predicted img/s;
#   4. the recipe on the 2 hosts, 1 thread each: the measured img/s.
#   bench/plan_check_multihost.sh [RATE] [SAMPLES] [OUT_DIR]
#   (defaults: 50mbit 16384 runs/plan_check_multihost)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-50mbit}
samples=${2:-16384}
out=${3:-runs/plan_check_multihost}
bin=build/apps/bigbatch
py=/usr/bin/python3
mkdir -p "$out"
cluster=(scripts/emulated_cluster --hosts 2 --ranks-per-host 1 --rate "$rate" --)

"${cluster[@]}" "$bin" bench allreduce --json --no-memcpy --algorithms ring,recursive_doubling \
  --min-bytes 1K --max-bytes 1M > "$out/allreduce.jsonl"
"$bin" plan --calibrate "$out/allreduce.jsonl" | tee "$out/fit.txt"
"$bin" plan --calibrate "$out/allreduce.jsonl" --json > "$out/fit.jsonl"
read -r lat gbps < <($py -c "
import json
r = [json.loads(l) for l in open('$out/fit.jsonl')]
r = [x for x in r if x['algorithm'] == 'all'][0]
print(r['latency_us'], r['gbps'])")

sets=(--set data.train_samples="$samples" --set data.eval_samples=1000 --set train.epochs=1
      --set train.stop_at_target=false --set run.threads=1 --set ckpt.every_epochs=0)
"$bin" train configs/default.toml --workers 1 --run-dir "$out/np1" --overwrite -q "${sets[@]}"
one=$($py -c "import json; print(json.load(open('$out/np1/summary.json'))['throughput_img_s'])")
"$bin" plan --model cnn --devices 2 --devices-per-node 1 --device-img-s "$one" \
  --batch-per-device 64 --inter-gbps "$gbps" --inter-latency-us "$lat" --fusion-mb 1 \
  --epochs 1 --dataset-size "$samples" --json > "$out/plan.json"
"${cluster[@]}" "$bin" train configs/default.toml --run-dir "$out/hosts" --overwrite -q "${sets[@]}"
$py - "$out" "$rate" <<'EOF'
import json, sys
out, rate = sys.argv[1], sys.argv[2]
one = json.load(open(f"{out}/np1/summary.json"))["throughput_img_s"]
two = json.load(open(f"{out}/hosts/summary.json"))["throughput_img_s"]
p = json.load(open(f"{out}/plan.json"))
print(f"link {rate}: 1 worker measured {one:.1f} img/s")
print(f"2 hosts predicted {p['img_s']:.1f} img/s (step {p['step_time_s']*1e3:.2f} ms: compute "
      f"{p['compute_s']*1e3:.2f}, exposed exchange {p['exposed_exchange_s']*1e3:.2f}, "
      f"sync {p['sync_s']*1e3:.2f})")
print(f"2 hosts measured  {two:.1f} img/s")
print(f"predicted / measured {p['img_s'] / two:.3f}")
EOF
