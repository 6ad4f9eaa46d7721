#!/usr/bin/env bash
# bench_step.sh: iabn's training step (standard BN and in-place ABN II) beside
# PyTorch 1.13's, same model, batch, size and thread count; prints a table.
#   tools/bench_step.sh [MODEL] [BATCH] [SIZE] [THREADS] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnext101}; batch=${2:-4}; size=${3:-224}; threads=${4:-2}; repeat=${5:-5}
iabn=${IABN:-build/tools/iabn}
export OMP_NUM_THREADS=$threads
std=$($iabn bench step "$model" --batch "$batch" --size "$size" --threads "$threads" --repeat "$repeat" --bn standard --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_ms"])')
ip=$($iabn bench step "$model" --batch "$batch" --size "$size" --threads "$threads" --repeat "$repeat" --bn inplace_abn_ii --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_ms"])')
pt=$(/usr/bin/python3 tools/bench_step_torch.py "$model" --batch "$batch" --size "$size" --threads "$threads" --repeat "$repeat" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_ms"])')
python3 - "$model" "$batch" "$size" "$threads" "$std" "$ip" "$pt" <<'PY'
import sys
m, b, s, t, std, ip, pt = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], *map(float, sys.argv[5:])
print(f"{m}, batch {b}, {s}x{s}, {t} threads (median step, ms)")
print(f"  pytorch 1.13 (standard BN)   {pt:10.1f}")
print(f"  iabn standard                {std:10.1f}   {std/pt:5.2f}x pytorch   (target <= 0.60x)")
print(f"  iabn inplace_abn_ii          {ip:10.1f}   {ip/std:5.3f}x standard  (target <= 1.03x)")
PY
