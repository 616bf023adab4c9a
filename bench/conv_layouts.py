#!/usr/bin/python3
"""Training-step img/s of the DDP benchmark's models (bench/pytorch_ddp.py)
on one thread, for each memory layout (channels-last / NCHW) and convolution
backend (oneDNN / ATen's native im2col + BLAS, `torch.backends.mkldnn`):
which kernels the fastest single-rank step on this CPU uses.

  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
      /usr/bin/python3 bench/conv_layouts.py [--rounds 2] [--batch 64]
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_ddp import Cnn, ResNet  # noqa: E402


def img_per_s(model_cls, channels_last, mkldnn, batch, steps):
    torch.backends.mkldnn.enabled = mkldnn
    torch.manual_seed(0)
    model = model_cls()
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("model   layout          backend  img/s")
    for name, cls, steps in (("cnn", Cnn, 60), ("resnet", ResNet, 8)):
        for _ in range(args.rounds):
            for cl in (True, False):
                for mk in (True, False):
                    rate = img_per_s(cls, cl, mk, args.batch, steps)
                    print(f"{name:7} {'channels-last' if cl else 'nchw':15} "
                          f"{'onednn' if mk else 'native':8} {rate:6.0f}", flush=True)


if __name__ == "__main__":
    main()
