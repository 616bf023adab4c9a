#!/usr/bin/python3
"""Golden values for bigbatch's optimizers, schedules and label smoothing.

Reference implementations written from the papers' formulas in PyTorch fp32
(python3-torch; run with /usr/bin/python3):
  SGD/Nesterov  PyTorch's formulation: d = g + wd*w; v = m*v + d;
                w -= lr*(d + m*v) (Nesterov) or lr*v
  LARS          You, Gitman & Ginsburg 2017 (MLPerf reference form):
                trust = eta*|w| / (|g| + wd*|w| + eps), 1 if |w| or |g| is 0;
                v = m*v + lr*trust*(g + wd*w); w -= v
  LAMB          You et al. 2019: Adam moments with bias correction,
                u = m_hat/(sqrt(v_hat)+eps) + wd*w; trust = phi(|w|)/|u|
                (1 if |w| or |u| is 0); w -= lr*trust*u
Excluded parameters (rank <= 1 here) take trust 1, their own weight decay
and lr multiplier. Writes optim_golden.json next to this script; the C++
test (tests/optim/optim_golden_test.cpp) replays every case.

Usage: /usr/bin/python3 tests/optim/golden/generate.py
"""
import json
import math
import os

import torch

torch.manual_seed(20261129)
F = torch.float32


def group(p, h, o):
    if p["excluded"]:
        return h["lr"] * o["excluded_lr_scale"], o["excluded_weight_decay"] * h["wd_scale"], False
    return h["lr"], o["weight_decay"] * h["wd_scale"], True


def sgd(params, grads, hypers, o):
    w = [p["w"].clone() for p in params]
    v = [torch.zeros_like(x) for x in w]
    for step, h in enumerate(hypers):
        m = h["momentum"]
        for i, p in enumerate(params):
            lr, wd, _ = group(p, h, o)
            g = grads[step][i]
            d = g + wd * w[i]
            v[i] = m * v[i] + d
            w[i] = w[i] - lr * ((d + m * v[i]) if o["nesterov"] else v[i])
    return w


def lars(params, grads, hypers, o):
    w = [p["w"].clone() for p in params]
    v = [torch.zeros_like(x) for x in w]
    for step, h in enumerate(hypers):
        m = h["momentum"]
        for i, p in enumerate(params):
            lr, wd, adapt = group(p, h, o)
            g = grads[step][i]
            wn, gn = float(torch.linalg.norm(w[i])), float(torch.linalg.norm(g))
            trust = 1.0
            if adapt and wn > 0 and gn > 0:
                trust = o["lars_eta"] * wn / (gn + wd * wn + o["lars_epsilon"])
            v[i] = m * v[i] + (lr * trust) * (g + wd * w[i])
            w[i] = w[i] - v[i]
    return w


def lamb(params, grads, hypers, o):
    w = [p["w"].clone() for p in params]
    m1 = [torch.zeros_like(x) for x in w]
    m2 = [torch.zeros_like(x) for x in w]
    b1, b2, eps = o["beta1"], o["beta2"], o["epsilon"]
    for step, h in enumerate(hypers):
        t = step + 1
        for i, p in enumerate(params):
            lr, wd, adapt = group(p, h, o)
            g = grads[step][i]
            m1[i] = b1 * m1[i] + (1 - b1) * g
            m2[i] = b2 * m2[i] + (1 - b2) * g * g
            u = (m1[i] / (1 - b1 ** t)) / (torch.sqrt(m2[i] / (1 - b2 ** t)) + eps) + wd * w[i]
            wn, un = float(torch.linalg.norm(w[i])), float(torch.linalg.norm(u))
            trust = 1.0
            if adapt and wn > 0 and un > 0:
                hi = o["phi_max"] if o["phi_max"] > 0 else math.inf
                trust = min(max(wn, o["phi_min"]), hi) / un
            w[i] = w[i] - (lr * trust) * u
    return w


def make_params(zero_weight=False, zero_grad_step=None):
    shapes = [("conv.weight", (4, 3, 2, 2)), ("bn.weight", (4,)), ("bn.bias", (4,)),
              ("fc.weight", (5, 4)), ("fc.bias", (5,)), ("zero.weight", (3, 3))]
    params = []
    for name, shape in shapes:
        w = torch.randn(shape, dtype=F)
        if name == "bn.weight":
            w = 1 + 0.1 * w
        if name == "zero.weight" and zero_weight:
            w = torch.zeros(shape, dtype=F)  # |w| = 0: trust must be 1
        params.append({"name": name, "shape": list(shape), "excluded": len(shape) <= 1, "w": w})
    steps = 3
    grads = []
    for s in range(steps):
        gs = []
        for p in params:
            g = 0.05 * torch.randn(p["shape"], dtype=F)
            if zero_grad_step == s and p["name"] == "fc.weight":
                g = torch.zeros_like(g)  # |g| = 0: trust must be 1
            gs.append(g)
        grads.append(gs)
    return params, grads


def flat(t):
    return [float(x) for x in t.flatten().tolist()]


