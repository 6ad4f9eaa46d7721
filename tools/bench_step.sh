#!/usr/bin/env bash
# bench_step.sh: iabn's training step (standard BN and in-place ABN II) beside
# PyTorch 1.13's, same model, batch, size and thread count; prints a table.
#   tools/bench_step.sh [MODEL] [BATCH] [SIZE] [THREADS] [REPEAT]
#   tools/bench_step.sh all [SIZE] [THREADS] [REPEAT]   # issue 19's sweep:
#       resnext50, resnext101, wider_resnet38_a2 at batch 4 and 16
# IABN=path picks the iabn binary; BEFORE=path adds that binary's standard
# step (an older build) to each row, run in the same invocation.
# ROUNDS=N runs the columns interleaved N times and prints each round and the
# best and the median of each column: on a shared host, single runs of the
# same step vary by 15% and more.  Each cell is the median step of REPEAT;
# the last table ("fastest") takes each column's fastest single step over
# all rounds instead: other tenants only ever slow a step down, so the
# fastest step is the closest to the step's own time (as `iabn bench conv`
# reports the best call).  A BEFORE build without that figure is left out of
# that table.
# IABN_FLAGS="..." adds flags to this build's two columns (not BEFORE's), e.g.
# IABN_FLAGS="--winograd on".
set -euo pipefail
cd "$(dirname "$0")/.."
iabn=${IABN:-build/tools/iabn}
before=${BEFORE:-}
rounds=${ROUNDS:-1}
read -r -a flags <<<"${IABN_FLAGS:-}"

# "median:fastest" (ms) of a bench's JSON; fastest 0 when it has none
times() { python3 -c 'import json,sys; j = json.load(sys.stdin); print("%s:%s" % (j["step_ms"], j.get("step_min_ms", 0)))'; }

step_ms() { # binary model batch size threads repeat bn [flags...]
    "$1" bench step "$2" --batch "$3" --size "$4" --threads "$5" --repeat "$6" --bn "$7" "${@:8}" --json |
        times
}

one() { # model batch size threads repeat
    local model=$1 batch=$2 size=$3 threads=$4 repeat=$5 runs=()
    export OMP_NUM_THREADS=$threads
    for ((r = 0; r < rounds; r++)); do
        local std ip pt old=0:0
        pt=$(/usr/bin/python3 tools/bench_step_torch.py "$model" --batch "$batch" --size "$size" \
            --threads "$threads" --repeat "$repeat" --json | times)
        if [ -n "$before" ]; then
            old=$(step_ms "$before" "$model" "$batch" "$size" "$threads" "$repeat" standard)
        fi
        std=$(step_ms "$iabn" "$model" "$batch" "$size" "$threads" "$repeat" standard "${flags[@]}")
        ip=$(step_ms "$iabn" "$model" "$batch" "$size" "$threads" "$repeat" inplace_abn_ii "${flags[@]}")
        runs+=("$pt,$old,$std,$ip")
    done
    python3 - "$model" "$batch" "$size" "$threads" "${IABN_FLAGS:-}" "${runs[@]}" <<'PY'
import statistics, sys
m, b, s, t, fl = sys.argv[1:6]
cells = [[tuple(map(float, c.split(":"))) for c in r.split(",")] for r in sys.argv[6:]]
runs = [tuple(c[0] for c in r) for r in cells]
def show(label, pt, old, std, ip, stat="median step"):
    print(f"{m}, batch {b}, {s}x{s}, {t} threads ({stat}, ms){label}" +
          (f"; iabn with {fl}" if fl else ""))
    print(f"  pytorch 1.13 (standard BN)   {pt:10.1f}")
    if old:
        print(f"  iabn standard, BEFORE build  {old:10.1f}   {old/pt:5.2f}x pytorch")
    print(f"  iabn standard                {std:10.1f}   {std/pt:5.2f}x pytorch   (target <= 0.60x)")
    print(f"  iabn inplace_abn_ii          {ip:10.1f}   {ip/std:5.3f}x standard  (target <= 1.03x)")
    print(f"ROW{label} | {m} | {b} | {s} | {pt:.1f} | " + (f"{old:.1f} ({old/pt:.2f}x) | " if old else "") +
          f"{std:.1f} ({std/pt:.2f}x) | {ip:.1f} ({ip/std:.3f}x) |")
for i, r in enumerate(runs):
    show(f" round {i + 1}" if len(runs) > 1 else "", *r)
if len(runs) > 1:
    cols = list(zip(*runs))
    show(" best", *[min(c) for c in cols])
    show(" median", *[statistics.median(c) for c in cols])
# each column's fastest single step over the rounds (0: a BEFORE build
# that does not report it, left out)
fast = [min(c[k][1] for c in cells) for k in range(4)]
if fast[0] > 0 and fast[2] > 0 and fast[3] > 0:
    show(" fastest", *fast, stat="fastest single step over the rounds")
else:
    print("fastest step: not reported by one of the columns")
PY
}

if [ "${1:-}" = all ]; then
    size=${2:-224}; threads=${3:-2}; repeat=${4:-3}
    for model in resnext50 resnext101 wider_resnet38_a2; do
        for batch in 4 16; do one "$model" "$batch" "$size" "$threads" "$repeat"; done
    done
else
    one "${1:-resnext101}" "${2:-4}" "${3:-224}" "${4:-2}" "${5:-5}"
fi
