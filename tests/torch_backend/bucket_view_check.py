"""DDP's gradient_as_bucket_view with bigbatch's PowerSGD hook (run by
ddp_test.sh under mpirun, 2 ranks): the view is in effect (the gradients of
a bucket share its storage) and the hook's result is the bucket itself,
written in place, so DDP copies nothing back. Prints "rank R: bucket view: ok"."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import bigbatch_torch

dist.init_process_group("bigbatch")
torch.manual_seed(1)
net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
model = nn.parallel.DistributedDataParallel(net, gradient_as_bucket_view=True)
state = bigbatch_torch.hooks.powersgd(rank=2, start_step=1, module=model)
in_place = []


def hook(state, bucket):
    buffer = bucket.buffer()

    def check(fut):
        in_place.append(fut.value().data_ptr() == buffer.data_ptr())
        return fut.value()

    return bigbatch_torch.hooks.powersgd_hook(state, bucket).then(check)


model.register_comm_hook(state, hook)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(dist.get_rank())
for _ in range(4):
    opt.zero_grad(set_to_none=False)
    model(torch.randn(32, 64, generator=g)).square().mean().backward()
    opt.step()
storages = {p.grad.untyped_storage().data_ptr() if hasattr(p.grad, "untyped_storage")
            else p.grad.storage().data_ptr() for p in net.parameters()}
params = len(list(net.parameters()))
ok = in_place and all(in_place) and len(storages) < params
print(f"rank {dist.get_rank()}: {len(in_place)} hook calls, in place {sum(in_place)}; "
      f"{params} gradients in {len(storages)} storages", flush=True)
rank = dist.get_rank()
dist.destroy_process_group()
# PyTorch 1.13: the globals hold the group past destroy_process_group(),
# and the exit handler must shut it down (ddp_test.sh checks the exit
# status). PyTorch 2.x: destroy_process_group() shut it down (Backend's
# shutdown), though the globals still hold it.
held = 1 if int(torch.__version__.split(".")[0]) < 2 else 0
assert bigbatch_torch._C.live_groups() == held, bigbatch_torch._C.live_groups()
if not ok:
    sys.exit("bucket view: the hook's result is not the bucket, or the gradients are not views")
print(f"rank {rank}: bucket view: ok", flush=True)
