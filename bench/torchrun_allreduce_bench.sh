#!/usr/bin/env bash
# Leaving MPI costs nothing? Allreduce on 2 emulated hosts x 1 rank, side by
# side in one run per link rate (root):
#   bigbatch/UCX   bigbatch's algorithms on the UCX transport (the default
#                  of torchrun starts), torchrun on each host
#                  (scripts/torchrun_hosts: no MPI)
#   bigbatch/Gloo  the same on Gloo's TCP transport (BIGBATCH_TRANSPORT=gloo)
#   bigbatch/MPI   the same algorithms on MPI, started by mpirun
#   MPI_Allreduce  OpenMPI's own, in the same mpirun job
#   gloo           PyTorch's gloo backend at its best: started by torchrun (no
#                  core binding, no bigbatch group in the process),
#                  bench/pytorch_allreduce.py
# A table of busbw per size, each side its best algorithm: bigbatch/UCX ÷
# gloo (target >= 1.0), bigbatch/UCX ÷ bigbatch/MPI (target >= 0.95), and
# bigbatch/Gloo ÷ gloo (the transports compared with the codec held equal).
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
  for transport in ucx gloo; do
    "${cluster[@]}" --launcher -- scripts/torchrun_hosts --env BIGBATCH_TRANSPORT=$transport \
      --torchrun-arg --no_python -- "$PWD/build/apps/bigbatch" "${common[@]}" --algorithms "$algos" \
      >"$out/${transport}_$rate.jsonl"
  done
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
def best(rs, b):
    return max((r for r in rs if r["bytes"] == b and r["algorithm"] not in ("mpi", "memcpy")),
               key=lambda r: r["busbw"])
for rate in rates:
    u, g, m = (rows(f"{out}/{n}_{rate}.jsonl") for n in ("ucx", "gloo", "mpi"))
    torch = {r["bytes"]: r for r in rows(f"{out}/pytorch_gloo_{rate}.jsonl")}
    print(f"\n2 hosts x 1 rank, {rate} links; busbw GB/s, each bigbatch column its best algorithm")
    print(f"{'bytes':>10} {'bb/UCX':>8} {'bb/Gloo':>8} {'bb/MPI':>8} {'MPI_Allr':>8} {'gloo':>8} "
          f"{'UCX÷gloo':>8} {'UCX÷MPI':>8} {'Gloo÷gloo':>9} {'wrong':>5}")
    for b in sorted({r["bytes"] for r in u}):
        bu, bg, bm = best(u, b), best(g, b), best(m, b)
        mpi = next((r for r in m if r["bytes"] == b and r["algorithm"] == "mpi"), {"busbw": 0})
        t = torch.get(b, {"busbw": 0, "wrong": 0})
        wrong = sum(r["wrong"] for r in u + g + m if r["bytes"] == b) + t["wrong"]
        ratio = lambda a, c: a / c if c else 0
        print(f"{b:>10} {bu['busbw']:>8.3f} {bg['busbw']:>8.3f} {bm['busbw']:>8.3f} {mpi['busbw']:>8.3f} "
              f"{t['busbw']:>8.3f} {ratio(bu['busbw'], t['busbw']):>8.2f} "
              f"{ratio(bu['busbw'], bm['busbw']):>8.2f} {ratio(bg['busbw'], t['busbw']):>9.2f} {wrong:>5}")
PY
