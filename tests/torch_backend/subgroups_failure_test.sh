#!/bin/sh
# A subgroup's failure is still the job's after a later group is made
# (subgroups_test.py failure_kept, torchrun, 4 ranks): passes when the run
# ends non-zero, the later group worked (rank 0 says so), and the exit hook
# ended the job for the pair's failure.
#   subgroups_failure_test.sh TORCHRUN PORT
torchrun=$1 port=$2
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout -k 5 90 "$torchrun" --nproc_per_node 4 --master_port "$port" --redirects 2 --tee 2 \
  "$here/subgroups_test.py" failure_kept >"$out" 2>&1
rc=$?
cat "$out"
fail() { echo "subgroups_failure_test: FAIL: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job ended with status 0: the pair's failure was forgotten"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "still running after 90 s (a hang)"
grep -q "failure_kept: the later group works" "$out" || fail "the later group did not work"
grep -q "bigbatch_torch: the process group failed (.*allreduce" "$out" ||
  fail "the exit hook did not end the job for the pair's failure"
echo "subgroups_failure_test: ok"
