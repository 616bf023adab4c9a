#!/bin/bash
# bigbatch across emulated hosts (scripts/emulated_cluster: one network
# namespace per host, each host's link shaped to 1 Gb/s by tc, MPI over TCP
# between them, shared memory inside), started as a real cluster starts
# them: mpirun reaches each host over ssh, and a rank gets none of the
# starter's environment — what it needs travels on the command line:
#   sweep        every algorithm but shm (which needs one host), fp32, bf16
#                and fp16, 4 B..256 KiB, on 2 hosts x 1 rank and 2 hosts x
#                2 ranks: no wrong element (the crafted inputs' exact sums,
#                the hierarchical algorithm's cross-host phase included),
#                and every rank sees the right layout; then the hierarchical
#                algorithm pipelined (2 x 2, fp32 and fp16) in pieces of
#                16 KiB from 4 KiB to 1 MiB and in its default pieces from
#                2 to 8 MiB: no wrong element
#   equivalence  the default recipe (1 short epoch) on 2 hosts x 1 rank and
#                on 2 ranks of one host: the same metrics and the same
#                model.pt, byte for byte (a sum of two is the same in any
#                order, whatever algorithm each layout picks)
#   resume       stopped by a fault on the other host mid-epoch, resumed on
#                the 2 hosts from its checkpoint: the same weights and
#                metrics as an uninterrupted 2-host run
#   kill         a rank on the other host SIGKILLed mid-training: the job
#                ends non-zero within LIMIT seconds and names rank 1
#   stall        a rank on the other host SIGSTOPped mid-training (alive to
#                the kernel and to TCP, silent to everyone): the stall
#                watchdog ends the job non-zero within LIMIT seconds, naming
#                rank 1 from the cross-host heartbeat's datagrams
#   restart      `--max-restarts 2` started once outside the hosts
#                (emulated_cluster --launcher): the rank on the other host
#                SIGKILLed after the first checkpoints; the supervisor ends
#                the attempt on both hosts (rank 0's process on host 0 gone
#                before the restart), starts it again across the hosts from
#                the newest checkpoint, and the run finishes with model.pt
#                byte-identical to an uninterrupted 2-host run's (itself
#                started through BIGBATCH_MPIRUN by `--workers 2`);
#                restarts.json names rank 1 with the steps the failure lost
#                (the step file's path arrived), the second attempt counts
#                time to train from the first attempt's run_start (the
#                job's clock arrived) as restart 1 (the restart count
#                arrived: the pause fault of attempt 1 did not fire again),
#                in the same run directory with the same --set overrides
#   lost_host    `--max-restarts 3 --min-workers 2` on 3 hosts x 1 rank
#                (--launcher): host 0 is lost for good (fault.host: its
#                rank throws at step 3, in every attempt, whatever rank it
#                is); after its second failure the supervisor leaves host 0
#                out — the relaunch goes to hosts 1 and 2 only (mpirun's
#                --host from the cluster's hostfile) — and the job finishes
#                there on 2 workers, global batch kept (the slot plan
#                arrived: the lost host's slot is not used again)
#   map_by_node  `--max-restarts 3 --min-workers 3` on 2 hosts x 2 ranks,
#                mpirun given `--map-by node`: rank 1 runs on host 1 (not
#                in host 0's slot 1, where mapping by slot puts it); the
#                worker in slot 0 of host 1 is lost for good (fault.host,
#                fault.slot); the supervisor leaves out what that rank
#                reported — host 1's slot 0 — and the job finishes on 3
#                workers without it (the fault fires exactly twice)
#   torchrun     no mpirun: torchrun on each of 2 hosts (scripts/torchrun_hosts
#                over ssh), the ranks meeting through torchrun's store:
#                `bigbatch train` (UCX) gives the same model.pt as --workers 2
#                on one host, and the DDP example (backend bigbatch, Gloo's
#                TCP) the same losses as under mpirun on one host
#   multihost_test.sh BIGBATCH_BINARY CONFIG MODE [LIMIT]
set -u
bin=$(realpath "$1"); config=$(realpath "$2"); mode=$3; limit=${4:-60}
# Every link shaped (tc tbf), as a cluster's would be: 1 Gb/s per host.
rate=${MULTIHOST_RATE:-1gbit}
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/emulated_cluster"
[ "$(id -u)" = 0 ] || { echo "FAIL: needs root (network namespaces); CI runs as root"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
small=(--set data.train_samples=4096 --set data.eval_samples=1000 --set train.epochs=1
       --set run.threads=1 --set ckpt.every_epochs=0)

case "$mode" in
sweep)
  for layout in "2 1" "2 2"; do
    set -- $layout
    for type in float32 bfloat16 float16; do
      "$cluster" --hosts "$1" --ranks-per-host "$2" --rate "$rate" -- "$bin" bench allreduce --json --no-memcpy \
        --min-bytes 4 --max-bytes 256K --iters 2 --warmup 1 --type "$type" \
        --algorithms auto,ring,halving_doubling,recursive_doubling,hierarchical,mpi \
        >"$dir/rows" 2>&1 || { echo "FAIL: $1 x $2 $type exited non-zero"; cat "$dir/rows"; exit 1; }
      /usr/bin/python3 - "$dir/rows" "$1" "$2" "$type" <<'EOF' || exit 1
