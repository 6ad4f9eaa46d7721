#!/usr/bin/env python3
"""offload_cli.py: the user surface of offloading and the strategy, through
the iabn program: `iabn mem --offload / --strategy auto / --largest-batch`
(JSON fields, SVG), `iabn bench step --offload / --strategy auto`, a step
over its budget refused with the largest batch that fits, unknown strategy
names rejected with the valid ones."""
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
rc, out, err = run("mem", *base, "--offload", "--json")
check(rc == 0, f"mem --offload: {err}")
if rc == 0:
    cols = {c["strategy"]: c for c in json.loads(out)}
    check(set(cols) == {"keep", "offload"}, f"columns {list(cols)}")
    k, o = cols["keep"], cols["offload"]
    check(o["host_bytes"] > 0 and o["offloaded_tensors"] > 0, "offload column offloads nothing")
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
rc, out, err = run("mem", *base, "--strategy", "bogus")
check(rc == 2 and "keep, offload, auto, recompute" in err, f"bad strategy: {rc} {err}")
print("offload_cli:", "ok" if not fails else f"{fails} failed")
sys.exit(1 if fails else 0)
