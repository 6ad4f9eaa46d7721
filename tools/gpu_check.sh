#!/usr/bin/env bash
# gpu_check.sh: the GPU run kit.  Run THERE, on a lent GPU machine, from the
# repository root with .gpudeps/ carried (made here by tools/gpu_deps.sh):
#
#     bash tools/gpu_check.sh
#
# It unpacks the carried .deb files into a private prefix under /tmp (never
# into /), finds nvcc, cuBLAS and the cuDNN / NCCL that PyTorch's wheels
# brought, configures and builds iabn (-Dgpu_archs=90, -Dwerror=true; if that
# build fails, once more without -Dwerror so that the GPU steps still run),
# then runs, each under its own timeout and within ~9 minutes in all:
#   smi        nvidia-smi
#   test       meson test --suite cuda --suite unit --suite planner --suite grad ...
#   memcheck   compute-sanitizer --tool memcheck  on tests/test_cuda, test_cuda_kernels
#   initcheck  compute-sanitizer --tool initcheck on tests/test_cuda, test_cuda_kernels
#   racecheck  compute-sanitizer --tool racecheck on tests/test_cuda_kernels (shared-memory reductions)
#   stepcheck  compute-sanitizer --tool memcheck  on one resnext_tiny training step
#   traincheck compute-sanitizer --tool memcheck  on `iabn train --device cuda` (pinned
#              batches, staged inputs on the copy stream, SGD, validation, checkpoint)
#   bench      resnext101 b32 224: iabn standard, iabn inplace_abn_ii, PyTorch (TF32 off)
#   mem        iabn mem resnext101 --batch 32 (the planned totals)
#   ops        the benchmark's step broken down by op and by conv shape (standard BN)
#   kernels    device time per kernel name in one steady step, iabn beside PyTorch (CUPTI)
#   largest    the largest batch per mode in the free device memory, one step at each
#   dataload   iabn train on a synthetic JPEG/PNG folder: the share of time waiting for data
#   traintest  tests/test_train (a CPU and a CUDA training run compared), if time is left
#   tf32       the same step with TF32 allowed on both sides (only if time is left)
# Everything goes to $OUT (or build-gpu-out/ when OUT is unset) as it happens:
# gpu-results.md (the summary, written step by step), gpu-steps.log (each
# step's output), testlog.json, bench.json.  A failed step does not stop the
# ones after it.  Here, without a GPU, the same script builds and runs the CPU
# suites; the GPU steps then end "no GPU".
# Knobs (environment): GPU_CHECK_ONLY="test bench" (steps to run; the build
# always runs), GPU_TEST_SUITES="cuda unit planner grad kernels data",
# GPU_CHECK_BUDGET=540 (seconds in all), GPU_ARCHS=90,
# GPU_CHECK_BUILD=build-gpu, BENCH_BATCH=32, BENCH_SIZE=224, BENCH_REPEAT=5,
# BENCH_MODEL=resnext101, BENCH_CLASSES=1000, CUDNN_DIR=... (a cuDNN with include/ and lib/).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-540}
ONLY=${GPU_CHECK_ONLY:-}
B=${GPU_CHECK_BUILD:-build-gpu}
ARCHS=${GPU_ARCHS:-90}
MODEL=${BENCH_MODEL:-resnext101}
CLASSES=${BENCH_CLASSES:-1000}
BATCH=${BENCH_BATCH:-32}
SIZE=${BENCH_SIZE:-224}
REPEAT=${BENCH_REPEAT:-5}
W=/tmp/iabn-gpu            # private prefix and scratch
P=$W/prefix                # the unpacked .deb files
NV=$W/nv                   # symlinks: cuDNN / NCCL / cuBLAS headers and libraries found outside the toolkit
OUT=${OUT:-$ROOT/build-gpu-out}
mkdir -p "$OUT" "$W/bin" "$W/steps"
# a warm machine keeps /tmp: no reading of an earlier invocation's samples or results
rm -f "$W"/smi.* "$W"/smi_* "$W"/*.json
MD=$OUT/gpu-results.md
LOG=$OUT/gpu-steps.log
STEP_LOG_MAX=${STEP_LOG_MAX:-600000}   # bytes of one step's output kept in gpu-steps.log (head; the tail is added)
: >"$LOG"
: >"$MD"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}

now() { date +%s; }
elapsed() { echo $(($(now) - T0)); }
md() { printf '%s\n' "$*" >>"$MD"; }
say() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; printf '[%4ss] %s\n' "$(elapsed)" "$*" >>"$LOG"; }
wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

# step NAME TIMEOUT GPU_ONLY(0|1) CMD...: runs CMD under `timeout`, its output
# into $W/steps/NAME.out and (bounded) into gpu-steps.log, one row into the
# summary table.  Sets RC.  A step that needs a GPU and fails on a machine
# without one is reported "no GPU", not as a failure.
RC=0
NOTE=''
FAILS=0
RESERVE=0   # seconds kept back for later steps (the benchmark)
step() {
  local name=$1 to=$2 gpu=$3; shift 3
  local left=$((BUDGET - $(elapsed) - RESERVE))
  if [ "$left" -lt 15 ]; then
    md "| $name | not run: out of time | 0 | |"; say "$name: not run (out of time)"; RC=125; return
  fi
  [ "$to" -gt "$left" ] && to=$left
  local out=$W/steps/$name.out t0 t1 res
  printf '\n===== %s (timeout %ss): %s\n' "$name" "$to" "$*" >>"$LOG"
  say "$name: start (timeout ${to}s)"
  t0=$(date +%s.%N)
  timeout -k 5 "$to" "$@" 2>&1 | tee -p "$out" | head -c "$STEP_LOG_MAX" >>"$LOG"
  RC=${PIPESTATUS[0]}
  t1=$(date +%s.%N)
  local sz; sz=$(stat -c %s "$out" 2>/dev/null || echo 0)
  if [ "$sz" -gt "$STEP_LOG_MAX" ]; then
    printf '\n[... %s bytes left out ...]\n' "$((sz - STEP_LOG_MAX))" >>"$LOG"
    tail -c 20000 "$out" >>"$LOG"
  fi
  case $RC in
    0) res=ok ;;
    77) res='skipped (exit 77)' ;;
    124|137) res="TIMEOUT after ${to}s" ;;
    *) res="FAIL (exit $RC)" ;;
  esac
  if [ "$gpu" = 1 ] && [ "$HAVE_GPU" = 0 ] && [ "$RC" -ne 0 ]; then res="no GPU (exit $RC, expected here)"; fi
  case $res in FAIL*|TIMEOUT*) FAILS=$((FAILS + 1)) ;; esac
  local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
  md "| $name | $res | $secs | ${NOTE//|/\\|} |"
  say "$name: $res in ${secs}s${NOTE:+ ($NOTE)}"
  NOTE=''
}

# ---- the machine ------------------------------------------------------------
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then HAVE_GPU=1; fi
# the python with torch: the GPU machine's venv, else the first that has it
PY=''
for c in ${PYTHON:-} /opt/torch/.venv/bin/python3 "$(command -v python3)" /usr/bin/python3; do
  [ -x "$c" ] && "$c" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null && { PY=$c; break; }
done
[ -n "$PY" ] || PY=$(command -v python3)
# pip's meson and ninja live beside that python (else: python -m)
[ -x "$(dirname "$PY")/meson" ] && PATH="$(dirname "$PY"):$PATH"
PATH="$PATH:$W/bin"
if ! command -v meson >/dev/null && "$PY" -c 'import mesonbuild' 2>/dev/null; then
  printf '#!/bin/sh\nexec %s -m mesonbuild.mesonmain "$@"\n' "$PY" >"$W/bin/meson"; chmod +x "$W/bin/meson"
fi
if ! command -v ninja >/dev/null && "$PY" -c 'import ninja' 2>/dev/null; then
  printf '#!/bin/sh\nexec %s -m ninja "$@"\n' "$PY" >"$W/bin/ninja"; chmod +x "$W/bin/ninja"
fi
{
  md "# iabn GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  md ""
  md "- host: $(uname -srm), $(env -u OMP_NUM_THREADS nproc) cores; $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  md "- GPU: $( [ "$HAVE_GPU" = 1 ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 || echo 'none (nvidia-smi finds no device)')"
  md "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git status --porcelain 2>/dev/null | grep -q . && echo ' (+ uncommitted changes)')"
  md "- python: $PY ($("$PY" -c 'import importlib.metadata as m; print("torch", m.version("torch"))' 2>/dev/null ||
                "$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch'))"
} >/dev/null
say "gpu_check: OUT=$OUT, budget ${BUDGET}s, GPU: $HAVE_GPU"

# ---- the carried .deb files -> $P ---------------------------------------------
unpack() {
  [ -d .gpudeps ] && ls .gpudeps/*.deb >/dev/null 2>&1 || { echo "no .gpudeps/*.deb: run tools/gpu_deps.sh here and carry .gpudeps"; return 1; }
  (cd .gpudeps && sha256sum -c --quiet SHA256SUMS) || return 1
  rm -rf "$P"; mkdir -p "$P"
  local f
  for f in .gpudeps/*.deb; do
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$f" "$P" || return 1
    else (cd "$W" && rm -f data.tar.* && ar x "$ROOT/$f" && tar -xf data.tar.* -C "$P") || return 1; fi
    echo "unpacked $(basename "$f")"
  done
  # their pkg-config files say /usr: point them into the prefix
  local pc
  for pc in $(find "$P" -name '*.pc'); do
    sed -i -E "s#=/usr(/|\$)#=$P/usr\\1#g; s#(-I|-L)/usr/#\\1$P/usr/#g" "$pc"
  done
  # jpeglib.h includes jconfig.h, which Debian keeps in the multiarch folder
  # that gcc searches on its own in /usr but not in the prefix
  sed -i -E "s#^(Cflags:.*)\$#\1 -I$P/usr/include/x86_64-linux-gnu#" "$P/usr/lib/x86_64-linux-gnu/pkgconfig/libjpeg.pc"
  cat >"$W/bin/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $P/usr/bin/pkgconf "\$@"
EOF
  chmod +x "$W/bin/pkg-config"
  "$W/bin/pkg-config" --version || return 1
  local m=$P/usr/lib/x86_64-linux-gnu
  PKG_CONFIG_LIBDIR="$m/openblas-openmp/pkgconfig:$m/pkgconfig:$P/usr/share/pkgconfig" \
    "$W/bin/pkg-config" --cflags --libs openblas libpng libjpeg libcjson || return 1
  echo "libgomp: $(gcc -print-file-name=libgomp.so)"
}
export -f unpack
export W P ROOT
PL=$P/usr/lib/x86_64-linux-gnu
export PKG_CONFIG="$W/bin/pkg-config"
export PKG_CONFIG_LIBDIR="$PL/openblas-openmp/pkgconfig:$PL/pkgconfig:$P/usr/share/pkgconfig"

# ---- CUDA: nvcc, the toolkit, cuBLAS, cuDNN, NCCL ----------------------------
SP=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
NVCC=$(command -v nvcc || true)
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc "$SP"/nvidia/cu1*/bin/nvcc "$SP"/nvidia/cuda_nvcc/bin/nvcc; do
  [ -n "$NVCC" ] && break
  [ -x "$c" ] && NVCC=$c
