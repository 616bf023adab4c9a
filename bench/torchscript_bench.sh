#!/usr/bin/env bash
# A model written in Python against the same model in C++: the default CNN
# (configs/default.toml's), scripted from examples/python_model/default_cnn.py
# and trained as model.name = "torchscript", against the native `cnn`
# started `--init-from` the same file (the same weights), on 2 workers of
# this host, configs/default.toml for EPOCHS epochs, runs alternating
# native / scripted REPEATS times. Prints each run's img/s (the mean of its
# epochs after the first, and the first epoch's), the median ratio, and
# whether the per-epoch losses and accuracies are identical.
#
# Then the example a user copies: examples/python_model/fashion_net.toml
# (FashionNet, LARS, global batch 1024) on 2 workers for its 12 epochs, and
# Python's evaluation of the run's model.jit.pt against its final_accuracy.
# Skip that part with EXAMPLE=0.
#
# Usage: bench/torchscript_bench.sh [EPOCHS] [REPEATS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-3}
repeats=${2:-3}
out=${3:-runs/torchscript_bench}
scripts/build --target bigbatch >/dev/null
mkdir -p "$out"
twin="$out/default_cnn.jit.pt"
/usr/bin/python3 examples/python_model/default_cnn.py "$twin" >/dev/null

common=(--set train.epochs="$epochs" --set train.stop_at_target=false --set ckpt.every_epochs=0
        --workers 2 -q --overwrite)
row() {  # metrics.csv -> "mean img/s after epoch 1, epoch-1 img/s"
  /usr/bin/python3 - "$1" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
later = [float(r["img_s"]) for r in rows[1:]] or [float(rows[0]["img_s"])]
print(f"{sum(later) / len(later):.1f} {float(rows[0]['img_s']):.1f}")
EOF
}
curve() { cut -d, -f1,4,6 "$1"; }  # epoch, train_loss, test_acc

echo "run native_img_s native_epoch1 scripted_img_s scripted_epoch1 ratio same_curve"
ratios=()
for r in $(seq 1 "$repeats"); do
  build/apps/bigbatch train configs/default.toml --run-dir "$out/native_$r" \
    --init-from "$twin" "${common[@]}"
  build/apps/bigbatch train configs/default.toml --run-dir "$out/scripted_$r" \
    --set model.name=torchscript --set model.path="$twin" "${common[@]}"
  read -r n n1 < <(row "$out/native_$r/metrics.csv")
  read -r s s1 < <(row "$out/scripted_$r/metrics.csv")
  same=no
  diff -q <(curve "$out/native_$r/metrics.csv") <(curve "$out/scripted_$r/metrics.csv") \
    >/dev/null && same=yes
  ratio=$(/usr/bin/python3 -c "print(f'{$s / $n:.3f}')")
  ratios+=("$ratio")
  echo "$r $n $n1 $s $s1 $ratio $same"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median scripted/native img/s: $median"

if [ "${EXAMPLE:-1}" != 0 ]; then
  net="$out/fashion_net.jit.pt"
  /usr/bin/python3 examples/python_model/fashion_net.py "$net"
  build/apps/bigbatch train examples/python_model/fashion_net.toml --run-dir "$out/fashion_net" \
    --set model.path="$net" --overwrite -q
  cut -d, -f1,4,6,8 "$out/fashion_net/metrics.csv"
  /usr/bin/python3 examples/python_model/evaluate.py "$out/fashion_net"
fi
