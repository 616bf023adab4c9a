#!/bin/bash
# Fault-injection campaign for docs/RELIABILITY.md: RUNS injections of each
# fault kind into a 2-worker run (rank 1, step 5, checkpoints every 2 steps,
# comm.timeout_s = TIMEOUT), each under a hard limit. Per injection: the exit
# status, whether the output names rank 1, the seconds from the injection
# message to the job's exit, and the newest checkpoint that `latest` names and
# whether it loads (step 4: one step lost; step 2 when rank 0 was ended while
# writing step 4's, which the atomic write leaves unseen). Prints one summary
# row per kind; logs of injections whose output does not name rank 1 are
# kept in LOGS (default /tmp/fault-campaign-logs).
#   bench/fault_campaign.sh [RUNS] [TIMEOUT] [KINDS...]   (from the repo root)
set -u
runs=${1:-20}; timeout_s=${2:-10}; shift 2 || true
kinds=("$@"); [ ${#kinds[@]} -gt 0 ] || kinds=(throw abort sigkill hang nan)
logs=${LOGS:-/tmp/fault-campaign-logs}; mkdir -p "$logs"
bin=build/apps/bigbatch; config=configs/default.toml
limit=$((timeout_s * 3 + 60))
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }
printf "| kind | injections | non-zero exit | hangs (> %s s) | rank 1 named | newest checkpoint loads (step 4 / step 2) | detection s (min / median / max) |\n|---|---|---|---|---|---|---|\n" "$limit"
for kind in "${kinds[@]}"; do
  nonzero=0; hangs=0; named=0; loads4=0; loads2=0; times=()
  for i in $(seq 1 "$runs"); do
    dir=$(mktemp -d)
    ( timeout -k 5 "$limit" "$bin" train "$config" --workers 2 --run-dir "$dir/run" \
        --set data.train_samples=8192 --set data.eval_samples=1000 --set train.epochs=2 \
        --set ckpt.every_steps=2 --set fault.kind="$kind" --set fault.rank=1 --set fault.step=5 \
        --set comm.timeout_s="$timeout_s" -q 2>&1; echo "EXIT $?" ) | stamp > "$dir/log"
    end=$(tail -1 "$dir/log" | cut -d' ' -f1)
    rc=$(tail -1 "$dir/log" | awk '{print $3}')
    inject=$(grep -m1 "injecting fault" "$dir/log" | cut -d' ' -f1)
    [ "$rc" != 0 ] && nonzero=$((nonzero + 1))
    [ "$rc" = 124 ] && hangs=$((hangs + 1))
    if grep -Eq "rank 1 (did not|\(in the)|injected fault .* on rank 1|rank 1's loss|process rank 1 " "$dir/log"; then
      named=$((named + 1))
    else
      cp "$dir/log" "$logs/$kind-$i.log"
    fi
    [ -n "$inject" ] && times+=("$(echo "$end - $inject" | bc)")
    newest=$(cat "$dir/run/checkpoints/latest" 2>/dev/null)
    if [ -n "$newest" ] && "$bin" export "$dir/run/checkpoints/$newest" "$dir/w.pt" >>"$dir/log" 2>&1; then
      case $newest in
        ckpt-000000004.pt) loads4=$((loads4 + 1)) ;;
        ckpt-000000002.pt) loads2=$((loads2 + 1)) ;;
      esac
    else
      { echo "latest: '$newest'"; ls -la "$dir/run/checkpoints"; } >> "$dir/log" 2>&1
      cp "$dir/log" "$logs/$kind-$i-checkpoint.log"
    fi
    rm -rf "$dir"
  done
  sorted=($(printf '%s\n' "${times[@]}" | sort -n))
  n=${#sorted[@]}
  if [ "$n" -gt 0 ]; then
    det=$(printf "%.1f / %.1f / %.1f" "${sorted[0]}" "${sorted[$((n / 2))]}" "${sorted[$((n - 1))]}")
  else det="-"; fi
  printf "| %s | %d | %d | %d | %d | %d / %d | %s |\n" "$kind" "$runs" "$nonzero" "$hangs" "$named" "$loads4" "$loads2" "$det"
done
