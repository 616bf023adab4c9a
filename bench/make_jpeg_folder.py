#!/usr/bin/python3
"""Writes an ImageNet-style folder of photo-like JPEGs for the input-pipeline
benchmark: ROOT/class_XX/img_NNNN.jpg, `--images` in all over `--classes`
classes, `--width` x `--height`, quality `--quality` (defaults: 2,000 images
of 500x375, quality 90, 10 classes). Deterministic (seeded). Content: a
smooth random colour field (bicubic from 12x9), random ellipses and
rectangles, and pixel noise, so the files are the size of real photos
(~40-90 kB), not the few kB of a flat image.

Usage: bench/make_jpeg_folder.py ROOT [--images N] [--classes K] ...
"""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--width", type=int, default=500)
    p.add_argument("--height", type=int, default=375)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    total = 0
    for i in range(a.images):
        c = i % a.classes
        d = os.path.join(a.root, f"class_{c:02d}")
        os.makedirs(d, exist_ok=True)
        field = Image.fromarray(rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)).resize(
            (a.width, a.height), Image.BICUBIC)
        draw = ImageDraw.Draw(field)
        for _ in range(6):
            x0, y0 = rng.integers(0, a.width), rng.integers(0, a.height)
            x1, y1 = x0 + rng.integers(20, 200), y0 + rng.integers(20, 150)
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=colour)
        pixels = np.asarray(field, dtype=np.int16)
        pixels = pixels + rng.normal(0, 10, pixels.shape).astype(np.int16)
        img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        path = os.path.join(d, f"img_{i:04d}.jpg")
        img.save(path, quality=a.quality)
        total += os.path.getsize(path)
    print(f"{a.images} images in {a.classes} classes under {a.root}, "
          f"{a.width}x{a.height} q{a.quality}, mean {total / a.images / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
