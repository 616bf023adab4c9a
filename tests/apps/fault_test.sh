#!/bin/bash
# Injects one fault (fault.kind = KIND on rank 1 at step 3) into a 2-worker
# run: the job must exit non-zero within LIMIT seconds and its output must
# name rank 1 (and, for a hang, the operation that waited for it).
#   fault_test.sh BIGBATCH_BINARY CONFIG KIND [LIMIT] [TIMEOUT_S]
# Prints "fault_test: ok KIND <seconds from injection to exit>" on success.
set -u
bin=$1; config=$2; kind=$3; limit=${4:-60}; timeout_s=${5:-5}
dir=$(mktemp -d)
log=$dir/log
start=$(date +%s.%N)
timeout -k 5 "$limit" "$bin" train "$config" --workers 2 --run-dir "$dir/run" \
  --set data.train_samples=4096 --set data.eval_samples=1000 --set train.epochs=2 \
  --set fault.kind="$kind" --set fault.rank=1 --set fault.step=3 \
  --set comm.timeout_s="$timeout_s" -q >"$log" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$log"
# (mpirun passes on a killed rank's status, 137 for SIGKILL: time tells a hang.)
if [ "$rc" -eq 124 ] || [ "$(echo "$end - $start >= $limit" | bc)" -eq 1 ]; then
  echo "FAIL: $kind: the job was still running after $limit s (hang)"; rm -rf "$dir"; exit 1
fi
[ "$rc" -ne 0 ] || { echo "FAIL: $kind: exit status 0 after a fault"; rm -rf "$dir"; exit 1; }
grep -q "injecting fault '$kind' on rank 1 at step 3" "$log" || {
  echo "FAIL: $kind: the fault was not injected"; rm -rf "$dir"; exit 1; }
case $kind in
  throw)   pattern="injected fault \(fault.kind = throw\) on rank 1 at step 3" ;;
  abort)   pattern="rank 1 .*(signal 6|Aborted)" ;;
  sigkill) pattern="rank 1 .*(signal 9|Killed)" ;;
  hang)    pattern="rank 1 did not |stopped answering: rank 1 " ;;
  nan)     pattern="non-finite gradient at epoch 1 step 3 .*rank 1's loss was not finite" ;;
  *) echo "FAIL: unknown kind $kind"; exit 1 ;;
esac
grep -Eq "$pattern" "$log" || { echo "FAIL: $kind: the output does not name rank 1 (/$pattern/)"; rm -rf "$dir"; exit 1; }
rm -rf "$dir"
echo "fault_test: ok $kind rc=$rc $(echo "$end - $start" | bc) s"
