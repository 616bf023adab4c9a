#!/usr/bin/python3
"""bigbatch's default `cnn` (configs/default.toml: model.widths [16, 32, 64],
model.blocks [2, 2, 1]) written in PyTorch, with the zoo's parameter names.

    /usr/bin/python3 examples/python_model/default_cnn.py default_cnn.jit.pt [SEED]

saves it scripted. It runs the same ATen operations as the native C++ model
(src/models/small_cnn.cpp), so a torchscript run of this file and a native
run started `--init-from` it train to the same losses, bit for bit
(tests/apps/torchscript_test.py; bench/torchscript_bench.sh times the two).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class DefaultCnn(nn.Module):
    """conv-BN-ReLU x2, max-pool, x2, max-pool, x1, global average pool, fc."""

    def __init__(self, classes=10):
        super().__init__()
        cin = 1
        for i, w in enumerate([16, 16, 32, 32, 64], start=1):
            setattr(self, f"conv{i}", nn.Conv2d(cin, w, 3, padding=1, bias=False))
            setattr(self, f"bn{i}", nn.BatchNorm2d(w))
            cin = w
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.bn3(self.conv3(x)))
        x = F.max_pool2d(F.relu(self.bn4(self.conv4(x))), 2)
        x = F.relu(self.bn5(self.conv5(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "default_cnn.jit.pt"
    torch.manual_seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    torch.jit.script(DefaultCnn()).save(out)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
