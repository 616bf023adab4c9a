#!/usr/bin/env bash
# Does leaving MPI cost training speed? The same jobs on 2 emulated hosts x 2
# ranks at RATE (default 1gbit), started by mpirun (over ssh; MPI moves the
# bytes) and by torchrun on each host (scripts/torchrun_hosts; UCX moves
# them), ROUNDS rounds (default 3) interleaved, medians (root):
#   train    `bigbatch train` on the default recipe (8192 images, 1 epoch,
#            1 thread per rank): summary.json's throughput_img_s
#   example  examples/torch_ddp/train.py --backend bigbatch --steps 60: the
#            img/s it prints
# Prints each median and torchrun ÷ mpirun (target >= 0.95).
#   bench/launcher_bench.sh [RATE] [ROUNDS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
rounds=${2:-3}
out=$(realpath -m "${3:-runs/launcher_bench}")
scripts/build --target bigbatch bigbatch_torch >/dev/null
mkdir -p "$out"
bin=$PWD/build/apps/bigbatch
example=$PWD/examples/torch_ddp/train.py
pypath=$PWD/build/python
recipe=(configs/default.toml --set data.train_samples=8192 --set data.eval_samples=1000
        --set train.epochs=1 --set run.threads=1 --set ckpt.every_epochs=0
        --set train.stop_at_target=false -q --overwrite)
mpi=(scripts/emulated_cluster --hosts 2 --ranks-per-host 2 --rate "$rate" --)
tr=(scripts/emulated_cluster --hosts 2 --rate "$rate" --launcher -- scripts/torchrun_hosts
    --nproc-per-node 2)
for round in $(seq 1 "$rounds"); do
  "${mpi[@]}" "$bin" train "${recipe[@]}" --run-dir "$out/train_mpi_$round" >"$out/train_mpi_$round.log" 2>&1
  "${tr[@]}" --torchrun-arg --no_python -- "$bin" train "${recipe[@]}" \
    --run-dir "$out/train_torchrun_$round" >"$out/train_torchrun_$round.log" 2>&1
  "${mpi[@]}" env PYTHONPATH="$pypath" /usr/bin/python3 "$example" --backend bigbatch --steps 60 \
    >"$out/example_mpi_$round.log" 2>&1
  "${tr[@]}" --env PYTHONPATH="$pypath" -- "$example" --backend bigbatch --steps 60 \
    >"$out/example_torchrun_$round.log" 2>&1
done
/usr/bin/python3 - "$out" "$rounds" "$rate" <<'PY'
import json, re, statistics, sys
out, rounds, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def train(launcher):
    return [json.load(open(f"{out}/train_{launcher}_{r}/summary.json"))["throughput_img_s"]
            for r in range(1, rounds + 1)]
def example(launcher):
    rates = []
    for r in range(1, rounds + 1):
        m = re.findall(r"(\d+) img/s", open(f"{out}/example_{launcher}_{r}.log").read())
        rates.append(float(m[-1]))
    return rates
print(f"2 emulated hosts x 2 ranks, {rate} links, {rounds} rounds; img/s (median; every round)")
for name, get in (("bigbatch train", train), ("torch DDP example", example)):
    m, t = get("mpi"), get("torchrun")
    print(f"{name:>18}: mpirun {statistics.median(m):8.1f} {m}  torchrun {statistics.median(t):8.1f} {t}"
          f"  torchrun/mpirun {statistics.median(t) / statistics.median(m):.3f}")
PY
