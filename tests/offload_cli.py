#!/usr/bin/env python3
"""offload_cli.py: the user surface of offloading and the strategy, through
the iabn program: `iabn mem --offload / --strategy auto / --largest-batch`
(JSON fields, SVG), `iabn bench step --offload / --strategy auto`, a step
over its budget refused with the largest batch that fits, bfloat16 copies
(`--offload-bf16` in mem, bench step and train), auto falling back to the
paper's policy where its own plan misses, unknown strategy names
rejected with the valid ones."""
import json
import os
import subprocess
import sys
import tempfile

iabn = sys.argv[1]
env = dict(os.environ, OMP_NUM_THREADS="2")
fails = 0


def run(*args):
    p = subprocess.run([iabn, *args], capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAILED:", what)


base = ["resnext_tiny", "--batch", "4", "--size", "32x32", "--bn", "standard"]
f32_host = None  # the offload column's host pool with float32 copies
rc, out, err = run("mem", *base, "--offload", "--json")
check(rc == 0, f"mem --offload: {err}")
if rc == 0:
    cols = {c["strategy"]: c for c in json.loads(out)}
    check(set(cols) == {"keep", "offload"}, f"columns {list(cols)}")
    k, o = cols["keep"], cols["offload"]
    check(o["host_bytes"] > 0 and o["offloaded_tensors"] > 0, "offload column offloads nothing")
    f32_host = o["host_bytes"]
    check(o["arena_bytes"] < k["arena_bytes"], "offload does not shrink the arena")
    check(o["device_total_bytes"] < k["device_total_bytes"], "device total not lower")
    budget = str((k["device_total_bytes"] + o["device_total_bytes"]) // 2)
    rc, out, err = run("mem", *base, "--strategy", "auto", "--budget", budget, "--json")
    check(rc == 0, f"mem --strategy auto: {err}")
    if rc == 0:
        a = json.loads(out)[0]
        check(a["strategy"] == "auto" and a["fits"], f"auto does not fit {budget}")
        check(a["device_total_bytes"] <= int(budget), "auto over its budget")
        check(a["max_batch"] >= 4, f"max_batch {a['max_batch']}")
    rc, out, err = run("mem", *base, "--largest-batch", "--budget", budget)
    check(rc == 0 and "standard+auto" in out and "standard+offload" in out,
          f"--largest-batch: {out} {err}")
    with tempfile.TemporaryDirectory() as d:
        svg = os.path.join(d, "m.svg")
        rc, out, err = run("mem", *base, "--offload", "--plot", svg)
        check(rc == 0 and "host pool" in open(svg).read(), "the SVG shows no host pool")
# auto at exactly the memory the paper's offload policy needs: on VGG19 the
# greedy's packed plan lands 1% above its live-bytes goal there, and auto
# takes the paper's policy instead of refusing (it did, before)
vgg = ["vgg19", "--batch", "4", "--size", "128x128", "--bn", "standard"]
rc, out, err = run("mem", *vgg, "--offload", "--json")
check(rc == 0, f"vgg19 mem --offload: {err}")
if rc == 0:
    o = [c for c in json.loads(out) if c["strategy"] == "offload"][0]
    rc, out, err = run("mem", *vgg, "--strategy", "auto", "--budget",
                       str(o["device_total_bytes"]), "--json")
    check(rc == 0, f"vgg19 auto at the offload memory: {err}")
    if rc == 0:
        a = json.loads(out)[0]
        check(a["fits"] and a["device_total_bytes"] <= o["device_total_bytes"],
              f"vgg19 auto at the offload memory does not fit: {a}")
rc, out, err = run("bench", "step", "resnext_tiny", "--batch", "2", "--size", "32", "--repeat",
                   "1", "--offload", "--copy-bw", "4", "--json")
check(rc == 0, f"bench step --offload: {err}")
if rc == 0:
    j = json.loads(out)
    check(j["strategy"] == "offload" and j["host_bytes"] > 0 and j["device_peak_bytes"] > 0,
          f"bench step --offload json {j}")
rc, out, err = run("bench", "step", "resnext_tiny", "--batch", "8", "--size", "32", "--repeat",
                   "1", "--strategy", "auto", "--budget", "12MiB")
check(rc == 1 and "largest batch that fits" in err, f"over budget: rc {rc} {err}")
# bfloat16 copies: a smaller host pool and copy time in the report; the
# bench runs them through the simulated device; train records them in its config
rc, out, err = run("mem", *base, "--offload", "--offload-bf16", "--json")
check(rc == 0, f"mem --offload-bf16: {err}")
if rc == 0 and f32_host:
    b = [c for c in json.loads(out) if c["strategy"] == "offload"][0]
    check(0 < b["host_bytes"] < f32_host, f"bf16 host pool {b['host_bytes']} vs {f32_host}")
rc, out, err = run("bench", "step", "resnext_tiny", "--batch", "2", "--size", "32", "--repeat",
                   "1", "--offload", "--offload-bf16", "--copy-bw", "4", "--json")
check(rc == 0 and json.loads(out)["host_bytes"] > 0, f"bench step --offload-bf16: {err}")
with tempfile.TemporaryDirectory() as d:
    rc, out, err = run("data", "synth", "--dataset", "imagefolder", "--classes", "3", "--size", "32",
                       "-o", os.path.join(d, "data"))
    rc, out, err = run("train", "--model", "resnext_tiny", "--bn", "inplace_abn_ii", "--act",
                       "leaky_relu", "-b", "4", "--crop", "32", "--max-steps", "2", "-j", "1",
                       "--strategy", "offload", "--offload-bf16", "--output-dir",
                       os.path.join(d, "run"), "-q", os.path.join(d, "data"))
    check(rc == 0, f"train --offload-bf16: {err}")
    if rc == 0:
        cfg = json.load(open(os.path.join(d, "run", "config.json")))
        check(cfg["network"].get("offload_bf16") is True and cfg["network"]["strategy"] == "offload",
              f"config.json network: {cfg['network']}")
rc, out, err = run("mem", *base, "--strategy", "bogus")
check(rc == 2 and "keep, offload, auto, recompute" in err, f"bad strategy: {rc} {err}")
print("offload_cli:", "ok" if not fails else f"{fails} failed")
sys.exit(1 if fails else 0)
