#!/usr/bin/env python3
"""PyTorch eager ResNet-50 training throughput: the anchor of bigbatch's GPU
numbers (scripts/device-check runs both side by side).

Synthetic 224x224 data resident on the GPU (no input pipeline), channels-last,
SGD with momentum, one process, one GPU. Precision: tf32 (fp32 with TF32
matmuls/convolutions), bf16 (autocast), fp16 (autocast + GradScaler).
Prints one JSON line per precision: {"precision", "batch", "img_s", "steps"}.

  bench/pytorch_resnet50.py [--batch 256] [--steps 30] [--warmup 10] [--precisions tf32,bf16,fp16]
"""
import argparse
import json
import time

import torch

from resnet50_torch import resnet50


def run(precision, batch, steps, warmup):
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    model = resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    images = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device="cuda")
    dtype = {"tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"precision": precision, "batch": batch, "steps": steps,
            "img_s": batch * steps / seconds}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--precisions", default="tf32,bf16,fp16")
    a = p.parse_args()
    for precision in a.precisions.split(","):
        print(json.dumps(run(precision, a.batch, a.steps, a.warmup)), flush=True)


if __name__ == "__main__":
    main()
