#!/usr/bin/env bash
# bigbatch against PyTorch DDP (gloo) on the SAME emulated links, and what
# each part of bigbatch's exchange contributes — side by side in one run
# (root: scripts/emulated_cluster builds network namespaces and tc links).
#
# Models (both sides build the same architecture, batch 64 per rank, 1
# thread per rank, synthetic 1x28x28 data, SGD + Nesterov):
#   cnn     the default recipe's 35.7 k-parameter CNN           (143 KB of gradients)
#   big     the same CNN with model.hidden = 350000: 26.3 M     (105 MB: ResNet-50-sized
#           parameters, mostly one 64x350000 layer                gradients, little compute)
# Rows (img/s of the second epoch for bigbatch, of the timed steps after as
# many warm-up steps for PyTorch; the slowest rank's time):
#   2 hosts x 1 rank at RATE (default 1gbit) for `big`, at CNN_RATE (default
#   50mbit, where the CNN's exchange is a third of its step) for `cnn`:
#     pytorch none      DistributedDataParallel, gloo, 25 MB buckets (its default)
#     pytorch fp16      the same with its fp16_compress_hook
#     pytorch powersgd  the same with its powerSGD_hook, rank 4, from step 2
#                  (every ratio is given against PyTorch's default and
#                  against its best of the three, named under each group;
#                  a PyTorch row that fails or passes PT_LIMIT_S, default
#                  240 s, is shown as failed)
#     bb fp32      bigbatch as configured by configs/default.toml (64 KiB
#                  buckets, overlap, comm.allreduce = auto), fp32 on the wire
#     bb fp16      the same with ddp.exchange_dtype = fp16 (its accuracy cost
#                  on the main job: -0.08 points, docs/BENCHMARKS.md)
#     no overlap   fp16, ddp.overlap = false (every bucket after backward)
#     1 MiB, 25 MiB, auto   fp16 with those ddp.fusion_bytes
#   2 hosts x 2 ranks at RATE, `big` (4 ranks on this machine's 2 cores:
#   compute is shared, the link is what differs):
#     pytorch none, fp16, powersgd   gloo's ring over 4 ranks (2 of its 4
#                  hops cross the link), with each hook as above
#     bb ring      comm.allreduce = ring, flat over the 4 ranks, fp32
#     bb hier      comm.allreduce = hierarchical (shared memory in the host,
#                  one ring between the hosts' leaders), fp32, then fp16
# Usage: bench/multihost_ddp_bench.sh [RATE] [CNN_RATE] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
cnn_rate=${2:-50mbit}
out=${3:-runs/multihost_ddp_bench}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"
rm -f "$out/rows.jsonl"
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
big_steps=15
cnn_steps=100
pt_limit=${PT_LIMIT_S:-240}

# row NAME MODEL HOSTSxRANKS RATE -- command...: runs it on the cluster, appends a JSON row.
bigbatch_row() {  # name model ranks_per_host rate steps hidden sets...
  local name=$1 model=$2 rph=$3 link=$4 steps=$5 hidden=$6
  shift 6
  local dir="$out/$name"
  scripts/emulated_cluster --hosts 2 --ranks-per-host "$rph" --rate "$link" -- \
    build/apps/bigbatch train configs/default.toml --run-dir "$dir" --overwrite -q \
    --set data.dataset=synthetic --set run.threads=1 --set train.batch_size=64 \
    --set train.epochs=2 --set train.eval_every=100 --set data.eval_samples=256 \
    --set train.stop_at_target=false --set ckpt.every_epochs=0 \
    --set data.train_samples=$((steps * 64 * 2 * rph)) --set model.hidden="$hidden" "$@" \
    >"$dir.log" 2>&1 || { echo "bigbatch row $name failed; see $dir.log" >&2; exit 1; }
  /usr/bin/python3 - "$dir" "$name" "$model" "$rph" "$link" >>"$out/rows.jsonl" <<'EOF'
import csv, json, sys
d, name, model, rph, link = sys.argv[1:]
rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
r = rows[-1]
s = json.load(open(f"{d}/summary.json"))
print(json.dumps({"name": name, "model": model, "hosts_x_ranks": f"2x{rph}", "link": link,
                  "img_s": float(r["img_s"]), "epoch_s": float(r["epoch_time_s"]),
                  "comm_wait_max_s": float(r["comm_wait_max_s"]),
                  "fusion_bytes": s["fusion_bytes"]}))
EOF
}

