#!/bin/bash
# bigbatch started by torchrun, no mpirun anywhere (UCX, or Gloo's TCP with
# BIGBATCH_TRANSPORT=gloo, over torchrun's store: comm/world.h), on one host:
#   same_run   `torchrun --no_python bigbatch train` on 2 ranks is the same
#              run as `bigbatch train --workers 2` (MPI): model.pt byte for
#              byte, the same metrics — on each transport
#   elastic    torchrun --max_restarts 2, rank 1 SIGKILLs itself at step 20
#              in the first attempt (fault.attempts = 1, read from
#              TORCHELASTIC_RESTART_COUNT): torchrun restarts both ranks,
#              `--resume auto` continues from the newest checkpoint, and
#              model.pt equals the uninterrupted run's
#   hang       rank 1 hangs at step 20: rank 0 names it and the job ends
#              non-zero (the deadline is comm.timeout_s)
#   ddp        examples/torch_ddp/train.py --backend bigbatch under torchrun
#              and under mpirun: the same loss at every step
#   bad starts one line each, non-zero, nothing left running: a store no
#              one serves (names MASTER_ADDR:MASTER_PORT); ranks given
#              different WORLD_SIZE (both refuse); a second job on a port
#              another job's store holds
# Debian's torchrun (PyTorch 1.13, Python 3.11) takes only the underscore
# spellings (--nproc_per_node, --no_python, --max_restarts) and needs
# `--redirects 2 --tee 2` (its default redirects fail on Python 3.11).
#   torchrun_test.sh BIGBATCH_BINARY CONFIG PYTHONPATH_OF_BIGBATCH_TORCH
set -u
bin=$1; config=$2; pypath=$3
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
torchrun_2() {  # torchrun_2 [TORCHRUN OPTIONS] -- COMMAND...
  local opts=()
  while [ "$1" != -- ]; do opts+=("$1"); shift; done; shift
  torchrun --nproc_per_node 2 --master_port "$(free_port)" --redirects 2 --tee 2 "${opts[@]}" "$@"
}
common=(--set data.train_samples=4096 --set data.eval_samples=1000 --set train.epochs=2
        --set train.stop_at_target=false --set train.batch_size=128 --set ckpt.every_steps=5
        --set comm.timeout_s=20 -q)
cd "$dir"

# same_run
"$bin" train "$config" "${common[@]}" --workers 2 --run-dir "$dir/ref" >ref.log 2>&1 ||
  { cat ref.log; fail "the --workers 2 reference run failed"; }
for transport in ucx gloo; do
  BIGBATCH_TRANSPORT=$transport torchrun_2 --no_python -- "$bin" train "$config" "${common[@]}" \
    --run-dir "$dir/tr_$transport" >"tr_$transport.log" 2>&1 ||
    { cat "tr_$transport.log"; fail "bigbatch train under torchrun ($transport) failed"; }
  label=$([ "$transport" = ucx ] && echo "UCX" || echo "Gloo TCP")
  grep -q "over $label" "tr_$transport/train.log" || fail "the torchrun run did not use $label"
  cmp "tr_$transport/model.pt" ref/model.pt || fail "model.pt differs between torchrun ($transport) and --workers 2"
  /usr/bin/python3 - "tr_$transport" <<'PY' || fail "metrics differ between torchrun ($transport) and --workers 2"
import csv, sys
a, b = (list(csv.DictReader(open(f"{d}/metrics.csv"))) for d in (sys.argv[1], "ref"))
for key in ("train_loss", "train_acc", "test_acc", "test_top5"):
    assert [r[key] for r in a] == [r[key] for r in b], f"{key}: {a} vs {b}"
PY
done
grep -q "over MPI" ref/train.log || fail "the --workers run did not use MPI"
echo "same_run: torchrun (UCX, and Gloo's TCP) and --workers 2 (MPI) give the same model.pt"

# elastic
torchrun_2 --no_python --max_restarts 2 -- "$bin" train "$config" "${common[@]}" \
  --set fault.kind=sigkill --set fault.rank=1 --set fault.step=20 --set fault.attempts=1 \
  --resume auto --run-dir "$dir/el" >el.log 2>&1 || { cat el.log; fail "the elastic run failed"; }
