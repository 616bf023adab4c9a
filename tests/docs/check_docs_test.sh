#!/bin/bash
# scripts/check-docs finds what it claims to (tests/docs/fixtures/broken.md:
# one of each problem on a line marked "bad") and nothing on the lines marked
# "good": a docs check that cannot fail would pass any page.
#   check_docs_test.sh BIGBATCH_BINARY
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
page=$root/tests/docs/fixtures/broken.md
out=$("$root/scripts/check-docs" "$1" "$page")
rc=$?
echo "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ $rc -eq 1 ] || fail "check-docs exited $rc on a page with problems, not 1"
for n in $(grep -n '^- bad:' "$page" | cut -d: -f1); do
  echo "$out" | grep -q "broken.md:$n: " || fail "line $n ($(sed -n "${n}p" "$page")) not reported"
done
for n in $(grep -n '^- good:\|^  `src' "$page" | cut -d: -f1); do
  ! echo "$out" | grep -q "broken.md:$n: " || fail "line $n reported, but it is correct"
done
bad=$(grep -c '^- bad:' "$page")
got=$(echo "$out" | grep -c "broken.md:")
[ "$got" -eq "$bad" ] || fail "$got problems reported for $bad bad lines"
echo "PASS: check-docs reported each of the $bad problems and nothing else"