pytorch_row() {  # name model ranks_per_host rate steps hidden hook
  local name=$1 model=$2 rph=$3 link=$4 steps=$5 hidden=$6 hook=$7
  if ! scripts/emulated_cluster --hosts 2 --ranks-per-host "$rph" --rate "$link" -- \
      env LD_PRELOAD="$tcmalloc" timeout "$pt_limit" /usr/bin/python3 bench/pytorch_ddp.py --mpi \
      --model cnn --hidden "$hidden" --batch 64 --threads 1 --steps "$steps" --warmup "$steps" \
      --hook "$hook" --powersgd-rank 4 --powersgd-start 2 >"$out/$name.log" 2>&1; then
    echo "pytorch row $name failed; see $out/$name.log" >&2
    echo "{\"name\": \"$name\", \"model\": \"$model\", \"hosts_x_ranks\": \"2x$rph\", \"link\": \"$link\", \"img_s\": null}" \
      >>"$out/rows.jsonl"
    return 0
  fi
  /usr/bin/python3 - "$out/$name.log" "$name" "$model" "$rph" "$link" >>"$out/rows.jsonl" <<'EOF'
import json, sys
log, name, model, rph, link = sys.argv[1:]
r = [json.loads(l) for l in open(log) if l.startswith("{")][-1]
print(json.dumps({"name": name, "model": model, "hosts_x_ranks": f"2x{rph}", "link": link,
                  "img_s": r["img_s"]}))
EOF
}

pytorch_rows() {  # prefix model ranks_per_host rate steps hidden: PyTorch with each hook
  for hook in none fp16 powersgd; do
    pytorch_row "$1_pytorch_$hook" "$2" "$3" "$4" "$5" "$6" "$hook"
  done
}

# The CNN where its exchange matters, then ResNet-50-sized gradients.
pytorch_rows cnn cnn 1 "$cnn_rate" $cnn_steps 0
bigbatch_row cnn_bb_fp32 cnn 1 "$cnn_rate" $cnn_steps 0
bigbatch_row cnn_bb_fp16 cnn 1 "$cnn_rate" $cnn_steps 0 --set ddp.exchange_dtype=fp16
bigbatch_row cnn_bb_fp16_no_overlap cnn 1 "$cnn_rate" $cnn_steps 0 --set ddp.exchange_dtype=fp16 \
  --set ddp.overlap=false
bigbatch_row cnn_bb_fp16_1MiB cnn 1 "$cnn_rate" $cnn_steps 0 --set ddp.exchange_dtype=fp16 \
  --set ddp.fusion_bytes=1048576
bigbatch_row cnn_bb_fp16_auto cnn 1 "$cnn_rate" $cnn_steps 0 --set ddp.exchange_dtype=fp16 \
  --set ddp.fusion_bytes=auto

pytorch_rows big big 1 "$rate" $big_steps 350000
bigbatch_row big_bb_fp32 big 1 "$rate" $big_steps 350000
bigbatch_row big_bb_fp16 big 1 "$rate" $big_steps 350000 --set ddp.exchange_dtype=fp16
bigbatch_row big_bb_fp16_no_overlap big 1 "$rate" $big_steps 350000 \
  --set ddp.exchange_dtype=fp16 --set ddp.overlap=false
bigbatch_row big_bb_fp16_25MiB big 1 "$rate" $big_steps 350000 --set ddp.exchange_dtype=fp16 \
  --set ddp.fusion_bytes=26214400

pytorch_rows big2 big 2 "$rate" $big_steps 350000
bigbatch_row big2_bb_ring_fp32 big 2 "$rate" $big_steps 350000 --set comm.allreduce=ring
bigbatch_row big2_bb_hier_fp32 big 2 "$rate" $big_steps 350000 --set comm.allreduce=hierarchical
bigbatch_row big2_bb_hier_fp16 big 2 "$rate" $big_steps 350000 --set comm.allreduce=hierarchical \
  --set ddp.exchange_dtype=fp16

/usr/bin/python3 - "$out/rows.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# Per (model, layout): PyTorch's default (no hook) and its best hook.
groups = {}
for r in rows:
    key = (r["model"], r["hosts_x_ranks"])
    g = groups.setdefault(key, {"none": None, "best": None})
    if "_pytorch_" in r["name"] and r["img_s"]:
        if r["name"].endswith("_none"):
            g["none"] = r["img_s"]
        if g["best"] is None or r["img_s"] > g["best"]["img_s"]:
            g["best"] = r
print(f"{'row':<26} {'model':<5} {'hosts':<5} {'link':<7} {'img/s':>8} {'vs pt none':>10} "
      f"{'vs pt best':>10} {'exposed':>8} {'fusion':>9}")
last = None
for r in rows:
    key = (r["model"], r["hosts_x_ranks"])
    g = groups[key]
    if last is not None and key != last and groups[last]["best"]:
        print(f"  PyTorch's best for {last[0]} {last[1]}: {groups[last]['best']['name']}")
    last = key
    v = r["img_s"]
    img = f"{v:8.1f}" if v else "  failed"
    vs_none = f"{v / g['none']:9.2f}x" if v and g["none"] else ""
    vs_best = f"{v / g['best']['img_s']:9.2f}x" if v and g["best"] else ""
    exposed = f"{r['comm_wait_max_s'] / r['epoch_s']:.0%}" if "epoch_s" in r else ""
    print(f"{r['name']:<26} {r['model']:<5} {r['hosts_x_ranks']:<5} {r['link']:<7} "
          f"{img} {vs_none:>10} {vs_best:>10} {exposed:>8} {r.get('fusion_bytes', ''):>9}")
if last is not None and groups[last]["best"]:
    print(f"  PyTorch's best for {last[0]} {last[1]}: {groups[last]['best']['name']}")
EOF
