#!/usr/bin/env bash
# bench_all.sh: every CPU benchmark of the targets (docs/TARGETS.md), run one after
# the other, written as a dated Markdown report (default: bench/results/).
# Run it on an otherwise idle machine:  tools/bench_all.sh [OUT.md]
set -euo pipefail
cd "$(dirname "$0")/.."
iabn=${IABN:-build/tools/iabn}
out=${1:-bench/results/$(date +%F)-cpu.md}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$(dirname "$out")"
run() { echo; echo '```'; echo "\$ $*"; "$@" 2>&1; echo '```'; }
{
  echo "# CPU benchmarks, $(date +%F)"
  echo
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;"
  echo "OMP_NUM_THREADS=$OMP_NUM_THREADS; iabn $($iabn version)."
  echo
  echo "## Convolutions (iabn bench conv)"
  run "$iabn" bench conv --repeat 9
  run "$iabn" bench conv --repeat 9 --peak measure
  run "$iabn" bench conv --repeat 9 --peak measure --cold
  echo
  echo "## BN+ACT+CONV blocks, paper Fig. 4 (iabn bench block)"
  run "$iabn" bench block --repeat 15
  run "$iabn" bench block --repeat 15 --plain
  echo
  echo "## Training step against PyTorch 1.13 (tools/bench_step.sh)"
  run tools/bench_step.sh resnext101 4 224 2 5
  echo
  echo "## Data pipeline against torchvision (same folder, one core each)"
  if [ ! -d /tmp/iabn_bench_data ]; then
    /usr/bin/python3 tools/bench_data_torchvision.py --make /tmp/iabn_bench_data --count 200 >/dev/null
  fi
  run "$iabn" data bench --data /tmp/iabn_bench_data --workers 1 --epochs 3
  run /usr/bin/python3 tools/bench_data_torchvision.py --data /tmp/iabn_bench_data --epochs 3
  echo
  echo "## Memory (iabn mem)"
  run "$iabn" mem resnext101 --batch 64 --bn standard,inplace_abn_ii,checkpoint --budget 12GiB
  run "$iabn" mem wider_resnet38_a2 --batch 64 --bn standard,inplace_abn_ii
  run "$iabn" mem deeplabv3_wider_resnet38_a2 --batch 2 --size 512x512 --bn standard,inplace_abn_ii --budget 12GiB
  run "$iabn" mem deeplabv3_resnext101 --batch 2 --size 512x512 --bn standard,inplace_abn_ii --budget 12GiB
  run "$iabn" mem deeplabv3_resnext101 --batch 2 --size 672x672 --bn standard,inplace_abn_ii --budget 12GiB
} > "$out"
echo "wrote $out"
