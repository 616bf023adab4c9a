#!/usr/bin/python3
"""A TorchScript model with tied weights and a frozen part, on 3 workers.

The module (written here): a frozen input layer (requires_grad off: a
fine-tuned backbone), two 64 x 64 layers that share one weight (tied), a
classifier. Trained on 3 workers for 2 short epochs with evaluations (the
BatchNorm-statistics averaging) and checkpoints, then:
  1. model.pt loads into the module's class with Python's strict
     load_state_dict: it has every name state_dict() has, the tied names
     on one storage;
  2. the frozen weight is the input file's, bit for bit (never averaged:
     (a + a + a) / 3 need not be a), and the checkpoint holds it once,
     with the parameters, not in each rank's buffers;
  3. `--init-from` the tied module file and from model.pt both start a run;
  4. a resume from the checkpoint restores it (the frozen weight again the
     input's).

Usage: torchscript_shared_test.py BIGBATCH_BINARY DEFAULT_CONFIG
"""
import io
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(784, 64)
        self.backbone.requires_grad_(False)  # frozen
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.b.weight = self.a.weight  # tied
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        h = F.relu(self.backbone(x.flatten(1)))
        h = F.relu(self.a(h))
        h = F.relu(self.b(h))
        return self.head(h)


def run(args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def main():
    binary, config = (os.path.abspath(a) for a in sys.argv[1:3])
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(3)
        net = Shared()
        path = os.path.join(tmp, "shared.jit.pt")
        torch.jit.script(net).save(path)
        frozen = net.backbone.weight.detach().clone()
        # 3 x 64 = 192 images a step, 8 steps an epoch; a checkpoint every 4.
        common = ["--set", "model.name=torchscript", "--set", f"model.path={path}",
                  "--set", "data.train_samples=1536", "--set", "data.eval_samples=500",
                  "--set", "train.epochs=2", "--set", "ckpt.every_steps=4",
                  "--set", "train.stop_at_target=false", "--workers", "3", "-q"]
        run_dir = os.path.join(tmp, "run")
        run([binary, "train", config, "--run-dir", run_dir] + common)

        sd = torch.load(os.path.join(run_dir, "model.pt"))
        model = Shared()
        model.load_state_dict(sd)  # strict: every name of state_dict()
        if set(sd) != set(Shared().state_dict()):
            sys.exit(f"FAIL: model.pt names {sorted(sd)}")
        if sd["a.weight"].data_ptr() != sd["b.weight"].data_ptr():
            sys.exit("FAIL: the tied names are not one storage in model.pt")
        if not torch.equal(sd["backbone.weight"], frozen):
            d = (sd["backbone.weight"] - frozen).abs().max().item()
            sys.exit(f"FAIL: the frozen weight changed in training (max |change| {d})")
        if torch.equal(sd["a.weight"], net.a.weight):
            sys.exit("FAIL: the tied weight did not train")

        ckpt_dir = os.path.join(run_dir, "checkpoints")
        latest = open(os.path.join(ckpt_dir, "latest")).read().strip()
        # A checkpoint is a short header, then torch's own archive.
        raw = open(os.path.join(ckpt_dir, latest), "rb").read()
        k = torch.load(io.BytesIO(raw[raw.index(b"PK"):]))
        for r, buffers in enumerate(k["rank_buffers"]):
            if "backbone.weight" in buffers:
                sys.exit(f"FAIL: the checkpoint holds the frozen weight in rank {r}'s buffers")
        if not torch.equal(k["parameters"].get("backbone.weight", torch.empty(0)), frozen):
            sys.exit("FAIL: the checkpoint's parameters lack the frozen weight")

        for source in (path, os.path.join(run_dir, "model.pt")):
            run([binary, "train", config, "--run-dir", os.path.join(tmp, "init" + str(len(source)))]
                + common + ["--set", "train.epochs=1", "--init-from", source])

        resumed = os.path.join(tmp, "resumed")
        os.makedirs(os.path.join(resumed, "checkpoints"))
        first = sorted(f for f in os.listdir(ckpt_dir) if f.startswith("ckpt-"))[0]
        with open(os.path.join(ckpt_dir, first), "rb") as src, \
                open(os.path.join(resumed, "checkpoints", first), "wb") as dst:
            dst.write(src.read())
        run([binary, "train", config, "--run-dir", resumed, "--resume",
             os.path.join(resumed, "checkpoints", first)] + common)
        again = torch.load(os.path.join(resumed, "model.pt"))
        if not torch.equal(again["backbone.weight"], frozen):
            sys.exit("FAIL: the frozen weight changed across the resume")
        print("torchscript_shared_test: tied names on one storage, frozen weight unchanged on 3 "
              "workers, --init-from and resume work")
    print("torchscript_shared_test: ok")


if __name__ == "__main__":
    main()
