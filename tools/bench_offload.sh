#!/usr/bin/env bash
# bench_offload.sh: offloading saved activations (issue 15) against keeping
# everything and against checkpointing, on the CPU's simulated device (its
# copy thread at PCIe 3 x16 and at the measured host memcpy) and, from the
# cost model, estimated for a GPU.  Writes one JSON per run and a table to
# OUT (default bench/results/offload/).
#   tools/bench_offload.sh [OUT] [REPEAT]
#   MODELS="vgg19:4:128:32:128" tools/bench_offload.sh
# Each spec is model:batch:size:full_batch:full_size: the steps are timed at
# batch x size (a CPU is slow), the GPU estimate and the planned memory are
# at full_batch x full_size (the paper's setting).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/offload}; repeat=${2:-1}
iabn=${IABN:-build/tools/iabn}
threads=${THREADS:-2}
export OMP_NUM_THREADS=$threads
models=${MODELS:-"vgg19:4:128:32:128 resnet50:8:128:32:128 mobilenet_v1:8:128:32:128 resnext101:2:224:32:224 deeplabv3_wider_resnet38_a2:2:128:4:512"}
mkdir -p "$out"
step() { # name model batch size extra...
    local name=$1 m=$2 b=$3 s=$4; shift 4
    $iabn bench step "$m" --batch "$b" --size "$s" --threads "$threads" --repeat "$repeat" \
        --sim --json "$@" > "$out/$m-$name.json"
}
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
for spec in $models; do
    IFS=: read -r m b s fb fs <<< "$spec"
    # the GPU estimate: the paper's setting is a Titan X over PCIe at 6.5 GB/s
    $iabn mem "$m" --batch "$fb" --size "${fs}x${fs}" --bn standard --offload --cost gpu \
        --copy-bw 6.5 --json > "$out/$m-estimate-gpu.json"
    step keep "$m" "$b" "$s" --bn standard
    step checkpoint "$m" "$b" "$s" --bn checkpoint
    step offload-pcie3 "$m" "$b" "$s" --bn standard --offload --copy-bw pcie3
    step offload-memcpy "$m" "$b" "$s" --bn standard --offload --copy-bw memcpy
    peak=$(field "$out/$m-offload-pcie3.json" device_peak_bytes)
    peak=${peak%.*}
    # checkpointing chosen per tensor, and the automatic choice, at the
    # device memory offloading needs
    step recompute-at-offload "$m" "$b" "$s" --bn standard --strategy recompute --budget "$peak" \
        || echo "{\"model\": \"$m\", \"error\": \"recompute cannot fit $peak bytes\"}" > "$out/$m-recompute-at-offload.json"
    step auto-at-offload "$m" "$b" "$s" --bn standard --strategy auto --budget "$peak" --copy-bw pcie3
done
python3 - "$out" $models <<'PY'
import json, os, sys
out, specs = sys.argv[1], sys.argv[2:]
runs = ["keep", "checkpoint", "offload-pcie3", "offload-memcpy", "recompute-at-offload", "auto-at-offload"]
lines = ["| model | batch | size | run | device peak MiB | vs keep | step ms | vs keep | host pool MiB | copy wait ms |",
         "|---|---|---|---|---|---|---|---|---|---|"]
est = ["| model | batch | size | GPU estimate: device MiB keep | offload | vs keep | est. time overhead |",
       "|---|---|---|---|---|---|---|"]
for spec in specs:
    m, b, s, fb, fs = spec.split(":")
    def load(n):
        p = os.path.join(out, f"{m}-{n}.json")
        try:
            return json.load(open(p))
        except Exception:
            return None
    k = load("keep")
    for r in runs:
        j = load(r)
        if not j or "step_ms" not in j:
            lines.append(f"| {m} | {b} | {s} | {r} | (does not fit) | | | | | |")
            continue
        dp = j.get("device_peak_bytes", j["held_bytes"]) / 2**20
        kp = k.get("device_peak_bytes", k["held_bytes"]) / 2**20 if k else dp
        lines.append(f"| {m} | {b} | {s} | {r} | {dp:.0f} | {dp / kp - 1:+.0%} | {j['step_ms']:.0f} | "
                     f"{j['step_ms'] / k['step_ms'] - 1:+.0%} | {j.get('host_bytes', 0) / 2**20:.0f} | "
                     f"{j.get('copy_wait_ms_per_step', 0):.0f} |")
    e = load("estimate-gpu")
    if e:
        kk = [x for x in e if x["strategy"] == "keep"][0]
        oo = [x for x in e if x["strategy"] == "offload"][0]
        est.append(f"| {m} | {fb} | {fs} | {kk['device_total_bytes'] / 2**20:.0f} | "
                   f"{oo['device_total_bytes'] / 2**20:.0f} | "
                   f"{oo['device_total_bytes'] / kk['device_total_bytes'] - 1:+.0%} | "
                   f"{oo['est_overhead']:+.1%} |")
text = "\n".join(lines) + "\n\n" + "\n".join(est) + "\n"
open(os.path.join(out, "table.md"), "w").write(text)
print(text)
PY
