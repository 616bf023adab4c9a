#!/usr/bin/python3
"""Every collective x dtype x op of the "bigbatch" backend against gloo's,
in the same processes (mpirun -np N): the default group is bigbatch's, a
gloo group over the same ranks (a TCP store on 127.0.0.1:MASTER_PORT) is
the reference.

Inputs are rank-derived small integers, exact in every dtype, so every sum,
product, max and min is exact whatever the order, and the two backends must
agree exactly (==), as must AVG with SUM / n (a power of two or not, the
division is one rounding of an exact sum). Every result is also compared
with the value computed directly (integer types wrap as C++ does), so a
case gloo cannot run (AVG; reduce_scatter in PyTorch 1.13; some 16-bit and
8-bit ops) is still checked; rank 0 prints each such case with gloo's
reason — none is skipped silently. reduce_scatter_tensor and a
non-contiguous tensor (a strided view, reduced in place) are checked
against the direct values too. A second pass with random fp32 values
compares to gloo within 2 ulps of the sum's magnitude times the ranks (the
two sum in different orders on 3 ranks).

Then what a user gets wrong and the group survives: a sparse tensor, AVG
of integers (refused before anything is sent), wrong lists and splits.
(Complex tensors PyTorch itself sends as their real view.)

Also reduce (every root), gather and scatter (every root, every dtype),
all_to_all and all_to_all_single with uneven sizes, the coalesced forms,
gather_object / scatter_object_list, and the group's sequence number.

  mpirun -np N /usr/bin/python3 collectives_test.py   (PYTHONPATH: the built bigbatch_torch)
"""
import os
import sys
import traceback
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
import bigbatch_torch  # noqa: E402

TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
         torch.int16, torch.int8, torch.uint8, torch.bool]
OPS = {"SUM": dist.ReduceOp.SUM, "MAX": dist.ReduceOp.MAX, "MIN": dist.ReduceOp.MIN,
       "PRODUCT": dist.ReduceOp.PRODUCT}
failures = []
gloo_cannot = []  # (what, gloo's reason): checked against the direct values only


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"[rank {dist.get_rank()}] FAIL: {what}", flush=True)


def values(rank, n, dtype, count=33):
    # 1..5 + rank: exact in every float type; integer products wrap (below).
    # bool: a pattern of True and False that differs by rank, so that SUM
    # and MAX (or), PRODUCT and MIN (and) and each root's broadcast differ.
    if dtype == torch.bool:
        return (torch.arange(count) + rank) % 3 == 0
    return ((torch.arange(count) % 5) + 1 + rank).to(dtype)


def cast(exact, dtype):
    """An exact (float64, integral) result in `dtype`: integers wrap modulo
    2^bits as C++'s arithmetic does in the type (through int64, whose
    conversion to the narrower type truncates); bool is "any nonzero"."""
    return exact.to(dtype) if dtype.is_floating_point else exact.long().to(dtype)


def expected_reduce(n, dtype, op, count=33):
    rows = [values(r, n, dtype, count).double() for r in range(n)]
    out = rows[0].clone()
    for row in rows[1:]:
        out = {"SUM": out + row, "PRODUCT": out * row, "MAX": torch.maximum(out, row),
               "MIN": torch.minimum(out, row)}[op]
    return cast(out, dtype)


def with_gloo(what, run):
    """Runs gloo's side of a comparison; a case gloo cannot do is noted."""
    try:
        run()
    except RuntimeError as e:
        gloo_cannot.append((what, str(e).splitlines()[0][:100]))


