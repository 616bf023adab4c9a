#!/usr/bin/python3
"""torchvision's reference input pipeline on a folder of JPEGs, for
`bench/pipeline_bench.sh`: ImageFolder + DataLoader with RandomResizedCrop
(224), RandomHorizontalFlip, ToTensor and Normalize (the ImageNet training
transforms), `--workers` worker processes, batch `--batch`, shuffled, for
`--epochs` epochs. Prints one JSON line per epoch: images, seconds, img/s,
and CPU seconds of the main process plus all workers (getrusage), so the
img/s one fully busy worker sustains is images / CPU seconds.

`--gpu-decode`: torchvision's GPU path instead (scripts/device-check's
`input` section) — the DataLoader's `--workers` processes only read each
file's bytes (torchvision.io.read_file), the main process decodes each batch
with one batched call, torchvision.io.decode_jpeg(list, device="cuda"), then
takes the same transforms on the GPU image by image (RandomResizedCrop's
parameters, resized_crop, flip) and normalises the stacked batch; each epoch
is timed to the end of its GPU work (torch.cuda.synchronize).
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


class FileBytes(torch.utils.data.Dataset):
    """An ImageFolder's files as uint8 tensors of their bytes, with labels."""

    def __init__(self, root):
        self.samples = torchvision.datasets.ImageFolder(root).samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        return torchvision.io.read_file(path), label


def as_lists(batch):
    """A batch as (file bytes, labels) lists: decode_jpeg takes a list."""
    return [x for x, _ in batch], [y for _, y in batch]


def gpu_epoch(data, a, mean, std):
    """One epoch of torchvision's GPU decode path; returns the images seen."""
    import torchvision.transforms.functional as F
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True,
                                         num_workers=a.workers, collate_fn=as_lists)
    crop = T.RandomResizedCrop(a.size)
    n = 0
    for files, labels in loader:
        images = torchvision.io.decode_jpeg(files, device="cuda")  # one batched call
        out = []
        for img in images:
            top, left, h, w = crop.get_params(img, crop.scale, crop.ratio)
            img = F.resized_crop(img, top, left, h, w, [a.size, a.size])
            if torch.rand(1).item() < 0.5:
                img = F.hflip(img)
            out.append(img)
        batch = torch.stack(out).float().div_(255).sub_(mean).div_(std)
        torch.tensor(labels).to("cuda", non_blocking=True)
        n += batch.shape[0]
    torch.cuda.synchronize()
    return n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--gpu-decode", action="store_true",
                   help="torchvision's GPU decode path (decode_jpeg on cuda) instead of PIL")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.gpu_decode:
        data = FileBytes(a.root)
        mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1)
        for epoch in range(1, a.epochs + 1):
            c0, t0 = cpu_seconds(), time.perf_counter()
            n = gpu_epoch(data, a, mean, std)
            t1 = time.perf_counter()
            c1 = cpu_seconds()
            print(json.dumps({"impl": "torchvision-gpu", "epoch": epoch, "workers": a.workers,
                              "images": n, "seconds": t1 - t0, "img_s": n / (t1 - t0),
                              "cpu_s": c1 - c0, "img_per_cpu_s": n / (c1 - c0),
                              "torchvision": torchvision.__version__}), flush=True)
        return
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
