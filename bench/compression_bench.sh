#!/usr/bin/env bash
# Gradient compression on slow links: bigbatch's codecs against PyTorch DDP
# with each of its own communication hooks, on the SAME emulated links, side
# by side in one run (root: scripts/emulated_cluster builds network
# namespaces and tc links). "PyTorch's best" is the fastest of its hooks.
#
# Models (both sides build the same architecture, batch 64 per rank, 1
# thread per rank, synthetic 1x28x28 data, SGD + Nesterov):
#   cnn   the default recipe's 35.7 k-parameter CNN        (143 KB of gradients)
#   big   the same CNN with model.hidden = 350000: 26.3 M  (105 MB: ResNet-50-sized,
#         parameters, mostly one 64 x 350000 matrix           little compute)
# Cases: cnn on 2 hosts x 1 rank at CNN_RATE (50mbit); big on 2 x 1 at RATE
# (1gbit) and at SLOW_RATE (300mbit); big on 2 hosts x 2 ranks at RATE.
# Rows per case:
#   pt none / pt fp16 / pt powersgd / pt batched_powersgd / pt powersgd_bf16
#                                     PyTorch DDP (gloo, 25 MB buckets, tcmalloc)
#                                     with no hook, fp16_compress_hook,
#                                     powerSGD_hook and batched_powerSGD_hook at
#                                     rank 4 from iteration 2, and powerSGD_hook
#                                     in bf16_compress_wrapper (its 16-bit-wire
#                                     PowerSGD; the fp16 wrapper cannot run on
#                                     CPU: PyTorch 1.13 has no fp16 CPU matmul)
#   bb fp32 / bb fp16 / bb powersgd   bigbatch (configs/default.toml's exchange)
#                                     fp32, ddp.exchange_dtype = fp16, and
#                                     ddp.compression = powersgd at rank 4 from
#                                     step 2 (the same start as PyTorch's)
#   bb powersgd_r2                    the same at rank 2 (half the factors'
#                                     bytes; its accuracy: the ablation)
#   bb powersgd_fp16 / _r2_fp16       rank 4 / rank 2 with ddp.exchange_dtype =
#                                     fp16: factors and small tensors in 16 bits
#   ceiling                           (big) bigbatch fp32 with the same ranks on
#                                     one host: no network at all
# img/s: bigbatch's second epoch, PyTorch's timed steps after as many
# warm-up steps; the slowest rank's time. A row that fails (or a PyTorch
# row that runs past PT_LIMIT_S, default 240 s) is printed as failed with
# its log, the others go on.
# CASES: the cases to run, e.g. CASES="big_2x1" (default: all four:
# cnn_2x1 big_2x1 big_2x1_slow big_2x2). ROWS: the rows to run, by the
# name after the case, e.g. ROWS="bb_powersgd_r2 ceiling" (default: all).
# ROUNDS: run each case's rows this many times in turn (default 1), so
# drift hits every row alike; the table then shows each row's median,
# with the lowest and highest, and the ratios are of medians.
# A rate of "unshaped" leaves the links as they are (veth pairs through a
# bridge: no tc shaping).
# Usage: bench/compression_bench.sh [RATE] [CNN_RATE] [SLOW_RATE] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
cnn_rate=${2:-50mbit}
slow_rate=${3:-300mbit}
out=${4:-runs/compression_bench}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"
rm -f "$out/rows.jsonl"
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
# A PyTorch row that has not finished by then is ended and shown as failed:
# on 2026-12-02 PyTorch 1.13's powerSGD_hook on the 26 M model hung at
# 300mbit (and elsewhere aborted with gloo's pair.cc enforce).
pt_limit=${PT_LIMIT_S:-240}

record() {  # name case link img_s [summary.json]
  /usr/bin/python3 - "$@" >>"$out/rows.jsonl" <<'EOF'
import json, sys
name, case, link, img_s = sys.argv[1:5]
row = {"name": name, "case": case, "link": link, "img_s": float(img_s) if img_s else None}
if len(sys.argv) > 5:
    s = json.load(open(sys.argv[5]))
    row["wire_bytes"] = s["exchange_bytes_per_step"]
    row["ratio"] = s["compression_ratio"]
print(json.dumps(row))
EOF
}