def main():
    # "all_reduce_coalesced will be deprecated": it is still called, and tested
    warnings.filterwarnings("ignore", message=".*coalesced will be deprecated")
    dist.init_process_group("bigbatch", timeout=timedelta(seconds=20))
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    if rank == 0:
        print(bigbatch_torch.backend_of().describe(), flush=True)

    for dtype in TYPES:
        for name, op in OPS.items():
            t = values(rank, n, dtype)
            dist.all_reduce(t, op=op)
            want = expected_reduce(n, dtype, name)
            check(torch.equal(t, want), f"all_reduce {name} {dtype}: {t.tolist()} != {want.tolist()}")
            # gloo as the reference where it runs this type and op
            ref = values(rank, n, dtype)

            def gloo_all_reduce():
                dist.all_reduce(ref, op=op, group=gloo)
                check(torch.equal(t, ref), f"all_reduce {name} {dtype}: bigbatch != gloo")
            with_gloo(f"all_reduce {name} {dtype}", gloo_all_reduce)
        if dtype.is_floating_point:
            t = values(rank, n, dtype)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            want = (expected_reduce(n, dtype, "SUM").double() / n).to(dtype)
            check(torch.equal(t, want), f"all_reduce AVG {dtype}")

        # broadcast from every root
        for root in range(n):
            t = values(rank, n, dtype)
            dist.broadcast(t, src=root)
            check(torch.equal(t, values(root, n, dtype)), f"broadcast {dtype} from {root}")

        # all_gather, and into one tensor
        outs = [torch.empty(33, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, values(rank, n, dtype))
        ref = [torch.empty(33, dtype=dtype) for _ in range(n)]

        def gloo_all_gather():
            dist.all_gather(ref, values(rank, n, dtype), group=gloo)
            check(all(torch.equal(a, b) for a, b in zip(outs, ref)), f"all_gather {dtype}")
        with_gloo(f"all_gather {dtype}", gloo_all_gather)
        check(all(torch.equal(outs[r], values(r, n, dtype)) for r in range(n)), f"all_gather {dtype} values")
        flat = torch.empty(33 * n, dtype=dtype)
        gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        gather_into(flat, values(rank, n, dtype))
        check(torch.equal(flat, torch.cat([values(r, n, dtype) for r in range(n)])),
              f"all_gather_into_tensor {dtype}")

        # reduce_scatter: rank r sends values(r) * (c + 1) to rank c
        for name in ("SUM", "MAX"):
            op = OPS[name]
            parts = [(values(rank, n, dtype).double() * (c + 1)).to(dtype) for c in range(n)]
            out = torch.empty(33, dtype=dtype)
            dist.reduce_scatter(out, parts, op=op)
            want = parts[0].clone()
            rows = [(values(r, n, dtype).double() * (rank + 1)) for r in range(n)]
            acc = rows[0]
            for row in rows[1:]:
                acc = acc + row if name == "SUM" else torch.maximum(acc, row)
            want = cast(acc, dtype)
            check(torch.equal(out, want), f"reduce_scatter {name} {dtype}")
            # ... and from one tensor: rank r's chunk c is what it sends to rank c
            scatter_from = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
            out = torch.empty(33, dtype=dtype)
            scatter_from(out, torch.cat(parts), op=op)
            check(torch.equal(out, want), f"reduce_scatter_tensor {name} {dtype}")

        # reduce to every root: the root holds the reduction, the others
        # keep their tensors (as NCCL's in-place reduce leaves them)
        for root in range(n):
            for name in ("SUM", "MIN"):
                t = values(rank, n, dtype)
                dist.reduce(t, dst=root, op=OPS[name])
                want = expected_reduce(n, dtype, name) if rank == root else values(rank, n, dtype)
                check(torch.equal(t, want), f"reduce {name} {dtype} to {root}")
                ref = values(rank, n, dtype)

                def gloo_reduce():
                    dist.reduce(ref, dst=root, op=OPS[name], group=gloo)
                    check(rank != root or torch.equal(t, ref), f"reduce {name} {dtype}: bigbatch != gloo")
                with_gloo(f"reduce {name} {dtype} to {root}", gloo_reduce)

            # gather to, scatter from this root
            outs = [torch.empty(33, dtype=dtype) for _ in range(n)] if rank == root else None
            dist.gather(values(rank, n, dtype), outs, dst=root)
            check(rank != root or all(torch.equal(outs[r], values(r, n, dtype)) for r in range(n)),
                  f"gather {dtype} to {root}")
            out = torch.empty(33, dtype=dtype)
            parts = [values(r, n, dtype) for r in range(n)] if rank == root else None
            dist.scatter(out, parts, src=root)
            check(torch.equal(out, values(rank, n, dtype)), f"scatter {dtype} from {root}")

        # all_to_all_single, uneven: rank r sends c + 1 rows of 3 to rank c,
        # each row filled with 100 r + c (wrapped to the type)
        in_splits = [c + 1 for c in range(n)]
        out_splits = [rank + 1] * n
        src = torch.cat([torch.full((c + 1, 3), 100 * rank + c) for c in range(n)])
        out = torch.empty(sum(out_splits), 3, dtype=dtype)
        dist.all_to_all_single(out, cast(src.double(), dtype), out_splits, in_splits)
        want = cast(torch.cat([torch.full((rank + 1, 3), 100 * r + rank) for r in range(n)]).double(), dtype)
        check(torch.equal(out, want), f"all_to_all_single uneven {dtype}")
        ref = torch.empty_like(out)

        def gloo_all_to_all():
            dist.all_to_all_single(ref, cast(src.double(), dtype), out_splits, in_splits, group=gloo)
            check(torch.equal(out, ref), f"all_to_all_single {dtype}: bigbatch != gloo")
        with_gloo(f"all_to_all_single {dtype}", gloo_all_to_all)

        # a non-contiguous tensor (every other element of a longer one):
        # reduced in place, the elements between untouched
        base = torch.stack([values(rank, n, dtype), torch.zeros(33, dtype=dtype)], dim=1)
        strided = base[:, 0]
        assert not strided.is_contiguous()
        dist.all_reduce(strided)
        check(torch.equal(base[:, 0], expected_reduce(n, dtype, "SUM")) and
              torch.equal(base[:, 1], torch.zeros(33, dtype=dtype)),
              f"all_reduce of a non-contiguous {dtype} tensor")
    dist.barrier()

    # all_to_all of lists, uneven: rank r sends r + c + 1 values to rank c
    outs = [torch.empty(r + rank + 1) for r in range(n)]
    dist.all_to_all(outs, [torch.full((rank + c + 1,), float(10 * rank + c)) for c in range(n)])
    check(all(torch.equal(outs[r], torch.full((r + rank + 1,), float(10 * r + rank))) for r in range(n)),
          "all_to_all of lists")
    # equal parts when no split sizes are given
    out = torch.empty(2 * n)
    dist.all_to_all_single(out, torch.arange(2 * n, dtype=torch.float32) + 100 * rank)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r for r in range(n)])
    check(torch.equal(out, want), f"all_to_all_single in equal parts: {out.tolist()}")

    # the coalesced forms: a list through one exchange
    ts = [values(rank, n, torch.float32, 5), values(rank, n, torch.float32, 7).view(7, 1)]
    dist.all_reduce_coalesced(ts)
    check(torch.equal(ts[0], expected_reduce(n, torch.float32, "SUM", 5)) and
          torch.equal(ts[1].view(-1), expected_reduce(n, torch.float32, "SUM", 7)), "all_reduce_coalesced")
    ins = [values(rank, n, torch.int64, 4), values(rank, n, torch.int64, 6)]
    lists = [[torch.empty(4, dtype=torch.int64), torch.empty(6, dtype=torch.int64)] for _ in range(n)]
    dist.all_gather_coalesced(lists, ins)
    check(all(torch.equal(lists[r][0], values(r, n, torch.int64, 4)) and
              torch.equal(lists[r][1], values(r, n, torch.int64, 6)) for r in range(n)),
          "all_gather_coalesced")

    # PyTorch 2.x: all_gather_into_tensor and reduce_scatter_tensor inside
    # _coalescing_manager, through the backend's coalesced forms (sizes 5
    # and 3: unequal parts)
    if int(torch.__version__.split(".")[0]) >= 2:
        sizes = (5, 3)
        ins = [values(rank, n, torch.float32, c) for c in sizes]
        outs = [torch.empty(c * n) for c in sizes]
        with dist.distributed_c10d._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        check(all(torch.equal(o, torch.cat([values(r, n, torch.float32, c) for r in range(n)]))
                  for o, c in zip(outs, sizes)), "coalesced all_gather_into_tensor")
        # rank r's chunk j of input k: values(r) * (j + 1), for rank j
        ins = [torch.cat([values(rank, n, torch.float32, c) * (j + 1) for j in range(n)]) for c in sizes]
        outs = [torch.empty(c) for c in sizes]
        with dist.distributed_c10d._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i)
        check(all(torch.equal(o, expected_reduce(n, torch.float32, "SUM", c) * (rank + 1))
                  for o, c in zip(outs, sizes)), "coalesced reduce_scatter_tensor")

    # the object collectives built on gather and scatter
    got = [None] * n if rank == 0 else None
    dist.gather_object({"rank": rank, "name": "x" * rank}, got, dst=0)
    check(rank != 0 or got == [{"rank": r, "name": "x" * r} for r in range(n)], f"gather_object: {got}")
    mine = [None]
    dist.scatter_object_list(mine, [("to", r) for r in range(n)] if rank == 0 else None, src=0)
    check(mine[0] == ("to", rank), f"scatter_object_list: {mine}")

    # the sequence number: every rank made the same calls
    pg = dist.distributed_c10d._get_default_group()
    seqs = [None] * n
    seq = pg._get_sequence_number_for_group()
    dist.all_gather_object(seqs, seq)
    check(seq > 0 and len(set(seqs)) == 1, f"sequence numbers {seqs}")

    # Random fp32 against gloo: the same to a few ulps of the sum.
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(100_003, generator=g)
    a, b = x.clone(), x.clone()
    dist.all_reduce(a)
    dist.all_reduce(b, group=gloo)
    scale = x.abs().max().item() * n
    check((a - b).abs().max().item() <= 2 * n * torch.finfo(torch.float32).eps * scale,
          f"random fp32 sum: max |bigbatch - gloo| = {(a - b).abs().max().item()}")

    # What a user gets wrong, each one clear exception.
    try:
        dist.all_reduce(torch.zeros(4).to_sparse())
        check(False, "a sparse allreduce ran")
    except RuntimeError as e:
        check("takes dense CPU tensors" in str(e), f"the sparse refusal: {e}")
    try:
        dist.all_reduce(torch.zeros(4, dtype=torch.int64), op=dist.ReduceOp.AVG)
        check(False, "AVG of int64 ran")
    except RuntimeError as e:
        check("use ReduceOp.SUM and divide" in str(e), f"the integer AVG refusal: {e}")
    # Wrong lists: refused on the caller's thread; the group goes on.
    try:
        dist.all_gather([torch.empty(3)] * (n + 1), torch.ones(3))
        check(False, "an all_gather into too many outputs ran")
    except RuntimeError as e:
        check("give one per rank" in str(e), f"the all_gather refusal: {e}")
    try:
        dist.reduce_scatter(torch.empty(3), [torch.ones(4)] * n)
        check(False, "a reduce_scatter of mis-sized inputs ran")
    except RuntimeError as e:
        check("every input must match the output's size and type" in str(e),
              f"the reduce_scatter refusal: {e}")
    try:
        dist.gather(torch.ones(3), [torch.empty(3)] * n if rank != 0 else [torch.empty(3)] * (n + 1), dst=0)
        check(False, "a gather with a wrong list ran")
    except (RuntimeError, ValueError) as e:
        check("give one per rank" in str(e) or "only the root" in str(e) or "gather_list" in str(e),
              f"the gather refusal: {e}")
    try:
        dist.all_to_all_single(torch.empty(n + 1), torch.empty(n + 1))
        check(False, "an all_to_all_single of unsplittable rows ran")
    except RuntimeError as e:
        check("not a multiple of" in str(e), f"the all_to_all_single refusal: {e}")
    try:
        # (torch.distributed refuses mixed types itself: the group's own check)
        dist.distributed_c10d._get_default_group().allreduce_coalesced(
            [torch.ones(2), torch.ones(2, dtype=torch.float64)], dist.AllreduceCoalescedOptions())
        check(False, "a mixed-type all_reduce_coalesced ran")
    except RuntimeError as e:
        check("make one call per type" in str(e), f"the all_reduce_coalesced refusal: {e}")
    t = torch.ones(5)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((5,), float(n))), "an allreduce after the refusals")
    # Work.wait() returns with the future completed (as gloo's).
    w = dist.all_reduce(torch.ones(7), async_op=True)
    w.wait()
    check(w.get_future().done() and torch.equal(w.get_future().value()[0], torch.full((7,), float(n))),
          "the future after wait()")
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        sys.exit(1)
    if rank == 0:
        for what, why in gloo_cannot:
            print(f"gloo cannot: {what} ({why}): checked against the direct values only", flush=True)
        print(f"collectives_test: ok ({len(TYPES)} dtypes on {n} ranks; {len(gloo_cannot)} "
              f"case(s) without gloo, listed above)", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
