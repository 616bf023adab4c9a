#!/usr/bin/env bash
# The same PyTorch DDP script (bench/pytorch_ddp.py) on the "bigbatch"
# torch.distributed backend and on gloo, side by side in one run: what a
# user gets by changing init_process_group's backend. gloo at its best for
# the case: pinned one rank a core and tcmalloc (LD_PRELOAD) on one host,
# and each of PyTorch's own hooks (none, fp16_compress_hook, powerSGD_hook
# rank 4 from step 2) on the emulated links, each with and without DDP's
# gradient_as_bucket_view, its best one named.
#
# Rows (img/s of the timed steps after as many warm-up steps; the slowest
# rank's time; batch 64 per rank, synthetic 1x28x28; 1 thread per rank,
# PyTorch's and OpenBLAS's pools both: bench/blas_threads.py):
#   1x2   one host, 2 ranks, the default recipe's 35.7 k-parameter CNN:
#         gloo none | bigbatch none
#   2x1   2 emulated hosts x 1 rank at RATE (default 1gbit), the CNN with
#         model hidden 350000 (26.3 M parameters, 105 MB of gradients):
#         gloo none, fp16, powersgd | bigbatch none, bb_fp16,
#         bb_powersgd (rank 4, fp32 factors: bigbatch's default),
#         bb_powersgd_r2_fp16 (rank 2, fp16 factors) and powersgd
#         (PyTorch's own powerSGD_hook over bigbatch: the control that
#         separates the backend's gain from the codec's)
#   2x2   2 emulated hosts x 2 ranks at RATE, the same model:
#         gloo none, fp16, powersgd | bigbatch none, bb_fp16
# Rows named *_view build DDP with gradient_as_bucket_view=True (the
# gradients live in the buckets: no copy into them after backward, none
# back out after the hook), a setting of DDP's own that both backends take:
# gloo's rows that are candidates for its best (every hook but the one that
# aborts) run with and without it, and its best is the fastest of them all;
# bigbatch's run with it where the comparison names its best (none on one
# host, PowerSGD on 2 x 1, none and fp16 on 2 x 2).
# LAYOUTS: the layouts to run (default "1x2 2x1 2x2"), e.g. LAYOUTS=2x1.
# ROUNDS rounds (default 3), every row once a round, interleaved; the table
# gives each row's median (and its lowest and highest round). gloo's
# powerSGD_hook aborts on this model (gloo's pair.cc): it is tried in the
# first round only. A row that fails or passes LIMIT_S (default 300 s) is
# shown as failed, with its log in OUT_DIR.
#
# OpenBLAS (the matrix products of PyTorch's Linear layers, both sides)
# picks its kernels from the CPU's model; on a virtual CPU it does not know
# it falls back to its oldest x86-64 kernels (Prescott: SSE3), which on
# this 2-core Xeon guest took the 26 M model's step from 0.32 to 0.45 s.
# Unless OPENBLAS_CORETYPE is set, the script sets it for both backends
# from the CPU's flags when OpenBLAS reports Prescott (SkylakeX with
# AVX-512, Haswell with AVX2), and prints the choice.
# Usage: bench/torch_backend_bench.sh [RATE] [OUT_DIR]   (root: network namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
out=${2:-runs/torch_backend_bench}
limit=${LIMIT_S:-300}
rounds=${ROUNDS:-3}
read -ra wanted <<<"${LAYOUTS:-1x2 2x1 2x2}"
[ "${#wanted[@]}" -gt 0 ] || { echo "LAYOUTS is empty: name one or more of 1x2, 2x1, 2x2" >&2; exit 2; }
for l in "${wanted[@]}"; do
  case $l in 1x2 | 2x1 | 2x2) ;; *) echo "LAYOUTS: '$l' is not one of 1x2, 2x1, 2x2" >&2; exit 2 ;; esac
done
layouts=" ${wanted[*]} "
scripts/build --target bigbatch_torch >/dev/null
mkdir -p "$out"
rm -f "$out/rows.jsonl"
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
pypath=$PWD/build/python

. bench/openblas_coretype.sh  # OpenBLAS's kernels for this CPU, on every side

# row NAME LAYOUT BACKEND HOOK STEPS HIDDEN [EXTRA ARGS...]: runs it, appends a JSON row.
row() {
  local name=$1 layout=$2 backend=$3 hook=$4 steps=$5 hidden=$6
  shift 6
  [[ $layouts == *" $layout "* ]] || return 0
  local -a launch
  if [ "$layout" = 1x2 ]; then
    launch=(mpirun --allow-run-as-root -np 2 --bind-to core)
  else
    launch=(scripts/emulated_cluster --hosts 2 --ranks-per-host "${layout#2x}" --rate "$rate" --)
  fi
  local img_s=null log="$out/$name.round$round.log"
  if "${launch[@]}" env PYTHONPATH="$pypath" LD_PRELOAD="$tcmalloc" \
      ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE} timeout "$limit" \
      /usr/bin/python3 bench/pytorch_ddp.py --mpi --ifname "$([ "$layout" = 1x2 ] && echo lo || echo eth0)" \
      --master "$([ "$layout" = 1x2 ] && echo 127.0.0.1 || echo '')" \
      --backend "$backend" --hook "$hook" --model cnn --hidden "$hidden" --batch 64 --threads 1 \
      --steps "$steps" --warmup "$steps" --powersgd-rank 4 --powersgd-start 2 "$@" \
      >"$log" 2>&1; then
    img_s=$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "img_s" in l][-1]["img_s"])' "$log")
  else
    echo "row $name failed in round $round; see $log" >&2
  fi
  local viewed=false
  [[ " $* " == *" --bucket-view "* ]] && viewed=true
  echo "{\"name\": \"$name\", \"layout\": \"$layout\", \"backend\": \"$backend\", \"hook\": \"$hook\", \"bucket_view\": $viewed, \"round\": $round, \"img_s\": $img_s}" \
    >>"$out/rows.jsonl"
}

