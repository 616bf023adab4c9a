#!/bin/sh
# Runs a command that must succeed: passes when it exits 0 and its output
# matches PATTERN (grep -E). CTest's PASS_REGULAR_EXPRESSION alone ignores
# the exit status, so a script that printed its "ok" line and then failed
# would pass; this checks both. Exit status 77 (skipped) is passed on: a
# test declared with SKIP_RETURN_CODE 77 is then reported skipped, any
# other fails.
#   expect_success.sh PATTERN COMMAND [ARGS...]
pattern=$1; shift
out=$(mktemp)
"$@" >"$out" 2>&1
rc=$?
cat "$out"
echo "expect_success: exit status $rc"
if [ "$rc" -eq 77 ]; then
  echo "expect_success: skipped (exit status 77)"; rm -f "$out"; exit 77
fi
if [ "$rc" -ne 0 ]; then
  echo "expect_success: FAIL: exit status $rc"; rm -f "$out"; exit 1
fi
if ! grep -Eq "$pattern" "$out"; then
  echo "expect_success: FAIL: output does not match /$pattern/"; rm -f "$out"; exit 1
fi
rm -f "$out"
echo "expect_success: ok"
