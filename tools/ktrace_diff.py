#!/usr/bin/python3
"""ktrace_diff.py: the device time of one steady training step per kernel,
from two libiabn_ktrace.so reports (tools/cuda_ktrace.c) of the same
benchmark run with SHORT and LONG timed steps: (long - short) / (LONG - SHORT)
per kernel name, so that warm-up, algorithm trials and set-up cancel.

    ktrace_diff.py A1 A11 10 [--label iabn] [--top 40] [--vs B1 B11 10 --vs-label pytorch]

Prints the total, a table by kind of work (convolution passes, batch norm,
elementwise, reductions, copies; a kernel's name decides), and the top
kernels (names demangled by c++filt where it is installed).  With --vs, the
same for a second pair, and the kinds side by side."""
import argparse
import re
import shutil
import subprocess
import sys


def read(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            us, count, name = line.rstrip("\n").split("\t", 2)
            rows[name] = (float(us), int(count))
    return rows


def per_step(short, long_, steps):
    a, b = read(short), read(long_)
    out = {}
    for name, (us, cnt) in b.items():
        us0, cnt0 = a.get(name, (0.0, 0))
        d = (us - us0) / steps
        if d > 0.05 or (cnt - cnt0) > 0:
            out[name] = (d, (cnt - cnt0) / steps)
    return out


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    lines = res.stdout.split("\n")
    return {n: (lines[i] if i < len(lines) and lines[i] else n) for i, n in enumerate(names)}


# (kind, pattern over the demangled name, lower case); the first match wins
KINDS = [
    ("conv wgrad", r"wgrad|bwd_filter|backward_filter|convolve_.*filter"),
    ("conv dgrad", r"dgrad|bwd_data|backward_data"),
    ("conv fprop", r"fprop|conv2d_grouped_direct|implicit_convolve|winograd|fft|conv|xmma_gemm|gemm|sgemm|cutlass"),
    ("batch norm", r"bn_|batch_norm|batchnorm|red_kernel|ew_kernel|running_kernel|param_grads"),
    ("copies", r"memcpy|memset|nchwtonhwc|nhwctonchw|transpose|scalepackedtensor"),
    ("optimizer", r"sgd|multi_tensor|sumsq"),
    ("elementwise", r"elementwise|act_kernel|add|relu|mul|sign|abs|fill|axpy"),
]


def kind(name):
    low = name.lower()
    for k, pat in KINDS:
        if re.search(pat, low):
            return k
    return "other"


def summary(label, rows, top):
    names = demangle(list(rows))
    total = sum(d for d, _ in rows.values())
    kinds = {}
    for n, (d, _) in rows.items():
        k = kind(names[n])
        kinds[k] = kinds.get(k, 0.0) + d
    print("## %s: %.2f ms of device time per step" % (label, total / 1e3))
    print()
    print("| kernel | ms per step | launches per step |")
    print("|---|---|---|")
    for n, (d, c) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:top]:
        short = names[n].replace("|", "/")
        short = short if len(short) <= 140 else short[:137] + "..."
        print("| `%s` | %.2f | %.0f |" % (short, d / 1e3, c))
    print()
    return kinds, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("short")
    ap.add_argument("long")
    ap.add_argument("steps", type=int)
    ap.add_argument("--label", default="A")
    ap.add_argument("--vs", nargs=3, metavar=("SHORT", "LONG", "STEPS"))
    ap.add_argument("--vs-label", default="B")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    if a.steps <= 0:
        sys.exit("ktrace_diff.py: STEPS must be positive")
    sides = [(a.label, per_step(a.short, a.long, a.steps))]
    if a.vs:
        sides.append((a.vs_label, per_step(a.vs[0], a.vs[1], int(a.vs[2]))))
    kinds = [summary(lbl, rows, a.top) for lbl, rows in sides]
    print("| kind | " + " | ".join("%s ms" % lbl for lbl, _ in sides) + " |")
    print("|---|" + "---|" * len(sides))
    order = [k for k, _ in KINDS] + ["other"]
    for k in order:
        print("| %s | " % k + " | ".join("%.2f" % (kd.get(k, 0.0) / 1e3) for kd, _ in kinds) + " |")
    print("| total | " + " | ".join("%.2f" % (t / 1e3) for _, t in kinds) + " |")


if __name__ == "__main__":
    main()
