#!/usr/bin/env python3
"""FSDP2 and torch.distributed.checkpoint over a backend (PyTorch 2.x;
fsdp_test.sh drives it under mpirun).

  fsdp_check.py BACKEND train LOG CKPT REF   10 steps of FSDP2 (fully_shard
      per layer and the whole model; every rank its own batches), each
      step's mean loss into LOG; then the sharded state saved with DCP to
      CKPT, and rank 0 writes each parameter's full value to REF
  fsdp_check.py BACKEND load CKPT REF        the same model sharded over
      this job's ranks (another count), CKPT loaded into it (DCP reshards),
      every parameter's full value equal to REF's, exactly

  fsdp_check.py BACKEND hsdp LOG             4 ranks (torchrun or mpirun): the same 10
      steps with HSDP, fully_shard on a 2 x 2 DeviceMesh (replicated across
      its first dimension, sharded along its second: two subgroups of 2 on
      each rank), each step's mean loss into LOG

BACKEND "gloo" needs MASTER_ADDR and MASTER_PORT (a real store).
"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import fully_shard

import bigbatch_torch


def model(mesh=None):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48),
                            torch.nn.ReLU(), torch.nn.Linear(48, 10))
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def full(m):
    return {k: v.full_tensor() for k, v in m.state_dict().items()}


def main():
    backend, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = None
    if mode == "hsdp":
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("replicate", "shard"))
        if backend == "bigbatch":  # the mesh's groups are the backend's, not a fallback
            for dim in ("replicate", "shard"):
                bigbatch_torch.backend_of(mesh.get_group(dim))
    m = model(mesh)
    if mode in ("train", "hsdp"):
        log, ckpt, ref = (sys.argv[3:6] if mode == "train" else (sys.argv[3], None, None))
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(rank)
        losses = []
        for _ in range(10):
            x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
            loss = torch.nn.functional.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / n)
        if rank == 0:
            with open(log, "w") as f:
                f.write("".join(f"{v:.9g}\n" for v in losses))
        if ckpt is not None:
            dcp.save({"model": m.state_dict()}, checkpoint_id=ckpt)
            values = full(m)
            if rank == 0:
                torch.save(values, ref)
    else:
        ckpt, ref = sys.argv[3:5]
        state = {"model": m.state_dict()}
        dcp.load(state, checkpoint_id=ckpt)
        m.load_state_dict(state["model"])
        want = torch.load(ref)
        got = full(m)
        bad = [k for k in want if not torch.equal(want[k], got[k])]
        if bad:
            sys.exit(f"fsdp_check: rank {rank}: after the resharded load, {bad} differ")
        if rank == 0:
            print(f"fsdp_check: load ok ({len(want)} tensors resharded onto {n} ranks)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
