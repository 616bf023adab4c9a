#!/bin/bash
# `--timeline` on 2 workers: the file is valid Chrome-trace JSON with, for
# both ranks, exactly the traced steps' data/forward/backward/comm_wait/
# optimizer events and one allreduce per bucket per step (every bucket once).
#   timeline_test.sh BIGBATCH_BINARY CONFIG
set -eu
bin=$1; config=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" train "$config" --workers 2 --run-dir "$dir/run" -q --set train.epochs=1 \
  --set data.train_samples=6400 --set data.eval_samples=1000 \
  --timeline "$dir/trace.json" --timeline-steps 3-12
/usr/bin/python3 - "$dir/trace.json" <<'PY'
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
count = collections.Counter((e["pid"], e["name"]) for e in events if e["ph"] == "X")
steps = {e["args"]["step"] for e in events if e["ph"] == "X"}
ok = steps == set(range(3, 13))
# One allreduce per bucket per step: every traced step has buckets 0..B-1
# once each, the same B on both ranks (B = 4 for the default recipe's
# 64 KiB buckets).
buckets = collections.defaultdict(list)
for e in events:
    if e["ph"] == "X" and e["name"] == "allreduce":
        buckets[(e["pid"], e["args"]["step"])].append(e["args"]["bucket"])
per_step = {k: sorted(v) for k, v in buckets.items()}
b = len(per_step.get((0, 3), []))
ok &= b >= 1 and all(per_step.get((r, s)) == list(range(b)) for r in (0, 1) for s in range(3, 13))
for rank in (0, 1):
    for name in ("data", "forward", "backward", "comm_wait", "optimizer"):
        ok &= count[(rank, name)] == 10
    ok &= count[(rank, "allreduce")] == 10 * b
    ok &= any(e["ph"] == "M" and e["pid"] == rank and e["args"]["name"] == f"rank {rank}" for e in events)
ok &= all(e["dur"] >= 0 for e in events if e["ph"] == "X")
print("timeline events:", dict(count), "steps:", sorted(steps), "buckets per step:", b)
print("timeline_test: ok" if ok else "timeline_test: FAIL")
PY
