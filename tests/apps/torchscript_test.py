#!/usr/bin/python3
"""A PyTorch user's own model, end to end, as they would run it.

1. examples/python_model/fashion_net.py's FashionNet (depthwise-separable
   convolutions, residuals, squeeze-excitation, dropout; width 8 here for
   time), scripted by Debian's PyTorch, trains on 2 workers with a LARS
   recipe (`bigbatch train --set model.name=torchscript --set model.path=F`).
   The run directory holds model.jit.pt; Python's torch.jit.load of it
   evaluates the 10,000 test images to exactly summary.json's
   final_accuracy, and model.pt is its state dict.
2. `bigbatch export CHECKPOINT OUT.jit.pt` of that run's final checkpoint
   gives a module with model.jit.pt's tensors.
3. The twin of bigbatch's `cnn` written in Python: a native run started
   `--init-from` the scripted file and a torchscript run of the file train
   to the same per-epoch losses and accuracy — the same weights, the same ops.
4. Bad model files and settings are refused on one line, exit status 1,
   before any worker starts and before the run directory exists.
5. Two ranks that load different files under the same model.path (each in
   its own directory) are stopped by the weight checksum, which names the
   tensor that differs.

Usage: torchscript_test.py BIGBATCH_BINARY DEFAULT_CONFIG EXAMPLE_DIR
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, y):
        return self.fc(x.flatten(1) + y.flatten(1))


class SevenClasses(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 7)

    def forward(self, x):
        return self.fc(x.flatten(1))


def run(args, expect_ok=True, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if expect_ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def epochs(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [(r["epoch"], r["train_loss"], r["test_acc"]) for r in csv.DictReader(f)]


def main():
    binary, config, example = (os.path.abspath(a) for a in sys.argv[1:4])
    sys.path.insert(0, example)
    import evaluate  # examples/python_model/evaluate.py
    from default_cnn import DefaultCnn as Cnn  # the zoo's default cnn, in PyTorch
    from fashion_net import FashionNet

    quick = ["--set", "data.train_samples=4096", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        # 1. Train the example's model on 2 workers with LARS.
        net = os.path.join(tmp, "fashion_net.jit.pt")
        torch.manual_seed(0)
        torch.jit.script(FashionNet(width=8)).save(net)
        run_dir = os.path.join(tmp, "run")
        run([binary, "train", os.path.join(example, "fashion_net.toml"), "--run-dir", run_dir,
             "--set", f"model.path={net}", "--set", "train.epochs=2",
             "--set", "train.batch_size=256", "--set", "train.virtual_workers=2",
             "--workers", "2"] + quick)
        s = summary(run_dir)
        if s["world_size"] != 2 or s["optimizer"] != "lars":
            sys.exit(f"FAIL: trained on {s['world_size']} worker(s) with {s['optimizer']}")
        module = torch.jit.load(os.path.join(run_dir, "model.jit.pt"))
        if module.training:
            sys.exit("FAIL: model.jit.pt is not in evaluation mode")
        torch.set_num_threads(1)
        images, labels = evaluate.test_set()
        ours = evaluate.accuracy(module, images, labels)
        print(f"Python accuracy of model.jit.pt {ours:.4f}, bigbatch final_accuracy "
              f"{s['final_accuracy']:.4f}", flush=True)
        if round(ours * len(labels)) != round(s["final_accuracy"] * len(labels)):
            sys.exit("FAIL: model.jit.pt does not evaluate to final_accuracy")
        state = torch.load(os.path.join(run_dir, "model.pt"))
        theirs = {k: v for k, v in module.state_dict().items()}
        if sorted(state) != sorted(theirs) or any(not torch.equal(state[k], theirs[k])
                                                 for k in state):
            sys.exit("FAIL: model.pt is not model.jit.pt's state dict")

        # 2. The final checkpoint, exported as a module.
        ckpts = os.path.join(run_dir, "checkpoints")
        with open(os.path.join(ckpts, "latest")) as f:
            last = os.path.join(ckpts, f.read().strip())
        out = os.path.join(tmp, "exported.jit.pt")
        print(run([binary, "export", last, out]).stdout.strip())
        exported = torch.jit.load(out).state_dict()
        if sorted(exported) != sorted(theirs) or any(not torch.equal(exported[k], theirs[k])
                                                    for k in theirs):
            sys.exit("FAIL: the exported checkpoint is not the run's module")

        # 3. The native cnn from the scripted twin's weights, and the twin itself.
        twin = os.path.join(tmp, "cnn.jit.pt")
        torch.manual_seed(1)
        torch.jit.script(Cnn()).save(twin)
        two = ["--set", "train.epochs=2", "--workers", "2"] + quick
        native = os.path.join(tmp, "native")
        scripted = os.path.join(tmp, "scripted")
        run([binary, "train", config, "--run-dir", native, "--init-from", twin] + two)
        run([binary, "train", config, "--run-dir", scripted, "--set", "model.name=torchscript",
             "--set", f"model.path={twin}"] + two)
        print(f"native {epochs(native)}\nscripted {epochs(scripted)}")
        if epochs(native) != epochs(scripted):
            sys.exit("FAIL: the scripted twin does not train as the native model does")

        # 4. Bad input: one line, exit 1, no run directory.
        text = os.path.join(tmp, "notes.txt")
        with open(text, "w") as f:
            f.write("not a model\n")
        pickled = os.path.join(tmp, "state.pt")
        torch.save(Cnn().state_dict(), pickled)
        newer = os.path.join(tmp, "newer.jit.pt")
        shutil.copy(twin, newer)
        with zipfile.ZipFile(newer, "a") as z:  # what PyTorch >= 2.1 adds to every archive
            z.writestr(z.namelist()[0].split("/")[0] + "/.data/serialization_id", "1234")
        two_inputs = os.path.join(tmp, "two_inputs.jit.pt")
        torch.jit.script(TwoInputs()).save(two_inputs)
        seven = os.path.join(tmp, "seven.jit.pt")
        torch.jit.script(SevenClasses()).save(seven)
        frozen = os.path.join(tmp, "frozen.jit.pt")
        m = Cnn()
        for p in m.parameters():
            p.requires_grad_(False)
        torch.jit.script(m).save(frozen)
        cases = [
            ([f"model.path={text}"], "is not a TorchScript file"),
            ([f"model.path={pickled}"], "is a torch.save file"),
            ([f"model.path={newer}"], "saved by PyTorch 2.1 or newer"),
            ([f"model.path={two_inputs}"], "exactly one Tensor argument"),
            ([f"model.path={seven}"], "forward returned shape [2, 7]"),
            ([f"model.path={frozen}"], "no parameter of the module requires grad"),
            ([f"model.path={os.path.join(tmp, 'missing.pt')}"], "does not exist"),
            ([f"model.path={twin}", "optim.kfac=true", "optim.name=lars"],
             "K-FAC gathers its factors through the built-in models' layer taps"),
            ([], "needs model.path"),
        ]
        for sets, expected in cases:
            for workers in ("2", "1"):
                bad = os.path.join(tmp, "bad")
                args = [binary, "train", config, "--run-dir", bad, "--workers", workers,
                        "--set", "model.name=torchscript"]
                for kv in sets:
                    args += ["--set", kv]
                p = run(args, expect_ok=False)
                lines = p.stderr.strip().splitlines()
                print(f"{expected!r} on {workers}: exit {p.returncode}: {p.stderr.strip()}")
                if p.returncode != 1 or len(lines) != 1 or expected not in lines[0]:
                    sys.exit(f"FAIL: not refused on one line with {expected!r}:\n{p.stdout}\n"
                             f"{p.stderr}")
                if os.path.exists(bad):
                    sys.exit("FAIL: a refused run created its run directory")
        p = run([binary, "train", config, "--run-dir", os.path.join(tmp, "bad"), "--set",
                 f"model.path={twin}"], expect_ok=False)
        if p.returncode != 1 or "is read by model.name = \"torchscript\" only" not in p.stderr:
            sys.exit(f"FAIL: model.path without torchscript was not refused:\n{p.stderr}")

        # 5. The same model.path, different files: the checksum names the tensor.
        for rank, seed in (("0", 1), ("1", 2)):
            os.makedirs(os.path.join(tmp, f"host{rank}"))
            torch.manual_seed(seed)
            torch.jit.script(Cnn()).save(os.path.join(tmp, f"host{rank}", "cnn.jit.pt"))
        rank_args = [binary, "train", config, "--run-dir", os.path.join(tmp, "mixed"), "-q",
                     "--set", "model.name=torchscript", "--set", "model.path=cnn.jit.pt",
                     "--set", "run.threads=1"]
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        p = run(["mpirun"] + root + ["-np", "1", "-wdir", os.path.join(tmp, "host0")] + rank_args
                + [":", "-np", "1", "-wdir", os.path.join(tmp, "host1")] + rank_args,
                expect_ok=False, timeout=120)
        print(f"different files per rank: exit {p.returncode}: {p.stderr.strip()[-400:]}")
        if p.returncode == 0 or "conv1.weight" not in p.stderr:
            sys.exit("FAIL: ranks with different module files were not stopped by name")
    print("torchscript_test: ok")


if __name__ == "__main__":
    main()
