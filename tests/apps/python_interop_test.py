#!/usr/bin/python3
"""Weights out to Python and back, as a user would do it.

1. `bigbatch train` (2 workers, 1 epoch on 10,000 images) writes model.pt;
   `bigbatch export RUN_DIR out.pt` copies it.
2. Python loads out.pt with plain torch.load, builds the same architecture
   with the same parameter names, evaluates the 10,000 Fashion-MNIST test
   images, and must get exactly bigbatch's own test accuracy (summary.json's
   final_accuracy): the workers evaluate with the BatchNorm statistics
   model.pt holds (their mean over the ranks). Python evaluates as the
   workers do — channels-last weights, the same float32 normalisation, one
   thread, batches of 1,000 — so no kernel's rounding can flip a borderline
   image.
3. `bigbatch train --init-from out.pt` starts from the exported weights: the
   first epoch's loss is far below a fresh start's. (Files written by Python's
   torch.save cannot be read: libtorch 1.13's unpickler does not rebuild the
   OrderedDict every Python tensor pickle carries; see README.)
4. A state dict of another architecture is refused with a message naming the
   tensor and exit status 1.

Usage: python_interop_test.py BIGBATCH_BINARY CONFIG (CTest passes the main
job's recipe, configs/fast.toml)
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import tomllib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Cnn(nn.Module):
    """bigbatch's `cnn` model with its parameter names: model.widths x
    model.blocks conv-BN-ReLU layers, max-pooled between stages, the last
    stage's features average-pooled to model.head_pool x model.head_pool and
    flattened (channel-major) into fc."""

    def __init__(self, widths=(16, 32, 64), blocks=(2, 2, 1), head_pool=1):
        super().__init__()
        cin, index, self.plan = 1, 1, []
        for s, (w, b) in enumerate(zip(widths, blocks)):
            for i in range(b):
                setattr(self, f"conv{index}", nn.Conv2d(cin, w, 3, padding=1, bias=False))
                setattr(self, f"bn{index}", nn.BatchNorm2d(w))
                self.plan.append((index, i == b - 1 and s + 1 < len(widths)))
                cin, index = w, index + 1
        self.head_pool = head_pool
        self.fc = nn.Linear(cin * head_pool * head_pool, 10)

    def forward(self, x):
        for index, pool in self.plan:
            x = F.relu(getattr(self, f"bn{index}")(getattr(self, f"conv{index}")(x)))
            if pool:
                x = F.max_pool2d(x, 2)
        return self.fc(F.adaptive_avg_pool2d(x, self.head_pool).flatten(1))


def model_of(config):
    """The Cnn a recipe's [model] table describes (its defaults as bigbatch's)."""
    with open(config, "rb") as f:
        m = tomllib.load(f).get("model", {})
    if m.get("name", "cnn") != "cnn" or m.get("hidden", 0):
        sys.exit(f"FAIL: {config} is not a plain cnn recipe; this test reads cnn weights")
    return Cnn(tuple(m.get("widths", (16, 32, 64))), tuple(m.get("blocks", (2, 2, 1))),
               m.get("head_pool", 1))


def load_test_set():
    root = "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{root}/t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{root}/t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    # bigbatch's normalisation (data/batch.cpp), in the same float32 steps:
    # pixel * (1 / (255 * std)) + (-mean / std).
    std, mean = np.float32(0.3530), np.float32(0.2860)
    scale, shift = np.float32(1) / (np.float32(255) * std), -mean / std
    x = torch.from_numpy(images.astype(np.float32) * scale + shift)
    return x, torch.from_numpy(labels.astype(np.int64))


def run(args, expect_ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def first_loss(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)["first_epoch_loss"]


def main():
    binary, config = sys.argv[1], sys.argv[2]
    common = ["--set", "train.epochs=1", "--set", "data.train_samples=10000", "-q"]
    two = ["--workers", "2"]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, out = os.path.join(tmp, "run"), os.path.join(tmp, "weights.pt")
        run([binary, "train", config, "--run-dir", run_dir] + common + two)
        run([binary, "export", run_dir, out])
        state = torch.load(out)
        model = model_of(config)
        model.load_state_dict(state)  # strict: every name and shape must match
        model = model.to(memory_format=torch.channels_last).eval()
        torch.set_num_threads(1)
        x, y = load_test_set()
        with torch.no_grad():
            correct = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
                          for i in range(0, len(y), 1000))
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        theirs, ranks = summary["final_accuracy"], summary["world_size"]
        print(f"Python accuracy {correct}/{len(y)}, bigbatch accuracy {theirs:.4f} on {ranks} "
              f"workers", flush=True)
        if ranks != 2:
            sys.exit(f"FAIL: the run trained on {ranks} worker(s), not 2")
        if correct != round(theirs * len(y)):
            sys.exit("FAIL: model.pt does not reproduce bigbatch's reported accuracy")

        warm = os.path.join(tmp, "warm")
        run([binary, "train", config, "--run-dir", warm, "--init-from", out] + common + two)
        print(f"first-epoch loss: fresh {first_loss(run_dir):.4f}, from the exported weights "
              f"{first_loss(warm):.4f}")
        if not first_loss(warm) < 0.9 * first_loss(run_dir):
            sys.exit("FAIL: --init-from did not start from the trained weights")

        # The same weights into another architecture (first stage 8 wide, not 16).
        p = run([binary, "train", config, "--run-dir", os.path.join(tmp, "bad"), "--init-from",
                 out, "--set", "model.widths=[8,32,64]", "--workers", "1"] + common,
                expect_ok=False)
        print(f"foreign weights: exit {p.returncode}: {p.stderr.strip()}")
        if p.returncode != 1 or "conv1.weight" not in p.stderr or "shape" not in p.stderr:
            sys.exit("FAIL: foreign weights were not refused with a message naming the tensor")
    print("python_interop_test: ok")


if __name__ == "__main__":
    main()
