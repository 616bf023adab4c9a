#!/usr/bin/env bash
# UCX's own settings, A/B, under bigbatch's allreduces: 2 emulated hosts x 1
# rank (scripts/emulated_cluster; root), torchrun on each host
# (scripts/torchrun_hosts), `bigbatch bench allreduce` on the UCX transport
# with each VARIANT's UCX_* variables, beside the same algorithms on MPI
# (mpirun over ssh) as the yardstick. Rounds interleave every variant; each
# cell is the median over the rounds of that size's best algorithm (of auto,
# ring, halving_doubling, recursive_doubling), and its ratio to MPI's.
#
# A VARIANT is LABEL or "LABEL:VAR=VALUE [VAR=VALUE...]" (one argument;
# LABEL letters, digits, _ and -, not "mpi"). bigbatch changes three of
# UCX's defaults where their variables are unset: RNDV_THRESH (inf), and
# TCP_TX_SEG_SIZE and TCP_RX_SEG_SIZE (256k, both, where neither is set).
# UCX's own: "ucx_own:UCX_RNDV_THRESH=auto UCX_TCP_TX_SEG_SIZE=8k
# UCX_TCP_RX_SEG_SIZE=64k".
# ITERS=N (default 5) timed calls per size after WARMUP=N (default 20); give
# each cell about 100 ms of traffic, as bench/torchrun_allreduce_bench.sh
# explains (tc's bucket is 4 ms of it): 5 calls read above the link.
#   [ROUNDS=N] [RATE=10gbit] [ITERS=N] [WARMUP=N] bench/ucx_settings_bench.sh MIN MAX OUT_DIR VARIANT...
# e.g. bench/ucx_settings_bench.sh 16K 64M runs/ucx_settings \
#        ucx_default:UCX_RNDV_THRESH=auto bigbatch_eager \
#        "seg64k:UCX_TCP_TX_SEG_SIZE=64k UCX_TCP_RX_SEG_SIZE=64k"
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/ucx_settings_bench.sh MIN MAX OUT_DIR VARIANT... (see the comment atop it)"
[ $# -ge 4 ] || { echo "$usage" >&2; exit 2; }
min=$1 max=$2 out=$3
shift 3
labels=" "
for variant in "$@"; do
  label=${variant%%:*}
  [[ $label =~ ^[A-Za-z0-9_-]+$ && $label != mpi && $labels != *" $label "* ]] ||
    { echo "ucx_settings_bench.sh: variant label '$label': letters, digits, _ or -, not mpi, each once" >&2; exit 2; }
  labels+="$label "
done
rounds=${ROUNDS:-3}
rate=${RATE:-10gbit}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"
rm -f "$out"/*.jsonl
common=(bench allreduce --json --no-memcpy --warmup "${WARMUP:-20}" --iters "${ITERS:-5}"
        --min-bytes "$min" --max-bytes "$max"
        --algorithms auto,ring,halving_doubling,recursive_doubling)
cluster=(scripts/emulated_cluster --hosts 2 --rate "$rate")
for round in $(seq 1 "$rounds"); do
  "${cluster[@]}" -- build/apps/bigbatch "${common[@]}" >"$out/mpi_$round.jsonl"
  for variant in "$@"; do
    label=${variant%%:*}
    envs=(--env BIGBATCH_TRANSPORT=ucx)
    if [[ $variant == *:* ]]; then
      read -r -a sets <<<"${variant#*:}"
      for e in "${sets[@]}"; do envs+=(--env "$e"); done
    fi
    "${cluster[@]}" --launcher -- scripts/torchrun_hosts "${envs[@]}" --torchrun-arg --no_python -- \
      "$PWD/build/apps/bigbatch" "${common[@]}" >"$out/${label}_$round.jsonl" || {
      rm -f "$out/${label}_$round.jsonl"
      echo "ucx_settings_bench.sh: variant $label failed in round $round (its cells: the other rounds)" >&2
    }
  done
done

/usr/bin/python3 - "$out" "$rate" <<'PY'
import collections, glob, json, os, statistics, sys
out, rate = sys.argv[1], sys.argv[2]
cells = collections.defaultdict(lambda: collections.defaultdict(list))  # label -> bytes -> [best]
wrong = 0
for path in sorted(glob.glob(f"{out}/*.jsonl")):
    label = os.path.basename(path)[:-len(".jsonl")].rsplit("_", 1)[0]
    best = {}
    for line in open(path):
        if line.startswith("{"):
            row = json.loads(line)
            best[row["bytes"]] = max(best.get(row["bytes"], 0.0), row["busbw"])
            wrong += row["wrong"]
    for b, v in best.items():
        cells[label][b].append(v)
labels = ["mpi"] + [l for l in cells if l != "mpi"]
print(f"2 hosts x 1 rank at {rate}; busbw GB/s (each cell: the median over the rounds of its best "
      f"algorithm) / its ratio to bigbatch on MPI; wrong elements: {wrong}")
print("| bytes | " + " | ".join(labels) + " |")
print("|---:|" + "---:|" * len(labels))
for b in sorted({b for l in labels for b in cells[l]}):
    med = {l: statistics.median(cells[l][b]) for l in labels if cells[l].get(b)}
    ref = med.get("mpi")
    row = [f"{med['mpi']:.3f}" if ref else "-"]
    row += [f"{med[l]:.3f} / {med[l] / ref:.2f}" if l in med and ref else "-" for l in labels[1:]]
    print(f"| {b} | " + " | ".join(row) + " |")
PY
