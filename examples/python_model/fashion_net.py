#!/usr/bin/python3
"""A model of your own, in ordinary PyTorch, trained by bigbatch.

FashionNet is not in bigbatch's zoo: depthwise-separable convolutions
(MobileNet, Howard et al. 2017), residual connections (He et al. 2016), a
squeeze-and-excitation gate in every block (Hu et al. 2018) and dropout
before the classifier. Nothing in it knows about bigbatch: bigbatch trains
whatever `torch.jit.script` can compile whose forward(images) returns
logits [N, classes].

    /usr/bin/python3 examples/python_model/fashion_net.py examples/python_model/fashion_net.jit.pt [WIDTH]

scripts the model (WIDTH channels in the first stage, default 32) and saves
it; `bigbatch train` then loads that file on
every worker (model.name = "torchscript", model.path = the file). Script it
with the PyTorch of your bigbatch build: Debian's python3-torch (1.13, under
/usr/bin/python3) for the default build.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class SqueezeExcite(nn.Module):
    """Channel attention: each channel scaled by a gate computed from the
    global average of all channels."""

    def __init__(self, channels: int, reduction: int = 4):
        super().__init__()
        self.reduce = nn.Conv2d(channels, channels // reduction, 1)
        self.expand = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = torch.sigmoid(self.expand(F.relu(self.reduce(s))))
        return x * s


class SeparableBlock(nn.Module):
    """depthwise 3x3 - BN - ReLU - pointwise 1x1 - BN - SE, plus the input
    (projected by a strided 1x1 convolution where the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.se = SqueezeExcite(cout)
        if stride == 1 and cin == cout:
            self.shortcut = nn.Sequential()
        else:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.depthwise(x)))
        y = self.se(self.bn2(self.pointwise(y)))
        return F.relu(y + self.shortcut(x))


class FashionNet(nn.Module):
    def __init__(self, classes: int = 10, width: int = 32, dropout: float = 0.2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        w = width
        self.blocks = nn.Sequential(
            SeparableBlock(w, w, 1),
            SeparableBlock(w, 2 * w, 2),      # 14 x 14
            SeparableBlock(2 * w, 2 * w, 1),
            SeparableBlock(2 * w, 4 * w, 2),  # 7 x 7
            SeparableBlock(4 * w, 4 * w, 1),
        )
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(4 * w, classes)

    def forward(self, images):
        x = self.blocks(self.stem(images))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(self.dropout(x))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fashion_net.jit.pt"
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    torch.manual_seed(0)  # the initial weights are the file's: every worker starts from them
    module = torch.jit.script(FashionNet(width=width))
    module.save(out)
    params = sum(p.numel() for p in module.parameters())
    print(f"saved {out}: FashionNet, {params} parameters (torch {torch.__version__})")


if __name__ == "__main__":
    main()
