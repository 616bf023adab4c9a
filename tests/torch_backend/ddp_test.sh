#!/bin/bash
# An ordinary PyTorch DDP script (examples/torch_ddp/train.py: its own
# DataLoader, model and optimizer, Fashion-MNIST) on the "bigbatch"
# backend against gloo, the same script with only the backend changed:
#   1. 100 steps on 2 ranks: the same loss at every step, bit for bit (DDP
#      averages each bucket and a sum of two is exact in any order). On 3
#      ranks the sums go in another order (bigbatch's shared-memory sum in
#      rank order, gloo's ring): one ulp apart from step 2, which SGD with
#      momentum amplifies (measured: 5e-7 at step 10, 5e-3 at step 40) — so
#      the first 20 steps within 1e-5 (a wrong sum is off by the loss
#      itself from step 2: the check that matters), and the last 100
#      steps' mean loss within 10 % (both train alike; one run's 50-step
#      means are ±5 % apart by batch noise alone)
#   2. DDP comm hooks, 60 steps each: PyTorch's fp16_compress_hook and
#      powerSGD_hook on bigbatch, and bigbatch's own hooks.fp16 and
#      hooks.powersgd: every loss finite, the last 20 steps' mean below the
#      first 20's; bigbatch's fp16 hook within 1e-4 of PyTorch's over the
#      first 5 steps (both round the bucket to fp16, in other places, and
#      SGD amplifies the difference, up to ~20x in one step: 5e-5 apart at
#      step 6 on one machine, 1.01e-4 on a 2-core Xeon guest, 2026-12-07,
#      whose steps 2 and 5 were 2.4e-7 and 5.2e-6 apart; 1e-2 by step 18.
#      A wrong sum is off by the loss itself from step 2)
#   3. bigbatch's PowerSGD state through a checkpoint: 30 steps, saved
#      (model, optimizer, the hook's state on each rank), resumed in a new
#      job for 30 more — the same losses, bit for bit, as 60 steps at once
#   4. DDP's gradient_as_bucket_view: the view in effect and bigbatch's
#      PowerSGD hook handing back the bucket itself, written in place
#      (bucket_view_check.py), and the example's 60 steps with it the same
#      losses, bit for bit, as without (the same sums, on the same values).
#      bucket_view_check.py keeps DDP and the hook's state in globals, so
#      its group outlives destroy_process_group() to the interpreter's
#      exit: it must exit 0 (it crashed there, 2 runs in 3, before
#      bigbatch_torch shut such groups down at exit)
#   ddp_test.sh PYTHONPATH
set -u
pythonpath=$1
# The interpreter the example runs under: Debian's (PyTorch 1.13) unless the
# test names PyTorch 2.x's (scripts/setup-torch2's environment).
python=${BIGBATCH_TEST_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
train="$here/../../examples/torch_ddp/train.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.out; do echo "== $f"; tail -20 "$f"; done; exit 1; }
run() {  # run NAME RANKS ARGS...: the example under mpirun; its losses in NAME.log
  local name=$1 n=$2; shift 2
  MASTER_PORT=$((29600 + RANDOM % 300)) PYTHONPATH=$pythonpath \
    timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe -np "$n" \
    "$python" "$train" --log "$dir/$name.log" "$@" >"$dir/$name.out" 2>&1 ||
    fail "$name exited non-zero"
}

run gloo2 2 --backend gloo --steps 100
run bigbatch2 2 --backend bigbatch --steps 100
[ "$(wc -l <"$dir/bigbatch2.log")" -eq 100 ] || fail "bigbatch2 logged $(wc -l <"$dir/bigbatch2.log") steps"
cmp "$dir/gloo2.log" "$dir/bigbatch2.log" || { diff "$dir/gloo2.log" "$dir/bigbatch2.log" | head; fail "2 ranks: the losses differ from gloo's"; }
# BIGBATCH_DDP_TEST_TWO_RANKS=1 (the PyTorch 2.x run, to keep CI's time):
# no 3-rank comparison — its sums are the backend's own C++, the same under
# either PyTorch; what 2.x changes is DDP's side, which the bit-exact 2-rank
# run, the hooks, the resume and the bucket view cover.
if [ "${BIGBATCH_DDP_TEST_TWO_RANKS:-0}" != 1 ]; then
run gloo3 3 --backend gloo --steps 200
run bigbatch3 3 --backend bigbatch --steps 200
/usr/bin/python3 - "$dir/gloo3.log" "$dir/bigbatch3.log" <<'PY' || fail "3 ranks: the losses differ from gloo's"
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
early = max(abs(x - y) for x, y in zip(a[:20], b[:20]))
late = abs(sum(a[-100:]) - sum(b[-100:])) / sum(a[-100:])
print(f"3 ranks: first 20 steps max |loss difference| {early:.3g}; last 100 steps' mean "
      f"{sum(a[-100:]) / 100:.4f} (gloo) and {sum(b[-100:]) / 100:.4f} (bigbatch)")
assert len(a) == len(b) == 200 and early < 1e-5 and late < 0.10, (early, late)
PY
fi

for hook in torch_fp16 torch_powersgd bigbatch_fp16 bigbatch_powersgd; do
  run "$hook" 2 --backend bigbatch --hook "$hook" --steps 60
done
/usr/bin/python3 - "$dir" <<'PY' || fail "the hooks did not train"
import math, sys
d = sys.argv[1]
loss = {h: [float(l.split()[1]) for l in open(f"{d}/{h}.log")]
        for h in ("torch_fp16", "torch_powersgd", "bigbatch_fp16", "bigbatch_powersgd")}
for h, v in loss.items():
    first, last = sum(v[:20]) / 20, sum(v[-20:]) / 20
    print(f"{h}: 60 steps, mean loss {first:.3f} -> {last:.3f}")
    assert len(v) == 60 and all(math.isfinite(x) for x in v) and last < first, h
worst = max(abs(a - b) for a, b in zip(loss["torch_fp16"][:5], loss["bigbatch_fp16"][:5]))
print(f"bigbatch's fp16 hook against PyTorch's: first 5 steps max |loss difference| {worst:.3g}")
assert worst < 1e-4, worst
PY

run straight 2 --backend bigbatch --hook bigbatch_powersgd --steps 60
run first 2 --backend bigbatch --hook bigbatch_powersgd --steps 30 --save "$dir/ck"
run second 2 --backend bigbatch --hook bigbatch_powersgd --steps 60 --resume "$dir/ck"
cat "$dir/first.log" "$dir/second.log" >"$dir/resumed.log"
cmp "$dir/straight.log" "$dir/resumed.log" || {
  diff "$dir/straight.log" "$dir/resumed.log" | head; fail "the resumed PowerSGD run differs"; }

MASTER_PORT=$((29600 + RANDOM % 300)) PYTHONPATH=$pythonpath \
  timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$python" "$here/bucket_view_check.py" \
  >"$dir/view_check.out" 2>&1 || fail "bucket_view_check.py exited non-zero"
# mpirun interleaves the ranks' output (once it joined two lines): look for
# each rank's verdict anywhere, not at a line's start.
[ "$(grep -o 'rank [01]: bucket view: ok' "$dir/view_check.out" | sort -u | wc -l)" -eq 2 ] ||
  fail "bucket_view_check.py: not ok on both ranks"
run view 2 --backend bigbatch --hook bigbatch_powersgd --steps 60 --bucket-view
cmp "$dir/straight.log" "$dir/view.log" || {
  diff "$dir/straight.log" "$dir/view.log" | head; fail "PowerSGD with gradient_as_bucket_view differs"; }
echo "ddp_test: ok"
