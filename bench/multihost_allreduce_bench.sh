#!/usr/bin/env bash
# Allreduce across emulated hosts, side by side in one run (root): every
# bigbatch algorithm and MPI_Allreduce (`bigbatch bench allreduce`), then
# PyTorch's gloo allreduce (bench/pytorch_allreduce.py) on the same ranks and
# links; a table of busbw per size with bigbatch's best ÷ MPI and ÷ gloo.
#   bench/multihost_allreduce_bench.sh [HOSTS] [RANKS_PER_HOST] [RATE] [MIN] [MAX] [OUT_DIR]
#   (defaults: 2 2 1gbit 4K 256M runs/multihost_allreduce)
# Sizes step x2; 5 timed calls per size and algorithm after one warm-up
# (a 256 MiB call takes ~2 s through a 1 Gb/s link: ~4 minutes in all).
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=${1:-2}
per=${2:-2}
rate=${3:-1gbit}
min=${4:-4K}
max=${5:-256M}
out=${6:-runs/multihost_allreduce}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"
bytes() { numfmt --from=iec "$1"; }
cluster=(scripts/emulated_cluster --hosts "$hosts" --ranks-per-host "$per" --rate "$rate" --)

"${cluster[@]}" build/apps/bigbatch bench allreduce --json --no-memcpy --warmup 1 --iters 5 \
  --algorithms auto,ring,halving_doubling,recursive_doubling,hierarchical,mpi \
  --min-bytes "$min" --max-bytes "$max" >"$out/bigbatch.jsonl"
"${cluster[@]}" /usr/bin/python3 bench/pytorch_allreduce.py --min-bytes "$(bytes "$min")" \
  --max-bytes "$(bytes "$max")" --bytes-per-size 1 --warmup 1 >"$out/gloo.jsonl"

/usr/bin/python3 - "$out" "$hosts" "$per" "$rate" <<'EOF'
import json, sys
out, hosts, per, rate = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{out}/bigbatch.jsonl") if l.startswith("{")]
gloo = {r["bytes"]: r for r in (json.loads(l) for l in open(f"{out}/gloo.jsonl") if l.startswith("{"))}
algos = ["auto", "ring", "halving_doubling", "recursive_doubling", "hierarchical", "mpi"]
table = {}
for r in rows:
    table.setdefault(r["bytes"], {})[r["algorithm"]] = r
print(f"# {hosts} hosts x {per} ranks, {rate} links; busbw GB/s")
print(f"{'bytes':>10} " + " ".join(f"{a[:9]:>9}" for a in algos) + f" {'gloo':>9} {'best/MPI':>9} {'best/gloo':>9} {'wrong':>5}")
for size in sorted(table):
    t = table[size]
    bb = [t[a]["busbw"] for a in algos[:-1] if a in t]
    best = max(bb) if bb else 0
    mpi = t.get("mpi", {}).get("busbw", 0)
    g = gloo.get(size, {})
    wrong = sum(t[a]["wrong"] for a in t) + g.get("wrong", 0)
    cells = " ".join(f"{t[a]['busbw']:>9.3f}" if a in t else f"{'':>9}" for a in algos)
    print(f"{size:>10} {cells} {g.get('busbw', 0):>9.3f} "
          f"{best / mpi if mpi else 0:>9.2f} {best / g['busbw'] if g else 0:>9.2f} {wrong:>5}")
EOF