import json, sys
path, hosts, per, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(path) if l.startswith("{")]
assert len(rows) == 17 * 6, f"FAIL: {len(rows)} rows, expected 17 sizes x 6 algorithms"
for r in rows:
    assert r["ranks"] == hosts * per and r["local_ranks"] == per, f"FAIL: layout {r}"
    assert r["wrong"] == 0, f"FAIL: wrong elements {r}"
print(f"{hosts} hosts x {per}: {dtype}: {len(rows)} rows, none wrong")
EOF
    done
  done
  # The hierarchical pipeline over MPI's TCP between the hosts: pieces of
  # 16 KiB from 4 KiB to 1 MiB (2 to 64 pieces a call; 4 KiB messages, under
  # the TCP transport's eager limit), and the default pieces from 2 to
  # 8 MiB (256 KiB messages: MPI's rendezvous, which moves only while a rank
  # polls), each piece's ring in flight while the next is staged.
  for run in "16K 4K 1M 9" "0 2M 8M 3"; do
    set -- $run
    for type in float32 float16; do
      "$cluster" --hosts 2 --ranks-per-host 2 --rate "$rate" -- "$bin" bench allreduce --json --no-memcpy \
        --min-bytes "$2" --max-bytes "$3" --iters 2 --warmup 1 --type "$type" --algorithms hierarchical \
        --pipeline-bytes "$1" >"$dir/rows" 2>&1 ||
        { echo "FAIL: the pipelined 2 x 2 $type (pieces $1) exited non-zero"; cat "$dir/rows"; exit 1; }
      /usr/bin/python3 - "$dir/rows" "$type" "$4" <<'EOF' || exit 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(rows) == int(sys.argv[3]), f"FAIL: {len(rows)} rows, expected {sys.argv[3]} sizes"
for r in rows:
    assert r["wrong"] == 0, f"FAIL: wrong elements in the pipelined hierarchical {r}"
print(f"2 hosts x 2, pipelined: {sys.argv[2]}: {len(rows)} rows, none wrong")
EOF
    done
  done
  echo "multihost_test: ok sweep"
  ;;
equivalence)
  "$cluster" --hosts 2 --rate "$rate" -- "$bin" train "$config" --run-dir "$dir/hosts" -q "${small[@]}" \
    >"$dir/log1" 2>&1 || { echo "FAIL: the 2-host run failed"; cat "$dir/log1"; exit 1; }
  "$bin" train "$config" --workers 2 --run-dir "$dir/one" -q "${small[@]}" \
    >"$dir/log2" 2>&1 || { echo "FAIL: the 1-host run failed"; cat "$dir/log2"; exit 1; }
  /usr/bin/python3 - "$dir" <<'EOF' || exit 1
