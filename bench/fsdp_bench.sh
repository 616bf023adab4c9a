#!/usr/bin/env bash
# FSDP2 over the "bigbatch" torch.distributed backend against FSDP2 over
# gloo, side by side in one run: the same script (bench/pytorch_ddp.py
# --fsdp: fully_shard on each top-level layer and the model), only the
# backend changed, on 2 emulated hosts x 2 ranks at RATE (default 1gbit;
# scripts/emulated_cluster, ranks started over ssh, not bound to cores).
# The CNN with model hidden 350000 (26.3 M parameters: each step
# all-gathers every layer's parameters for forward and again for backward,
# and reduce-scatters its gradients), batch 64 per rank, 1 thread per rank,
# synthetic 1x28x28; img/s of STEPS timed steps after as many warm-up steps
# (the slowest rank's time). gloo at its setting for CPU tensors (its own
# TCP transport on the cluster's eth0, the store on host 0), tcmalloc
# preloaded on both sides. ROUNDS rounds (default 3), the two rows
# interleaved; the table gives each row's median (lowest-highest).
# PYTHON: the interpreter of a PyTorch 2.7+ environment with bigbatch_torch
# (default build-torch2/venv/bin/python, scripts/setup-torch2).
# Usage: bench/fsdp_bench.sh [RATE] [OUT_DIR]   (root: network namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
out=${2:-runs/fsdp_bench}
rounds=${ROUNDS:-3}
steps=${STEPS:-15}
limit=${LIMIT_S:-400}
python=${PYTHON:-$PWD/build-torch2/venv/bin/python}
[ -x "$python" ] || { echo "no $python: run scripts/setup-torch2 (or set PYTHON)" >&2; exit 2; }
"$python" -c 'from torch.distributed.fsdp import fully_shard; import bigbatch_torch' ||
  { echo "$python lacks FSDP2 or bigbatch_torch (PyTorch 2.7+; scripts/setup-torch2)" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out/rows.jsonl"
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
. bench/openblas_coretype.sh  # OpenBLAS's kernels for this CPU, on both sides

row() {  # row BACKEND: one run, one JSON row
  local backend=$1 img_s=null log="$out/$1.round$round.log"
  if scripts/emulated_cluster --hosts 2 --ranks-per-host 2 --rate "$rate" -- \
      env LD_PRELOAD="$tcmalloc" ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE} \
      timeout "$limit" "$python" bench/pytorch_ddp.py --mpi --ifname eth0 --fsdp \
      --backend "$backend" --model cnn --hidden 350000 --batch 64 --threads 1 \
      --steps "$steps" --warmup "$steps" >"$log" 2>&1; then
    img_s=$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "img_s" in l][-1]["img_s"])' "$log") ||
      { img_s=null; echo "row $backend printed no img/s in round $round; see $log" >&2; }
  else
    echo "row $backend failed in round $round; see $log" >&2
  fi
  echo "{\"backend\": \"$backend\", \"round\": $round, \"img_s\": $img_s}" >>"$out/rows.jsonl"
}

for round in $(seq 1 "$rounds"); do
  echo "round $round of $rounds ($(date +%H:%M:%S))" >&2
  row gloo
  row bigbatch
done

/usr/bin/python3 - "$out/rows.jsonl" "$rate" "$("$python" -c 'import torch; print(torch.__version__)')" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def stats(b):
    ok = [r["img_s"] for r in rows if r["backend"] == b and r["img_s"]]
    failed = sum(1 for r in rows if r["backend"] == b and not r["img_s"])
    return (statistics.median(ok), min(ok), max(ok), failed) if ok else (None, None, None, failed)
g, b = stats("gloo"), stats("bigbatch")
print(f"FSDP2, 2 hosts x 2 ranks at {sys.argv[2]}, PyTorch {sys.argv[3]}")
print("| backend | img/s, median (lowest-highest) | rounds failed | vs gloo |")
print("|---|---:|---:|---:|")
for name, s in (("gloo", g), ("bigbatch", b)):
    ratio = f"{s[0] / g[0]:.2f}x" if s[0] and g[0] else "-"
    shown = f"{s[0]:.1f} ({s[1]:.1f}-{s[2]:.1f})" if s[0] else "failed"
    print(f"| {name} | {shown} | {s[3]} | {ratio} |")
PY
