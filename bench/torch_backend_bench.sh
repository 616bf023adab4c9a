#!/usr/bin/env bash
# The same PyTorch DDP script (bench/pytorch_ddp.py) on the "bigbatch"
# torch.distributed backend and on gloo, side by side in one run: what a
# user gets by changing init_process_group's backend. gloo at its best for
# the case: pinned one rank a core and tcmalloc (LD_PRELOAD) on one host,
# and each of PyTorch's own hooks (none, fp16_compress_hook, powerSGD_hook
# rank 4 from step 2) on the emulated links, its best one named.
#
# Rows (img/s of the timed steps after as many warm-up steps; the slowest
# rank's time; batch 64 per rank, 1 thread per rank, synthetic 1x28x28):
#   1x2   one host, 2 ranks, the default recipe's 35.7 k-parameter CNN:
#         gloo none | bigbatch none
#   2x1   2 emulated hosts x 1 rank at RATE (default 1gbit), the CNN with
#         model hidden 350000 (26.3 M parameters, 105 MB of gradients):
#         gloo none, fp16, powersgd | bigbatch none, bb_fp16, bb_powersgd
#   2x2   2 emulated hosts x 2 ranks at RATE, the same model:
#         gloo none, fp16, powersgd | bigbatch none, bb_fp16
# A row that fails or passes LIMIT_S (default 300 s) is shown as failed,
# with its log in OUT_DIR.
# Usage: bench/torch_backend_bench.sh [RATE] [OUT_DIR]   (root: network namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
out=${2:-runs/torch_backend_bench}
limit=${LIMIT_S:-300}
scripts/build --target bigbatch_torch >/dev/null
mkdir -p "$out"
rm -f "$out/rows.jsonl"
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
pypath=$PWD/build/python

# row NAME LAYOUT BACKEND HOOK STEPS HIDDEN: runs it, appends a JSON row.
row() {
  local name=$1 layout=$2 backend=$3 hook=$4 steps=$5 hidden=$6
  local -a launch
  if [ "$layout" = 1x2 ]; then
    launch=(mpirun --allow-run-as-root -np 2 --bind-to core)
  else
    launch=(scripts/emulated_cluster --hosts 2 --ranks-per-host "${layout#2x}" --rate "$rate" --)
  fi
  local img_s=null
  if "${launch[@]}" env PYTHONPATH="$pypath" LD_PRELOAD="$tcmalloc" timeout "$limit" \
      /usr/bin/python3 bench/pytorch_ddp.py --mpi --ifname "$([ "$layout" = 1x2 ] && echo lo || echo eth0)" \
      --master "$([ "$layout" = 1x2 ] && echo 127.0.0.1 || echo '')" \
      --backend "$backend" --hook "$hook" --model cnn --hidden "$hidden" --batch 64 --threads 1 \
      --steps "$steps" --warmup "$steps" --powersgd-rank 4 --powersgd-start 2 \
      >"$out/$name.log" 2>&1; then
    img_s=$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]["img_s"])' "$out/$name.log")
  else
    echo "row $name failed; see $out/$name.log" >&2
  fi
  echo "{\"name\": \"$name\", \"layout\": \"$layout\", \"backend\": \"$backend\", \"hook\": \"$hook\", \"img_s\": $img_s}" \
    >>"$out/rows.jsonl"
}

row 1x2_gloo_none 1x2 gloo none 200 0
row 1x2_bigbatch_none 1x2 bigbatch none 200 0
for hook in none fp16 powersgd; do row "2x1_gloo_$hook" 2x1 gloo "$hook" 15 350000; done
for hook in none bb_fp16 bb_powersgd; do row "2x1_bigbatch_$hook" 2x1 bigbatch "$hook" 15 350000; done
for hook in none fp16 powersgd; do row "2x2_gloo_$hook" 2x2 gloo "$hook" 15 350000; done
for hook in none bb_fp16; do row "2x2_bigbatch_$hook" 2x2 bigbatch "$hook" 15 350000; done

/usr/bin/python3 - "$out/rows.jsonl" "$rate" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"| layout | backend | hook | img/s | vs gloo none | vs gloo's best |  (links: {sys.argv[2]})")
print("|---|---|---|---:|---:|---:|")
for layout in ("1x2", "2x1", "2x2"):
    mine = [r for r in rows if r["layout"] == layout]
    gloo = [r for r in mine if r["backend"] == "gloo"]
    none = next((r["img_s"] for r in gloo if r["hook"] == "none"), None)
    ok = [r for r in gloo if r["img_s"]]
    best = max(ok, key=lambda r: r["img_s"]) if ok else None
    for r in mine:
        v = r["img_s"]
        fmt = lambda base: f"{v / base:.2f}x" if v and base else "-"
        print(f"| {layout} | {r['backend']} | {r['hook']} | {f'{v:.0f}' if v else 'failed'} | "
              f"{fmt(none)} | {fmt(best['img_s'] if best else None)} |")
    if best:
        print(f"| {layout} | | gloo's best: {best['hook']} | | | |")
EOF
