#!/usr/bin/python3
"""A worker for failure_test.sh: the "bigbatch" group (timeout TIMEOUT s),
then allreduces forever; after the 20th, each rank writes MARKER_DIR/ready-<rank>
(the state the test waits for before it kills or stops a rank). MODE
mismatch: the ranks' 5th allreduce differs in size; raise: rank 1 raises
an ordinary exception after its 30th (a bug in a script).

  mpirun -np N /usr/bin/python3 ranks_loop.py MARKER_DIR TIMEOUT [MODE]
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import bigbatch_torch  # noqa: F401

marker_dir, timeout = sys.argv[1], float(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "loop"
dist.init_process_group("bigbatch", timeout=timedelta(seconds=timeout))
rank = dist.get_rank()
t = torch.ones(1 << 16)
step = 0
while True:
    step += 1
    n = 100 + rank if (mode == "mismatch" and step == 5) else 1 << 16
    dist.all_reduce(t[:n])
    t.fill_(1.0)
    if mode == "raise" and rank == 1 and step == 30:
        raise ValueError("a bug in rank 1's script")
    if step == 20:
        open(os.path.join(marker_dir, f"ready-{rank}"), "w").close()