view=--bucket-view
for round in $(seq 1 "$rounds"); do
  echo "round $round of $rounds ($(date +%H:%M:%S))" >&2
  row 1x2_gloo_none 1x2 gloo none 200 0
  row 1x2_gloo_none_view 1x2 gloo none 200 0 "$view"
  row 1x2_bigbatch_none 1x2 bigbatch none 200 0
  row 1x2_bigbatch_none_view 1x2 bigbatch none 200 0 "$view"
  for hook in none fp16 powersgd; do
    [ "$hook" = powersgd ] && [ "$round" -gt 1 ] && continue
    row "2x1_gloo_$hook" 2x1 gloo "$hook" 15 350000
  done
  row 2x1_gloo_none_view 2x1 gloo none 15 350000 "$view"
  row 2x1_gloo_fp16_view 2x1 gloo fp16 15 350000 "$view"
  for hook in none bb_fp16 bb_powersgd; do row "2x1_bigbatch_$hook" 2x1 bigbatch "$hook" 15 350000; done
  # The control: PyTorch's own powerSGD_hook over bigbatch (what the
  # backend gives a codec not its own; gloo's aborts on this model).
  row 2x1_bigbatch_powersgd 2x1 bigbatch powersgd 15 350000
  row 2x1_bigbatch_bb_powersgd_view 2x1 bigbatch bb_powersgd 15 350000 "$view"
  row 2x1_bigbatch_bb_powersgd_r2_fp16 2x1 bigbatch bb_powersgd 15 350000 \
    --powersgd-rank 2 --powersgd-wire fp16
  row 2x1_bigbatch_bb_powersgd_r2_fp16_view 2x1 bigbatch bb_powersgd 15 350000 \
    --powersgd-rank 2 --powersgd-wire fp16 "$view"
  for hook in none fp16 powersgd; do
    [ "$hook" = powersgd ] && [ "$round" -gt 1 ] && continue
    row "2x2_gloo_$hook" 2x2 gloo "$hook" 15 350000
  done
  row 2x2_gloo_none_view 2x2 gloo none 15 350000 "$view"
  row 2x2_gloo_fp16_view 2x2 gloo fp16 15 350000 "$view"
  for hook in none bb_fp16; do
    row "2x2_bigbatch_$hook" 2x2 bigbatch "$hook" 15 350000
    row "2x2_bigbatch_${hook}_view" 2x2 bigbatch "$hook" 15 350000 "$view"
  done
done

/usr/bin/python3 - "$out/rows.jsonl" "$rate" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = list(dict.fromkeys(r["name"] for r in rows))
runs = {n: [r for r in rows if r["name"] == n] for n in names}
def label(n):  # "2x1_gloo_fp16_view" -> "fp16, bucket view"
    hook = n.split("_", 2)[2]
    return hook[:-5] + ", bucket view" if runs[n][0].get("bucket_view", n.endswith("_view")) else hook
def median(n):
    ok = [r["img_s"] for r in runs[n] if r["img_s"]]
    return statistics.median(ok) if ok else None
print(f"| layout | backend | hook | img/s, median (lowest-highest) | rounds failed | vs gloo none | vs gloo's best |  (links: {sys.argv[2]})")
print("|---|---|---|---:|---:|---:|---:|")
for layout in ("1x2", "2x1", "2x2"):
    mine = [n for n in names if runs[n][0]["layout"] == layout]
    if not mine:
        continue
    gloo = [n for n in mine if runs[n][0]["backend"] == "gloo" and median(n)]
    none = median(f"{layout}_gloo_none")
    best = max(gloo, key=median) if gloo else None
    for n in mine:
        v, ok = median(n), [r["img_s"] for r in runs[n] if r["img_s"]]
        failed = sum(1 for r in runs[n] if not r["img_s"])
        fmt = lambda base: f"{v / base:.2f}x" if v and base else "-"
        shown = f"{v:.0f} ({min(ok):.0f}-{max(ok):.0f})" if v else "failed"
        print(f"| {layout} | {runs[n][0]['backend']} | {label(n)} | {shown} | "
              f"{failed} of {len(runs[n])} | {fmt(none)} | {fmt(median(best) if best else None)} |")
    if best:
        print(f"| {layout} | | gloo's best: {label(best)} | | | | |")
EOF
