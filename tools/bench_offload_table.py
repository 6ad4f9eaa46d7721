#!/usr/bin/env python3
"""bench_offload_table.py OUT SPEC...: the table of tools/bench_offload.sh
from the JSON files in OUT (SPEC: model:batch:size:full_batch:full_size).
Runs that are missing are listed as not run."""
import json
import os
import sys

out, specs = sys.argv[1], sys.argv[2:]
runs = ["keep", "checkpoint", "offload-pcie3", "offload-memcpy", "recompute-at-offload",
        "auto-at-offload"]
lines = ["| model | batch | size | run | device peak MiB | vs keep | arena MiB | vs keep | "
         "step ms | vs keep | host pool MiB | copy wait ms/step |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
est = ["| model | batch | size | device MiB keep | device MiB offload | vs keep | "
       "arena MiB keep | arena MiB offload | vs keep | est. time overhead | "
       "checkpoint BN mode: device MiB / overhead | recompute at offload's memory: device MiB / overhead |",
       "|---|---|---|---|---|---|---|---|---|---|---|---|"]


def load(m, n):
    try:
        with open(os.path.join(out, f"{m}-{n}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ckpt(m, kk):
    c = load(m, "estimate-gpu-ckpt")
    if not c:
        return "not run"
    x = [y for y in c if y["bn_mode"] == "checkpoint"][0]
    return (f"{x['device_total_bytes'] / 2**20:.0f} / "
            f"{x['est_step_seconds'] / kk['est_step_seconds'] - 1:+.1%}")


def recomp(m):
    c = load(m, "estimate-gpu-recompute")
    if not c:
        return "not run"
    x = c[0]
    fits = "" if x["fits"] else " (does not fit)"
    return f"{x['device_total_bytes'] / 2**20:.0f} / {x['est_overhead']:+.1%}{fits}"


for spec in specs:
    m, b, s, fb, fs = spec.split(":")
    k = load(m, "keep")
    for r in runs:
        j = load(m, r)
        if not j or "step_ms" not in j:
            why = j.get("error", "not run") if j else "not run"
            lines.append(f"| {m} | {b} | {s} | {r} | ({why}) | | | | | | | |")
            continue
        dp = j.get("device_peak_bytes", j["held_bytes"]) / 2**20
        ar = j["arena_bytes"] / 2**20
        if k and "step_ms" in k:
            kp = k.get("device_peak_bytes", k["held_bytes"]) / 2**20
            ka = k["arena_bytes"] / 2**20
            vs = (f"{dp / kp - 1:+.0%}", f"{ar / ka - 1:+.0%}", f"{j['step_ms'] / k['step_ms'] - 1:+.0%}")
        else:
            vs = ("", "", "")
        lines.append(f"| {m} | {b} | {s} | {r} | {dp:.0f} | {vs[0]} | {ar:.0f} | {vs[1]} | "
                     f"{j['step_ms']:.0f} | {vs[2]} | {j.get('host_bytes', 0) / 2**20:.0f} | "
                     f"{j.get('copy_wait_ms_per_step', 0):.0f} |")
    e = load(m, "estimate-gpu")
    if e:
        kk = [x for x in e if x["strategy"] == "keep"][0]
        oo = [x for x in e if x["strategy"] == "offload"][0]
        est.append(f"| {m} | {fb} | {fs} | {kk['device_total_bytes'] / 2**20:.0f} | "
                   f"{oo['device_total_bytes'] / 2**20:.0f} | "
                   f"{oo['device_total_bytes'] / kk['device_total_bytes'] - 1:+.0%} | "
                   f"{kk['arena_bytes'] / 2**20:.0f} | {oo['arena_bytes'] / 2**20:.0f} | "
                   f"{oo['arena_bytes'] / kk['arena_bytes'] - 1:+.0%} | {oo['est_overhead']:+.1%} | "
                   f"{ckpt(m, kk)} | {recomp(m)} |")
text = ("Measured on the CPU's simulated device (shared 2-core machine: step times are noisy):\n\n" +
        "\n".join(lines) + "\n\nPlanned at the paper's sizes, time estimated by the cost model "
        "(`--cost gpu`: a Titan X-class GPU, copies at 6.5 GB/s as in the paper):\n\n" +
        "\n".join(est) + "\n")
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(text)
print(text)
