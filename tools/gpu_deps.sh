#!/usr/bin/env bash
# gpu_deps.sh: run HERE (Debian bookworm, amd64): downloads the .deb files of
# the libraries iabn builds against that the GPU machine lacks (it has nvcc,
# gcc, PyTorch with cuDNN/NCCL wheels, meson and ninja, but no Debian -dev
# packages and no network) into .gpudeps/ (git-ignored).  A device run carries
# that folder and tools/gpu_check.sh unpacks it into a private prefix under
# /tmp with `dpkg -x` (never into /).  See docs/GPU.md.
#   bash tools/gpu_deps.sh          # idempotent: fetches again only what is missing
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpudeps
pkgs=(
  libjpeg62-turbo libjpeg62-turbo-dev          # JPEG
  libpng16-16 libpng-dev zlib1g-dev            # PNG (png.h includes zlib.h, libpng.pc requires zlib.pc; libz.so.1 is there)
  libopenblas0-openmp libopenblas-openmp-dev   # BLAS, the OpenMP build (pkg-config file under openblas-openmp/)
  libgfortran5 libquadmath0                    # what libopenblas0-openmp links besides libc and libgomp
  libcjson1 libcjson-dev                       # JSON
  pkgconf-bin libpkgconf3                      # pkg-config, in case the GPU machine has none
)
# libgomp1 is not carried: the GPU machine's gcc brings its own (gpu_check.sh checks).
mkdir -p "$dir"
[ "$(dpkg --print-architecture)" = amd64 ] || { echo "gpu_deps.sh: needs an amd64 Debian (the GPU machine is x86-64)" >&2; exit 1; }
missing=()
for p in "${pkgs[@]}"; do
  v=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then echo "gpu_deps.sh: apt knows no $p (apt-get update?)" >&2; exit 1; fi
  f="${p}_${v//:/%3a}_amd64.deb"
  [ -s "$dir/$f" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  (cd "$dir" && apt-get download "${missing[@]}" 2>&1 | grep -v -e '^W: Download is performed unsandboxed' -e '^Get:' || true)
fi
# one version of each listed package: drop stale versions and packages no longer listed
want=" "
for p in "${pkgs[@]}"; do
  v=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')
  want+="${p}_${v//:/%3a}_amd64.deb "
done
for f in "$dir"/*.deb; do
  [[ "$want" == *" $(basename "$f") "* ]] || rm -f "$f"
done
n=$(ls "$dir"/*.deb | wc -l)
[ "$n" -eq ${#pkgs[@]} ] || { echo "gpu_deps.sh: expected ${#pkgs[@]} .deb files, found $n" >&2; exit 1; }
(cd "$dir" && sha256sum ./*.deb >SHA256SUMS)
bytes=$(du -cb "$dir" | awk 'END {print $1}')
echo "gpu_deps.sh: $n packages in $dir, $((bytes / 1024)) KiB (the whole carried tree may hold 64 MiB)"
[ "$bytes" -lt $((32 * 1024 * 1024)) ] || { echo "gpu_deps.sh: over 32 MiB, too close to the 64 MiB limit" >&2; exit 1; }
