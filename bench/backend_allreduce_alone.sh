#!/usr/bin/env bash
# dist.all_reduce on one host, 2 ranks, fp32: the "bigbatch" backend (its
# shared-memory allreduce) against gloo (its ring over TCP loopback), each
# at its best and alone: every rank in processes holding no group of the
# other backend (bench/torch_backend_allreduce.py --only), no core binding
# (mpirun --bind-to none), tcmalloc preloaded on both sides, the same
# timing (the mean of back-to-back calls after 2 warm-up calls, the slowest
# rank's). ROUNDS rounds (default 3), the two backends alternating; the
# table gives each size's median. Every call checked (#wrong 0).
# Usage: bench/backend_allreduce_alone.sh [MIN] [MAX] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
min=${1:-4K}
max=${2:-256M}
out=${3:-runs/backend_allreduce_alone}
rounds=${ROUNDS:-3}
scripts/build --target bigbatch_torch >/dev/null
mkdir -p "$out"
rm -f "$out"/*.jsonl
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
[ -n "$tcmalloc" ] || echo "no libtcmalloc_minimal.so.4 (apt-get install libtcmalloc-minimal4): both backends run on glibc's malloc" >&2
for round in $(seq 1 "$rounds"); do
  for backend in bigbatch gloo; do
    echo "round $round of $rounds: $backend ($(date +%H:%M:%S))" >&2
    MASTER_PORT=$((29700 + round)) mpirun --allow-run-as-root -np 2 --bind-to none \
      -x MASTER_PORT -x PYTHONPATH="$PWD/build/python" ${tcmalloc:+-x LD_PRELOAD=$tcmalloc} \
      /usr/bin/python3 bench/torch_backend_allreduce.py --only "$backend" --min "$min" \
      --max "$max" --json >"$out/$backend.round$round.log" 2>&1 ||
      { echo "$backend failed in round $round; see $out/$backend.round$round.log" >&2; exit 1; }
    grep '^{' "$out/$backend.round$round.log" >>"$out/$backend.jsonl"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def load(b):
    rows = {}
    for line in open(f"{out}/{b}.jsonl"):
        r = json.loads(line)
        assert r["wrong"] == 0, r
        rows.setdefault(r["bytes"], []).append(r[f"{b}_us"])
    return rows
bb, gl = load("bigbatch"), load("gloo")
def size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
print("| size | bigbatch µs (shared memory) | gloo µs (TCP loopback) | ratio |")
print("|---:|---:|---:|---:|")
for n in sorted(bb):
    b, g = statistics.median(bb[n]), statistics.median(gl[n])
    print(f"| {size(n)} | {b:,.1f} | {g:,.1f} | {g / b:.1f}× |")
PY
