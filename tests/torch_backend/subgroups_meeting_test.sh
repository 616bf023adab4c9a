#!/bin/sh
# A subgroup under mpirun whose members do not all come (MODE missing) or
# list other ranks (MODE mismatch): subgroups_test.py MODE on 3 ranks.
# Passes when every member's new_group raised the expected error within its
# timeout and the default group still worked (rank 0 says "MODE ok"), and
# the failed creation then ended the job at exit (non-zero, the exit
# hook's line): a member arriving after its peers' deadline could
# otherwise wait in MPI_Comm_create_group for ever.
#   subgroups_meeting_test.sh PYTHON MODE
python=$1 mode=$2
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout -k 5 90 mpirun --allow-run-as-root --oversubscribe -np 3 "$python" \
  "$here/subgroups_test.py" "$mode" >"$out" 2>&1
rc=$?
cat "$out"
fail() { echo "subgroups_meeting_test: FAIL: $*"; exit 1; }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "still running after 90 s (a hang)"
grep -q "subgroups_test: $mode ok" "$out" || fail "a rank's error or the default group's all_reduce was wrong"
[ "$rc" -ne 0 ] || fail "the job ended with status 0: the failed creation was forgotten"
grep -q "bigbatch_torch: the process group failed (.*making a process group of MPI ranks" "$out" ||
  fail "the exit hook did not end the job for the failed creation"
echo "subgroups_meeting_test: ok $mode"
