#!/usr/bin/env python3
"""Collects scripts/device-check's outputs in WORK_DIR into OUT_DIR's
results.json and table.md, each figure beside the issue's target. Missing
parts (a section that failed or was not run) are reported as missing, never
guessed; a rehearsal (REHEARSAL=1, no GPU) says so at the top of both.

  scripts/device_check_table.py WORK_DIR OUT_DIR
"""
import csv
import json
import os
import re
import sys


def jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def last_epoch(run_dir):
    path = os.path.join(run_dir, "metrics.csv")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return rows[-1] if rows else None


def summary(run_dir):
    path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(x, spec=".1f"):
    return "missing" if x is None else format(x, spec)


def main(work, out):
    sections = jsonl(os.path.join(work, "sections.jsonl"))
    rehearsal = any(x.get("rehearsal") for x in sections)
    r = {"rehearsal": rehearsal, "sections": sections}
    lines = ["# scripts/device-check", ""]
    if rehearsal:
        lines += ["**REHEARSAL** (REHEARSAL=1, no GPU): every GPU step was replaced by a CPU stand-in "
                  "or a stub; the figures below test the script, they are not GPU measurements.", ""]
    machine = os.path.join(work, "machine.txt")
    if os.path.exists(machine):
        r["machine"] = [line.strip() for line in open(machine) if line.strip()]
        lines += ["Machine: " + "; ".join(r["machine"]), ""]
    lines += ["| section | status | s | timeout s | reason |", "|---|---|---|---|---|"]
    lines += [f"| {x['section']} | {x['status']} | {x['seconds']} | {x['timeout_s']} | {x['reason']} |"
              for x in sections]

    # The cuda test label.
    test_log = os.path.join(work, "logs", "test.log")
    if os.path.exists(test_log):
        m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", open(test_log).read())
        if m:
            r["cuda_tests"] = {"failed": int(m.group(2)), "total": int(m.group(3))}
            lines += ["", f"CUDA test suites: {int(m.group(3)) - int(m.group(2))}/{m.group(3)} passed"]
        missing = re.search(r"cuda tests not built: (.*)", open(test_log).read())
        if missing:
            r.setdefault("cuda_tests", {})["not_built"] = missing.group(1).split()
            lines += ["", f"CUDA tests not built (a failure): {missing.group(1)}"]

    # Fused optimizer step.
    ours = {row["optimizer"]: row for row in jsonl(os.path.join(work, "optim_bigbatch.jsonl"))}
    theirs = {row["form"]: row for row in jsonl(os.path.join(work, "optim_pytorch.jsonl"))}
    if ours:
        r["optim"] = {"bigbatch": ours, "pytorch": theirs}
        lines += ["", "## Optimizer step, ResNet-50's 161 tensors (target: LARS <= 0.25 ms and >= 8x torch._foreach)", "",
                  "| optimizer | fused ms | bigbatch per-tensor ms | bound ms | of bound | torch._foreach ms | torch loop ms | vs _foreach |",
                  "|---|---|---|---|---|---|---|---|"]
        foreach = theirs.get("foreach", {}).get("ms")
        loop = theirs.get("per_tensor", {}).get("ms")
        for name, row in ours.items():
            versus = foreach / row["fused_ms"] if foreach and name == "lars" else None
            lines.append(f"| {name} | {row['fused_ms']:.3f} | {row['naive_ms']:.3f} | {row['bound_ms']:.3f} | "
                         f"{row['of_bound']:.2f} | {fmt(foreach if name == 'lars' else None, '.3f')} | "
                         f"{fmt(loop if name == 'lars' else None, '.3f')} | {fmt(versus, '.1f')} |")

    # The gradient codecs' own work per step (bench/device_codec_bench.cpp).
    codec_rows = jsonl(os.path.join(work, "codec.jsonl"))
    if codec_rows:
        by = {}
        for row in codec_rows:
            by.setdefault(row["codec"], {})["host" if row["where"] == "host" else "device"] = row
        r["codec"] = codec_rows
        first = codec_rows[0]
        lines += ["", f"## Gradient codecs' own work per step, ResNet-50 ({first['fp32_mb']:.1f} MB of fp32 "
                      f"gradients in {first['buckets']} buckets, a world of 2, no wire)", "",
                  "| codec | device codec ms (where) | host codec ms (threads) | host / device | wire MB | vs fp32 |",
                  "|---|---|---|---|---|---|"]
        for name, pair in by.items():
            d, h = pair.get("device"), pair.get("host")
            ref = d or h
            lines.append(f"| {name} | {fmt(d and d['ms'], '.2f')} ({d['where'] if d else '-'}) | "
                         f"{fmt(h and h['ms'], '.2f')} ({h['threads'] if h else '-'}) | "
                         f"{fmt(h['ms'] / d['ms'] if d and h and d['ms'] > 0 else None, '.1f')} | "
                         f"{ref['wire_mb']:.2f} | {ref['fp32_mb'] / ref['wire_mb']:.1f}x |")

    # ResNet-50 step rates (issue 55): bigbatch's `bench step` and PyTorch's
    # eager loop, measured the same way; torch.compile beside them.
    ours = jsonl(os.path.join(work, "step_bigbatch.jsonl"))
    eager = jsonl(os.path.join(work, "step_pytorch.jsonl"))
    compiled = jsonl(os.path.join(work, "compile_pytorch.jsonl"))
    if ours or eager or compiled:
        def rate(rows, precision, input_kind, graph=False, unfused=False):
            # unfused: the rows run with model.fused_bn = off (the others: auto)
            return next((x.get("img_s") for x in rows
                         if x.get("precision") == precision and x.get("input") == input_kind
                         and bool(x.get("cuda_graph")) == graph
                         and (x.get("fused_bn") == "off") == unfused), None)
        precisions = []
        for x in ours + eager:
            if x.get("precision") and x["precision"] not in precisions:
                precisions.append(x["precision"])
        rows = []
        for p in precisions:
            for input_kind in ("resident", "host"):
                b, e = rate(ours, p, input_kind), rate(eager, p, input_kind)
                g = rate(ours, p, input_kind, graph=True)
                u = rate(ours, p, input_kind, unfused=True)
                best = max((x.get("img_s") or 0 for x in compiled
                            if x.get("precision") == p and x.get("input") == input_kind), default=0) or None
                rows.append({"precision": p, "input": input_kind, "bigbatch_img_s": b, "pytorch_eager_img_s": e,
                             "ratio": b / e if b and e else None, "bigbatch_unfused_bn_img_s": u,
                             "unfused_ratio": u / e if u and e else None, "bigbatch_graph_img_s": g,
                             "graph_ratio": g / e if g and e else None, "pytorch_compile_img_s": best,
                             "graph_ratio_compile": g / best if g and best else None})
        r["resnet50_step"] = {"rows": rows, "bigbatch": ours, "pytorch_eager": eager, "pytorch_compile": compiled}
        lines += ["", "## ResNet-50 step, batch 256, synthetic 224x224, one rank, >= 48 timed steps after warm-up "
                      "(targets: >= 1.0x PyTorch eager at bf16 and fp16 with items 1-4; >= 1.3x eager and >= 1.0x "
                      "torch.compile with the CUDA graph and fused BatchNorm)", "",
                  "resident: one batch kept on the GPU (the model's cost); host: fed from host memory every step "
                  "(bigbatch: its input pipeline, uint8 on the bus; PyTorch: pinned float batches, "
                  "non_blocking copies on a side stream, DeepLearningExamples' prefetcher). fused BN off: "
                  "model.fused_bn = off (the other bigbatch columns: auto, which fuses at fp16 only: cuDNN's "
                  "fused ops take half, so at bf16 both columns run unfused).", "",
                  "| precision | input | bigbatch img/s | PyTorch eager img/s | ratio | bigbatch, fused BN off | "
                  "vs eager | bigbatch + CUDA graph img/s | "
                  "vs eager | torch.compile img/s | graph vs compile |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in rows:
            lines.append(f"| {x['precision']} | {x['input']} | {fmt(x['bigbatch_img_s'], '.0f')} | "
                         f"{fmt(x['pytorch_eager_img_s'], '.0f')} | {fmt(x['ratio'], '.2f')} | "
                         f"{fmt(x['bigbatch_unfused_bn_img_s'], '.0f')} | {fmt(x['unfused_ratio'], '.2f')} | "
                         f"{fmt(x['bigbatch_graph_img_s'], '.0f')} | {fmt(x['graph_ratio'], '.2f')} | "
                         f"{fmt(x['pytorch_compile_img_s'], '.0f')} | {fmt(x['graph_ratio_compile'], '.2f')} |")
        for x in compiled:
            if x.get("failed") or x.get("skipped"):
                lines.append(f"\n{x['impl']}: {x.get('failed') or 'skipped: ' + x['skipped']}")
            elif x.get("compile_s") is not None:
                lines.append(f"\n{x['impl']} {x.get('precision')}: first step (the compile) {x['compile_s']:.1f} s")
    for side in ("bigbatch", "pytorch"):
        path = os.path.join(work, f"profile_{side}.json")
        if os.path.exists(path):
            with open(path) as f:
                prof = json.load(f)
            r.setdefault("profile", {})[side] = prof
            if side == "bigbatch":
                lines += ["", "## Profile of one step, bf16 with input (profile_bigbatch.md, profile_pytorch.md)", ""]
            lines.append(f"- {side}: step {prof['step_ms']:.2f} ms, GPU busy {100 * prof['gpu_busy_share']:.1f} %, "
                         f"{sum(x['per_step'] for x in prof['syncs']):.1f} synchronising calls a step, longest idle gap "
                         f"{max((g['ms'] for g in prof['gaps']), default=0):.2f} ms")

    # The host's input rate alone (bench pipeline --in-memory), the last epoch.
    feed = jsonl(os.path.join(work, "pipeline_inmemory.jsonl"))
    if feed:
        r["input_pipeline_img_s"] = feed[-1]["img_s"]
        lines += ["", f"Host input alone (`bench pipeline --in-memory --workers 4 --batch 256`, "
                      f"224x224 into channels-last): {feed[-1]['img_s']:.0f} img/s, "
                      f"{feed[-1]['img_per_cpu_s']:.0f} per CPU second."]

    # The default recipe on the GPU.
    s = summary(os.path.join(work, "recipe-gpu"))
    if s:
        r["recipe"] = {k: s.get(k) for k in ("reached_target", "final_accuracy", "best_accuracy", "epochs",
                                               "time_to_target_s", "train_time_s", "throughput_img_s", "device")}
        lines += ["", "## Default recipe on the GPU (target: 92 %)", "",
                  f"reached {s.get('reached_target')}: final {100 * s.get('final_accuracy', 0):.2f} % after "
                  f"{s.get('epochs')} epochs, time to target {s.get('time_to_target_s')} s, "
                  f"{s.get('throughput_img_s', 0):.0f} img/s on {s.get('device')}"]

    # CPU weak scaling, and the machine's ceiling: n independent 1-rank runs
    # at once (ceiling-npN-i), whose summed img/s against n times one run
    # alone bounds any data-parallel program's efficiency on these CPUs.
    scaling = []
    counts = sorted(int(m.group(1)) for m in (re.fullmatch(r"scaling-np(\d+)", d) for d in os.listdir(work)) if m)
    for n in counts:
        e = last_epoch(os.path.join(work, f"scaling-np{n}"))
        p = jsonl(os.path.join(work, f"scaling_pytorch_np{n}.json"))
        copies = [last_epoch(os.path.join(work, f"ceiling-np{n}-{i}")) for i in range(n)] if n > 1 else []
        ceiling_img_s = sum(float(c["img_s"]) for c in copies) if copies and all(copies) else None
        if e or p:
            scaling.append({"ranks": n, "bigbatch_img_s": float(e["img_s"]) if e else None,
                            "pytorch_img_s": p[0]["img_s"] if p else None,
                            "independent_img_s": ceiling_img_s})
    if scaling:
        base = {k: next((x[k] for x in scaling if x["ranks"] == 1 and x[k]), None)
                for k in ("bigbatch_img_s", "pytorch_img_s")}
        for x in scaling:
            for k, e in (("bigbatch_img_s", "bigbatch_efficiency"), ("pytorch_img_s", "pytorch_efficiency")):
                x[e] = x[k] / (x["ranks"] * base[k]) if x[k] and base[k] else None
            x["ratio"] = x["bigbatch_img_s"] / x["pytorch_img_s"] if x["bigbatch_img_s"] and x["pytorch_img_s"] else None
            if x["ranks"] == 1:
                x["ceiling_efficiency"] = 1.0
            else:
                b = base["bigbatch_img_s"]
                x["ceiling_efficiency"] = x["independent_img_s"] / (x["ranks"] * b) if x["independent_img_s"] and b else None
        r["scaling"] = scaling
        lines += ["", "## CPU weak scaling, default CNN, 64 images and 1 thread per rank (target at 16: efficiency >= 0.8, >= 1.5x PyTorch DDP)", "",
                  "Ceiling: n independent 1-rank bigbatch runs at once, one per CPU, no exchange — their summed img/s "
                  "over n times one run alone; no data-parallel run on these CPUs can be more efficient.", "",
                  "| ranks | bigbatch img/s | efficiency | PyTorch DDP img/s | efficiency | ratio | ceiling |",
                  "|---|---|---|---|---|---|---|"]
        for x in scaling:
            lines.append(f"| {x['ranks']} | {fmt(x['bigbatch_img_s'], '.0f')} | {fmt(x['bigbatch_efficiency'], '.2f')} | "
                         f"{fmt(x['pytorch_img_s'], '.0f')} | {fmt(x['pytorch_efficiency'], '.2f')} | {fmt(x['ratio'], '.2f')} | "
                         f"{fmt(x['ceiling_efficiency'], '.2f')} |")

    # Issue 56: decode + augment rates on ImageNet-shaped JPEGs (the last,
    # warm epoch of each), and ResNet-50 trained from them.
    rates = []
    for impl, name in (("bigbatch_gpu", "bigbatch, GPU decode (nvJPEG)"),
                       ("bigbatch_cpu", "bigbatch, CPU decode, every core"),
                       ("torchvision_gpu", "torchvision, GPU decode (decode_jpeg on cuda)"),
                       ("dataloader", "PyTorch DataLoader (PIL), workers = cores")):
        rows = jsonl(os.path.join(work, f"input_{impl}.jsonl"))
        if rows:
            last = rows[-1]
            per_cpu = last.get("img_per_cpu_s")
            rates.append({"impl": impl, "name": name, "workers": last.get("workers"),
                          "img_s": last.get("img_s"),
                          "cpu_ms_per_img": 1e3 / per_cpu if per_cpu else None,
                          "backend": last.get("backend")})
    if rates:
        by = {x["impl"]: x["img_s"] for x in rates}
        gpu = by.get("bigbatch_gpu")
        for x in rates:
            x["gpu_decode_over_this"] = gpu / x["img_s"] if gpu and x["img_s"] and x["impl"] != "bigbatch_gpu" else None
        r["input_rates"] = rates
        lines += ["", "## Decode + augment to the device, ImageNet-shaped JPEGs, 224x224 crops (targets: GPU decode "
                      ">= 3x bigbatch's CPU decode, >= 5x the DataLoader, >= 1.0x torchvision's GPU decode)", "",
                  "The last epoch of each; batches of 256 (64 in a rehearsal); host CPU time: getrusage of the "
                  "process and its children over the epoch.", "",
                  "| pipeline | workers | img/s | host CPU ms/img | GPU decode / this |", "|---|---|---|---|---|"]
        for x in rates:
            lines.append(f"| {x['name']} | {x['workers'] if x['workers'] is not None else '-'} | {fmt(x['img_s'], '.0f')} | "
                         f"{fmt(x['cpu_ms_per_img'], '.3f')} | {fmt(x['gpu_decode_over_this'], '.2f')} |")
        backend = next((x["backend"] for x in rates if x.get("backend")), None)
        if backend:
            lines += ["", f"GPU decode backend: {backend}"]
    trained = []
    for p in ("fp32", "bf16", "fp16"):
        j = last_epoch(os.path.join(work, f"input-train-{p}-jpeg"))
        m = last_epoch(os.path.join(work, f"input-train-{p}-memory"))
        if j or m:
            ji = float(j["img_s"]) if j else None
            mi = float(m["img_s"]) if m else None
            share = float(j["data_s"]) / float(j["epoch_time_s"]) if j and float(j["epoch_time_s"]) > 0 else None
            trained.append({"precision": p, "jpeg_gpu_decode_img_s": ji, "in_memory_img_s": mi,
                            "ratio": ji / mi if ji and mi else None, "jpeg_data_wait_share": share})
    if trained:
        r["input_training"] = trained
        lines += ["", "## ResNet-50 trained from the JPEG folder, data.decode = gpu, vs the same run on synthetic data in memory "
                      "(target: >= 0.9x at bf16 and fp16)", "",
                  "| precision | JPEG folder img/s | in memory img/s | ratio | data wait share (JPEG) |", "|---|---|---|---|---|"]
        for x in trained:
            lines.append(f"| {x['precision']} | {fmt(x['jpeg_gpu_decode_img_s'], '.0f')} | {fmt(x['in_memory_img_s'], '.0f')} | "
                         f"{fmt(x['ratio'], '.2f')} | {fmt(x['jpeg_data_wait_share'], '.3f')} |")

    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(r, f, indent=2)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
