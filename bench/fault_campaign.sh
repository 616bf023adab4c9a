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
#
# Recovery mode, for docs/RELIABILITY.md ("Recovery campaign"):
#   bench/fault_campaign.sh --recover [RUNS] [TIMEOUT]
# RUNS rounds of every kind (throw abort sigkill hang nan) at every site
# (fault.during: step exchange evaluation checkpoint; nan at a step only),
# each a supervised 2-worker job (--max-restarts 2) of the default recipe on
# 4,096 images for 2 epochs, checkpoints every 5 steps, the fault on a
# random rank at a random step: with fault.attempts = 1 (a transient fault)
# the job must finish with model.pt byte-identical to an uninterrupted
# run's; every fifth round (every GIVE_UP_EVERY-th, default 5) runs the
# fault in every attempt instead, and the job must give up (exit 1) listing
# 3 failures. After every job: no hang
# (a hard limit), every checkpoint left in the run directory loads, no
# process of the job and no new /dev/shm segment is left. One row per
# kind and site, and the totals.
set -u
if [ "${1:-}" = "--recover" ]; then
  shift
  runs=${1:-3}; timeout_s=${2:-10}; giveUpEvery=${GIVE_UP_EVERY:-5}
  bin=build/apps/bigbatch; config=configs/default.toml
  limit=$((timeout_s * 9 + 120))
  work=$(mktemp -d)
  common=(--workers 2 --set data.train_samples=4096 --set data.eval_samples=1000
          --set train.epochs=2 --set train.stop_at_target=false --set train.batch_size=64
          --set ckpt.every_steps=5 --set comm.timeout_s="$timeout_s" -q)
  "$bin" train "$config" "${common[@]}" --run-dir "$work/reference" >/dev/null 2>&1 ||
    { echo "fault_campaign: the uninterrupted run failed"; exit 1; }
  shm_before=$(ls /dev/shm | sort)
  total=0; exact=0; gave_up=0; bad=0; hangs=0; corrupt=0; orphans=0
  printf "| kind | during | jobs | failures injected | recovered byte-identical | gave up, all named | wrong outcome | hangs | corrupt checkpoints | orphans |\n|---|---|---|---|---|---|---|---|---|---|\n"
  for kind in throw abort sigkill hang nan; do
    for during in step exchange evaluation checkpoint; do
      [ "$kind" = nan ] && [ "$during" != step ] && continue
      jobs=0; injected=0; ok=0; up=0; wrong=0; hung=0; broken=0; left=0
      for i in $(seq 1 "$runs"); do
        run=$work/$kind-$during-$i
        rank=$((RANDOM % 2)); step=$((3 + RANDOM % 55)); attempts=1
        [ $((i % giveUpEvery)) = 0 ] && attempts=0
        timeout -k 5 "$limit" "$bin" train "$config" "${common[@]}" --run-dir "$run" --max-restarts 2 \
          --set fault.kind="$kind" --set fault.during="$during" --set fault.rank="$rank" \
          --set fault.step="$step" --set fault.attempts="$attempts" >"$run.log" 2>&1
        rc=$?
        jobs=$((jobs + 1))
        injected=$((injected + $(grep -c "injecting fault" "$run.log")))
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
          hung=$((hung + 1))
        elif [ "$attempts" = 1 ] && [ "$rc" = 0 ] && cmp -s "$work/reference/model.pt" "$run/model.pt"; then
          ok=$((ok + 1))
        elif [ "$attempts" = 0 ] && [ "$rc" = 1 ] &&
             [ "$(grep -c '^  attempt [123]: ' "$run.log")" = 3 ]; then
          up=$((up + 1))
        else
          wrong=$((wrong + 1)); echo "wrong outcome (exit $rc): $run.log" >&2
        fi
        for c in "$run"/checkpoints/ckpt-*.pt; do
          [ -e "$c" ] || continue
          "$bin" export "$c" "$work/w.pt" >/dev/null 2>&1 || { broken=$((broken + 1)); echo "does not load: $c" >&2; }
        done
        if pgrep -f -- "$run" >/dev/null || comm -13 <(echo "$shm_before") <(ls /dev/shm | sort) | grep -q .; then
          left=$((left + 1)); echo "left over after $run" >&2
          pkill -9 -f -- "$run"
        fi
      done
      printf "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d |\n" "$kind" "$during" "$jobs" \
        "$injected" "$ok" "$up" "$wrong" "$hung" "$broken" "$left"
      total=$((total + injected)); exact=$((exact + ok)); gave_up=$((gave_up + up))
      bad=$((bad + wrong)); hangs=$((hangs + hung)); corrupt=$((corrupt + broken)); orphans=$((orphans + left))
    done
  done
  printf "| all | | | %d | %d | %d | %d | %d | %d | %d |\n" "$total" "$exact" "$gave_up" "$bad" "$hangs" "$corrupt" "$orphans"
  rm -rf "$work"
  exit 0
fi
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
