#!/bin/sh
# Runs a command that must fail: passes when it exits non-zero within
# LIMIT seconds and its output matches PATTERN (grep -E). A hang is killed at
# LIMIT and reported as a failure, so a regression cannot stall CI.
#   expect_failure.sh LIMIT PATTERN COMMAND [ARGS...]
limit=$1; pattern=$2; shift 2
out=$(mktemp)
start=$(date +%s.%N)
timeout -k 5 "$limit" "$@" >"$out" 2>&1
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$out"
echo "expect_failure: exit status $rc after ${elapsed} s (limit ${limit} s)"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "expect_failure: FAIL: still running after ${limit} s (a hang)"; rm -f "$out"; exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "expect_failure: FAIL: the command succeeded"; rm -f "$out"; exit 1
fi
if ! grep -Eq "$pattern" "$out"; then
  echo "expect_failure: FAIL: output does not match /$pattern/"; rm -f "$out"; exit 1
fi
rm -f "$out"
echo "expect_failure: ok"
