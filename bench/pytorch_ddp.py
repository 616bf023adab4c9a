#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel (gloo) on the same models, batch and
threads as `bench/ddp_bench.sh` runs bigbatch with, for a side-by-side img/s.

  /usr/bin/python3 bench/pytorch_ddp.py --model cnn --batch 64 --steps 100 --ranks 2

Models mirror bigbatch's (src/models): `cnn` = the default 5-conv BN CNN
[16, 32, 64] x [2, 2, 1]; `resnet` = the small-image ResNet [32, 64, 128] x
[2, 2, 2] (696 k parameters). Channels-last, SGD + Nesterov 0.9, weight decay
5e-4, label smoothing 0.1, 1 thread per rank (PyTorch's and OpenBLAS's
pools: bench/blas_threads.py), random 1x28x28 inputs made once
(no input pipeline on either side of the comparison beyond bigbatch's own
batch assembly). Prints one JSON line: img/s over the timed steps (after
`--warmup` steps), the slowest rank's time.

`--hook` registers one of PyTorch's own DDP communication hooks
(torch.distributed.algorithms.ddp_comm_hooks): `fp16` (fp16_compress_hook),
`bf16` (bf16_compress_hook), `powersgd` (PowerSGDState with
matrix_approximation_rank `--powersgd-rank`, start_powerSGD_iter
`--powersgd-start`, error feedback and warm start on — its defaults);
`batched_powersgd` (batched_powerSGD_hook: the whole bucket as one square
matrix); `powersgd_fp16` / `powersgd_bf16` (powerSGD_hook inside
fp16_compress_wrapper / bf16_compress_wrapper: PowerSGD on a 16-bit
bucket, PyTorch's own 16-bit-wire PowerSGD); `none` is DDP's plain fp32
allreduce.

`--backend bigbatch` runs the same script on bigbatch's torch.distributed
backend (import bigbatch_torch; only under --mpi), where `--hook` may also
name bigbatch's own hooks: `bb_fp16`, `bb_bf16` (bigbatch_torch.hooks.fp16 /
bf16) and `bb_powersgd` (hooks.powersgd with rank `--powersgd-rank`, start
`--powersgd-start`, factors in `--powersgd-wire`).

`--hook no_exchange` is a control: DDP's buckets and hooks, no gradient moved
(each rank keeps its own gradients), the ceiling of any exchange's rate.

