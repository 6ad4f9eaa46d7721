#!/usr/bin/python3
"""bench_data_torchvision.py: the torchvision side of `iabn data bench`.

Times what a torchvision ImageNet training loader does per image, on one
core: PIL decode + convert("RGB"), RandomResizedCrop(224), RandomHorizontalFlip,
ToTensor, Normalize, and reports images/s and images per CPU-second (the
per-core figure `iabn data bench` also reports).  torch is held to one thread
so the figure is per core.

It also makes the benchmark folder, so both sides read the same files:
    /usr/bin/python3 tools/bench_data_torchvision.py --make DIR [--count 200]
writes DIR/train/<class>/*.JPEG: photo-like JPEGs (smooth light, edges,
multi-scale texture, sensor noise), mostly 500x375 / 375x500 / 500x333,
quality 90, 4:2:0, about the size and entropy of ImageNet files.

    /usr/bin/python3 tools/bench_data_torchvision.py --data DIR [--split train] [--json]
    build/iabn data bench --data DIR --workers 1 --json
Run with Debian's python3 (python3-torchvision 0.14, PIL 9.4).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from PIL import Image


def photo(h, w, rng):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    base = rng.uniform(40, 200, 3)
    # smooth illumination
    for c in range(3):
        img[..., c] = base[c] + 40 * np.sin(x / w * rng.uniform(1, 3) + rng.uniform(0, 6)) \
            * np.cos(y / h * rng.uniform(1, 3) + rng.uniform(0, 6))
    # multi-scale texture (value noise, bilinearly upsampled)
    for cell, amp in [(64, 30), (16, 30), (4, 40), (2, 50)]:
        gh, gw = h // cell + 2, w // cell + 2
        grid = rng.normal(0, 1, (gh, gw, 3)).astype(np.float32)
        up = np.asarray(Image.fromarray(((grid - grid.min()) / (np.ptp(grid) + 1e-6) * 255)
                                        .astype(np.uint8)).resize((gw * cell, gh * cell),
                                                                  Image.BILINEAR),
                        np.float32)[:h, :w]
        img += (up - 128) / 128 * amp
    # objects with hard edges
    for _ in range(rng.integers(3, 8)):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(10, w / 3), rng.uniform(10, h / 3)
        m = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 < 1
        img[m] = img[m] * 0.4 + rng.uniform(0, 255, 3) * 0.6
    img += rng.normal(0, 20, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def make(root, count, seed):
    rng = np.random.default_rng(seed)
    sizes = [(375, 500)] * 6 + [(500, 375)] * 2 + [(333, 500), (400, 500)]
    classes = 10
    total = 0
    for i in range(count):
        d = os.path.join(root, "train", "n%08d" % (i % classes))
        os.makedirs(d, exist_ok=True)
        h, w = sizes[i % len(sizes)]
        p = os.path.join(d, "img_%05d.JPEG" % i)
        Image.fromarray(photo(h, w, rng)).save(p, quality=90)
        total += os.path.getsize(p)
    print("wrote %d JPEGs to %s/train (mean %.1f KB)" % (count, root, total / count / 1024))


def bench(root, split, epochs, seed, as_json):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    d = os.path.join(root, split)
    ds = ImageFolder(d if os.path.isdir(d) else root, transform=T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    n = 0
    check = 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        for i in range(len(ds)):
            x, _ = ds[i]
            check += float(x[0, 0, 0])
            n += 1
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    res = {"command": "bench_data_torchvision", "data": root, "images": n, "seconds": secs,
           "cpu_seconds": cpu, "images_per_s": n / secs, "images_per_cpu_s": n / cpu,
           "torch_threads": torch.get_num_threads(), "torchvision": __import__("torchvision")
           .__version__, "checksum": check}
    if as_json:
        print(json.dumps(res))
    else:
        print("torchvision: %d images in %.3f s: %.1f images/s, %.1f images per CPU-s"
              % (n, secs, n / secs, n / cpu))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make", metavar="DIR", help="write the benchmark folder")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--data", metavar="DIR")
    ap.add_argument("--split", default="train")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.make:
        make(a.make, a.count, a.seed)
    if a.data:
        bench(a.data, a.split, a.epochs, a.seed, a.json)
    if not a.make and not a.data:
        ap.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
