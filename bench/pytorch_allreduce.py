#!/usr/bin/python3
"""PyTorch's gloo allreduce beside `bigbatch bench allreduce` (the same
sizes, float32, busbw = algbw * 2(n-1)/n; `--timing mean` times the calls
as that bench does, the default the median single call), for a side-by-side table on the
same ranks and links. Started by torchrun (its RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, as scripts/torchrun_hosts starts it: no core binding, no MPI in
the process) or by mpirun: rank and world size from OpenMPI's
OMPI_COMM_WORLD_*, the store on host 0
(`--master`, default: this host's `--ifname` address with the last byte 1,
the emulated cluster's host 0). Prints one JSON line per size from rank 0.

  scripts/emulated_cluster --hosts 2 --ranks-per-host 2 --rate 1gbit -- \\
      /usr/bin/python3 bench/pytorch_allreduce.py --min-bytes 4096 --max-bytes 268435456
"""
import argparse
import json
import os
import subprocess
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--bytes-per-size", type=float, default=2e9,
                   help="iterations per size: about this many bytes moved (5 to 200)")
    p.add_argument("--iters", type=int, default=0,
                   help="timed calls per size (0: from --bytes-per-size)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timing", choices=("median", "mean"), default="median",
                   help="median: each call timed alone, the median call (the input refilled "
                        "and checked between calls, so a shaped link idles and refills its "
                        "token bucket before each); mean: the calls back to back after a "
                        "barrier, their mean, checked after (as `bigbatch bench allreduce` "
                        "times); either way the slowest rank's")
    p.add_argument("--master", default="")
    p.add_argument("--ifname", default="eth0")
    p.add_argument("--port", type=int, default=29556)
    args = p.parse_args()
    if args.iters < 0 or args.warmup < 0:
        p.error("--iters and --warmup must be 0 or more")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", args.ifname)
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:  # torchrun's start: as given
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        master = os.environ["MASTER_ADDR"]
        args.port = int(os.environ["MASTER_PORT"])
    else:
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        master = args.master
    if not master:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", args.ifname],
                             capture_output=True, text=True, check=True).stdout
        master = out.split("inet ")[1].split("/")[0].rsplit(".", 1)[0] + ".1"
    os.environ["MASTER_ADDR"] = master
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = nbytes // 4
        x = torch.full((count,), float(rank + 1))
        iters = args.iters or int(min(200, max(5, args.bytes_per_size / nbytes)))
        for _ in range(args.warmup):
            dist.all_reduce(x)
        x.fill_(float(rank + 1))
        dist.barrier()
        times = []
        wrong = 0
        expected = size * (size + 1) / 2
        if args.timing == "mean":
            # Back to back, as bigbatch's bench: no idle link between calls.
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            times.append((time.perf_counter() - t0) / iters)
            x.fill_(float(rank + 1))
            dist.all_reduce(x)
            wrong += int((x != expected).sum().item())
        else:
            for _ in range(iters):
                x.fill_(float(rank + 1))
                t0 = time.perf_counter()
                dist.all_reduce(x)
                times.append(time.perf_counter() - t0)
                wrong += int((x != expected).sum().item())
        # The slowest rank's median call (one entry: its mean).
        t = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        w = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(w)
        if rank == 0:
            algbw = nbytes / t.item() / 1e9
            print(json.dumps({"system": "pytorch_gloo", "bytes": nbytes, "ranks": size,
                              "timing": args.timing,
                              "iterations": iters, "time_us": t.item() * 1e6,
                              "algbw": algbw, "busbw": algbw * 2 * (size - 1) / size,
                              "wrong": int(w.item())}), flush=True)
        nbytes *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
