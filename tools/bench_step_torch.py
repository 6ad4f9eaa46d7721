#!/usr/bin/python3
"""bench_step_torch.py: the PyTorch side of `iabn bench step`: the median
time of one training step (forward, backward, SGD with Nesterov momentum) of
the same network built in PyTorch (tests/fixtures/parity.py's modules: the
reference architecture, BN as F.batch_norm + activation, i.e. standard BN).

    /usr/bin/python3 tools/bench_step_torch.py resnext101 --batch 4 --size 224 --threads 2
    python3 tools/bench_step_torch.py resnext101 --device cuda --batch 32 --size 224 --json

Prints one line, or JSON with --json.  Run it beside `iabn bench step` on an
otherwise idle machine (tools/bench_step.sh does both; tools/gpu_check.sh on
a GPU).  With --device cuda each timed step starts and ends with
torch.cuda.synchronize(), TF32 is off in cuBLAS and cuDNN unless --tf32 (as
iabn's IABN_TF32), and peak_bytes is torch.cuda.max_memory_allocated() over
the timed steps (weights, gradients, momentum and activations; counters reset
once the model, optimizer and batch are on the device).  Works with Debian's
torch 1.13 (CPU) and PyTorch 2.x (CUDA).  Exits 77 when torch or the device
is missing."""
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
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in cuBLAS and cuDNN (default: off)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark = True (autotuned algorithms)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timing, two more steps under torch.profiler: the N kernels and "
                         "the N operators that took the most device time, per step, on stderr")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)  # Debian's torch defaults to 1 thread here
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            print("SKIP: torch %s sees no CUDA device" % torch.__version__, file=sys.stderr)
            sys.exit(77)
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = parity.build(a.model, a.classes).float().train().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, nesterov=True, weight_decay=1e-4)
    x = torch.randn(a.batch, 3, a.size, a.size).to(dev)
    seg = "deeplab" in a.model
    y = torch.randint(a.classes, (a.batch, a.size, a.size) if seg else (a.batch,)).to(dev)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(a.repeat + 1):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, ignore_index=255)
        loss.backward()
        opt.step()
        sync()
        if i:
            times.append(time.perf_counter() - t0)
    ms = 1e3 * statistics.median(times)
    if a.profile > 0:
        profile(a, model, opt, x, y, sync)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    name = torch.cuda.get_device_name() if cuda else "cpu"
    if a.json:
        print(json.dumps({"model": a.model, "framework": "pytorch " + torch.__version__, "device": a.device,
                          "device_name": name, "batch": a.batch, "size": a.size, "threads": a.threads,
                          "tf32": bool(cuda and a.tf32), "cudnn_benchmark": bool(cuda and a.cudnn_benchmark),
                          "step_ms": ms, "step_min_ms": 1e3 * min(times), "peak_bytes": peak}))
    elif cuda:
        print("pytorch %s %s on %s, batch %d %dx%d, tf32 %s: step %.1f ms, median of %d; "
              "peak %.1f MiB (max_memory_allocated)"
              % (torch.__version__, a.model, name, a.batch, a.size, a.size, "on" if a.tf32 else "off", ms,
                 a.repeat, peak / 1048576.0))
    else:
        print("pytorch %s %s batch %d %dx%d, %d threads: step %.1f ms, median of %d"
              % (torch.__version__, a.model, a.batch, a.size, a.size, a.threads, ms, a.repeat))


def profile(a, model, opt, x, y, sync):
    """Two steps under torch.profiler; device time per step by kernel and by
    operator (self time), so that it can be set beside `iabn bench step --ops
    --layers`.  Kernels keep cuDNN's own names (wgrad / dgrad / fprop)."""
    from torch.profiler import profile as tprofile, ProfilerActivity
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
    steps = 2
    sync()
    with tprofile(activities=acts) as prof:
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y, ignore_index=255)
            loss.backward()
            opt.step()
        sync()
    kern, ops = {}, {}
    for ev in prof.events() if a.device == "cuda" else ():
        if str(getattr(ev, "device_type", "")).endswith("CUDA"):  # a kernel or a copy
            k = kern.setdefault(ev.name, [0.0, 0])
            k[0] += ev.time_range.elapsed_us()
            k[1] += 1
    for ev in prof.key_averages():
        self_us = getattr(ev, "self_device_time_total", None)
        if self_us is None:
            self_us = getattr(ev, "self_cuda_time_total", 0) if a.device == "cuda" else ev.self_cpu_time_total
        ops[ev.key] = [self_us, ev.count]
    tables = (("kernels", kern),) if a.device == "cuda" else ()
    for title, table in tables + (("operators (self %s time)" % ("device" if kern else "CPU"), ops),):
        rows = sorted(table.items(), key=lambda kv: -kv[1][0])[:a.profile]
        total = sum(v[0] for v in table.values())
        print("%s: %.1f ms per step in all" % (title, total / 1e3 / steps), file=sys.stderr)
        for name, (us, cnt) in rows:
            print("  %9.2f ms  x%-5d %s" % (us / 1e3 / steps, cnt // steps, name[:150]), file=sys.stderr)


if __name__ == "__main__":
    main()
