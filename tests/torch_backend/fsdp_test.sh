#!/bin/bash
# FSDP2 and distributed checkpoints over the "bigbatch" backend, PyTorch 2.x
# only (fully_shard): fsdp_check.py on 4 ranks (mpirun) with gloo and with
# bigbatch, 10 steps of SGD with momentum from the same initial model on
# each rank's own batches:
#   1. the same mean loss at every step within 2e-6: both sum 4 ranks'
#      gradients in fp32, in different orders (bigbatch's shared-memory sum
#      in rank order, gloo's ring), one or two ulps apart per step (measured:
#      2.4e-7 on losses of 2.3); a wrong sum or shard is off by far more
#   2. the 4-rank run's sharded state, saved with torch.distributed.checkpoint,
#      loads into the model sharded over 2 ranks (DCP reshards), every
#      parameter equal to the saved one exactly.
#   fsdp_test.sh PYTHON
set -u
python=$1
here=$(cd "$(dirname "$0")" && pwd)
check="$here/fsdp_check.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.out; do echo "== $f"; tail -20 "$f"; done; exit 1; }
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run() {  # run NAME RANKS ARGS...: fsdp_check.py under mpirun
  local name=$1 n=$2; shift 2
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) timeout -k 5 300 mpirun --allow-run-as-root \
    --oversubscribe -np "$n" -x MASTER_ADDR -x MASTER_PORT "$python" "$check" "$@" \
    >"$dir/$name.out" 2>&1 || fail "$name exited non-zero"
}

run gloo 4 gloo train "$dir/gloo.log" "$dir/ck_gloo" "$dir/ref_gloo.pt"
run bigbatch 4 bigbatch train "$dir/bigbatch.log" "$dir/ck" "$dir/ref.pt"
[ "$(wc -l <"$dir/bigbatch.log")" -eq 10 ] || fail "bigbatch logged $(wc -l <"$dir/bigbatch.log") steps"
/usr/bin/python3 - "$dir/gloo.log" "$dir/bigbatch.log" <<'PY' || fail "the losses differ from gloo's"
import sys
a = [float(x) for x in open(sys.argv[1])]
b = [float(x) for x in open(sys.argv[2])]
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"FSDP2 on 4 ranks: 10 steps, max |loss difference| against gloo {worst:.2g}")
sys.exit(0 if len(a) == len(b) == 10 and worst <= 2e-6 else 1)
PY
run load 2 bigbatch load "$dir/ck" "$dir/ref.pt"
grep -q "fsdp_check: load ok" "$dir/load.out" || fail "the resharded load did not report ok"
grep "fsdp_check: load ok" "$dir/load.out"
echo "fsdp_test: ok"
