#!/usr/bin/env bash
# Time to 92 % Fashion-MNIST on 2 emulated hosts (scripts/emulated_cluster,
# root) at a slow link, the same model and recipe on both sides
# (configs/fast.toml; bench/pytorch_train.py --recipe fast): PyTorch DDP
# (gloo, tcmalloc) with no hook, fp16_compress_hook and powerSGD_hook at
# rank 4 from iteration 2, against bigbatch fp32 and bigbatch with
# ddp.compression = powersgd at rank 4 from step 2 (bb_powersgd; with its
# factors in 16 bits, ddp.exchange_dtype = fp16: bb_powersgd_fp16, not in
# the default list). One thread per rank on
# both sides (each emulated host's rank would otherwise take every core of
# this machine). Seeds run in turn, each system once per seed, so drift of
# the machine hits all alike.
#
#   bench/compression_tta.sh "SEEDS" [LINK] [SYSTEMS]
#   e.g. bench/compression_tta.sh "1 2 3" 10mbit
#        bench/compression_tta.sh "1" 10mbit "pt_none pt_fp16"
#
# Every time is run_start (the barrier before the first step) to the end of
# the evaluation that first reaches 92 %; each run stops there. Prints a
# row per run, then per system the mean time, its final accuracy and its
# ratio to the mean of each PyTorch system.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=$1
link=${2:-10mbit}
systems=${3:-"pt_none pt_fp16 pt_powersgd bb_fp32 bb_powersgd"}
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
out=$(mktemp -d)
rows=$out/rows.jsonl
scripts/build --target bigbatch >/dev/null
cluster=(scripts/emulated_cluster --hosts 2 --ranks-per-host 1 --rate "$link" --)

run_pytorch() {  # seed hook log
  "${cluster[@]}" env ${tcmalloc:+LD_PRELOAD=$tcmalloc} OMP_NUM_THREADS=1 /usr/bin/python3 \
    bench/pytorch_train.py --mpi --recipe fast --seed "$1" --hook "$2" --powersgd-rank 4 \
    --powersgd-start 2 >"$3" 2>&1
  tail -1 "$3" | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
print(json.dumps({"time": r["time_to_target_s"] if r["reached_target"] else r["train_time_s"],
                  "reached": r["reached_target"], "epochs": r["epochs"],
                  "accuracy": r["final_accuracy"]}))'
}

run_bigbatch() {  # seed dir log sets...
  local seed=$1 dir=$2 log=$3
  shift 3
  "${cluster[@]}" build/apps/bigbatch train configs/fast.toml --set run.seed="$seed" \
    --set run.threads=1 --run-dir "$dir" -q "$@" >"$log" 2>&1
  /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"time": r["time_to_target_s"] if r["reached_target"] else r["train_time_s"],
                  "reached": r["reached_target"], "epochs": r["epochs"],
                  "accuracy": r["final_accuracy"]}))' "$dir/summary.json"
}

printf "%-17s %4s %9s %8s %7s %9s\n" system seed "to 92 %" reached epochs accuracy
for seed in $seeds; do
  for system in $systems; do
    log=$out/$system-$seed.log
    case $system in
      pt_*) r=$(run_pytorch "$seed" "${system#pt_}" "$log") ;;
      bb_fp32) r=$(run_bigbatch "$seed" "$out/$system-$seed" "$log") ;;
      bb_powersgd) r=$(run_bigbatch "$seed" "$out/$system-$seed" "$log" \
                       --set ddp.compression=powersgd --set ddp.powersgd_rank=4 \
                       --set ddp.powersgd_start_step=2) ;;
      bb_powersgd_fp16) r=$(run_bigbatch "$seed" "$out/$system-$seed" "$log" \
                            --set ddp.compression=powersgd --set ddp.powersgd_rank=4 \
                            --set ddp.powersgd_start_step=2 --set ddp.exchange_dtype=fp16) ;;
      *) echo "unknown system $system" >&2; exit 2 ;;
    esac
    echo "$r" | /usr/bin/python3 -c "
import json, sys
r = json.load(sys.stdin); r.update(system='$system', seed=$seed)
print('%-17s %4d %9.1f %8s %7d %8.2f%%' % (r['system'], r['seed'], r['time'], r['reached'],
                                        r['epochs'], 100 * r['accuracy']))
open('$rows', 'a').write(json.dumps(r) + '\n')"
  done
done
/usr/bin/python3 - "$rows" "$link" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
systems = list(dict.fromkeys(r["system"] for r in rows))
mean = {s: statistics.mean(r["time"] for r in rows if r["system"] == s) for s in systems}
acc = {s: statistics.mean(r["accuracy"] for r in rows if r["system"] == s) for s in systems}
runs = {s: sum(r["system"] == s for r in rows) for s in systems}
pts = [s for s in systems if s.startswith("pt_")]
print(f"\nlink {sys.argv[2]}: mean over the seeds")
for s in systems:
    ratios = "  ".join(f"{mean[s] / mean[p]:.2f}x {p}" for p in pts)
    print(f"{s:<17} {mean[s]:8.1f} s  {100 * acc[s]:6.2f} %  ({runs[s]} run(s))  {ratios}")
EOF
rm -rf "$out"
