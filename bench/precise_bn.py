#!/usr/bin/python3
"""Are a run's BatchNorm running statistics costing test accuracy?

Loads RUN_DIR/model.pt (the `cnn` model, [16,32,64] x [2,2,1]) into the
PyTorch twin of bigbatch's CNN, prints the test accuracy with the running
statistics the run ended with, then recomputes every BatchNorm layer's
statistics exactly over the whole training set ("precise BN": a cumulative
average, train-mode forward passes in groups of 128 and of 1024, no weight
changes) and prints the accuracy with those. docs/LARGE_BATCH.md uses it.

Usage: /usr/bin/python3 bench/precise_bn.py RUN_DIR
"""
import gzip
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "apps"))
from python_interop_test import Cnn, load_test_set  # noqa: E402


def load_train_images():
    root = "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{root}/train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    return (torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.2860) / 0.3530


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        hits = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
                   for i in range(0, len(y), 1000))
    return 100.0 * hits / len(y)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    model = Cnn()
    model.load_state_dict(torch.load(os.path.join(sys.argv[1], "model.pt")))
    x, y = load_test_set()
    print(f"running statistics: {accuracy(model, x, y):.2f} %")
    train = load_train_images()
    for group in (128, 1024):
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.reset_running_stats()
                m.momentum = None  # cumulative average
        model.train()
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            for i in range(0, len(train), group):
                model(train[order[i:i + group]])
        print(f"precise BN, groups of {group}: {accuracy(model, x, y):.2f} %")


if __name__ == "__main__":
    main()
