#!/usr/bin/env bash
# img/s against link speed: bigbatch and PyTorch DDP training the default
# CNN (143 KB of gradients) on 2 emulated hosts x 1 rank, at each link rate
# from 10 Mbit/s to unshaped — the chart in README.md and its table in
# docs/BENCHMARKS.md. Root (scripts/emulated_cluster: network namespaces,
# tc links).
#
# Each rate is bench/compression_bench.sh's cnn_2x1 case at that rate with
# six of its rows, side by side in one run (the same model, batch 64 per
# rank, 1 thread per rank, synthetic data; the settings are that script's):
#   bigbatch     fp32 on the wire; ddp.exchange_dtype = fp16; PowerSGD rank 4
#   PyTorch DDP  (gloo, tcmalloc) no hook; fp16_compress_hook; powerSGD_hook rank 4
# ROUNDS (default 1) runs each rate's rows that many times in turn; the
# table and the chart then use each row's median.
#   RATES   the rates (default "10mbit 50mbit 300mbit 1gbit unshaped")
# Usage: bench/link_speed_chart.sh [OUT_DIR] [CHART.svg]
# Writes OUT_DIR/table.md (the table for BENCHMARKS.md) and the chart
# (default docs/images/link_speed.svg, drawn by gnuplot from the table's rows).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/link_speed_chart}
chart=${2:-docs/images/link_speed.svg}
rates=${RATES:-10mbit 50mbit 300mbit 1gbit unshaped}
mkdir -p "$out" "$(dirname "$chart")"
: >"$out/rows.jsonl"
for rate in $rates; do
  echo "== $rate"
  CASES=cnn_2x1 ROWS="pt_none pt_fp16 pt_powersgd bb_fp32 bb_fp16 bb_powersgd" \
    bench/compression_bench.sh 1gbit "$rate" 300mbit "$out/$rate"
  cat "$out/$rate/rows.jsonl" >>"$out/rows.jsonl"
done
/usr/bin/python3 bench/link_speed_chart.py "$out/rows.jsonl" "$chart" | tee "$out/table.md"
