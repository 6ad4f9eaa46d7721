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
    step auto-at-offload "$m" "$b" "$s" --bn standard --strategy auto --budget "$peak" --copy-bw pcie3 \
        || echo "{\"model\": \"$m\", \"error\": \"auto cannot fit $peak bytes\"}" > "$out/$m-auto-at-offload.json"
    # the GPU estimate against checkpointing: the checkpoint BN mode, and
    # recomputation chosen per tensor at the memory offloading needs
    $iabn mem "$m" --batch "$fb" --size "${fs}x${fs}" --bn standard,checkpoint --cost gpu \
        --copy-bw 6.5 --json > "$out/$m-estimate-gpu-ckpt.json"
    off=$(python3 -c 'import json,sys; print([c for c in json.load(open(sys.argv[1])) if c["strategy"] == "offload"][0]["device_total_bytes"])' "$out/$m-estimate-gpu.json")
    $iabn mem "$m" --batch "$fb" --size "${fs}x${fs}" --bn standard --strategy recompute \
        --budget "$off" --cost gpu --copy-bw 6.5 --json > "$out/$m-estimate-gpu-recompute.json"
done
python3 tools/bench_offload_table.py "$out" $models
