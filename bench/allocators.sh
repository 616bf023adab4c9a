#!/usr/bin/env bash
# Allocator comparison for the default recipe: one epoch of training plus one
# evaluation per allocator, all in one script run (machines are noisy: compare
# the ratios within a run). Usage: bench/allocators.sh [epochs] [repeats]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-1}
repeats=${2:-1}
scripts/build --target bigbatch bigbatch-glibc-malloc >/dev/null
tunables="glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"
jemalloc=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
out=$(mktemp -d)
printf "%-22s %10s %10s %10s %10s\n" allocator img/s epoch_s backward_s eval_s
for r in $(seq "$repeats"); do
  for mode in tcmalloc glibc-default glibc-tunables jemalloc; do
    bin=build/bench/bigbatch-glibc-malloc
    env=()
    case $mode in
      tcmalloc) bin=build/apps/bigbatch ;;
      glibc-tunables) env=(GLIBC_TUNABLES=$tunables) ;;
      jemalloc) [ -n "$jemalloc" ] || continue; env=(LD_PRELOAD=$jemalloc) ;;
    esac
    # One process with 2 threads, as measured in docs/BENCHMARKS.md.
    env "${env[@]}" "$bin" train configs/default.toml --set train.epochs="$epochs" \
      --set run.workers=1 --set train.batch_size=128 \
      --set train.stop_at_target=false --run-dir "$out/$mode" --overwrite -q
    awk -F, -v m="$mode" 'NR == 1 {for (i = 1; i <= NF; i++) col[$i] = i; next}
      {img += $col["img_s"]; ep += $col["epoch_time_s"]; bw += $col["backward_s"];
       ev += $col["eval_s"]; n++}
      END {printf "%-22s %10.0f %10.2f %10.2f %10.2f\n", m, img / n, ep / n, bw / n, ev / n}' \
      "$out/$mode/metrics.csv"
  done
done
rm -rf "$out"