grep -q "injecting fault 'sigkill' on rank 1 at step 20" el.log || { cat el.log; fail "the fault did not fire"; }
[ "$(grep -c "injecting fault" el.log)" = 1 ] || fail "the fault fired again after the restart"
cmp el/model.pt ref/model.pt || fail "the restarted run's model.pt differs from the uninterrupted one"
echo "elastic: rank 1 killed at step 20, torchrun restarted the group, same model.pt"

# hang
torchrun_2 --no_python -- "$bin" train "$config" "${common[@]}" --set comm.timeout_s=5 \
  --set fault.kind=hang --set fault.rank=1 --set fault.step=20 --run-dir "$dir/hang" >hang.log 2>&1 &&
  fail "the job with a hung rank exited 0"
grep -E "error: .*rank 1 did not .*stopped answering: rank 1" hang.log >/dev/null ||
  { cat hang.log; fail "the hung rank was not named"; }
echo "hang: $(grep -o 'stopped answering: rank 1[^;]*' hang.log | head -1)"

# ddp
PYTHONPATH=$pypath torchrun_2 -- "$here/../../examples/torch_ddp/train.py" --backend bigbatch \
  --steps 30 --log ddp_tr.txt >ddp_tr.log 2>&1 || { cat ddp_tr.log; fail "the DDP example under torchrun failed"; }
mpirun --allow-run-as-root -np 2 -x PYTHONPATH="$pypath" /usr/bin/python3 \
  "$here/../../examples/torch_ddp/train.py" --backend bigbatch --steps 30 --log ddp_mpi.txt \
  >ddp_mpi.log 2>&1 || { cat ddp_mpi.log; fail "the DDP example under mpirun failed"; }
[ "$(wc -l <ddp_tr.txt)" = 30 ] || fail "the torchrun DDP run logged $(wc -l <ddp_tr.txt) steps, not 30"
cmp ddp_tr.txt ddp_mpi.txt || { paste ddp_tr.txt ddp_mpi.txt | head; fail "DDP losses differ between launchers"; }
echo "ddp: the example's 30 losses equal under torchrun and mpirun (last: $(tail -1 ddp_tr.txt))"

# bad starts: each one error line naming the problem, a non-zero exit
one_error() {  # one_error LOG PATTERN WHAT
  [ "$(grep -c 'error:' "$1")" = 1 ] || { cat "$1"; fail "$3: not one error line"; }
  grep -E "error: .*$2" "$1" >/dev/null || { cat "$1"; fail "$3: the error does not say '$2'"; }
}
port=$(free_port)
env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train "$config" "${common[@]}" \
  --set comm.timeout_s=2 --run-dir "$dir/nostore" >nostore.log 2>&1 && fail "a rank without a store exited 0"
one_error nostore.log "127.0.0.1:$port \(MASTER_ADDR:MASTER_PORT\)" "unreachable store"

port=$(free_port)
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train "$config" "${common[@]}" \
  --run-dir "$dir/size0" >size0.log 2>&1 & r0=$!
env RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train "$config" "${common[@]}" \
  --run-dir "$dir/size1" >size1.log 2>&1 & r1=$!
wait $r0 && fail "rank 0 of disagreeing world sizes exited 0"
wait $r1 && fail "rank 1 of disagreeing world sizes exited 0"
one_error size0.log "disagree on the world size" "WORLD_SIZE 2 vs 3, rank 0"
one_error size1.log "disagree on the world size" "WORLD_SIZE 2 vs 3, rank 1"

port=$(free_port)
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train "$config" "${common[@]}" \
  --run-dir "$dir/first" >first.log 2>&1 & first=$!
for _ in $(seq 1 600); do  # until the first job's store listens
  /usr/bin/python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.1
done
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" train "$config" "${common[@]}" \
  --run-dir "$dir/second" >second.log 2>&1 && fail "a second job on a used port exited 0"
one_error second.log "cannot open the rendezvous store on port $port \(MASTER_PORT\)" "port in use"
kill $first; wait $first 2>/dev/null  # every process this test started is waited for
pgrep -f -- "--run-dir $dir/" >/dev/null &&
  fail "a process of this test is still running"
echo "bad starts: no store, disagreeing WORLD_SIZE, a used port: one error line each"
echo "torchrun_test: ok"