import csv, json, sys
d = sys.argv[1]
a = list(csv.DictReader(open(f"{d}/hosts/metrics.csv")))
b = list(csv.DictReader(open(f"{d}/one/metrics.csv")))
for key in ("train_loss", "train_acc", "test_acc", "test_top5"):
    assert [r[key] for r in a] == [r[key] for r in b], f"FAIL: {key} {a} vs {b}"
sa, sb = json.load(open(f"{d}/hosts/summary.json")), json.load(open(f"{d}/one/summary.json"))
assert sa["world_size"] == sb["world_size"] == 2
print("2 hosts x 1 and 1 host x 2: train_loss", a[-1]["train_loss"], "test_acc", a[-1]["test_acc"])
EOF
  cmp "$dir/hosts/model.pt" "$dir/one/model.pt" || { echo "FAIL: model.pt differs"; exit 1; }
  echo "multihost_test: ok equivalence"
  ;;
resume)
  # Stopped by a fault on rank 1 — on the other host — in the middle of
  # epoch 2 (16 steps per epoch, checkpoints every 5: the newest is step
  # 20), resumed with --resume auto on the 2 hosts: the same weights and
  # metrics as an uninterrupted 2-host run.
  common=(--set data.train_samples=4096 --set data.eval_samples=1000 --set train.epochs=2
          --set train.stop_at_target=false --set train.batch_size=128 --set ckpt.every_steps=5
          --set run.threads=1)
  "$cluster" --hosts 2 --rate "$rate" -- "$bin" train "$config" -q "${common[@]}" --run-dir "$dir/reference" \
    >"$dir/log0" 2>&1 || { echo "FAIL: reference run"; cat "$dir/log0"; exit 1; }
  "$cluster" --hosts 2 --rate "$rate" -- "$bin" train "$config" -q "${common[@]}" --run-dir "$dir/resumed" \
    --set fault.kind=throw --set fault.rank=1 --set fault.step=23 >"$dir/log1" 2>&1 &&
    { echo "FAIL: the faulty run exited 0"; cat "$dir/log1"; exit 1; }
  grep -q "ckpt-000000020.pt" "$dir/resumed/checkpoints/latest" ||
    { echo "FAIL: latest is not step 20"; cat "$dir/log1"; exit 1; }
  "$cluster" --hosts 2 --rate "$rate" -- "$bin" train "$config" -q "${common[@]}" --run-dir "$dir/resumed" \
    --resume auto >"$dir/log2" 2>&1 || { echo "FAIL: the resumed run failed"; cat "$dir/log2"; exit 1; }
  cmp "$dir/reference/model.pt" "$dir/resumed/model.pt" || { echo "FAIL: final weights differ"; exit 1; }
  cols() { cut -d, -f1-6,18- "$1"; }  # every column that is not a time
  diff <(cols "$dir/reference/metrics.csv") <(cols "$dir/resumed/metrics.csv") ||
    { echo "FAIL: metrics differ"; exit 1; }
  cols "$dir/resumed/metrics.csv"
  echo "multihost_test: ok resume"
  ;;
