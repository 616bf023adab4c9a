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
#                  bench/pytorch_allreduce.py, timed as bigbatch's side is
#                  (--timing mean: the calls back to back, their mean, the
#                  slowest rank's); its median single call (--timing median,
#                  the link idle before each call) is printed beside it
# A table of busbw per size, each side its best algorithm: bigbatch/UCX ÷
# gloo (target >= 1.0), bigbatch/UCX ÷ bigbatch/MPI (target >= 0.95), and
# bigbatch/Gloo ÷ gloo (the transports compared with the codec held equal).
# ROUNDS=N (default 1) repeats the four runs N times, interleaved; each cell
# is then the median over the rounds (per algorithm, before the best).
# ITERS=N (default 5): timed calls per size on every side; WARMUP=N (default
# 20: bigbatch's `auto` tunes in its first 18 calls) untimed calls just
# before them. A shaped link's bucket (tbf's: rate / 250, 4 ms of traffic)
# fills whenever the link idles or runs below its rate, so a timed loop can
# start with it full and move its first bucketful at veth speed: a loop
# that moves N buckets of bytes reads up to N / (N - 1) times the link's
# rate. Give each cell about 25 buckets (100 ms at the link's rate: at most
# about 4 % above it) where a side can fill the link: ITERS=2000 from 4 KiB
# to 128 KiB (the smaller sizes run below the link at 10 Gb/s); above,
# 500 to 2 MiB and 50 to 8 MiB at 10 Gb/s, and 200 at 1 Gb/s, where the
# same bytes take ten times as long. With 200 calls of 64 KiB at 10 Gb/s
# (13 MB, 2.6 buckets) one side read 1.74 GB/s on a 1.19 GB/s link
# (2026-12-07). The default of 5 calls is for a quick look, not a table.
#   [ROUNDS=N] [ITERS=N] [WARMUP=N] bench/torchrun_allreduce_bench.sh [RATES] [MIN] [MAX] [OUT_DIR]
#   (defaults: "10gbit 1gbit" 4K 256M runs/torchrun_allreduce)
set -euo pipefail
cd "$(dirname "$0")/.."
rates=${1:-10gbit 1gbit}
min=${2:-4K}
max=${3:-256M}
out=${4:-runs/torchrun_allreduce}
rounds=${ROUNDS:-1}
iters=${ITERS:-5}
warmup=${WARMUP:-20}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"
bytes() { numfmt --from=iec "$1"; }
algos=auto,ring,halving_doubling,recursive_doubling
common=(bench allreduce --json --no-memcpy --warmup "$warmup" --iters "$iters" --min-bytes "$min" --max-bytes "$max")
for round in $(seq 1 "$rounds"); do
  for rate in $rates; do
    cluster=(scripts/emulated_cluster --hosts 2 --rate "$rate")
    for transport in ucx gloo; do
      "${cluster[@]}" --launcher -- scripts/torchrun_hosts --env BIGBATCH_TRANSPORT=$transport \
        --torchrun-arg --no_python -- "$PWD/build/apps/bigbatch" "${common[@]}" --algorithms "$algos" \
        >"$out/${transport}_${rate}_$round.jsonl"
    done
    "${cluster[@]}" -- build/apps/bigbatch "${common[@]}" --algorithms "$algos,mpi" \
      >"$out/mpi_${rate}_$round.jsonl"
    for timing in mean median; do
      "${cluster[@]}" --launcher -- scripts/torchrun_hosts -- "$PWD/bench/pytorch_allreduce.py" \
        --min-bytes "$(bytes "$min")" --max-bytes "$(bytes "$max")" --iters "$iters" --warmup "$warmup" \
        --timing "$timing" >"$out/pytorch_gloo_${timing}_${rate}_$round.jsonl"
    done
  done
done

/usr/bin/python3 - "$out" "$rounds" $rates <<'PY'
import json, statistics, sys
out, rounds, rates = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rows(name, rate):
    """(algorithm, bytes) -> the median busbw over the rounds, and the wrong count."""
    cells = {}
    for r in range(1, rounds + 1):
        for l in open(f"{out}/{name}_{rate}_{r}.jsonl"):
            if l.startswith("{"):
                row = json.loads(l)
                key = (row.get("algorithm", "gloo"), row["bytes"])
                cells.setdefault(key, []).append((row["busbw"], row["wrong"]))
    return {k: (statistics.median(b for b, _ in v), sum(w for _, w in v)) for k, v in cells.items()}
def best(t, b):
    return max(((a, v[0]) for (a, size), v in t.items() if size == b and a not in ("mpi", "memcpy")),
               key=lambda x: x[1])
for rate in rates:
    u, g, m, t, tm = (rows(n, rate) for n in ("ucx", "gloo", "mpi", "pytorch_gloo_mean",
                                              "pytorch_gloo_median"))
    print(f"\n2 hosts x 1 rank, {rate} links, median of {rounds} round(s); busbw GB/s, each bigbatch "
          "column its best algorithm")
    print(f"{'bytes':>10} {'bb/UCX':>8} {'bb/Gloo':>8} {'bb/MPI':>8} {'MPI_Allr':>8} {'gloo':>8} "
          f"{'UCX÷gloo':>8} {'UCX÷MPI':>8} {'Gloo÷gloo':>9} {'gloo/call':>9} {'wrong':>5}")
    ratio = lambda a, c: a / c if c else 0
    for b in sorted({size for _, size in u}):
        bu, bg, bm = best(u, b)[1], best(g, b)[1], best(m, b)[1]
        mpi = m.get(("mpi", b), (0, 0))[0]
        tg = t.get(("gloo", b), (0, 0))[0]
        tc = tm.get(("gloo", b), (0, 0))[0]
        wrong = sum(v[1] for d in (u, g, m, t, tm) for (a, size), v in d.items() if size == b)
        print(f"{b:>10} {bu:>8.3f} {bg:>8.3f} {bm:>8.3f} {mpi:>8.3f} {tg:>8.3f} {ratio(bu, tg):>8.2f} "
              f"{ratio(bu, bm):>8.2f} {ratio(bg, tg):>9.2f} {tc:>9.3f} {wrong:>5}")
PY
