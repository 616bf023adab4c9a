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
#   3. HSDP on a 2 x 2 DeviceMesh (subgroups), under the venv's torchrun
#      (UCX worlds) and under mpirun (MPI communicators), the same losses as
#      gloo's HSDP within the same 2e-6.
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

run_torchrun() {  # run_torchrun NAME ARGS...: fsdp_check.py on 4 ranks under the venv's torchrun
  local name=$1; shift
  timeout -k 5 300 "$(dirname "$python")/torchrun" --nproc-per-node 4 --master-port "$(port)" \
    "$check" "$@" >"$dir/$name.out" 2>&1 || fail "$name exited non-zero"
}
same_losses() {  # same_losses WHAT A.log B.log: 10 steps each, within 2e-6
  /usr/bin/python3 - "$@" <<'PY' || fail "$1: the losses differ from gloo's"
import sys
what, a, b = sys.argv[1], [float(x) for x in open(sys.argv[2])], [float(x) for x in open(sys.argv[3])]
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"{what}: 10 steps, max |loss difference| against gloo {worst:.2g}")
sys.exit(0 if len(a) == len(b) == 10 and worst <= 2e-6 else 1)
PY
}

run gloo 4 gloo train "$dir/gloo.log" "$dir/ck_gloo" "$dir/ref_gloo.pt"
run bigbatch 4 bigbatch train "$dir/bigbatch.log" "$dir/ck" "$dir/ref.pt"
[ "$(wc -l <"$dir/bigbatch.log")" -eq 10 ] || fail "bigbatch logged $(wc -l <"$dir/bigbatch.log") steps"
same_losses "FSDP2 on 4 ranks" "$dir/gloo.log" "$dir/bigbatch.log"
run load 2 bigbatch load "$dir/ck" "$dir/ref.pt"
grep -q "fsdp_check: load ok" "$dir/load.out" || fail "the resharded load did not report ok"
grep "fsdp_check: load ok" "$dir/load.out"
run_torchrun hsdp_gloo gloo hsdp "$dir/hsdp_gloo.log"
run_torchrun hsdp bigbatch hsdp "$dir/hsdp.log"
same_losses "HSDP on a 2 x 2 mesh" "$dir/hsdp_gloo.log" "$dir/hsdp.log"
run hsdp_mpi 4 bigbatch hsdp "$dir/hsdp_mpi.log"
same_losses "HSDP on a 2 x 2 mesh under mpirun" "$dir/hsdp_gloo.log" "$dir/hsdp_mpi.log"
echo "fsdp_test: ok"
