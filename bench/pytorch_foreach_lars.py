#!/usr/bin/env python3
"""The LARS step over ResNet-50's parameter set in PyTorch on a GPU, two ways:
a per-tensor loop (norms, trust ratio, momentum, update per tensor) and the
multi-tensor `torch._foreach_*` form (a handful of launches for all tensors,
one host sync for the norms). The anchor of `bigbatch bench optim --device
cuda` (scripts/device-check runs both). Same rule as bigbatch's LARS:
trust = eta*|w| / (|g| + wd*|w| + eps) for tensors of rank > 1 (1 for BN and
biases), v = m*v + lr*trust*(g + wd*w), w -= v.
Prints one JSON line per form: {"form", "tensors", "values", "ms"} (median).

  bench/pytorch_foreach_lars.py [--iterations 200]
"""
import argparse
import json
import statistics
import time

import torch

from resnet50_torch import resnet50


def params():
    torch.manual_seed(1)
    ws = [p.detach().clone().cuda() for p in resnet50().parameters()]
    gs = [1e-3 * torch.randn_like(w) for w in ws]
    vs = [torch.zeros_like(w) for w in ws]
    return ws, gs, vs


def per_tensor(ws, gs, vs, lr=0.1, m=0.9, wd=5e-5, eta=0.001, eps=0.0):
    for w, g, v in zip(ws, gs, vs):
        if w.dim() > 1:
            wn, gn = w.norm(), g.norm()
            trust = torch.where((wn > 0) & (gn > 0), eta * wn / (gn + wd * wn + eps), torch.ones_like(wn))
            d = g.add(w, alpha=wd)
        else:
            trust = torch.ones((), device=w.device)
            d = g
        v.mul_(m).add_(d * (lr * trust))
        w.sub_(v)


def foreach(ws, gs, vs, lr=0.1, m=0.9, wd=5e-5, eta=0.001, eps=0.0):
    adapted = [i for i, w in enumerate(ws) if w.dim() > 1]
    wa = [ws[i] for i in adapted]
    ga = [gs[i] for i in adapted]
    wn = torch.stack(torch._foreach_norm(wa))
    gn = torch.stack(torch._foreach_norm(ga))
    trust = torch.where((wn > 0) & (gn > 0), eta * wn / (gn + wd * wn + eps), torch.ones_like(wn))
    coeff = [torch.ones((), device=ws[0].device) * lr for _ in ws]
    scaled = (trust * lr).unbind()
    for k, i in enumerate(adapted):
        coeff[i] = scaled[k]
    d = torch._foreach_add([gs[i] for i in range(len(ws))],
                           [ws[i] if ws[i].dim() > 1 else torch.zeros_like(ws[i]) for i in range(len(ws))],
                           alpha=wd)
    torch._foreach_mul_(vs, m)
    torch._foreach_add_(vs, torch._foreach_mul(d, coeff))
    torch._foreach_sub_(ws, vs)


def time_it(fn, iterations):
    ws, gs, vs = params()
    for _ in range(5):
        fn(ws, gs, vs)
    torch.cuda.synchronize()
    t = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn(ws, gs, vs)
        torch.cuda.synchronize()
        t.append(time.perf_counter() - t0)
    return statistics.median(t) * 1e3, len(ws), sum(w.numel() for w in ws)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=200)
    a = p.parse_args()
    for name, fn in (("per_tensor", per_tensor), ("foreach", foreach)):
        ms, tensors, values = time_it(fn, a.iterations)
        print(json.dumps({"form": name, "tensors": tensors, "values": values, "ms": ms}), flush=True)


if __name__ == "__main__":
    main()
