#!/usr/bin/python3
"""An ordinary PyTorch DistributedDataParallel script — its own model,
DataLoader, optimizer and loop — on Fashion-MNIST, run on either backend:

    mpirun -np 2 -x PYTHONPATH=build/python /usr/bin/python3 examples/torch_ddp/train.py --backend bigbatch
    PYTHONPATH=build/python torchrun --nproc_per_node 2 --redirects 2 --tee 2 \
        examples/torch_ddp/train.py --backend bigbatch
    mpirun -np 2 /usr/bin/python3 examples/torch_ddp/train.py --backend gloo

The bigbatch lines are the two marked "bigbatch" below: the import, and the
backend's name. Under mpirun, `import bigbatch_torch` sets RANK and
WORLD_SIZE from MPI's launch and lets init_process_group start without
MASTER_ADDR; under torchrun the ranks meet through its store and bigbatch
moves the bytes over UCX. For gloo under mpirun this script sets them
itself (one host: the store on 127.0.0.1; on several, export MASTER_ADDR).

Rank 0 prints a line per epoch: the training loss (the mean over every
rank's batches), the test accuracy (the 10,000 test images shared among
the ranks, summed with an all_reduce), images per second and seconds; a
run stopped by --steps before an epoch's end prints its loss and rate.

--hook chooses a DDP communication hook: PyTorch's own (torch_fp16,
torch_powersgd) or bigbatch's (bigbatch_fp16, bigbatch_powersgd: the
bigbatch backend only). --log FILE writes "step loss" per step on rank 0;
--save PREFIX / --resume PREFIX keep the model, the optimizer and the hook's
state (PowerSGD's error memory is each process's own) in PREFIX.<rank>, so a
resumed run continues exactly. --bucket-view builds DDP with
gradient_as_bucket_view=True: the gradients live in DDP's buckets, which
saves two passes over the gradients a step, copying them into the buckets
and back out (docs/TORCH_BACKEND.md). --compile (PyTorch 2.x) runs the
training step's forward and backward through torch.compile (inductor);
DDP's buckets are filled by the compiled backward (dynamo splits the graph
at bucket boundaries).
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def read_idx(path):
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def fashion_mnist(root, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.copy()).float().div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1)
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(self.features(x).flatten(1))))


def evaluate(model, test, rank, world):
    """Top-1 accuracy on `test`, each rank a share, summed over the ranks."""
    model.eval()
    sampler = DistributedSampler(test, num_replicas=world, rank=rank, shuffle=False)
    counts = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for x, y in DataLoader(test, batch_size=500, sampler=sampler):
            counts[0] += (model.module(x).argmax(1) == y).sum()
            counts[1] += len(y)
    dist.all_reduce(counts)
    model.train()
    return (counts[0] / counts[1]).item()


def register_hook(model, name):
    if name == "none":
        return None
    if name == "torch_fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if name == "torch_powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=4,
                                            start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None
    import bigbatch_torch
    if name == "bigbatch_fp16":
        model.register_comm_hook(None, bigbatch_torch.hooks.fp16)
        return None
    state = bigbatch_torch.hooks.powersgd(rank=4, module=model)
    model.register_comm_hook(state, bigbatch_torch.hooks.powersgd_hook)
    return state


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["gloo", "bigbatch"], default="gloo")
    p.add_argument("--hook", default="none",
                   choices=["none", "torch_fp16", "torch_powersgd", "bigbatch_fp16", "bigbatch_powersgd"])
    p.add_argument("--bucket-view", action="store_true",
                   help="DDP's gradient_as_bucket_view=True (no gradient copies)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: the epochs)")
    p.add_argument("--batch", type=int, default=64, help="per process")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--log", default="", help="rank 0 writes 'step loss' lines here")
    p.add_argument("--save", default="", help="checkpoint PREFIX.<rank> at the end")
    p.add_argument("--resume", default="", help="start from checkpoint PREFIX.<rank>")
    args = p.parse_args()
    if args.compile and not hasattr(torch, "compile"):
        p.error(f"--compile needs PyTorch 2.x (torch.compile); this is {torch.__version__}")
    torch.set_num_threads(args.threads)

    if args.backend == "bigbatch":
        import bigbatch_torch  # noqa: F401  (bigbatch) registers the backend
    else:
        env = os.environ
        env.setdefault("RANK", env.get("OMPI_COMM_WORLD_RANK", "0"))
        env.setdefault("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", "1"))
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", "29511")
    dist.init_process_group(args.backend)  # (bigbatch) the backend's name
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)
    model = DistributedDataParallel(Net(), gradient_as_bucket_view=args.bucket_view)
    hook_state = register_hook(model, args.hook)
    # Compiled for training only; evaluate() runs the model uncompiled.
    step_model = torch.compile(model) if args.compile else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    train = fashion_mnist(args.data, "train")
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch, sampler=sampler, drop_last=True)

    step, first_epoch = 0, 0
    if args.resume:
        saved = torch.load(f"{args.resume}.{rank}")
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        if hook_state is not None:
            hook_state.load_state_dict(saved["hook"])
        step, first_epoch = saved["step"], saved["epoch"]
    log = open(args.log, "a") if args.log and rank == 0 else None
    test = fashion_mnist(args.data, "test")
    done = False
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        start, seen, loss_sum = time.perf_counter(), 0, 0.0
        for i, (x, y) in enumerate(loader):
            if epoch == first_epoch and args.resume and i < step % len(loader):
                continue  # the batches before the checkpoint
            loss = F.cross_entropy(step_model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            seen += len(y)
            loss_sum += loss.item() * len(y)
            if log:
                log.write(f"{step} {loss.item():.9g}\n")
            if args.steps and step >= args.steps:
                done = True
                break
        # Every rank's loss and images, and the slowest rank's seconds.
        totals = torch.tensor([loss_sum, float(seen), time.perf_counter() - start],
                              dtype=torch.float64)
        seconds = totals[2:].clone()
        dist.all_reduce(totals[:2])
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        mean_loss = totals[0] / max(totals[1], 1)
        rate = f"{totals[1] / seconds[0]:.0f} img/s  {seconds[0]:.1f} s"
        if done:
            line = f"stopped after step {step} (--steps)  loss {mean_loss:.4f}  {rate}"
        else:
            accuracy = evaluate(model, test, rank, world)
            line = (f"epoch {epoch + 1}/{args.epochs}  loss {mean_loss:.4f}  "
                    f"test {100 * accuracy:.2f}%  {rate}")
        if rank == 0:
            print(line, flush=True)
        if done:
            break
    if args.compile and rank == 0:
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        print(f"torch.compile: {graphs} graph(s) compiled", flush=True)
    if args.save:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "hook": hook_state.state_dict() if hook_state is not None else {},
                    "step": step, "epoch": epoch if done else epoch + 1}, f"{args.save}.{rank}")
    if log:
        log.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
