#!/usr/bin/env bash
# Leaving MPI costs nothing? Allreduce on 2 emulated hosts x 1 rank, side by
# side in one run per link rate (root):
#   bigbatch/Gloo  bigbatch's algorithms on the Gloo transport, started by
#                  torchrun on each host (scripts/torchrun_hosts: no MPI)
#   bigbatch/MPI   the same algorithms on MPI, started by mpirun
#   MPI_Allreduce  OpenMPI's own, in the same mpirun job
#   gloo           PyTorch's gloo backend at its best: started by torchrun (no
#                  core binding, no bigbatch group in the process),
#                  bench/pytorch_allreduce.py
# A table of busbw per size; bigbatch/Gloo ÷ gloo (target >= 1.0) and
# bigbatch/Gloo ÷ bigbatch/MPI (target >= 0.95), each side its best algorithm.
#   bench/torchrun_allreduce_bench.sh [RATES] [MIN] [MAX] [OUT_DIR]
#   (defaults: "10gbit 1gbit" 4K 256M runs/torchrun_allreduce)
set -euo pipefail
cd "$(dirname "$0")/.."
rates=${1:-10gbit 1gbit}
min=${2:-4K}
max=${3:-256M}
out=${4:-runs/torchrun_allreduce}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"
bytes() { numfmt --from=iec "$1"; }
algos=auto,ring,halving_doubling,recursive_doubling
common=(bench allreduce --json --no-memcpy --warmup 1 --iters 5 --min-bytes "$min" --max-bytes "$max")
for rate in $rates; do
  cluster=(scripts/emulated_cluster --hosts 2 --rate "$rate")
  "${cluster[@]}" --launcher -- scripts/torchrun_hosts --torchrun-arg --no_python -- \
    "$PWD/build/apps/bigbatch" "${common[@]}" --algorithms "$algos" >"$out/gloo_transport_$rate.jsonl"
  "${cluster[@]}" -- build/apps/bigbatch "${common[@]}" --algorithms "$algos,mpi" \
    >"$out/mpi_$rate.jsonl"
  "${cluster[@]}" --launcher -- scripts/torchrun_hosts -- "$PWD/bench/pytorch_allreduce.py" \
    --min-bytes "$(bytes "$min")" --max-bytes "$(bytes "$max")" --bytes-per-size 1 --warmup 1 \
    >"$out/pytorch_gloo_$rate.jsonl"
done

/usr/bin/python3 - "$out" $rates <<'PY'
import json, sys
out, rates = sys.argv[1], sys.argv[2:]
def rows(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]
for rate in rates:
    g, m = rows(f"{out}/gloo_transport_{rate}.jsonl"), rows(f"{out}/mpi_{rate}.jsonl")
    torch = {r["bytes"]: r for r in rows(f"{out}/pytorch_gloo_{rate}.jsonl")}
    best = lambda rs, b: max((r for r in rs if r["bytes"] == b and r["algorithm"] not in ("mpi", "memcpy")),
                             key=lambda r: r["busbw"])
    print(f"\n2 hosts x 1 rank, {rate} links; busbw GB/s (best algorithm); any wrong element is counted")
    print(f"{'bytes':>10} {'bb/Gloo':>9} {'(algo)':>18} {'bb/MPI':>9} {'MPI_Allr':>9} {'gloo':>9} "
          f"{'÷gloo':>6} {'÷bb/MPI':>7} {'wrong':>5}")
    for b in sorted({r["bytes"] for r in g}):
        bg, bm = best(g, b), best(m, b)
        mpi = next((r for r in m if r["bytes"] == b and r["algorithm"] == "mpi"), {"busbw": 0, "wrong": 0})
        t = torch.get(b, {"busbw": 0, "wrong": 0})
        wrong = sum(r["wrong"] for r in g + m if r["bytes"] == b) + t["wrong"]
        print(f"{b:>10} {bg['busbw']:>9.3f} {bg['algorithm']:>18} {bm['busbw']:>9.3f} {mpi['busbw']:>9.3f} "
              f"{t['busbw']:>9.3f} {bg['busbw'] / t['busbw'] if t['busbw'] else 0:>6.2f} "
              f"{bg['busbw'] / bm['busbw']:>7.2f} {wrong:>5}")
PY
