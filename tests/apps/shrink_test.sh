#!/bin/bash
# --min-workers: a 3-worker job of the main job's recipe (configs/fast.toml
# at a global batch of 192 = 3 x 32 x 2 accumulation steps, which 2 workers
# also divide, with its lr 0.2 for 128 scaled linearly to 0.3) loses the
# worker in slot 0 for good — a bad device: whichever rank runs there
# throws at step 120 (fault.slot), rank 0 in the first attempt and again
# after its restart — and finishes on 2 workers in slots 1 and 2 (the
# relaunch leaves slot 0 out: rank 0 of the shrunk job is not put back on
# the bad device), global batch unchanged (32 x 3 accumulation steps), at
# the recipe's target accuracy; restarts.json names both failures with
# their world size; no process or shared-memory segment is left. The recipe's 3 epochs land this run at
# 92.0 +- 0.2 % (91.84-92.19 % over 8 runs, 2026-12-04: the 3-rank sums'
# order moves with the online allreduce choice and the bucket layout), so
# the run gets a 4th epoch and still has to reach the target; it stops
# there. Then what the launcher refuses before any
# worker starts: --min-workers above --workers, a global batch a smaller
# world does not divide, --min-workers without --max-restarts.
#   shrink_test.sh BIGBATCH_BINARY CONFIG
set -u
bin=$1; config=$2
dir=$(mktemp -d)
fail() { echo "FAIL: $*"; [ -f "$dir/log" ] && cat "$dir/log"; exit 1; }
shm_before=$(ls /dev/shm | sort)

"$bin" train "$config" --workers 3 --set train.batch_size=32 --set train.accumulation_steps=2 --set train.epochs=4 \
  --set optim.lr=0.3 --set ckpt.every_steps=50 --set fault.kind=throw --set fault.slot=0 --set fault.step=120 \
  --max-restarts 3 --min-workers 2 --run-dir "$dir/shrunk" -q >"$dir/log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "the job that lost a worker exited $rc"
grep -q "rank 0 failed again right after its restart: it is taken as lost; the job goes on with 2 of 3 workers (--min-workers 2), global batch 192 kept with 3 accumulation step(s) of 32 per rank" "$dir/log" ||
  fail "the shrink was not reported"
grep -q "^bigbatch: left out: slot 0 of this host$" "$dir/log" || fail "the lost worker's slot is not left out"
[ "$(grep -c "injecting fault 'throw'" "$dir/log")" -eq 2 ] || fail "the fault fired other than twice"
/usr/bin/python3 - "$dir/shrunk" <<'PY' || fail "the run on 2 workers is not the recipe's"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
r = json.load(open(sys.argv[1] + "/restarts.json"))
print("world", s["world_size"], "global batch", s["global_batch_size"],
      "accuracy", s["final_accuracy"], "restarts", [(f["attempt"], f["workers"], f["rank"]) for f in r])
assert s["world_size"] == 2 and s["global_batch_size"] == 192, s
assert s["reached_target"] and s["final_accuracy"] >= 0.92, s
assert [(f["attempt"], f["workers"], f["rank"]) for f in r] == [(1, 3, 0), (2, 3, 0)], r
assert [f["resumed_from_step"] for f in r] == [100, 100], r
PY
pgrep -f -- "$dir/shrunk" >/dev/null && fail "a process of the job is left"
comm -13 <(echo "$shm_before") <(ls /dev/shm | sort) | grep . && fail "shared-memory segments are left (above)"

# refused NAME EXPECTED ARGS...: exits 1 naming the problem, before a run
# directory exists.
refused() {
  local name=$1 expected=$2; shift 2
  "$bin" train "$config" "$@" --run-dir "$dir/$name" >"$dir/log" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] || fail "$name: exited $rc, not 1"
  grep -qF -- "$expected" "$dir/log" || fail "$name: the message does not say '$expected'"
  [ -e "$dir/$name" ] && fail "$name: a refused run created its directory"
  return 0
}
refused above "--min-workers 4 is above --workers 3" --workers 3 --max-restarts 1 --min-workers 4
refused undivided "on 2 worker(s) the global batch 192 is not a multiple of 2 x train.batch_size 64" \
  --workers 3 --max-restarts 1 --min-workers 2
refused alone "--min-workers 2 without --max-restarts" --workers 3 --min-workers 2
rm -rf "$dir"
echo "shrink_test: ok"