kill|stall)
  # Both ranks pause at step 3 (fault.kind = pause): the kill or stop lands
  # mid-training on a machine of any speed; then rank 0 is let go on.
  mkdir -p "$dir/pause"
  "$cluster" --hosts 2 --rate "$rate" -- "$bin" train "$config" --run-dir "$dir/run" \
    --set data.train_samples=4096 --set data.eval_samples=1000 --set train.epochs=1 \
    --set run.threads=1 --set comm.timeout_s=5 --set fault.kind=pause --set fault.rank=-1 \
    --set fault.step=3 --set fault.pause_dir="$dir/pause" >"$dir/log" 2>&1 &
  job=$!
  for _ in $(seq 1 1200); do
    [ -f "$dir/pause/paused-rank-0" ] && [ -f "$dir/pause/paused-rank-1" ] && break; sleep 0.1
  done
  ns=$(sed -n 's/^  host 1: namespace \([^,]*\),.*/\1/p' "$dir/log")
  victim=""
  for pid in $(ip netns pids "$ns" 2>/dev/null); do
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "bigbatch train" && victim=$pid
  done
  [ -n "$victim" ] || { echo "FAIL: no rank found in namespace '$ns'"; cat "$dir/log"; kill "$job"; exit 1; }
  if [ "$mode" = kill ]; then kill -9 "$victim"; else kill -STOP "$victim"; fi
  rm -f "$dir/pause"/paused-rank-*
  start=$(date +%s.%N)
  for _ in $(seq 1 $((limit * 10))); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    echo "FAIL: the job still runs ${limit} s after the $mode"; kill -9 "$victim" 2>/dev/null
    kill "$job"; sleep 2; cat "$dir/log"; exit 1
  fi
  wait "$job"; rc=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  cat "$dir/log"
  kill -9 "$victim" 2>/dev/null  # a stopped rank mpirun did not reap
  echo "multihost_test: exit status $rc ${elapsed} s after the $mode of pid $victim in $ns"
  [ "$rc" -ne 0 ] || { echo "FAIL: exit status 0 after losing a rank"; exit 1; }
  if [ "$mode" = kill ]; then
    grep -Eq "rank 1 .*(signal 9|Killed)|rank 1 did not|stopped answering: rank 1" "$dir/log" ||
      { echo "FAIL: the lost rank is not named"; exit 1; }
  else
    grep -q "stopped answering: rank 1 on another host (no sign of life" "$dir/log" ||
      { echo "FAIL: the stopped rank on the other host is not named"; exit 1; }
  fi
  ip netns list | grep -q "^$ns" && { echo "FAIL: namespace $ns left behind"; exit 1; }
  echo "multihost_test: ok $mode"
  ;;
