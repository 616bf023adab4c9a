#!/usr/bin/env python3
"""Horovod (horovod.torch, built by bench/horovod_setup.sh) training the same
model, batch and threads as bench/pytorch_ddp.py, for a side-by-side img/s
with PyTorch DDP on gloo and on the "bigbatch" backend, and bigbatch's own
trainer (bench/horovod_bench.sh runs them in one run).

  mpirun -np 2 build-horovod/venv/bin/python bench/horovod_ddp.py --hidden 350000 --compression fp16

The loop is bench/pytorch_ddp.py's: its Cnn (with `--hidden`), SGD +
Nesterov 0.9, weight decay 5e-4 on the weights, label smoothing 0.1, batch
64 per rank of random 1x28x28 inputs made once, 1 thread per rank (PyTorch's
and OpenBLAS's pools), `--warmup` steps, then `--steps` timed ones; one JSON
line with the slowest rank's time. Horovod's part is its documented use:
hvd.DistributedOptimizer over the model's named parameters (gradients
allreduced as backward produces them, fused into buffers of
HOROVOD_FUSION_THRESHOLD bytes every HOROVOD_CYCLE_TIME ms: set them, or
HOROVOD_AUTOTUNE=1, in the environment), `--compression fp16`
(hvd.Compression.fp16: the wire in fp16, as DDP's fp16 hook), the initial
weights broadcast from rank 0. The model stays in the default memory format:
Horovod refuses non-contiguous tensors, and channels-last weights are not
contiguous in PyTorch's default sense.
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import horovod.torch as hvd

from blas_threads import pin_blas_threads
from pytorch_ddp import Cnn


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--compression", choices=["none", "fp16"], default="none")
    args = p.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.set_num_threads(args.threads)
    blas_pools = pin_blas_threads(args.threads)
    torch.manual_seed(1)
    model = Cnn(hidden=args.hidden)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.05, momentum=0.9, nesterov=True)
    compression = hvd.Compression.fp16 if args.compression == "fp16" else hvd.Compression.none
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(args.batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)

    def barrier(name):
        hvd.allreduce(torch.zeros(1), name=name)

    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            barrier("start")
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
    barrier("end")
    seconds = hvd.allgather(torch.tensor([time.perf_counter() - t0], dtype=torch.float64),
                            name="seconds").max().item()
    if rank == 0:
        imgs = args.steps * args.batch * size
        knobs = {k: os.environ[k] for k in ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME",
                                            "HOROVOD_AUTOTUNE", "OMPI_MCA_mpi_yield_when_idle")
                 if k in os.environ}
        print(json.dumps({"system": "horovod", "horovod": hvd.__version__ if hasattr(hvd, "__version__")
                          else __import__("horovod").__version__, "ranks": size,
                          "batch_per_rank": args.batch, "threads": args.threads,
                          "hidden": args.hidden, "compression": args.compression,
                          "settings": knobs, "openblas_pools_set": len(blas_pools),
                          "steps": args.steps, "seconds": seconds, "img_s": imgs / seconds,
                          "parameters": sum(p.numel() for p in model.parameters()),
                          "loss": loss.item()}), flush=True)


if __name__ == "__main__":
    main()
