#!/usr/bin/python3
"""torchvision's reference input pipeline on a folder of JPEGs, for
`bench/pipeline_bench.sh`: ImageFolder + DataLoader with RandomResizedCrop
(224), RandomHorizontalFlip, ToTensor and Normalize (the ImageNet training
transforms), `--workers` worker processes, batch `--batch`, shuffled, for
`--epochs` epochs. Prints one JSON line per epoch: images, seconds, img/s,
and CPU seconds of the main process plus all workers (getrusage), so the
img/s one fully busy worker sustains is images / CPU seconds.
"""
import argparse
import json
import resource
import time

import torch
import torchvision
import torchvision.transforms as T


def cpu_seconds():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    data = torchvision.datasets.ImageFolder(a.root, transform=tf)
    for epoch in range(1, a.epochs + 1):
        # Workers are started inside the timed region and joined before the
        # CPU reading (non-persistent), so their CPU time is counted.
        c0, t0 = cpu_seconds(), time.perf_counter()
        loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True,
                                             num_workers=a.workers)
        n = 0
        for images, labels in loader:
            n += images.shape[0]
        del loader
        t1 = time.perf_counter()
        c1 = cpu_seconds()
        print(json.dumps({"impl": "torchvision", "epoch": epoch, "workers": a.workers,
                          "images": n, "seconds": t1 - t0, "img_s": n / (t1 - t0),
                          "cpu_s": c1 - c0, "img_per_cpu_s": n / (c1 - c0)}), flush=True)


if __name__ == "__main__":
    main()
