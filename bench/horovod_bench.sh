#!/usr/bin/env bash
# Horovod as the peer (issue 68), side by side in one run with bigbatch's
# own trainer, PyTorch DDP on the "bigbatch" backend and DDP on gloo: the
# same model, batch and threads on the same emulated links
# (scripts/emulated_cluster: 2 hosts x 2 ranks, mpirun over ssh; root).
#
# Model: bench/pytorch_ddp.py's CNN with model.hidden 350000 (26.3 M
# parameters, 105 MB of gradients), batch 64 per rank of synthetic 1x28x28,
# 1 thread per rank (PyTorch's and OpenBLAS's pools), at RATE (default
# 1gbit); and the default CNN (35.7 k parameters) at CNN_RATE (default
# 50mbit), where its exchange is a third of its step.
#
# Rows (img/s; the slowest rank's time over 15 timed steps after 15 warm-up
# for the Python rows, bigbatch's second epoch of 15 steps for its trainer;
# the CNN: 100 and 100):
#   hvd_fp32            Horovod 0.28.1 (bench/horovod_setup.sh), its defaults
#   hvd_fp16_tuned      hvd.Compression.fp16, HOROVOD_FUSION_THRESHOLD 128 MiB,
#                       HOROVOD_CYCLE_TIME 10 ms
#   hvd_fp16_autotune   hvd.Compression.fp16, HOROVOD_AUTOTUNE=1
#   hvd_fp16_tuned_hier hvd_fp16_tuned with HOROVOD_HIERARCHICAL_ALLREDUCE=1
#                       (every Horovod row with Open MPI's mpi_yield_when_idle=1:
#                       four ranks share two cores here, and Horovod's
#                       background thread polls MPI; without it the tuned
#                       fp16 row ran at 79 img/s against 104 in single runs
#                       here, 2026-12-06), and tcmalloc preloaded as for
#                       every Python row (since after the 2026-12-06 table,
#                       whose Horovod rows ran without it)
#   ddp_bb_fp16         PyTorch DDP on the "bigbatch" backend, its fp16 hook
#                       (bigbatch_torch.hooks.fp16), gradient_as_bucket_view
#   ddp_bb_fp32         the same, no hook
#   ddp_gloo_fp16       DDP on gloo with fp16_compress_hook and the view (gloo's
#                       best there: docs/BENCHMARKS.md), tcmalloc
#   ddp_no_exchange     a control, not a peer: DDP on the "bigbatch" backend with
#                       a hook that moves no gradient (bench/pytorch_ddp.py --hook
#                       no_exchange), the DDP rows' ceiling on these ranks
#   native_hier_fp16    bigbatch train: hierarchical allreduce, fp16 wire
#   native_hier_fp32    the same, fp32 wire
# The CNN at CNN_RATE: hvd_fp16_tuned, hvd_fp32, ddp_bb_fp16, native_fp16
# (comm.allreduce = auto), native_fp32.
# Horovod's best is the fastest of its rows, named; every other row is
# given against it. ROUNDS rounds (default 3), rows interleaved; medians.
# CASES (default "big cnn"); ROWS (default all) names the rows to run, e.g.
# ROWS="big_hvd_fp16_tuned big_ddp_bb_fp16 big_native_hier_fp16". A row that fails or passes LIMIT_S (default
# 300 s) is shown as failed, its log in OUT_DIR.
#
#   bench/horovod_bench.sh [RATE] [CNN_RATE] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
cnn_rate=${2:-50mbit}
out=${3:-runs/horovod_bench}
limit=${LIMIT_S:-300}
rounds=${ROUNDS:-3}
cases=" ${CASES:-big cnn} "
rows=" ${ROWS:-} "
hvd_python=${HOROVOD_PYTHON:-$PWD/build-horovod/venv/bin/python}
"$hvd_python" -c 'import horovod.torch' 2>/dev/null ||
  { echo "bench/horovod_bench.sh: no Horovod at $hvd_python; run bench/horovod_setup.sh first" >&2; exit 2; }
