#!/usr/bin/env bash
# demo.sh: sets up a fresh Debian machine, builds iabn, and runs the main job
# on its built-in default (iabn demo: a minute of training on generated data,
# then the memory report, the learning curves and the memory plot).  It needs
# only what iabn needs: no PyTorch (setup.sh --demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --demo
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} build/tools/iabn demo "$@"