bb_args() {  # steps hidden ranks_total
  echo --set data.dataset=synthetic --set run.threads=1 --set train.batch_size=64 \
    --set train.epochs=2 --set train.eval_every=100 --set data.eval_samples=256 \
    --set train.stop_at_target=false --set ckpt.every_epochs=0 \
    --set data.train_samples=$(($1 * 64 * $3)) --set model.hidden="$2"
}

bb_img_s() { /usr/bin/python3 -c "import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]['img_s'])" "$1"; }

rate_args() { if [ "$1" != unshaped ]; then echo --rate "$1"; fi; }  # link

rows_wanted=${ROWS:-}
row_wanted() { [[ -z "$rows_wanted" || " $rows_wanted " == *" ${1#"$2"_} "* ]]; }  # name case

bigbatch_row() {  # name case hosts_x_ranks link steps hidden sets...
  local name=$1 case=$2 rph=$3 link=$4 steps=$5 hidden=$6
  shift 6
  row_wanted "$name" "$case" || return 0
  local dir="$out/$name"
  if scripts/emulated_cluster --hosts 2 --ranks-per-host "$rph" $(rate_args "$link") -- \
      build/apps/bigbatch train configs/default.toml --run-dir "$dir" --overwrite -q \
      $(bb_args "$steps" "$hidden" $((2 * rph))) "$@" >"$dir.log" 2>&1; then
    record "$name" "$case" "$link" "$(bb_img_s "$dir/metrics.csv")" "$dir/summary.json"
  else
    cp "$dir.log" "$dir.failed-round$round.log"  # the next round overwrites $dir.log
    echo "row $name failed; see $dir.failed-round$round.log" >&2
    record "$name" "$case" "$link" ""
  fi
}

ceiling_row() {  # name case ranks steps hidden
  local name=$1 case=$2 ranks=$3 steps=$4 hidden=$5
  row_wanted "$name" "$case" || return 0
  local dir="$out/$name"
  if build/apps/bigbatch train configs/default.toml --workers "$ranks" --run-dir "$dir" \
      --overwrite -q $(bb_args "$steps" "$hidden" "$ranks") >"$dir.log" 2>&1; then
    record "$name" "$case" "none" "$(bb_img_s "$dir/metrics.csv")" "$dir/summary.json"
  else
    cp "$dir.log" "$dir.failed-round$round.log"  # the next round overwrites $dir.log
    echo "row $name failed; see $dir.failed-round$round.log" >&2
    record "$name" "$case" "none" ""
  fi
}

pytorch_row() {  # name case ranks_per_host link steps hidden hook
  local name=$1 case=$2 rph=$3 link=$4 steps=$5 hidden=$6 hook=$7
  row_wanted "$name" "$case" || return 0
  if scripts/emulated_cluster --hosts 2 --ranks-per-host "$rph" $(rate_args "$link") -- \
      env LD_PRELOAD="$tcmalloc" timeout "$pt_limit" /usr/bin/python3 bench/pytorch_ddp.py --mpi --model cnn \
      --hidden "$hidden" --batch 64 --threads 1 --steps "$steps" --warmup "$steps" \
      --hook "$hook" --powersgd-rank 4 --powersgd-start 2 >"$out/$name.log" 2>&1; then
    record "$name" "$case" "$link" \
      "$(/usr/bin/python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')][-1]['img_s'])" "$out/$name.log")"
  else
    cp "$out/$name.log" "$out/$name.failed-round$round.log"  # the next round overwrites it
    echo "row $name failed; see $out/$name.failed-round$round.log" >&2
    record "$name" "$case" "$link" ""
  fi
}

