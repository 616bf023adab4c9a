#!/usr/bin/python3
"""dist.all_reduce on the "bigbatch" backend against gloo, in the same
processes and the same run (mpirun -np N): every size from --min to --max
bytes (x2), fp32, each timed over --iters calls after --warmup, both
backends interleaved per size; one table in nccl-tests' form (size, count,
time, algbw, busbw = algbw x 2(n-1)/n, GB = 1e9 bytes) with the ratio, and
--json for one JSON line per size. Each call is checked: the inputs are
rank-derived integers, so #wrong must be 0.

gloo at its setting for CPU tensors: its own ring over TCP (on one host
loopback; GLOO_SOCKET_IFNAME selects the interface across hosts), the
store at MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29571; across the
emulated cluster's hosts, host 0's address).

  mpirun -np 2 -x PYTHONPATH=build/python /usr/bin/python3 bench/torch_backend_allreduce.py

`--only bigbatch` or `--only gloo` times one backend in processes that
hold no group of the other (gloo then as its own default group: no
bigbatch group, no MPI in the process beyond mpirun's launch); the other
column is then empty. bench/backend_allreduce_alone.sh runs both so.
"""
import argparse
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29571")
import bigbatch_torch  # noqa: E402


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def time_calls(t, group, iters, warmup):
    for _ in range(warmup):
        dist.all_reduce(t, group=group)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - t0) / iters


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min", default="4K")
    p.add_argument("--max", default="256M")
    p.add_argument("--iters", type=int, default=0, help="0: enough for ~64 MB per size, 3..200")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", choices=["bigbatch", "gloo"], default=None,
                   help="time this backend alone, in processes with no group of the other")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.only == "gloo":
        os.environ.setdefault("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
        os.environ.setdefault("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
        dist.init_process_group("gloo", timeout=timedelta(seconds=300))
        gloo = None  # the default group
        names = {"gloo": None}
    else:
        dist.init_process_group("bigbatch", timeout=timedelta(seconds=300))
        gloo = (None if a.only == "bigbatch"
                else dist.new_group(backend="gloo", timeout=timedelta(seconds=300)))
        names = {"bigbatch": None} if a.only else {"bigbatch": None, "gloo": gloo}
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0 and not a.json:
        what = (bigbatch_torch.backend_of().describe() if "bigbatch" in names
                else "bigbatch not run")
        print(f"# {what}; gloo {'over TCP' if 'gloo' in names else 'not run'}; fp32, {n} ranks")
        print(f"# {'size':>10} {'count':>11} | {'bigbatch us':>11} {'algbw':>7} {'busbw':>7} | "
              f"{'gloo us':>11} {'algbw':>7} {'busbw':>7} | {'ratio':>6} {'#wrong':>6}")
    size = parse_bytes(a.min)
    while size <= parse_bytes(a.max):
        count = size // 4
        iters = a.iters or max(3, min(200, (64 << 20) // size))
        t = torch.full((count,), float(rank + 1))
        want = float(n * (n + 1) // 2)
        # One checked call each, then the timed ones (the value grows: unchecked).
        wrong = 0
        for group in names.values():
            t.fill_(rank + 1)
            dist.all_reduce(t, group=group)
            wrong += int((t != want).sum().item())
        times = {"bigbatch": float("nan"), "gloo": float("nan")}
        for name, group in names.items():
            t.fill_(0.0)
            times[name] = time_calls(t, group, iters, a.warmup)
        worst = torch.tensor([times["bigbatch"], times["gloo"], float(wrong)], dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=gloo)
        tb, tg, wrong = worst.tolist()
        alg = lambda s: size / s / 1e9
        bus = lambda s: alg(s) * 2 * (n - 1) / n
        us = lambda s: None if s != s else s * 1e6  # NaN (not run): null
        if rank == 0:
            if a.json:
                print(json.dumps({"bytes": size, "count": count, "ranks": n, "iters": iters,
                                  "bigbatch_us": us(tb), "gloo_us": us(tg),
                                  "ratio": tg / tb if len(names) == 2 else None,
                                  "wrong": int(wrong)}), flush=True)
            else:
                print(f"  {size:>10} {count:>11} | {tb * 1e6:>11.1f} {alg(tb):>7.3f} {bus(tb):>7.3f} | "
                      f"{tg * 1e6:>11.1f} {alg(tg):>7.3f} {bus(tg):>7.3f} | {tg / tb:>5.2f}x {int(wrong):>6}",
                      flush=True)
        size *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
