#!/usr/bin/python3
"""What a top-k or a sign codec would cost on the 26 M-parameter model, beside PowerSGD.

Issue 38 asks for any other codec that pays on the emulated links, or the
measurement that says why not. The two usual ones, both with error feedback:

* top-k (Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory", NeurIPS
  2018; Lin et al., "Deep Gradient Compression", ICLR 2018): each rank sends
  the k largest |X| = |g + e| as (index, value) pairs; ranks pick different
  indices, so the sum is an allgather, not an allreduce. Timed with
  torch.topk, and with DGC's cheaper selection (a threshold estimated from
  a 0.1 % sample, then one compare).
* sign (Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019): each
  rank sends sign(X) as bits and one scale ||X||_1 / d; also an allgather.

This times, on one thread as the benchmarks' ranks run, the work each codec
does per step on this model's gradient (a 350000 x 64 and a 10 x 350000
matrix plus small tensors: 26.3 M floats) with PyTorch's CPU kernels
(python3-torch 1.13: the ATen that libtorch-dev ships), next to PowerSGD's
own passes at rank 2 (the error add, P = X Q, Q = X^T P, M = P Q^T, the
error update). The network time is arithmetic: a 2-rank exchange moves the
whole message each way through the link. Prints one table; median of
--repeats timings per row.

Usage: /usr/bin/python3 bench/sparse_codec_cost.py [--link-mbit 1000 300] [--repeats 5]
"""
import argparse
import statistics
import time

import numpy as np
import torch

from blas_threads import pin_blas_threads

SHAPES = [(350000, 64), (10, 350000)]  # the two big matrices of model.hidden = 350000
D = sum(r * c for r, c in SHAPES) + 350000 + 64 * 9 + 64 + 10  # + biases and the conv


def timed(fn, repeats):
    fn()  # first touch: page faults, allocator
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--link-mbit", type=float, nargs="+", default=[1000.0, 300.0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    pin_blas_threads(1)  # OpenBLAS's own pool too: one thread, as the ranks run
    torch.manual_seed(0)
    g = torch.randn(D)
    e = torch.randn(D) * 0.1
    x = torch.empty(D)
    rows = []

    def link_ms(nbytes, mbit):
        return nbytes * 8 / (mbit * 1e6) * 1e3

    # PowerSGD rank 2, as src/ddp/powersgd_codec.cpp runs it (error feedback on).
    mats = [(torch.randn(r, c), torch.randn(r, c) * 0.1) for r, c in SHAPES]
    qs = [torch.randn(c, 2) for _, c in SHAPES]

    def powersgd():
        for (m, err), q in zip(mats, qs):
            err.add_(m)
            pm = torch.mm(err, q)
            pm, _ = torch.linalg.qr(pm)
            qn = torch.mm(err.t(), pm)
            torch.mm(pm, qn.t(), out=m)
            err.sub_(m, alpha=0.5)

    factors = sum((r + c) * 2 for r, c in SHAPES) + (D - sum(r * c for r, c in SHAPES))
    rows.append(("PowerSGD r2, fp16 wire (bigbatch's)", timed(powersgd, args.repeats), factors * 2))

    for density in (0.01, 0.001):
        k = int(D * density)

        def topk():
            torch.add(g, e, out=x)
            _, idx = torch.topk(x.abs(), k, sorted=False)
            vals = x[idx]
            e.copy_(x)
            e[idx] = 0  # what was sent leaves the memory
            # decode: the other rank's pairs added into a dense gradient
            dense = torch.zeros(D)
            dense.index_add_(0, idx, vals)
            return dense

        rows.append((f"top-k {density:.1%} (index int32 + value fp32)", timed(topk, args.repeats),
                     k * 8))

    # Deep Gradient Compression's selection: a threshold from a 0.1 % sample,
    # then one compare over the gradient (about k values, not exactly k).
    k = int(D * 0.001)
    sample_at = torch.randint(0, D, (D // 1000,))

    def sampled_topk():
        torch.add(g, e, out=x)
        a = x.abs()
        threshold = torch.kthvalue(a[sample_at], sample_at.numel() - sample_at.numel() // 1000)[0]
        idx = torch.nonzero(a >= threshold).squeeze(1)
        vals = x[idx]
        e.copy_(x)
        e[idx] = 0
        dense = torch.zeros(D)
        dense.index_add_(0, idx, vals)
        return dense

    rows.append(("top-k ~0.1%, sampled threshold (DGC)", timed(sampled_topk, args.repeats), k * 8))

    def sign():
        torch.add(g, e, out=x)
        scale = x.abs().sum().item() / D
        bits = np.packbits(x.ge(0).numpy())
        e.copy_(x).sub_(torch.sign(x), alpha=scale)
        # decode the other rank's bits into a dense gradient
        signs = torch.from_numpy(np.unpackbits(bits)[:D].astype(np.float32)).mul_(2).sub_(1)
        return signs.mul_(scale)

    rows.append(("sign + scale (1 bit a value)", timed(sign, args.repeats), D // 8 + 4))

    links = " and ".join(f"{m:g}" for m in args.link_mbit)
    print(f"26.3 M-value gradient (d = {D:,}), 1 thread, 2 ranks, links of {links} Mb/s; "
          f"median of {args.repeats}")
    head = "".join(f" {f'link ms @{m:g}':>13} {f'sum ms @{m:g}':>12}" for m in args.link_mbit)
    print(f"{'codec':<40} {'codec ms':>9} {'wire MB':>8}{head}")
    for name, sec, nbytes in rows:
        ms = sec * 1e3
        cells = "".join(f" {link_ms(nbytes, m):13.1f} {ms + link_ms(nbytes, m):12.1f}"
                        for m in args.link_mbit)
        print(f"{name:<40} {ms:9.1f} {nbytes / 1e6:8.2f}{cells}")

if __name__ == "__main__":
    main()