scripts/build --target bigbatch bigbatch_torch >/dev/null
mkdir -p "$out"
rm -f "$out/rows.jsonl"
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
pypath=$PWD/build/python
. bench/openblas_coretype.sh  # OpenBLAS's kernels for this CPU, on every side
blas=${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE}

seen=" "
wanted() {  # name: in ROWS, or ROWS unset
  seen+="$1 "
  [ -z "${ROWS:-}" ] || [[ $rows == *" $1 "* ]]
}
record() {  # name case kind img_s
  echo "{\"name\": \"$1\", \"case\": \"$2\", \"kind\": \"$3\", \"round\": $round, \"img_s\": $4}" >>"$out/rows.jsonl"
}
last_json_img_s() {
  /usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "img_s" in l][-1]["img_s"])' "$1"
}
cluster() {  # link -- command...
  local link=$1
  shift
  scripts/emulated_cluster --hosts 2 --ranks-per-host 2 --rate "$link" -- "$@"
}

hvd_row() {  # name case link hidden steps compression env...
  wanted "$1" || return 0
  local name=$1 kase=$2 link=$3 hidden=$4 steps=$5 compression=$6
  shift 6
  local log="$out/$name.round$round.log" img_s=null
  if cluster "$link" env OMPI_MCA_mpi_yield_when_idle=1 LD_PRELOAD="$tcmalloc" ${blas:+"$blas"} "$@" timeout "$limit" \
      "$hvd_python" bench/horovod_ddp.py --hidden "$hidden" --steps "$steps" --warmup "$steps" \
      --compression "$compression" >"$log" 2>&1; then
    img_s=$(last_json_img_s "$log") || img_s=null
  else
    echo "row $name failed in round $round; see $log" >&2
  fi
  record "$name" "$kase" horovod "$img_s"
}

ddp_row() {  # name case link hidden steps backend hook
  wanted "$1" || return 0
  local name=$1 kase=$2 link=$3 hidden=$4 steps=$5 backend=$6 hook=$7
  local log="$out/$name.round$round.log" img_s=null
  if cluster "$link" env PYTHONPATH="$pypath" LD_PRELOAD="$tcmalloc" ${blas:+"$blas"} timeout "$limit" \
      /usr/bin/python3 bench/pytorch_ddp.py --mpi --backend "$backend" --hook "$hook" --bucket-view \
      --model cnn --hidden "$hidden" --batch 64 --threads 1 --steps "$steps" --warmup "$steps" \
      >"$log" 2>&1; then
    img_s=$(last_json_img_s "$log") || img_s=null
  else
    echo "row $name failed in round $round; see $log" >&2
  fi
  record "$name" "$kase" "ddp_$backend" "$img_s"
}

native_row() {  # name case link hidden steps sets...
  wanted "$1" || return 0
  local name=$1 kase=$2 link=$3 hidden=$4 steps=$5
  shift 5
  local dir="$out/$name.round$round" img_s=null
  if cluster "$link" env ${blas:+"$blas"} timeout "$limit" build/apps/bigbatch train configs/default.toml \
      --run-dir "$dir" --overwrite -q --set data.dataset=synthetic --set run.threads=1 \
      --set train.batch_size=64 --set train.epochs=2 --set train.eval_every=100 \
      --set data.eval_samples=256 --set train.stop_at_target=false --set ckpt.every_epochs=0 \
      --set data.train_samples=$((steps * 64 * 4)) --set model.hidden="$hidden" "$@" >"$dir.log" 2>&1; then
    img_s=$(/usr/bin/python3 -c 'import csv,sys; print(float(list(csv.DictReader(open(sys.argv[1])))[-1]["img_s"]))' \
              "$dir/metrics.csv") || img_s=null
  else
    echo "row $name failed in round $round; see $dir.log" >&2
  fi
  record "$name" "$kase" native "$img_s"
}

