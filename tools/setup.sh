#!/usr/bin/env bash
# setup.sh: installs what iabn needs on a fresh Debian (bookworm) machine.
# Run as root (or with sudo); does nothing for packages already present.
#   bash tools/setup.sh           everything: iabn, and PyTorch for the tests' fixtures
#   bash tools/setup.sh --demo    only what iabn itself needs (tools/demo.sh)
set -euo pipefail
pkgs=(
  gcc pkg-config meson ninja-build            # build
  libopenblas-openmp-dev                      # BLAS, the OpenMP build (never the pthread one)
  libdnnl-dev                                 # oneDNN: the dense convolutions
  libcjson-dev libjpeg62-turbo-dev libpng-dev # JSON, JPEG, PNG
  libopenmpi-dev openmpi-bin                  # multi-process training and its CPU collectives
)
case "${1:-}" in
  --demo) ;;
  # reference fixtures and parity; iabn export --format onnx, and its test
  "") pkgs+=(python3 python3-numpy python3-torch python3-torchvision python3-onnx) ;;
  *) echo "setup.sh: unknown argument '$1' (none, or --demo)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The OpenMP OpenBLAS must be the one the loader picks.
if [ -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 ] && [ "$(id -u)" -eq 0 ]; then
  update-alternatives --set libopenblas.so.0-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 >/dev/null 2>&1 || true
fi
