#!/usr/bin/env python3
"""One small table of a training step's profile, from a Kineto Chrome trace:
bigbatch's (`bigbatch train --profile-out`, `bench step --profile-out`) or
PyTorch's (torch.profiler's export_chrome_trace, bench/pytorch_resnet50.py
--profile-out) — both write the same format and mark each step as a
"ProfilerStep#N" range, so both sides are read the same way (issue 55).

Over the profiled steps, per step:
  - wall time, and the share of it the GPU was busy (kernels, copies,
    memsets on any stream, overlaps counted once);
  - the top kernels by time (count and ms a step);
  - copies by kind (CUPTI's names: HtoD / DtoH / DtoD, Pageable or Pinned),
    bytes and ms;
  - synchronising calls (the host waits in them for the device: stream,
    event and device synchronisation, blocking copies and memsets,
    cudaFree, and asynchronous copies from pageable memory, which the
    driver makes synchronous), calls and host ms;
  - the longest GPU idle gaps, each with the host operation running at its
    middle — what the host was doing while the GPU waited.
The window is the profiled steps' host ranges, extended to the end of the
GPU work queued inside them (a step's kernels run after its host range).

  scripts/profile_summary.py TRACE.json [--label NAME] [--top 15] [--gaps 5] [--json OUT.json]
  scripts/profile_summary.py --self-test | --example OUT.json
Prints Markdown (a few KB; the device check keeps it under 20 KB).
"""
import argparse
import json
import sys

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_CATS = {"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation", "python_function"}
SYNC_CALLS = {
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemset", "cudaFree", "cudaFreeHost", "cudaHostAlloc", "cudaMallocHost",
    "cudaStreamQuery", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemFree_v2",
}


def load(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]


def merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def summarise(events, top=15, gaps=5):
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    host = [e for e in events if e.get("cat") in HOST_CATS
            and not str(e.get("name", "")).startswith("ProfilerStep#")]
    if steps:
        start = steps[0]["ts"]
        host_end = max(s["ts"] + s["dur"] for s in steps)
        n = len(steps)
    else:  # no step marks: the whole trace is one step
        everything = gpu + host
        start = min(e["ts"] for e in everything)
        host_end = max(e["ts"] + e["dur"] for e in everything)
        n = 1
    # The GPU work queued inside the host ranges runs after them: extend the
    # window to the end of the GPU events that start before the host's end.
    end = max([host_end] + [g["ts"] + g["dur"] for g in gpu if start <= g["ts"] < host_end])
    window = end - start
    inside = [g for g in gpu if g["ts"] < end and g["ts"] + g["dur"] > start]
    busy = merge([[max(g["ts"], start), min(g["ts"] + g["dur"], end)] for g in inside])
    busy_us = sum(b - a for a, b in busy)

    kernels = {}
    for g in inside:
        if g.get("cat") == "kernel":
            k = kernels.setdefault(g["name"], [0, 0.0])
            k[0] += 1
            k[1] += g["dur"]
    copies = {}
    for g in inside:
        if g.get("cat") in ("gpu_memcpy", "gpu_memset"):
            c = copies.setdefault(g["name"], [0, 0, 0.0])
            c[0] += 1
            c[1] += int((g.get("args") or {}).get("bytes", 0))
            c[2] += g["dur"]
    # Pageable copies' runtime calls, by correlation id.
    pageable = {(g.get("args") or {}).get("correlation") for g in inside
                if g.get("cat") == "gpu_memcpy" and "Pageable" in g["name"]}
    syncs = {}
    for h in host:
        if h.get("cat") not in ("cuda_runtime", "cuda_driver") or not (start <= h["ts"] < end):
            continue
        name = h["name"]
        corr = (h.get("args") or {}).get("correlation")
        if name in SYNC_CALLS or (corr is not None and corr in pageable):
            label = name if name in SYNC_CALLS else name + " (pageable)"
            s = syncs.setdefault(label, [0, 0.0])
            s[0] += 1
            s[1] += h["dur"]

    idle = []
    cursor = start
    for a, b in busy + [[end, end]]:
        if a > cursor:
            idle.append((a - cursor, cursor, a))
        cursor = max(cursor, b)
    idle.sort(reverse=True)
    gap_rows = []
    for length, a, b in idle[:gaps]:
        mid = (a + b) / 2
        covering = [h for h in host if h["ts"] <= mid <= h["ts"] + h["dur"]]
        op = min(covering, key=lambda h: h["dur"]) if covering else None  # the innermost
        gap_rows.append({"at_ms": (a - start) / 1e3, "ms": length / 1e3,
                         "host_op": op["name"] if op else "(none: the host was idle or untraced)",
                         "host_cat": op.get("cat") if op else None})
    per = 1e3 * n
    return {
        "steps": n,
        "step_ms": window / per,
        "gpu_busy_share": busy_us / window if window > 0 else 0.0,
        "kernels": [{"name": k, "per_step": c / n, "ms_per_step": us / per}
                    for k, (c, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]],
        "kernel_count_per_step": sum(c for c, _ in kernels.values()) / n,
        "kernel_ms_per_step": sum(us for _, us in kernels.values()) / per,
        "copies": [{"kind": k, "per_step": c / n, "mb_per_step": b / n / 1e6, "ms_per_step": us / per}
                   for k, (c, b, us) in sorted(copies.items(), key=lambda kv: -kv[1][2])],
        "syncs": [{"call": k, "per_step": c / n, "host_ms_per_step": us / per}
                  for k, (c, us) in sorted(syncs.items(), key=lambda kv: -kv[1][1])],
        "gaps": gap_rows,
    }


