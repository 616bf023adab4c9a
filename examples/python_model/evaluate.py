#!/usr/bin/python3
"""The trained module back in Python: load a run's model.jit.pt and evaluate
it on the 10,000 Fashion-MNIST test images.

    /usr/bin/python3 examples/python_model/evaluate.py RUN_DIR [--data IDX_DIR]

(--data: the Fashion-MNIST IDX directory, t10k-images-idx3-ubyte.gz and
t10k-labels-idx1-ubyte.gz; default Debian's /usr/share/datasets/fashion-mnist,
the data.path of the run) prints Python's accuracy beside the run's own (summary.json's
final_accuracy); they are equal. The module was saved in evaluation mode
(BatchNorm on the running statistics the run's final evaluation used,
dropout off), so torch.jit.load gives a module ready to predict. Inputs are
normalised as bigbatch's data pipeline does (data/batch.cpp): pixel / 255,
minus the training set's mean, divided by its standard deviation.
"""
import argparse
import gzip
import json
import os

import numpy as np
import torch

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
MEAN, STD = 0.2860, 0.3530  # of the 60,000 training images


def test_set(root=FASHION_MNIST):
    with gzip.open(f"{root}/t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{root}/t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    # The same float32 steps as bigbatch: pixel * (1 / (255 * std)) + (-mean / std).
    std, mean = np.float32(STD), np.float32(MEAN)
    scale, shift = np.float32(1) / (np.float32(255) * std), -mean / std
    return (torch.from_numpy(images.astype(np.float32) * scale + shift),
            torch.from_numpy(labels.astype(np.int64)))


def accuracy(module, images, labels, batch=1000):
    """Top-1 accuracy, argmax as bigbatch counts it, in batches of `batch`."""
    with torch.no_grad():
        correct = sum(int((module(images[i:i + batch]).argmax(1) == labels[i:i + batch]).sum())
                      for i in range(0, len(labels), batch))
    return correct / len(labels)


def main():
    parser = argparse.ArgumentParser(
        description="Evaluate a bigbatch run's model.jit.pt on the Fashion-MNIST test set "
                    "and compare with the run's final_accuracy.")
    parser.add_argument("run_dir", help="the run directory (holds model.jit.pt and summary.json)")
    parser.add_argument("--data", default=FASHION_MNIST,
                        help="the Fashion-MNIST IDX directory (default: %(default)s)")
    args = parser.parse_args()
    run_dir = args.run_dir
    module = torch.jit.load(os.path.join(run_dir, "model.jit.pt"))
    torch.set_num_threads(1)  # as each bigbatch worker evaluated: the same kernels' rounding
    images, labels = test_set(args.data)
    ours = accuracy(module, images, labels)
    with open(os.path.join(run_dir, "summary.json")) as f:
        theirs = json.load(f)["final_accuracy"]
    print(f"Python: {ours:.4f}   bigbatch final_accuracy: {theirs:.4f}   "
          f"{'equal' if round(ours * len(labels)) == round(theirs * len(labels)) else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