def options(**kw):
    o = {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-3, "excluded_lr_scale": 0.1,
         "excluded_weight_decay": 2e-4, "lars_eta": 0.02, "lars_epsilon": 1e-9,
         "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "phi_min": 0.0, "phi_max": 0.0}
    o.update(kw)
    return o


HYPERS = [{"lr": 0.5, "momentum": 0.9, "wd_scale": 1.0},
          {"lr": 0.3, "momentum": 0.85, "wd_scale": 0.6},
          {"lr": 0.1, "momentum": 0.95, "wd_scale": 0.2}]

cases = []
for name, fn, opts, kwargs in [
        ("sgd_nesterov", sgd, options(), {}),
        ("sgd_plain", sgd, options(nesterov=False, excluded_lr_scale=1.0), {}),
        ("lars", lars, options(), {}),
        ("lars_zero_weight_and_grad", lars, options(), {"zero_weight": True, "zero_grad_step": 1}),
        ("lars_excluded_full_lr", lars, options(excluded_lr_scale=1.0, excluded_weight_decay=0.0), {}),
        ("lamb", lamb, options(), {}),
        ("lamb_phi_clip", lamb, options(phi_min=0.5, phi_max=1.5), {}),
        ("lamb_zero_weight", lamb, options(), {"zero_weight": True})]:
    params, grads = make_params(**kwargs)
    result = fn(params, grads, HYPERS, opts)
    cases.append({
        "name": name,
        "optimizer": name.split("_")[0],
        "options": opts,
        "hypers": HYPERS,
        "params": [{"name": p["name"], "shape": p["shape"], "excluded": p["excluded"],
                    "w0": flat(p["w"]), "grads": [flat(grads[s][i]) for s in range(len(HYPERS))],
                    "expected": flat(result[i])} for i, p in enumerate(params)],
    })


# Schedules, evaluated in double like the C++ (fp64 formulas).
def lr_at(e, o):
    if e < o["warmup_epochs"]:
        f = e / o["warmup_epochs"]
        return o["base_lr"] * (o["warmup_start_factor"] + (1 - o["warmup_start_factor"]) * f)
    span = max(o["total_epochs"] - o["warmup_epochs"], 1e-12)
    t = min(max((e - o["warmup_epochs"]) / span, 0.0), 1.0)
    if o["decay"] == "cosine":
        return o["end_lr"] + (o["base_lr"] - o["end_lr"]) * 0.5 * (1 + math.cos(math.pi * t))
    if o["decay"] == "poly":
        return o["end_lr"] + (o["base_lr"] - o["end_lr"]) * (1 - t) ** o["poly_power"]
    if o["decay"] == "step":
        lr = o["base_lr"]
        for s in o["step_epochs"]:
            if e >= s:
                lr *= o["step_gamma"]
        return lr
    return o["base_lr"]


positions = [0.0, 0.1, 0.5, 1.0, 1.7, 2.0, 2.5, 5.0, 7.3, 9.99, 10.0]
lr_cases = []
for decay in ["cosine", "poly", "step", "constant"]:
    o = {"base_lr": 3.2, "warmup_epochs": 2.0, "warmup_start_factor": 0.05, "decay": decay,
         "end_lr": 0.01, "poly_power": 2.0, "step_epochs": [5, 8], "step_gamma": 0.1,
         "total_epochs": 10.0}
    lr_cases.append({"options": o, "epochs": positions, "expected": [lr_at(e, o) for e in positions]})
o = {"base_lr": 0.4, "warmup_epochs": 0.0, "warmup_start_factor": 0.0, "decay": "cosine",
     "end_lr": 0.0, "poly_power": 2.0, "step_epochs": [], "step_gamma": 0.1, "total_epochs": 10.0}
lr_cases.append({"options": o, "epochs": positions, "expected": [lr_at(e, o) for e in positions]})


def piecewise(e, xs, ys, constant):
    if not xs:
        return constant
    if e <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if e < xs[i]:
            return ys[i - 1] + (e - xs[i - 1]) / (xs[i] - xs[i - 1]) * (ys[i] - ys[i - 1])
    return ys[-1]


mom = {"epochs": [0.0, 2.0, 8.0], "values": [0.85, 0.95, 0.9], "constant": 0.9}
momentum_case = {**mom, "positions": positions,
                 "expected": [piecewise(e, mom["epochs"], mom["values"], 0.9) for e in positions]}

batch_cases = []
for rule in ["linear", "sqrt", "none"]:
    epochs, factors = [3, 6], [2, 4]
    out = []
    for e in range(1, 9):
        f = 1
        for ep, fa in zip(epochs, factors):
            if e >= ep:
                f = fa
        mult = {"linear": f, "sqrt": math.sqrt(f), "none": 1.0}[rule]
        out.append({"epoch": e, "factor": f, "lr_multiplier": mult})
    batch_cases.append({"epochs": epochs, "factors": factors, "rule": rule, "expected": out})

scaling = [{"lr_per_256": 0.1, "batch": b, "expected": 0.1 * b / 256} for b in [128, 4096, 8192, 81920]]

# Label smoothing (Szegedy et al. 2016): targets (1-a)*onehot + a/K, mean
# cross entropy over the batch.
logits = torch.randn(6, 10, dtype=F) * 3
labels = torch.randint(0, 10, (6,))
smoothing = []
for a in [0.0, 0.1, 0.3]:
    target = (1 - a) * torch.nn.functional.one_hot(labels, 10).to(F) + a / 10
    loss = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    smoothing.append({"alpha": a, "expected": float(loss)})

out = {"generator": "tests/optim/golden/generate.py", "torch": torch.__version__,
       "optimizers": cases, "lr_schedules": lr_cases, "momentum_schedule": momentum_case,
       "batch_schedules": batch_cases, "linear_scaling": scaling,
       "label_smoothing": {"logits": flat(logits), "labels": labels.tolist(), "classes": 10,
                           "cases": smoothing}}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
print(f"wrote {path}: {len(cases)} optimizer cases, {len(lr_cases)} lr schedules")
