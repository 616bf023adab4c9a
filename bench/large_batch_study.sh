#!/bin/bash
# The large-batch study of docs/LARGE_BATCH.md: each recipe for its 20-epoch
# budget (no early stop) into OUT/<recipe>, then the accuracy chart and the
# tables. About 6-8 minutes per recipe on the 2-core reference machine.
#   bench/large_batch_study.sh [OUT] [RECIPE...]   (from the repo root)
set -eu
out=${1:-runs/study}
shift || true
recipes=("$@")
[ ${#recipes[@]} -gt 0 ] || recipes=(sgd_128 sgd_4096 lars_4096 lars_kfac_4096 lamb_4096 sgd_8192 lars_8192 lars_kfac_8192 lamb_8192)
for r in "${recipes[@]}"; do
  build/apps/bigbatch train "configs/$r.toml" --run-dir "$out/$r" --overwrite -q
done
dirs=("${recipes[@]/#/$out/}")
build/apps/bigbatch plot "${dirs[@]}" -o "$out/plots"
/usr/bin/python3 bench/large_batch_table.py 0.92 "${dirs[@]}"