tuned=(HOROVOD_FUSION_THRESHOLD=134217728 HOROVOD_CYCLE_TIME=10)
for round in $(seq 1 "$rounds"); do
  echo "round $round of $rounds ($(date +%H:%M:%S))" >&2
  if [[ $cases == *" big "* ]]; then
    hvd_row big_hvd_fp32 big "$rate" 350000 15 none
    hvd_row big_hvd_fp16_tuned big "$rate" 350000 15 fp16 "${tuned[@]}"
    hvd_row big_hvd_fp16_autotune big "$rate" 350000 15 fp16 HOROVOD_AUTOTUNE=1
    hvd_row big_hvd_fp16_tuned_hier big "$rate" 350000 15 fp16 "${tuned[@]}" HOROVOD_HIERARCHICAL_ALLREDUCE=1
    ddp_row big_ddp_bb_fp16 big "$rate" 350000 15 bigbatch bb_fp16
    ddp_row big_ddp_bb_fp32 big "$rate" 350000 15 bigbatch none
    ddp_row big_ddp_gloo_fp16 big "$rate" 350000 15 gloo fp16
    ddp_row big_ddp_no_exchange big "$rate" 350000 15 bigbatch no_exchange
    native_row big_native_hier_fp16 big "$rate" 350000 15 --set comm.allreduce=hierarchical \
      --set ddp.exchange_dtype=fp16
    native_row big_native_hier_fp32 big "$rate" 350000 15 --set comm.allreduce=hierarchical
  fi
  if [[ $cases == *" cnn "* ]]; then
    hvd_row cnn_hvd_fp16_tuned cnn "$cnn_rate" 0 100 fp16 "${tuned[@]}"
    hvd_row cnn_hvd_fp32 cnn "$cnn_rate" 0 100 none
    ddp_row cnn_ddp_bb_fp16 cnn "$cnn_rate" 0 100 bigbatch bb_fp16
    native_row cnn_native_fp16 cnn "$cnn_rate" 0 100 --set ddp.exchange_dtype=fp16
    native_row cnn_native_fp32 cnn "$cnn_rate" 0 100
  fi
done

for name in ${ROWS:-}; do
  [[ $seen == *" $name "* ]] ||
    echo "bench/horovod_bench.sh: ROWS names '$name', not a row of CASES '${CASES:-big cnn}' (the rows: atop this script)" >&2
done
[ -s "$out/rows.jsonl" ] || { echo "bench/horovod_bench.sh: no row ran" >&2; exit 2; }
/usr/bin/python3 - "$out/rows.jsonl" "$rate" "$cnn_rate" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
links = {"big": sys.argv[2], "cnn": sys.argv[3]}
names = list(dict.fromkeys(r["name"] for r in rows))
runs = {n: [r for r in rows if r["name"] == n] for n in names}
def median(n):
    ok = [r["img_s"] for r in runs[n] if r["img_s"]]
    return statistics.median(ok) if ok else None
print("| case | row | img/s, median (lowest-highest) | rounds failed | vs Horovod's best |")
print("|---|---|---:|---:|---:|")
for case in ("big", "cnn"):
    mine = [n for n in names if runs[n][0]["case"] == case]
    if not mine:
        continue
    hvd = [n for n in mine if runs[n][0]["kind"] == "horovod" and median(n)]
    best = max(hvd, key=median) if hvd else None
    for n in mine:
        v, ok = median(n), [r["img_s"] for r in runs[n] if r["img_s"]]
        failed = sum(1 for r in runs[n] if not r["img_s"])
        shown = f"{v:.0f} ({min(ok):.0f}-{max(ok):.0f})" if v else "failed"
        ratio = f"{v / median(best):.2f}x" if v and best else "-"
        print(f"| {case} 2x2 at {links[case]} | {n[len(case) + 1:]} | {shown} | {failed} of {len(runs[n])} | {ratio} |")
    if best:
        print(f"| {case} 2x2 at {links[case]} | Horovod's best: {best[len(case) + 1:]} | | | |")
EOF