case_rows() {  # case rph link steps hidden
  local case=$1 rph=$2 link=$3 steps=$4 hidden=$5
  for hook in none fp16 powersgd batched_powersgd powersgd_bf16; do
    pytorch_row "${case}_pt_${hook}" "$case" "$rph" "$link" "$steps" "$hidden" "$hook"
  done
  bigbatch_row "${case}_bb_fp32" "$case" "$rph" "$link" "$steps" "$hidden"
  bigbatch_row "${case}_bb_fp16" "$case" "$rph" "$link" "$steps" "$hidden" \
    --set ddp.exchange_dtype=fp16
  bigbatch_row "${case}_bb_powersgd" "$case" "$rph" "$link" "$steps" "$hidden" \
    --set ddp.compression=powersgd --set ddp.powersgd_rank=4 --set ddp.powersgd_start_step=2
  bigbatch_row "${case}_bb_powersgd_r2" "$case" "$rph" "$link" "$steps" "$hidden" \
    --set ddp.compression=powersgd --set ddp.powersgd_rank=2 --set ddp.powersgd_start_step=2
  bigbatch_row "${case}_bb_powersgd_fp16" "$case" "$rph" "$link" "$steps" "$hidden" \
    --set ddp.compression=powersgd --set ddp.powersgd_rank=4 --set ddp.powersgd_start_step=2 \
    --set ddp.exchange_dtype=fp16
  bigbatch_row "${case}_bb_powersgd_r2_fp16" "$case" "$rph" "$link" "$steps" "$hidden" \
    --set ddp.compression=powersgd --set ddp.powersgd_rank=2 --set ddp.powersgd_start_step=2 \
    --set ddp.exchange_dtype=fp16
}

cases=${CASES:-cnn_2x1 big_2x1 big_2x1_slow big_2x2}
wanted() { [[ " $cases " == *" $1 "* ]]; }
for round in $(seq "${ROUNDS:-1}"); do
if wanted cnn_2x1; then
  case_rows cnn_2x1 1 "$cnn_rate" 100 0
fi
if wanted big_2x1; then
  case_rows big_2x1 1 "$rate" 15 350000
  ceiling_row big_2x1_ceiling big_2x1 2 15 350000
fi
if wanted big_2x1_slow; then
  case_rows big_2x1_slow 1 "$slow_rate" 6 350000
  ceiling_row big_2x1_slow_ceiling big_2x1_slow 2 6 350000
fi
if wanted big_2x2; then
  case_rows big_2x2 2 "$rate" 10 350000
  ceiling_row big_2x2_ceiling big_2x2 4 10 350000
fi
done

/usr/bin/python3 - "$out/rows.jsonl" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
# One row per name: the median of its rounds (failed rounds left out), and
# the lowest and highest when there were several.
rows = []
for r in runs:
    if not any(x["name"] == r["name"] for x in rows):
        mine = [x["img_s"] for x in runs if x["name"] == r["name"] and x["img_s"]]
        rows.append(dict(r, img_s=statistics.median(mine) if mine else None, n=len(mine),
                         low=min(mine, default=None), high=max(mine, default=None)))
several = any(r["n"] > 1 for r in rows)
cases = []
for r in rows:
    if r["case"] not in cases:
        cases.append(r["case"])
spread_head = f" {'rounds: low-high':>18}" if several else ""
print(f"{'row':<33} {'link':<8} {'img/s':>8} {'vs pt best':>10} {'of ceiling':>10} "
      f"{'wire MB':>8}{spread_head}")
for c in cases:
    mine = [r for r in rows if r["case"] == c]
    pt = [r for r in mine if "_pt_" in r["name"] and r["img_s"]]
    best = max(pt, key=lambda r: r["img_s"]) if pt else None
    ceiling = next((r["img_s"] for r in mine if r["name"].endswith("ceiling")), None)
    for r in mine:
        v = r["img_s"]
        img = f"{v:8.1f}" if v else "  failed"
        vs = f"{v / best['img_s']:9.2f}x" if v and best else ""
        of = f"{v / ceiling:10.2f}" if v and ceiling else ""
        mb = f"{r['wire_bytes'] / 1e6:8.3f}" if "wire_bytes" in r else ""
        spread = f" {r['n']:>3}: {r['low']:6.1f}-{r['high']:6.1f}" if several and r["n"] else ""
        print(f"{r['name']:<33} {r['link']:<8} {img} {vs:>10} {of:>10} {mb:>8}{spread}")
    if best:
        print(f"  PyTorch's best in {c}: {best['name']} ({best['img_s']:.1f} img/s)")
EOF