lost_host)
  # 1920 images, 192 a step (3 x 32 x 2, or 2 x 32 x 3): 10 steps.
  common=(--set data.train_samples=1920 --set data.eval_samples=500 --set train.epochs=1
          --set train.batch_size=32 --set train.accumulation_steps=2 --set ckpt.every_steps=2
          --set run.threads=1 --set comm.timeout_s=10 --set train.stop_at_target=false
          --set fault.kind=throw --set fault.step=3 --workers 3 --max-restarts 3 --min-workers 2 -q)
  # The fault's host is the first of the cluster's (its hostname), known
  # once the cluster is up.
  "$cluster" --hosts 3 --rate "$rate" --launcher -- /bin/sh -c \
    'exec "$0" "$@" --set fault.host=${EMULATED_CLUSTER_HOSTS%% *}' \
    "$bin" train "$config" "${common[@]}" --run-dir "$dir/shrunk" >"$dir/log" 2>&1 ||
    { echo "FAIL: the job that lost a host exited non-zero"; cat "$dir/log"; exit 1; }
  first=$(sed -n 's/^  host 0: namespace [^,]*, \([0-9.]*\),.*/\1/p' "$dir/log")
  rest=$(sed -n 's/^  host [12]: namespace [^,]*, \([0-9.]*\),.*/\1:1/p' "$dir/log" | paste -sd,)
  grep -q "^bigbatch: left out: slot 0 of host $first, its last: the host; the next attempts run with --host $rest\$" "$dir/log" ||
    { echo "FAIL: host 0 ($first) is not left out for $rest"; cat "$dir/log"; exit 1; }
  /usr/bin/python3 - "$dir/shrunk" <<'PY' || { cat "$dir/log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
r = json.load(open(sys.argv[1] + "/restarts.json"))
got = [(f["attempt"], f["workers"], f["rank"]) for f in r]
print("world", s["world_size"], "global batch", s["global_batch_size"], "restarts", got)
assert s["world_size"] == 2 and s["global_batch_size"] == 192, f"FAIL: {s}"
assert got == [(1, 3, 0), (2, 3, 0)], f"FAIL: restarts {got}"
PY
  [ "$(grep -c "injecting fault 'throw'" "$dir/log")" -eq 2 ] ||
    { echo "FAIL: the fault fired other than twice: the lost host was used again"; cat "$dir/log"; exit 1; }
  echo "multihost_test: ok $mode"
  ;;
restart)
  common=(--set data.train_samples=4096 --set data.eval_samples=1000 --set train.epochs=2
          --set train.stop_at_target=false --set train.batch_size=128 --set ckpt.every_steps=5
          --set run.threads=1 --set comm.timeout_s=10 --workers 2 -q)
  "$cluster" --hosts 2 --rate "$rate" --launcher -- "$bin" train "$config" "${common[@]}" \
    --run-dir "$dir/reference" >"$dir/log0" 2>&1 || { echo "FAIL: reference run"; cat "$dir/log0"; exit 1; }
  # The first attempt's ranks pause at step 12 (the checkpoint of step 10
  # written): the kill lands mid-training on a machine of any speed.
  mkdir -p "$dir/pause"
  "$cluster" --hosts 2 --rate "$rate" --launcher -- "$bin" train "$config" "${common[@]}" \
    --run-dir "$dir/restarted" --max-restarts 2 --set fault.kind=pause --set fault.rank=-1 \
    --set fault.step=12 --set fault.attempts=1 --set fault.pause_dir="$dir/pause" >"$dir/log" 2>&1 &
  job=$!
  ranks_in() {  # the job's ranks in host H's namespace
    local ns pid
    ns=$(sed -n "s/^  host $1: namespace \([^,]*\),.*/\1/p" "$dir/log")
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "bigbatch train" && echo "$pid"
    done
  }
  for _ in $(seq 1 1200); do
    [ -f "$dir/pause/paused-rank-0" ] && [ -f "$dir/pause/paused-rank-1" ] && break; sleep 0.1
  done
  [ -f "$dir/pause/paused-rank-1" ] || { echo "FAIL: the ranks never paused"; cat "$dir/log"; kill "$job"; exit 1; }
  step=$(sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.pt$/\1/p' "$dir/restarted/checkpoints/latest" 2>/dev/null)
  peer=$(ranks_in 0); victim=$(ranks_in 1)
  [ -n "$victim" ] && [ -n "$peer" ] || { echo "FAIL: no ranks found on the hosts"; cat "$dir/log"; kill "$job"; exit 1; }
  kill -9 $victim
  rm -f "$dir/pause"/paused-rank-*
  echo "SIGKILL to rank pid $victim on host 1 after the checkpoint of step $step (rank 0: pid $peer on host 0)"
  for _ in $(seq 1 600); do grep -q "restart 1 of 2" "$dir/log" && break; sleep 0.1; done
  grep -q "restart 1 of 2 from the checkpoint of step" "$dir/log" ||
    { echo "FAIL: no restart reported"; cat "$dir/log"; kill "$job"; exit 1; }
  # Gone, or a zombie: rank 0 ran under its host's sshd and mpirun's
  # daemon there, not under the supervisor, so once that daemon is gone its
  # exited ranks wait for init to reap them — they hold nothing but a pid.
  for pid in $peer; do
    state=$(ps -o stat= -p "$pid" 2>/dev/null)
    [ -n "$state" ] && [ "${state#Z}" = "$state" ] &&
      { echo "FAIL: rank 0 of the failed attempt (pid $pid, state $state) outlived it"; cat "$dir/log"; kill "$job"; exit 1; }
  done
  # The pause is attempt 1's only (fault.attempts = 1): a rank that pauses
  # again never learnt it is a restart (BIGBATCH_RESTART_COUNT).
  for _ in $(seq 1 3000); do
    kill -0 "$job" 2>/dev/null || break
    ls "$dir/pause" | grep -q paused-rank &&
      { echo "FAIL: the restarted attempt paused again: the restart count did not reach its ranks"; kill "$job"; cat "$dir/log"; exit 1; }
    sleep 0.1
  done
  kill -0 "$job" 2>/dev/null && { echo "FAIL: the supervised job hung"; kill "$job"; cat "$dir/log"; exit 1; }
  wait "$job"; rc=$?
  cat "$dir/log"
  [ "$rc" -eq 0 ] || { echo "FAIL: the supervised job exited $rc"; exit 1; }
  cmp "$dir/reference/model.pt" "$dir/restarted/model.pt" ||
    { echo "FAIL: final weights differ from the uninterrupted 2-host run's"; exit 1; }
  /usr/bin/python3 - "$dir/restarted" <<'EOF' || { cat "$dir/restarted/train.log"; exit 1; }
import json, re, sys
d = sys.argv[1]
r = json.load(open(d + "/restarts.json"))
print("restarts.json:", r)
assert len(r) == 1 and r[0]["rank"] == 1 and r[0]["resumed_from_step"] >= 10, f"FAIL: {r}"
# The step file arrived on the ranks over ssh: the failure's step is known.
assert r[0]["failed_at_step"] >= r[0]["resumed_from_step"], f"FAIL: failed_at_step {r}"
assert r[0]["steps_lost"] == r[0]["failed_at_step"] - r[0]["resumed_from_step"], f"FAIL: steps_lost {r}"
# One time-to-train clock: the second attempt counts from the first
# attempt's run_start, which the joined mlperf.log keeps.
log = [json.loads(l[len(":::MLLOG "):]) for l in open(d + "/mlperf.log") if l.startswith(":::MLLOG")]
first = [e["time_ms"] for e in log if e["key"] == "run_start"][0]
said = re.findall(r"restart (\d+) of a supervised job: time to train counts from the job's first "
                  r"run_start \((\d+) ms\)", open(d + "/train.log").read())
assert said == [("1", str(first))], f"FAIL: the second attempt's clock: {said}, the job's run_start {first}"
# The run directory and the --set overrides arrived on the command line.
cfg = open(d + "/config.toml").read()
assert "train_samples = 4096" in cfg and "every_steps = 5" in cfg, "FAIL: overrides missing"
print("failed at step", r[0]["failed_at_step"], "resumed from", r[0]["resumed_from_step"],
      "steps lost", r[0]["steps_lost"], "; the job's clock from", first)
EOF
  pgrep -f -- "$dir/restarted" >/dev/null && { echo "FAIL: a process of the job is left"; exit 1; }
  echo "multihost_test: ok restart"
  ;;
map_by_node)
  # 3840 images, 384 a step (4 x 32 x 3, or 3 x 32 x 4): 10 steps.
  common=(--set data.train_samples=3840 --set data.eval_samples=500 --set train.epochs=1
          --set train.batch_size=32 --set train.accumulation_steps=3 --set ckpt.every_steps=2
          --set run.threads=1 --set comm.timeout_s=10 --set train.stop_at_target=false
          --set fault.kind=throw --set fault.step=3 --set fault.slot=0
          --workers 4 --max-restarts 3 --min-workers 3 -q)
  # mpirun maps by node; the fault's host is the second of the cluster's.
  "$cluster" --hosts 2 --ranks-per-host 2 --rate "$rate" --launcher -- /bin/sh -c \
    'export BIGBATCH_MPIRUN="$BIGBATCH_MPIRUN --map-by node"; set -- "$@" --set fault.host=${EMULATED_CLUSTER_HOSTS##* }; exec "$@"' \
    sh "$bin" train "$config" "${common[@]}" --run-dir "$dir/bynode" >"$dir/log" 2>&1 ||
    { echo "FAIL: the job that lost a worker exited non-zero"; cat "$dir/log"; exit 1; }
  second=$(sed -n 's/^  host 1: namespace [^,]*, \([0-9.]*\),.*/\1/p' "$dir/log")
  grep -q "^bigbatch: left out: slot 0 of host $second; " "$dir/log" ||
    { echo "FAIL: slot 0 of host 1 ($second) is not what was left out"; cat "$dir/log"; exit 1; }
  /usr/bin/python3 - "$dir/bynode" <<'PY' || { cat "$dir/log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
r = json.load(open(sys.argv[1] + "/restarts.json"))
got = [(f["attempt"], f["workers"], f["rank"]) for f in r]
print("world", s["world_size"], "global batch", s["global_batch_size"], "restarts", got)
# Rank 1 is the one on host 1's slot 0 under --map-by node.
assert s["world_size"] == 3 and s["global_batch_size"] == 384, f"FAIL: {s}"
assert got == [(1, 4, 1), (2, 4, 1)], f"FAIL: restarts {got}"
PY
  [ "$(grep -c "injecting fault 'throw'" "$dir/log")" -eq 2 ] ||
    { echo "FAIL: the fault fired other than twice: the lost slot was used again"; cat "$dir/log"; exit 1; }
  echo "multihost_test: ok $mode"
  ;;
torchrun)
  # No mpirun: one torchrun per host over ssh (scripts/torchrun_hosts), the
  # ranks meeting through torchrun's store; UCX, then Gloo's TCP.
  pypath=$(realpath "$(dirname "$bin")/../python")
  "$cluster" --hosts 2 --rate "$rate" --launcher -- "$here/../../scripts/torchrun_hosts" \
    --torchrun-arg --no_python -- "$bin" train "$config" --run-dir "$dir/hosts" -q "${small[@]}" \
    >"$dir/log1" 2>&1 || { echo "FAIL: the 2-host torchrun run failed"; cat "$dir/log1"; exit 1; }
  grep -q "2 ranks on several hosts over UCX" "$dir/hosts/train.log" ||
    { echo "FAIL: not 2 hosts over UCX"; cat "$dir/hosts/train.log"; exit 1; }
  "$bin" train "$config" --workers 2 --run-dir "$dir/one" -q "${small[@]}" \
    >"$dir/log2" 2>&1 || { echo "FAIL: the 1-host run failed"; cat "$dir/log2"; exit 1; }
  cmp "$dir/hosts/model.pt" "$dir/one/model.pt" ||
    { echo "FAIL: model.pt differs between torchrun on 2 hosts and mpirun on one"; exit 1; }
  echo "bigbatch train: torchrun on 2 hosts and --workers 2 on one: the same model.pt"
  example="$here/../../examples/torch_ddp/train.py"
  # One OpenBLAS thread a rank on both sides (torch.set_num_threads does not
  # reach OpenBLAS's own pool, which it sizes from the cores a rank may use:
  # mpirun binds each of its 2 ranks to a core, torchrun's are unbound). With
  # OpenBLAS's default pools the losses differed from step 2 in the 7th
  # digit on a 2-core AMD EPYC guest (2026-12-07); with one thread on both
  # sides they were equal.
  "$cluster" --hosts 2 --rate "$rate" --launcher -- "$here/../../scripts/torchrun_hosts" \
    --env PYTHONPATH="$pypath" --env BIGBATCH_TRANSPORT=gloo --env OPENBLAS_NUM_THREADS=1 -- \
    "$example" --backend bigbatch --steps 20 --log "$dir/ddp_hosts" \
    >"$dir/log3" 2>&1 || { echo "FAIL: the DDP example on 2 hosts failed"; cat "$dir/log3"; exit 1; }
  mpirun --allow-run-as-root -np 2 -x PYTHONPATH="$pypath" -x OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$example" \
    --backend bigbatch --steps 20 --log "$dir/ddp_one" >"$dir/log4" 2>&1 ||
    { echo "FAIL: the DDP example under mpirun failed"; cat "$dir/log4"; exit 1; }
  [ "$(wc -l <"$dir/ddp_hosts")" = 20 ] && cmp "$dir/ddp_hosts" "$dir/ddp_one" ||
    { echo "FAIL: the DDP losses differ"; paste "$dir/ddp_hosts" "$dir/ddp_one"; exit 1; }
  echo "DDP example: torchrun on 2 hosts (Gloo's TCP) and mpirun on one: the same 20 losses"
  echo "multihost_test: ok $mode"
  ;;
*) echo "multihost_test: unknown mode '$mode'"; exit 2 ;;
esac