`--fsdp` (PyTorch 2.x) shards the model with FSDP2 instead of DDP:
`fully_shard` on each of the model's top-level layers that hold parameters,
then on the whole model (as torchtitan wraps a model's blocks), so each
layer's parameters are all-gathered before its forward and backward and
its gradients reduce-scattered after; `--hook` must be none, and the model
stays in the default memory format (FSDP2 refuses non-contiguous
parameters).

`--hidden H` adds bigbatch's `model.hidden` layer to the cnn (350000: ResNet-50's
25.6 M gradient values for little compute). `--mpi` takes rank and world size
from mpirun (OpenMPI's OMPI_COMM_WORLD_*) instead of spawning, for ranks on
several hosts — e.g. scripts/emulated_cluster's namespaces, where the store
is on host 0 (`--master`, default: this host's eth0 address with the last
byte 1, the emulated cluster's host 0) and gloo uses `--ifname` (eth0).
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from blas_threads import pin_blas_threads


class Cnn(nn.Module):
    def __init__(self, widths=(16, 32, 64), blocks=(2, 2, 1), hidden=0, head_pool=1):
        super().__init__()
        layers, cin = [], 1
        for s, (w, b) in enumerate(zip(widths, blocks)):
            for i in range(b):
                layers += [nn.Conv2d(cin, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
                cin = w
                if i == b - 1 and s + 1 < len(widths):
                    layers.append(nn.MaxPool2d(2))
        self.body = nn.Sequential(*layers)
        self.head_pool = head_pool  # model.head_pool: features pooled to head_pool x head_pool
        features = cin * head_pool * head_pool
        self.hidden = nn.Linear(features, hidden) if hidden > 0 else None
        self.fc = nn.Linear(hidden if hidden > 0 else features, 10)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.body(x), self.head_pool).flatten(1)
        if self.hidden is not None:
            x = F.relu(self.hidden(x))
        return self.fc(x)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, widths=(32, 64, 128), blocks=(2, 2, 2)):
        super().__init__()
        self.conv1 = nn.Conv2d(1, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        stages, cin = [], widths[0]
        for s, (w, b) in enumerate(zip(widths, blocks)):
            for i in range(b):
                stages.append(Block(cin, w, 2 if (i == 0 and s > 0) else 1))
                cin = w
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, 10)

    def forward(self, x):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def no_exchange(state, bucket):
    """A control, not an exchange: each rank keeps its own gradients. DDP
    runs as with any hook (buckets, autograd hooks, the future), so a row
    with it is the step's ceiling for every exchange on the same ranks."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def register_hook(ddp, args):
    if args.hook == "no_exchange":
        ddp.register_comm_hook(None, no_exchange)
        return
    if args.hook.startswith("bb_"):
        import bigbatch_torch
        if args.hook == "bb_fp16":
            ddp.register_comm_hook(None, bigbatch_torch.hooks.fp16)
        elif args.hook == "bb_bf16":
            ddp.register_comm_hook(None, bigbatch_torch.hooks.bf16)
        else:
            state = bigbatch_torch.hooks.powersgd(rank=args.powersgd_rank,
                                                  start_step=args.powersgd_start,
                                                  wire=args.powersgd_wire)
            ddp.register_comm_hook(state, bigbatch_torch.hooks.powersgd_hook)
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    if args.hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif args.hook.startswith("powersgd") or args.hook == "batched_powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=args.powersgd_start, use_error_feedback=True, warm_start=True)
        hook = {"powersgd": powerSGD_hook.powerSGD_hook,
                "batched_powersgd": powerSGD_hook.batched_powerSGD_hook,
                "powersgd_fp16": default_hooks.fp16_compress_wrapper(powerSGD_hook.powerSGD_hook),
                "powersgd_bf16": default_hooks.bf16_compress_wrapper(powerSGD_hook.powerSGD_hook),
                }[args.hook]
        ddp.register_comm_hook(state, hook)


def worker(rank, args, port, master="127.0.0.1"):
    torch.set_num_threads(args.threads)
    blas_pools = pin_blas_threads(args.threads)
    os.environ["MASTER_ADDR"] = master
    os.environ["MASTER_PORT"] = str(port)
    if args.backend == "bigbatch":
        import bigbatch_torch  # noqa: F401
    dist.init_process_group(args.backend, rank=rank, world_size=args.ranks)
    torch.manual_seed(1)
    model = (Cnn(hidden=args.hidden) if args.model == "cnn" else ResNet())
    # FSDP2 refuses non-contiguous parameters: channels-last for DDP only.
    layout = torch.contiguous_format if args.fsdp else torch.channels_last
    model = model.to(memory_format=layout)
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model.children():
            if any(True for _ in layer.parameters()):
                fully_shard(layer)
        ddp = fully_shard(model)
    else:
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb,
                                                  gradient_as_bucket_view=args.bucket_view)
        register_hook(ddp, args)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.05, momentum=0.9, nesterov=True)
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(args.batch, 1, 28, 28, generator=g).contiguous(memory_format=layout)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    phases = []  # --phase-times: this thread's CPU seconds per timed step
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        timed = args.phase_times and step >= args.warmup
        ta = time.thread_time() if timed else 0.0
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(ddp(x), y, label_smoothing=0.1)
        tb = time.thread_time() if timed else 0.0
        loss.backward()
        tc = time.thread_time() if timed else 0.0
        opt.step()
        if timed:
            td = time.thread_time()
            phases.append((tb - ta, tc - tb, td - tc, td - ta))
    if args.phase_times:
        ms = [round(1000 * statistics.median(p), 1) for p in zip(*phases)]
        print(json.dumps({"rank": rank, "main_thread_cpu_ms": dict(zip(
            ["forward", "backward", "optimizer", "step"], ms))}), flush=True)
    dist.barrier()
    seconds = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if rank == 0:
        imgs = args.steps * args.batch * args.ranks
        kind = "fsdp2" if args.fsdp else "ddp"
        print(json.dumps({"system": f"pytorch_{kind}_{args.backend}", "model": args.model, "ranks": args.ranks,
                          "batch_per_rank": args.batch, "threads": args.threads,
                          "hidden": args.hidden, "bucket_mb": args.bucket_mb,
                          "bucket_view": args.bucket_view,
                          "hook": args.hook, "openblas_pools_set": len(blas_pools),
                          "steps": args.steps, "seconds": seconds.item(),
                          "img_s": imgs / seconds.item(),
                          "parameters": sum(p.numel() for p in model.parameters()),
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", choices=["cnn", "resnet"], default="cnn")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (its default 25)")
    p.add_argument("--bucket-view", action="store_true",
                   help="DDP gradient_as_bucket_view=True: the gradients live in the buckets "
                        "(no copy in and out of them)")
    p.add_argument("--phase-times", action="store_true",
                   help="print each rank's main-thread CPU time (time.thread_time) for forward "
                        "(with zero_grad), backward, the optimizer and the whole step, medians "
                        "of the timed steps")
    p.add_argument("--backend", choices=["gloo", "bigbatch"], default="gloo")
    p.add_argument("--hook", choices=["none", "fp16", "bf16", "powersgd", "batched_powersgd",
                                      "powersgd_fp16", "powersgd_bf16",
                                      "bb_fp16", "bb_bf16", "bb_powersgd", "no_exchange"],
                   default="none",
                   help="a DDP communication hook of PyTorch's own (default: none)")
    p.add_argument("--powersgd-rank", type=int, default=4)
    p.add_argument("--powersgd-start", type=int, default=2,
                   help="start_powerSGD_iter (PyTorch requires > 1 with error feedback)")
    p.add_argument("--powersgd-wire", choices=["fp32", "fp16", "bf16"], default="fp32",
                   help="bb_powersgd: the factors' type on the wire")
    p.add_argument("--fsdp", action="store_true",
                   help="FSDP2 (fully_shard per layer and the model; PyTorch 2.x) instead of DDP")
    p.add_argument("--mpi", action="store_true")
    p.add_argument("--master", default="")
    p.add_argument("--ifname", default="eth0")
    p.add_argument("--port", type=int, default=29555)
    args = p.parse_args()
    if (args.backend == "bigbatch" or args.hook.startswith("bb_")) and not args.mpi:
        p.error("--backend bigbatch and the bb_ hooks run under mpirun: add --mpi")
    if args.fsdp:
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError:
            p.error(f"--fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch 2.6+); "
                    f"this is PyTorch {torch.__version__}")
        if args.hook != "none":
            p.error("--fsdp takes no --hook (FSDP2 has no communication hooks)")
    if args.hook.startswith("bb_") and args.backend != "bigbatch":
        p.error(f"--hook {args.hook} is bigbatch's: add --backend bigbatch")
    if args.mpi:
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        args.ranks = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        os.environ.setdefault("GLOO_SOCKET_IFNAME", args.ifname)
        master = args.master
        if not master:
            out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", args.ifname],
                                 capture_output=True, text=True, check=True).stdout
            address = out.split("inet ")[1].split("/")[0]
            master = address.rsplit(".", 1)[0] + ".1"
        worker(rank, args, args.port, master)
        return
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