def markdown(s, label):
    short = lambda name, width=90: name if len(name) <= width else name[:width - 3] + "..."
    out = [f"### {label}: {s['steps']} profiled step(s)", "",
           f"Step wall time {s['step_ms']:.2f} ms; GPU busy {100 * s['gpu_busy_share']:.1f} % of it; "
           f"{s['kernel_count_per_step']:.0f} kernels a step, {s['kernel_ms_per_step']:.2f} ms of kernel time.", "",
           "| top kernels | per step | ms/step |", "|---|---|---|"]
    out += [f"| `{short(k['name'])}` | {k['per_step']:.1f} | {k['ms_per_step']:.3f} |" for k in s["kernels"]]
    out += ["", "| copies and memsets | per step | MB/step | ms/step |", "|---|---|---|---|"]
    out += [f"| {c['kind']} | {c['per_step']:.1f} | {c['mb_per_step']:.2f} | {c['ms_per_step']:.3f} |"
            for c in s["copies"]] or ["| (none) | | | |"]
    out += ["", "| synchronising calls | per step | host ms/step |", "|---|---|---|"]
    out += [f"| {c['call']} | {c['per_step']:.1f} | {c['host_ms_per_step']:.3f} |" for c in s["syncs"]] \
        or ["| (none) | | |"]
    out += ["", "| longest GPU idle gaps | ms | at ms | host op at its middle |", "|---|---|---|---|"]
    out += [f"| {i + 1} | {g['ms']:.3f} | {g['at_ms']:.2f} | `{short(g['host_op'], 70)}` |"
            for i, g in enumerate(s["gaps"])] or ["| (none) | | | |"]
    return "\n".join(out) + "\n"


def example_events():
    """A trace whose figures are known: two steps of 10 ms, a 4 ms kernel and
    a 2 ms kernel each, one pinned and one pageable copy, one stream sync
    and one host op, each under a GPU idle gap."""
    ev = []

    def x(cat, name, ts, dur, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 1, "args": args})

    for i, t0 in enumerate((0, 10000)):
        x("user_annotation", f"ProfilerStep#{i + 1}", t0, 10000)
        x("kernel", "conv_fwd", t0 + 1000, 4000)
        x("kernel", "bn_relu", t0 + 5000, 2000)
    x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 7000, 500, bytes=1000000, correlation=1)
    x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 17000, 500, bytes=4000000, correlation=2)
    x("cuda_runtime", "cudaMemcpyAsync", 16900, 700, correlation=2)
    x("cuda_runtime", "cudaStreamSynchronize", 8000, 1500, correlation=3)
    x("cpu_op", "aten::copy_", 17500, 2000)
    return ev


def self_test():
    s = summarise(example_events(), top=15, gaps=5)
    checks = [
        (s["steps"], 2), (round(s["step_ms"], 6), 10.0),
        (round(s["gpu_busy_share"], 6), round((2 * 6000 + 1000) / 20000, 6)),
        ([k["name"] for k in s["kernels"]], ["conv_fwd", "bn_relu"]),
        (s["kernels"][0]["ms_per_step"], 4.0), (s["kernels"][0]["per_step"], 1.0),
        ({c["kind"]: c["mb_per_step"] for c in s["copies"]},
         {"Memcpy HtoD (Pinned -> Device)": 0.5, "Memcpy HtoD (Pageable -> Device)": 2.0}),
        ({c["call"]: c["per_step"] for c in s["syncs"]},
         {"cudaStreamSynchronize": 0.5, "cudaMemcpyAsync (pageable)": 0.5}),
        # The idle spans are 0-1, 7.5-11 and 17.5-20 ms: 3.5 ms at 7.5 first.
        (round(s["gaps"][0]["ms"], 6), 3.5), (round(s["gaps"][0]["at_ms"], 6), 7.5),
        (s["gaps"][0]["host_op"], "cudaStreamSynchronize"),
        (round(s["gaps"][1]["ms"], 6), 2.5), (s["gaps"][1]["host_op"], "aten::copy_"),
    ]
    bad = [(got, want) for got, want in checks if got != want]
    for got, want in bad:
        print(f"self-test: got {got!r}, want {want!r}", file=sys.stderr)
    md = markdown(s, "self-test")
    assert len(md.encode()) < 20000
    print("profile_summary self-test:", "FAILED" if bad else "passed")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", nargs="?")
    p.add_argument("--label", default=None)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--gaps", type=int, default=5)
    p.add_argument("--json", dest="json_out")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--example", metavar="OUT.json",
                   help="write the self-test's synthetic trace (for a rehearsal without a GPU)")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if a.example:
        with open(a.example, "w") as f:
            json.dump({"traceEvents": example_events()}, f)
        return 0
    if not a.trace:
        p.error("give a trace file (or --self-test)")
    s = summarise(load(a.trace), a.top, a.gaps)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(s, f, indent=1)
    sys.stdout.write(markdown(s, a.label or a.trace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
