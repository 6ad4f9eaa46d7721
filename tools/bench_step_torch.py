#!/usr/bin/python3
"""bench_step_torch.py: the PyTorch side of `iabn bench step`: the median
time of one training step (forward, backward, SGD with Nesterov momentum) of
the same network built in PyTorch (tests/fixtures/parity.py's modules: the
reference architecture, BN as F.batch_norm + activation, i.e. standard BN).

    /usr/bin/python3 tools/bench_step_torch.py resnext101 --batch 4 --size 224 --threads 2

Prints one line, or JSON with --json.  Run it beside `iabn bench step` on an
otherwise idle machine (tools/bench_step.sh does both)."""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))

import parity  # noqa: E402  (exits 77 without torch)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)  # Debian's torch defaults to 1 thread here
    torch.manual_seed(0)
    model = parity.build(a.model, a.classes).float().train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, nesterov=True, weight_decay=1e-4)
    x = torch.randn(a.batch, 3, a.size, a.size)
    seg = "deeplab" in a.model
    y = torch.randint(a.classes, (a.batch, a.size, a.size) if seg else (a.batch,))
    times = []
    for i in range(a.repeat + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, ignore_index=255)
        loss.backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    ms = 1e3 * statistics.median(times)
    if a.json:
        print(json.dumps({"model": a.model, "framework": "pytorch " + torch.__version__, "batch": a.batch,
                          "size": a.size, "threads": a.threads, "step_ms": ms}))
    else:
        print("pytorch %s %s batch %d %dx%d, %d threads: step %.1f ms, median of %d"
              % (torch.__version__, a.model, a.batch, a.size, a.size, a.threads, ms, a.repeat))


if __name__ == "__main__":
    main()