done
CUDA_ROOT=''
[ -n "$NVCC" ] && CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
# the first folder under which a library (LIB: libcudnn) or header exists
find_lib() { # LIB DIR... -> the folder holding LIB.so or LIB.so.N
  local lib=$1 d; shift
  local f
  for d in "$@"; do
    [ -d "$d" ] || continue
    for f in "$d/$lib".so "$d/$lib".so.[0-9]*; do [ -e "$f" ] && { echo "$d"; return 0; }; done
  done
  return 1
}
find_hdr() { # HEADER DIR...
  local h=$1 d; shift
  for d in "$@"; do [ -f "$d/$h" ] && { echo "$d"; return 0; }; done
  return 1
}
link_dir() { # SRC_LIB_DIR SRC_INC_DIR PATTERN: symlink into $NV, unversioned .so names made where missing
  local ld=$1 id=$2 pat=$3 f base
  for f in "$ld"/$pat; do
    [ -e "$f" ] || continue
    ln -sfn "$f" "$NV/lib/$(basename "$f")"
  done
  for f in "$NV"/lib/$pat; do
    [ -e "$f" ] || continue
    base=$(basename "$f"); base=${base%%.so.*}
    [ -e "$NV/lib/$base.so" ] || ln -sfn "$(basename "$f")" "$NV/lib/$base.so"
  done
  if [ -n "$id" ] && [ -d "$id" ]; then
    for f in "$id"/*; do [ -e "$NV/include/$(basename "$f")" ] || ln -sfn "$f" "$NV/include/$(basename "$f")"; done
  fi
}
rm -rf "$NV"; mkdir -p "$NV/include" "$NV/lib"
TK_LIB=''; TK_INC=''
if [ -n "$CUDA_ROOT" ]; then
  TK_LIB=$(find_lib libcudart "$CUDA_ROOT/lib64" "$CUDA_ROOT/targets/x86_64-linux/lib" "$CUDA_ROOT/lib" || true)
  TK_INC=$(find_hdr cuda_runtime.h "$CUDA_ROOT/include" "$CUDA_ROOT/targets/x86_64-linux/include" || true)
fi
WHEEL_DIRS=()
[ -n "$SP" ] && [ -d "$SP/nvidia" ] && for d in "$SP"/nvidia/*; do [ -d "$d/lib" ] && WHEEL_DIRS+=("$d"); done
NOTES=()
# cudart / cuBLAS: the toolkit's, else a wheel's (meson takes them from the
# toolkit when it can, else from $NV/lib: -Dgpu_lib_dirs)
for l in libcudart libcublas libcublasLt; do
  d=$(find_lib "$l" ${TK_LIB:+"$TK_LIB"} "${WHEEL_DIRS[@]/%//lib}" || true)
  if [ -z "$d" ]; then NOTES+=("$l not found"); continue; fi
  link_dir "$d" '' "$l.so*"
  if [ "$d" != "$TK_LIB" ]; then
    NOTES+=("$l from $d")
    [ -f "$(dirname "$d")/include/cublas_v2.h" ] && link_dir "$d" "$(dirname "$d")/include" 'none'
  fi
done
# cuDNN: CUDNN_DIR, else PyTorch's wheel, else the toolkit's (meson's default)
CUDNN_FROM=''
for d in ${CUDNN_DIR:-} "$SP/nvidia/cudnn"; do
  [ -n "$d" ] || continue
  l=$(find_lib libcudnn "$d/lib" "$d/lib64" || true)
  if [ -n "$l" ] && [ -f "$d/include/cudnn.h" ]; then link_dir "$l" "$d/include" 'libcudnn*.so*'; CUDNN_FROM=$d; break; fi
done
[ -n "$CUDNN_FROM" ] || CUDNN_FROM="toolkit (${CUDA_ROOT:-/usr/local/cuda})"
# NCCL (not used by the build yet; put beside cuDNN for when it is)
NCCL_FROM=''
if [ -n "$SP" ] && l=$(find_lib libnccl "$SP/nvidia/nccl/lib"); then
  link_dir "$l" "$SP/nvidia/nccl/include" 'libnccl*.so*'; NCCL_FROM=$SP/nvidia/nccl
elif [ -n "$TK_LIB" ] && find_lib libnccl "$TK_LIB" >/dev/null; then NCCL_FROM="toolkit"; fi
# one toolkit for meson's cuda dependency (CUDA_PATH and CUDA_HOME must agree)
[ -n "$CUDA_ROOT" ] && [ -n "$TK_LIB" ] && export CUDA_PATH=$CUDA_ROOT CUDA_HOME=$CUDA_ROOT
[ -n "$NVCC" ] && PATH="$(dirname "$NVCC"):$PATH"
export PATH
SAN=$(command -v compute-sanitizer || true)
for c in "$CUDA_ROOT/bin/compute-sanitizer" "$CUDA_ROOT/compute-sanitizer/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer \
         /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/compute-sanitizer*/compute-sanitizer \
         "$SP"/nvidia/cu1*/bin/compute-sanitizer; do
  [ -z "$SAN" ] && [ -x "$c" ] && SAN=$c
done
# what our programs load at run time (the build's rpath names these too; the
# prefix's libraries' own dependencies, libgfortran say, need the path)
RUN_LDP="$NV/lib:$PL/openblas-openmp:$PL${TK_LIB:+:$TK_LIB}"
md "- nvcc: ${NVCC:-not found}$( [ -n "$NVCC" ] && "$NVCC" --version | tail -2 | head -1 | sed 's/^/, /'); CUDA_PATH=${CUDA_PATH:-unset}"
# the version of the cuDNN that PyTorch loads (the wheel iabn builds against)
CUDNN_VER=$(env -u LD_LIBRARY_PATH "$PY" -c 'import torch; v = torch.backends.cudnn.version(); print(v if v else "?")' 2>/dev/null || echo '?')
md "- cuDNN: $CUDNN_FROM (version $CUDNN_VER, as PyTorch reports it); NCCL: ${NCCL_FROM:-not found}${NOTES[*]:+; ${NOTES[*]}}"
md "- compute-sanitizer: ${SAN:-not found}; meson $(meson --version 2>/dev/null || echo '?'), ninja $(ninja --version 2>/dev/null || echo '?')"
md ""
md "| step | result | s | note |"
md "|---|---|---|---|"

step deps 60 0 bash -c unpack
if [ "$RC" -ne 0 ]; then
  md ""; md "**The carried libraries could not be unpacked: nothing was built.**"; cat "$MD"; exit 1
fi

# ---- configure and build -----------------------------------------------------
MESON_OPTS=(-Dbuildtype=release -Dcuda=enabled -Dmpi=disabled "-Dgpu_archs=$ARCHS"
            "-Dgpu_include_dirs=$NV/include" "-Dgpu_lib_dirs=$NV/lib")
configure_build() { # DIR WERROR
  local d=$1
  if [ -f "$d/build.ninja" ]; then   # a warm machine's earlier build: same options again
    meson setup --reconfigure "$d" "${MESON_OPTS[@]}" "-Dwerror=$2" || return 1
  else
    rm -rf "$d"
    meson setup "$d" "${MESON_OPTS[@]}" "-Dwerror=$2" || return 1
  fi
  ninja -C "$d" -k 0
}
export -f configure_build
export MESON_OPTS_STR="${MESON_OPTS[*]}"
# (arrays do not cross `bash -c`: pass them as words)
configure_build_w() { MESON_OPTS=($MESON_OPTS_STR); configure_build "$@"; }
export -f configure_build_w
BUILT=''
step build 300 0 bash -c 'configure_build_w "$0" true' "$B"
if [ "$RC" -eq 0 ]; then BUILT=$B
else
  NOTE="the -Dwerror=false build, after -Dwerror=true failed"
  step build-nowerror 300 0 bash -c 'configure_build_w "$0" false' "$B-nowerror"
  [ "$RC" -eq 0 ] && BUILT=$B-nowerror
fi
if [ -z "$BUILT" ]; then
  md ""; md "**No build: nothing more to run.** The errors are in gpu-steps.log."; cat "$MD"; exit 1
fi
IABN=$BUILT/tools/iabn
TEST_CUDA=$BUILT/tests/test_cuda
TEST_CUDA_K=$BUILT/tests/test_cuda_kernels
# each CUDA test program under a sanitizer tool: sanitize TOOL [ARGS...]
SANITIZE_BOTH='san=$1; shift; for t in "$TEST_CUDA" "$TEST_CUDA_K"; do
  env LD_LIBRARY_PATH="$RUN_LDP" "$san" "$@" "$t" || exit $?; done'
export TEST_CUDA TEST_CUDA_K
run() { LD_LIBRARY_PATH="$RUN_LDP" "$@"; }   # our programs, with the private libraries
export RUN_LDP
grep -q 'IABN_HAVE_CUDA 1' "$BUILT/iabn_config.h" || md "| (config) | FAIL: IABN_HAVE_CUDA is 0 | 0 | |"

# ---- checks ------------------------------------------------------------------
if wanted smi; then
  step smi 30 1 nvidia-smi
fi

if wanted test; then
  SUITES=(); for s in ${GPU_TEST_SUITES:-cuda unit planner grad kernels data}; do SUITES+=(--suite "$s"); done
  step test 240 0 env LD_LIBRARY_PATH="$RUN_LDP" meson test -C "$BUILT" "${SUITES[@]}" \
       --num-processes 8 --timeout-multiplier 0.5 --print-errorlogs
  TL=$BUILT/meson-logs/testlog.json
  if [ -f "$TL" ]; then
    # one line per test: name, result (a SKIP of the cuda suite without a GPU is "skipped: no GPU");
    # the log's copy in $OUT without each test's environment
    "$PY" - "$TL" "$HAVE_GPU" "$OUT/testlog.json" >>"$MD" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gpu = sys.argv[2] == "1"
with open(sys.argv[3], "w") as f:
    for r in rows:
        r.pop("env", None)
        f.write(json.dumps(r) + "\n")
print()
print("| test | suite | result | s |")
print("|---|---|---|---|")
for r in rows:
    name = r.get("name", "?")  # "iabn:unit / norm_act"
    suite = name.split(":", 1)[-1].split(" / ")[0] if " / " in name else ""
    res = r.get("result", "?")
    if res == "SKIP" and suite == "cuda" and not gpu:
        res = "skipped: no GPU"
    print("| %s | %s | %s | %.1f |" % (name.split(" / ")[-1], suite, res, r.get("duration", 0)))
print()
print("| step | result | s | note |")
print("|---|---|---|---|")
PY
  fi
fi

SAN_ARGS=(--error-exitcode 99 --print-limit 30)
# the sanitizers may take what they like, but not the benchmark's time
wanted bench && RESERVE=${BENCH_RESERVE:-250}
if wanted memcheck; then
  if [ -n "$SAN" ]; then
    step memcheck 120 1 bash -c "$SANITIZE_BOTH" _ "$SAN" --tool memcheck --leak-check full "${SAN_ARGS[@]}"
  else md "| memcheck | not run: no compute-sanitizer | 0 | |"; fi
fi
if wanted initcheck; then
  if [ -n "$SAN" ]; then
    step initcheck 100 1 bash -c "$SANITIZE_BOTH" _ "$SAN" --tool initcheck "${SAN_ARGS[@]}"
  else md "| initcheck | not run: no compute-sanitizer | 0 | |"; fi
fi
if wanted racecheck; then
  if [ -n "$SAN" ]; then
    step racecheck 100 1 env LD_LIBRARY_PATH="$RUN_LDP" "$SAN" --tool racecheck "${SAN_ARGS[@]}" "$TEST_CUDA_K"
  else md "| racecheck | not run: no compute-sanitizer | 0 | |"; fi
fi
if wanted stepcheck; then
  if [ -n "$SAN" ]; then
    step stepcheck 90 1 env LD_LIBRARY_PATH="$RUN_LDP" "$SAN" --tool memcheck "${SAN_ARGS[@]}" \
         "$IABN" bench step resnext_tiny --device cuda --batch 2 --size 64 --repeat 1
  else
    NOTE="no compute-sanitizer: the plain step only"
    step stepcheck 60 1 env LD_LIBRARY_PATH="$RUN_LDP" "$IABN" bench step resnext_tiny --device cuda --batch 2 --size 64 --repeat 1
  fi
fi
if wanted traincheck; then
  TC=$W/traincheck
  mkdir -p "$TC"
  printf '%s\n' '{"network": {"arch": "resnext_tiny", "bn_mode": "inplace_abn_ii", "activation": "leaky_relu"},' \
    '"optimizer": {"batch_size": 8, "schedule": {"epochs": 1}}, "input": {"crop_train": 64, "crop_val": 64, "scale_val": 72}}' >"$TC/cfg.json"
  if env LD_LIBRARY_PATH="$RUN_LDP" "$IABN" data synth --out "$TC/data" >/dev/null 2>&1; then
    TRAIN=("$IABN" train "$TC/cfg.json" "$TC/data" --device cuda --max-steps 6 --print-freq 2 -j 2 --output-dir "$TC/run")
    if [ -n "$SAN" ]; then
      step traincheck 120 1 env LD_LIBRARY_PATH="$RUN_LDP" "$SAN" --tool memcheck "${SAN_ARGS[@]}" "${TRAIN[@]}"
    else
      NOTE="no compute-sanitizer: the plain run only"
      step traincheck 60 1 env LD_LIBRARY_PATH="$RUN_LDP" "${TRAIN[@]}"
    fi
  else md "| traincheck | not run: iabn data synth failed | 0 | |"; fi
fi

# ---- benchmark: iabn (standard, in-place ABN II) beside PyTorch --------------
# GPU memory as nvidia-smi sees it (the whole device, CUDA context included),
# sampled every 100 ms while a run lasts: the largest rise over the idle value.
SMI_PID=''
smi_start() {
  SMI_BASE=0; SMI_PID=''
  [ "$HAVE_GPU" = 1 ] || return 0
  SMI_BASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$W/smi.$1" 2>/dev/null &
  SMI_PID=$!
}
smi_stop() { # NAME -> $W/smi_NAME holds the peak rise in MiB
  [ -n "$SMI_PID" ] && { kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null; }
  SMI_PID=''
  [ -f "$W/smi.$1" ] && sort -n "$W/smi.$1" | tail -1 | awk -v b="$SMI_BASE" '{print $1 - b}' >"$W/smi_$1" || echo '' >"$W/smi_$1"
}
# bench_json NAME CMD...: the command's stdout (JSON) into $W/NAME.json, its output into the log
bench_json() {
  local name=$1; shift
  "$@" >"$W/$name.json"; local rc=$?
  cat "$W/$name.json"
  return $rc
}
export -f bench_json
BENCH=()
ours() { # NAME BN [env...]
  local name=$1 bn=$2; shift 2
  rm -f "$W/$name.json"
  smi_start "$name"
  step "$name" 150 1 env LD_LIBRARY_PATH="$RUN_LDP" "$@" bash -c 'bench_json "$0" "$@"' "$name" \
       "$IABN" bench step "$MODEL" --device cuda --batch "$BATCH" --size "$SIZE" --repeat "$REPEAT" --bn "$bn" \
       --classes "$CLASSES" --json
  smi_stop "$name"
  BENCH+=("$name")
}
theirs() { # NAME [flags...]
  local name=$1; shift
  rm -f "$W/$name.json"
  smi_start "$name"
  step "$name" 180 1 env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 bash -c 'bench_json "$0" "$@"' "$name" \
       "$PY" tools/bench_step_torch.py "$MODEL" --device cuda --batch "$BATCH" --size "$SIZE" --repeat "$REPEAT" \
       --classes "$CLASSES" --threads 8 --cudnn-benchmark --json "$@"
  smi_stop "$name"
  BENCH+=("$name")
}
# what the steps run through `bash -c` (mem, largest, dataload) read
export IABN MODEL BATCH SIZE CLASSES PY W; export -f run
RESERVE=0
if wanted bench; then
  ours iabn_standard standard IABN_TF32=0
  ours iabn_inplace_abn_ii inplace_abn_ii IABN_TF32=0
  theirs pytorch_standard
fi
if wanted mem; then
  # the plan's totals (weights, gradients, momentum, inputs, arena); with
  # --device cuda where this build's `iabn mem` knows it (cuDNN workspaces)
  memcmd() {
    LD_LIBRARY_PATH="$RUN_LDP" "$IABN" mem "$MODEL" --batch "$BATCH" --size "$SIZE" --classes "$CLASSES" --bn standard,inplace_abn_ii --json --device cuda >"$W/mem.json" 2>"$W/mem.err" ||
      LD_LIBRARY_PATH="$RUN_LDP" "$IABN" mem "$MODEL" --batch "$BATCH" --size "$SIZE" --classes "$CLASSES" --bn standard,inplace_abn_ii --json >"$W/mem.json"
    local rc=$?; cat "$W/mem.err" "$W/mem.json"; return $rc
  }
  export -f memcmd
  rm -f "$W/mem.json"
  step mem 60 0 bash -c memcmd
fi
# where the step's time goes: per op, then per conv / linear shape and pass
# (ms and GFLOP/s), the device synchronised after each node
if wanted ops; then
  step ops 90 1 env LD_LIBRARY_PATH="$RUN_LDP" "$IABN" bench step "$MODEL" --device cuda --batch "$BATCH" \
       --size "$SIZE" --classes "$CLASSES" --repeat 3 --bn standard --ops --layers
fi
# device time per kernel in one steady step, iabn (standard BN) beside
# PyTorch: each benchmark run twice under libiabn_ktrace.so (CUPTI), with 1
# and 1 + KTRACE_STEPS timed steps; tools/ktrace_diff.py takes the difference,
# so warm-up and algorithm trials cancel.  The table goes to kernels.md.
if wanted kernels; then
  KT=$ROOT/$BUILT/tools/libiabn_ktrace.so
  export KT KTRACE_STEPS=${KTRACE_STEPS:-10} ROOT OUT RUN_LDP
  kernels() {
    local n long=$((1 + KTRACE_STEPS))
    for n in 1 "$long"; do
      IABN_KTRACE_OUT=$W/kt_iabn_$n LD_PRELOAD="$KT" LD_LIBRARY_PATH="$RUN_LDP" "$IABN" bench step "$MODEL" \
        --device cuda --batch "$BATCH" --size "$SIZE" --classes "$CLASSES" --repeat "$n" --bn standard || return 1
      IABN_KTRACE_OUT=$W/kt_torch_$n LD_PRELOAD="$KT" PYTHONUNBUFFERED=1 "$PY" tools/bench_step_torch.py "$MODEL" \
        --device cuda --batch "$BATCH" --size "$SIZE" --classes "$CLASSES" --repeat "$n" --threads 8 \
        --cudnn-benchmark || return 1
    done
    "$PY" tools/ktrace_diff.py "$W/kt_iabn_1" "$W/kt_iabn_$long" "$KTRACE_STEPS" --label iabn \
      --vs "$W/kt_torch_1" "$W/kt_torch_$long" "$KTRACE_STEPS" --vs-label pytorch >"$OUT/kernels.md" || return 1
    cat "$OUT/kernels.md"
  }
  export -f kernels
  if [ -f "$KT" ]; then step kernels 240 1 env -u LD_LIBRARY_PATH bash -c kernels
  else md "| kernels | not run: no libiabn_ktrace.so (CUPTI not found at build time) | 0 | |"; fi
fi
# the largest batch the planner fits into the free device memory (less 3 GiB
# for the CUDA context and the cuDNN / cuBLAS handles), per mode, and one
# step run at each to show that it does fit
if wanted largest; then
  largest() {
    local free budget; free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
    budget=$(( (free - 3072) * 1048576 ))
    run "$IABN" mem "$MODEL" --size "$SIZE" --classes "$CLASSES" --largest-batch --budget "$budget" \
        --bn standard,inplace_abn_ii --device cuda --json >"$W/largest.json" || return 1
    local bn b
    for bn in standard inplace_abn_ii; do
      b=$("$PY" -c 'import json,sys; print([m["max_batch"] for m in json.load(open(sys.argv[1])) if m["bn_mode"] == sys.argv[2]][0])' "$W/largest.json" "$bn") || return 1
      echo "== $bn: largest batch $b in $((budget >> 20)) MiB"
      run "$IABN" bench step "$MODEL" --device cuda --batch "$b" --size "$SIZE" --classes "$CLASSES" --repeat 1 --bn "$bn" || return 1
    done
  }
  export -f largest
  step largest 150 1 bash -c largest
fi
# data loading beside the GPU: `iabn train` on a synthetic 384x384 JPEG/PNG
# folder, 224 crops, 14 loader threads; its progress lines give the share of
# the step spent waiting for a batch ("data N%")
if wanted dataload; then
  dataload() {
    local D=$W/dataload; rm -rf "$D"; mkdir -p "$D"
    run "$IABN" data synth --out "$D/data" --classes 10 --size 384 --train-images 64 --val-images 2 >/dev/null || return 1
    printf '%s\n' "{\"network\": {\"arch\": \"$MODEL\", \"bn_mode\": \"inplace_abn_ii\", \"activation\": \"leaky_relu\"}," \
      "\"optimizer\": {\"batch_size\": $BATCH, \"schedule\": {\"epochs\": 2}}," \
      '"input": {"crop_train": 224, "crop_val": 224, "scale_val": 256}}' >"$D/cfg.json"
    run "$IABN" train "$D/cfg.json" "$D/data" --device cuda --max-steps 30 --print-freq 5 -j 14 --output-dir "$D/run"
  }
  export -f dataload
  step dataload 120 1 bash -c dataload
fi
# the trainer on both devices: per-step losses of a CPU and a CUDA run agree
# and the CUDA run learns (tests/test_train.c, test_cuda_matches_cpu)
if wanted traintest; then
  step traintest 150 1 env LD_LIBRARY_PATH="$RUN_LDP" "$BUILT/tests/test_train"
fi
if wanted tf32 && [ $((BUDGET - $(elapsed))) -gt 200 ]; then
  ours iabn_standard_tf32 standard IABN_TF32=1
  theirs pytorch_standard_tf32 --tf32
fi

# ---- the table and the targets (docs/TARGETS.md, GPU) ------------
if [ ${#BENCH[@]} -gt 0 ] || [ -f "$W/mem.json" ]; then
  "$PY" - "$W" "$OUT/bench.json" "$MODEL" "$BATCH" "$SIZE" "${BENCH[@]}" >>"$MD" <<'PY'
import json, os, sys
w, out, model, batch, size, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
def load(p):  # a JSON file, or the JSON inside other output
    try:
        t = open(p).read()
    except Exception:
        return None
    for a, b in ((0, len(t)), (t.find("["), t.rfind("]") + 1), (t.find("{"), t.rfind("}") + 1)):
        if a < 0:
            continue
        try:
            return json.loads(t[a:b])
        except Exception:
            pass
    return None
def smi(n):
    try:
        return float(open(os.path.join(w, "smi_" + n)).read().strip())
    except Exception:
        return None
mem = load(os.path.join(w, "mem.json"))
plan = {}
for m in (mem if isinstance(mem, list) else [mem] if mem else []):
    plan[m.get("bn_mode")] = m
r = {n: load(os.path.join(w, n + ".json")) for n in names}
MiB = 1048576.0
def f(x, fmt="%.1f"):
    return "-" if x is None else fmt % x
print()
print("## %s, batch %s, %sx%s, fp32, TF32 %s" % (model, batch, size, size,
      "off unless the row says tf32 (iabn: IABN_TF32; PyTorch: allow_tf32 in cuBLAS and cuDNN)"))
print()
print("Step: median of the timed steps (after one warm-up), forward + backward + SGD update, "
      "device synchronised after the backward and after the update (no per-node synchronisation: "
      "bench step profiles nodes only with --ops).  iabn 'held' = arena + io + parameters + "
      "gradients + momentum as planned; 'driver' = the rise of used device memory over the run "
      "(cudaMemGetInfo).  PyTorch: cudnn.benchmark on, the parity.py network (standard BN).")
print()
print("| run | TF32 | step ms | arena MiB (plan) | plan total MiB (iabn mem) | iabn held / driver MiB | PyTorch max_memory_allocated MiB | nvidia-smi rise MiB |")
print("|---|---|---|---|---|---|---|---|")
for n in names:
    j = r[n] or {}
    bn = j.get("bn_mode")
    tot = plan.get(bn, {}).get("total_bytes") if bn and "tf32" not in n else None
    tf = j.get("tf32", n.endswith("tf32")) if j else None
    held = "-" if "held_bytes" not in j else "%s / %s" % (f(j["held_bytes"] / MiB),
          f(j["device_used_bytes"] / MiB if "device_used_bytes" in j else None))
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (n, "-" if tf is None else ("on" if tf else "off"),
          f(j.get("step_ms")), f(j["arena_bytes"] / MiB if "arena_bytes" in j else None),
          f(tot / MiB if tot else None), held, f(j["peak_bytes"] / MiB if j.get("peak_bytes") else None), f(smi(n), "%.0f")))
print()
def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b
g = lambda n, k: (r.get(n) or {}).get(k)
std, ip, pt = g("iabn_standard", "step_ms"), g("iabn_inplace_abn_ii", "step_ms"), g("pytorch_standard", "step_ms")
ptpeak = g("pytorch_standard", "peak_bytes")
iptot = g("iabn_inplace_abn_ii", "held_bytes") or plan.get("inplace_abn_ii", {}).get("total_bytes")
smi_ip, smi_pt = smi("iabn_inplace_abn_ii"), smi("pytorch_standard")
rows = [
    ("step time, standard BN, vs PyTorch + cuDNN", ratio(std, pt), "<= 1.00x", 1.00),
    ("in-place ABN II over standard", ratio(ip, std), "<= 1.02x", 1.02),
    ("peak memory, in-place ABN II (held as planned) vs PyTorch standard (max_memory_allocated)", ratio(iptot, ptpeak), "<= 0.55x", 0.55),
    ("same, iabn's driver-measured rise vs PyTorch max_memory_allocated", ratio(g("iabn_inplace_abn_ii", "device_used_bytes"), ptpeak), "<= 0.55x", 0.55),
    ("same, nvidia-smi rise of each process (CUDA context and workspaces included)", ratio(smi_ip, smi_pt), "<= 0.55x (indicative)", 0.55),
]
t32 = ratio(g("iabn_standard_tf32", "step_ms"), g("pytorch_standard_tf32", "step_ms"))
if t32 is not None:
    rows.append(("step time, standard BN, TF32 on both sides", t32, "<= 1.00x", 1.00))
print("| target (docs/TARGETS.md, GPU) | measured | target | met |")
print("|---|---|---|---|")
for what, v, t, lim in rows:
    print("| %s | %s | %s | %s |" % (what, f(v, "%.3fx"), t, "-" if v is None else ("yes" if v <= lim else "NO")))
json.dump({"runs": r, "plan": plan, "smi_rise_mib": {n: smi(n) for n in names},
           "model": model, "batch": int(batch), "size": int(size)}, open(out, "w"), indent=1)
PY
fi
md ""
md "Finished in $(elapsed)s; $FAILS step(s) failed or timed out."
echo
cat "$MD"
[ "$FAILS" -eq 0 ]
