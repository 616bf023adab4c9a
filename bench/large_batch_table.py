#!/usr/bin/python3
"""Markdown tables of a large-batch study from its run directories.

Usage: bench/large_batch_table.py TARGET RUN_DIR...
Prints, per run, the recipe (global batch, optimizer, peak lr, steps per
epoch), the best and final test accuracy, the first epoch at or above
TARGET (a fraction), and then the test accuracy of every epoch.
"""
import csv
import json
import os
import sys


def main():
    target = float(sys.argv[1])
    runs = []
    for d in sys.argv[2:]:
        with open(os.path.join(d, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        with open(os.path.join(d, "summary.json")) as f:
            summary = json.load(f)
        acc = [float(r["test_acc"]) for r in rows if r["test_acc"]]
        first = next((i + 1 for i, a in enumerate(acc) if a >= target), None)
        steps = int(rows[0]["step"]) if rows else 0
        runs.append((os.path.basename(d.rstrip("/")), summary, acc, first, steps))
    print(f"| run | global batch | optimizer | peak lr | steps/epoch | best test acc | final test acc | first epoch >= {100 * target:.0f} % |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s, acc, first, steps in runs:
        optimizer = s.get('optimizer', 'sgd') + (' + K-FAC' if s.get('kfac') else '')
        print(f"| {name} | {s['global_batch_size']} | {optimizer} | {s.get('peak_lr', 0):.4g} | "
              f"{steps} | {100 * max(acc):.2f} % | {100 * acc[-1]:.2f} % | {first if first else 'not reached'} |")
    print()
    epochs = max(len(a) for _, _, a, _, _ in runs)
    print("| epoch | " + " | ".join(n for n, *_ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for e in range(epochs):
        cells = [f"{100 * a[e]:.2f}" if e < len(a) else "" for _, _, a, _, _ in runs]
        print(f"| {e + 1} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
