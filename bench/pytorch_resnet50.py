#!/usr/bin/env python3
"""PyTorch ResNet-50 training throughput on one GPU: the anchor of bigbatch's
GPU numbers, measured the way `bigbatch bench step` measures bigbatch
(scripts/device-check's resnet, compile and profile sections run both).

PyTorch at its best in eager mode: channels-last, autocast (bf16, fp16 with
GradScaler), cudnn.benchmark, SGD with momentum and foreach=True; or the
model under torch.compile (--compile MODE). Synthetic 224x224 images, labels
of 1000 classes, one process. Each row: --warmup untimed steps, then --steps
timed ones (>= 48 for the device check), the clock read after a device
synchronisation at both ends.

Input (--input):
  resident  one batch already on the GPU, every step (the model's cost alone)
  host      a batch from host memory every step: normalised float32 images in
            pinned memory (what a DataLoader with pin_memory=True hands over,
            4 batches in rotation), fed as NVIDIA's DeepLearningExamples feed
            their ResNet-50 (their data_prefetcher): the next batch's copy
            (non_blocking=True) on a side stream while this step computes,
            the compute stream waiting on it, record_stream so the
            allocator does not reuse the buffer early — PyTorch's host-fed
            step at its best, not a copy in series with the compute. One
            difference: DeepLearningExamples copy uint8 pixels and normalise
            on the GPU; these are float32 (4x the bytes), which the overlap
            hides unless the bus is the bottleneck
  both      one row of each
Precision: tf32 (fp32 with TF32 matmuls/convolutions), bf16, fp16.
Prints one JSON line per row: {"impl", "precision", "batch", "input", "feed", "steps",
"step_ms", "img_s"} ("impl": "pytorch-eager" or "pytorch-compile-MODE", with
"compile_s" the first compiled step's seconds).

--profile-out FILE: a torch.profiler Chrome trace (CPU and CUDA activities) of
3 timed steps of the first row, marked ProfilerStep#N as bigbatch's
(scripts/profile_summary.py tables both).

  bench/pytorch_resnet50.py [--batch 256] [--steps 48] [--warmup 8]
      [--precisions tf32,bf16,fp16] [--input resident|host|both]
      [--compile default|reduce-overhead|max-autotune|max-autotune-no-cudagraphs]
      [--profile-out FILE]
"""
import argparse
import json
import time

import torch

from resnet50_torch import resnet50

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def host_batches(batch, count=4):
    """Normalised float32 NCHW images in pinned host memory, channels-last."""
    out = []
    for i in range(count):
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, 256, (batch, 3, 224, 224), dtype=torch.uint8, generator=g).float().div_(255)
        for c in range(3):
            x[:, c].sub_(MEAN[c]).div_(STD[c])
        out.append(x.contiguous(memory_format=torch.channels_last).pin_memory())
    return out


class Prefetcher:
    """The next batch's host-to-device copy on a side stream, overlapping the
    step that runs now (DeepLearningExamples' PyTorch ResNet-50 data_prefetcher)."""

    def __init__(self, batches):
        self.batches = batches
        self.stream = torch.cuda.Stream()
        self.i = 0
        self.next = None
        self._load()

    def _load(self):
        with torch.cuda.stream(self.stream):
            self.next = self.batches[self.i % len(self.batches)].cuda(non_blocking=True)
        self.i += 1

    def get(self):
        current = torch.cuda.current_stream()
        current.wait_stream(self.stream)
        images = self.next
        images.record_stream(current)  # freed only after the compute stream is done with it
        self._load()
        return images


def run(precision, batch, steps, warmup, input_kind, compile_mode, profile_out):
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    model = resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5, foreach=True)
    dtype = {"tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    loss_fn = torch.nn.CrossEntropyLoss()
    forward = torch.compile(model, mode=compile_mode) if compile_mode else model
    resident = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device="cuda")
    feed = Prefetcher(host_batches(batch)) if input_kind == "host" else None

    def step(i):
        images = feed.get() if feed else resident
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(forward(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    t0 = time.perf_counter()
    step(0)  # the compile, when compiled
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    for i in range(1, warmup):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    row = {"impl": f"pytorch-compile-{compile_mode}" if compile_mode else "pytorch-eager",
           "precision": precision, "batch": batch, "input": input_kind,
           "feed": "side-stream prefetch" if feed else "resident", "steps": steps,
           "step_ms": 1e3 * seconds / steps, "img_s": batch * steps / seconds}
    if compile_mode:
        row["compile_s"] = first_s
    if profile_out:
        from torch.profiler import ProfilerActivity, profile, schedule
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=2, active=3)) as prof:
            for i in range(5):
                step(i)
                prof.step()
        torch.cuda.synchronize()
        prof.export_chrome_trace(profile_out)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--precisions", default="tf32,bf16,fp16")
    p.add_argument("--input", choices=("resident", "host", "both"), default="resident")
    p.add_argument("--compile", dest="compile_mode", default=None,
                   choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))
    p.add_argument("--profile-out", default=None)
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 1:
        p.error("--steps and --warmup must be >= 1")
    inputs = ("resident", "host") if a.input == "both" else (a.input,)
    profile_out = a.profile_out
    for precision in a.precisions.split(","):
        for input_kind in inputs:
            print(json.dumps(run(precision, a.batch, a.steps, a.warmup, input_kind, a.compile_mode,
                                 profile_out)), flush=True)
            profile_out = None  # the first row only


if __name__ == "__main__":
    main()
