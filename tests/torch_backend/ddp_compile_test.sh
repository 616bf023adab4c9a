#!/bin/bash
# DDP under torch.compile (inductor, on the CPU; PyTorch 2.x) over the
# "bigbatch" backend against gloo: examples/torch_ddp/train.py --compile,
# 8 steps on 2 ranks under mpirun with each backend. The same compiled
# graph on the same batches, DDP's buckets (filled by the compiled
# backward; dynamo's DDP optimizer splits the graph at bucket boundaries,
# one bucket here) averaged over 2 ranks, which is exact in any order: the
# same loss at every step, bit for bit, and at least one graph compiled.
#   ddp_compile_test.sh PYTHON
set -u
python=$1
here=$(cd "$(dirname "$0")" && pwd)
train="$here/../../examples/torch_ddp/train.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.out; do echo "== $f"; tail -30 "$f"; done; exit 1; }
run() {  # run BACKEND: 8 compiled steps; the losses in BACKEND.log
  MASTER_PORT=$((29600 + RANDOM % 300)) timeout -k 5 240 mpirun --allow-run-as-root \
    --oversubscribe -np 2 "$python" "$train" --compile --steps 8 --backend "$1" \
    --log "$dir/$1.log" >"$dir/$1.out" 2>&1 || fail "$1 exited non-zero"
  grep -Eq "torch.compile: [1-9][0-9]* graph\(s\) compiled" "$dir/$1.out" ||
    fail "$1: no compiled graph reported"
}
run gloo
run bigbatch
[ "$(wc -l <"$dir/bigbatch.log")" -eq 8 ] || fail "bigbatch logged $(wc -l <"$dir/bigbatch.log") steps"
cmp "$dir/gloo.log" "$dir/bigbatch.log" ||
  { diff "$dir/gloo.log" "$dir/bigbatch.log" | head; fail "the compiled losses differ from gloo's"; }
grep "torch.compile:" "$dir/bigbatch.out"
echo "ddp_compile_test: ok"
