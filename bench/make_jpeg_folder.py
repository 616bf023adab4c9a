#!/usr/bin/python3
"""Writes an ImageNet-style folder of photo-like JPEGs for the input-pipeline
benchmarks: ROOT/class_XX/img_NNNN.jpg, `--images` in all over `--classes`
classes (up to 1,000, ImageNet's count), `--width` x `--height`, quality
`--quality` (defaults: 2,000 images of 500x375 — ImageNet's most common size
— quality 90, 10 classes). `--vary F` scales each image's sides by factors
drawn from [1 - F, 1 + F], as ImageNet's sizes vary. `--val N` writes N more
images under ROOT/val/ and the `--images` under ROOT/train/, the layout
data.path = ROOT trains from. Content: a smooth random colour field (bicubic
from 12x9), random ellipses and rectangles, and pixel noise, so the files are
the size of real photos (~40-90 kB at the defaults), not the few kB of a flat
image.

Deterministic: image i is a function of (--seed, i) alone — the same files
whatever `--jobs` (processes writing in parallel; default: every CPU).

Usage: bench/make_jpeg_folder.py ROOT [--images N] [--classes K] [--val N] ...
"""
import argparse
import multiprocessing
import os

import numpy as np
from PIL import Image, ImageDraw


def image(seed, i, width, height, vary):
    """Image i of the folder made with `seed`: a PIL image."""
    rng = np.random.default_rng([seed, i])
    if vary > 0:
        width = max(8, int(round(width * rng.uniform(1 - vary, 1 + vary))))
        height = max(8, int(round(height * rng.uniform(1 - vary, 1 + vary))))
    field = Image.fromarray(rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)).resize(
        (width, height), Image.BICUBIC)
    draw = ImageDraw.Draw(field)
    for _ in range(6):
        x0, y0 = rng.integers(0, width), rng.integers(0, height)
        x1, y1 = x0 + rng.integers(20, 200), y0 + rng.integers(20, 150)
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=colour)
    pixels = np.asarray(field, dtype=np.int16)
    pixels = pixels + rng.normal(0, 10, pixels.shape).astype(np.int16)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def write_one(job):
    """Writes one file; returns its size in bytes."""
    path, seed, i, a = job
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image(seed, i, a.width, a.height, a.vary).save(path, quality=a.quality)
    return os.path.getsize(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--val", type=int, default=0, help="images under ROOT/val (and the rest under ROOT/train)")
    p.add_argument("--width", type=int, default=500)
    p.add_argument("--height", type=int, default=375)
    p.add_argument("--vary", type=float, default=0.0, help="each side scaled by a factor in [1-F, 1+F]")
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = p.parse_args()
    if not 1 <= a.classes <= 1000:
        p.error("--classes must be 1..1000")
    if not 0 <= a.vary < 1:
        p.error("--vary must be in [0, 1)")
    if a.val > 0 and min(a.images, a.val) < a.classes:
        p.error("with --val, both splits need an image of every class: --images and --val >= --classes")
    digits = max(2, len(str(a.classes - 1)))
    splits = [("train", a.images, 0), ("val", a.val, a.images)] if a.val > 0 else [("", a.images, 0)]
    jobs = []
    for split, count, first in splits:
        for k in range(count):
            i = first + k  # the image's number: its content and name
            path = os.path.join(a.root, split, f"class_{k % a.classes:0{digits}d}", f"img_{i:04d}.jpg")
            jobs.append((path, a.seed, i, a))
    if a.jobs > 1:
        with multiprocessing.Pool(a.jobs) as pool:
            sizes = pool.map(write_one, jobs, chunksize=64)
    else:
        sizes = [write_one(j) for j in jobs]
    print(f"{len(jobs)} images in {a.classes} classes under {a.root}"
          f"{' (train/ and val/)' if a.val > 0 else ''}, {a.width}x{a.height}"
          f"{f' +-{a.vary:.0%}' if a.vary > 0 else ''} q{a.quality}, "
          f"mean {sum(sizes) / max(len(sizes), 1) / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
