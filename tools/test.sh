#!/usr/bin/env bash
# test.sh: sets up a fresh Debian machine, builds iabn with warnings as errors,
# runs the whole test suite, builds once more without oneDNN, then runs the
# unit and gradient tests again under AddressSanitizer + UndefinedBehavior-
# Sanitizer, and prints one closing line
# "N passed, N failed".  This is the README's test command and what CI runs.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

build() { # dir, meson options...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
  ninja -C "$dir" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
}

passed=0; failed=0
count() { # dir: adds the results of its testlog.json
  local log=$1/meson-logs/testlog.json
  [ -f "$log" ] || { failed=$((failed + 1)); return; }
  local p f
  p=$(grep -c '"result": "OK"' "$log"); f=$(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")
  passed=$((passed + p)); failed=$((failed + f))
}

if build build-test -Dwerror=true; then
  meson test -C build-test --num-processes 2 --print-errorlogs 2>&1 | tail -40
  count build-test
else
  echo "build failed"; failed=$((failed + 1))
fi

# without oneDNN (a machine without libdnnl-dev, the GPU machines' kit among
# them): the library and programs build with warnings as errors there too,
# and the unit suite passes with the native convolutions
if build build-nodnnl -Dwerror=true -Ddnnl=disabled -Dcuda=disabled; then
  meson test -C build-nodnnl --num-processes 2 --print-errorlogs --suite unit 2>&1 | tail -20
  count build-nodnnl
else
  echo "build without oneDNN failed"; failed=$((failed + 1))
fi

if [ "${IABN_SKIP_SANITIZE:-0}" != 1 ]; then
  if build build-asan -Dwerror=true -Dcuda=disabled -Dbuildtype=debugoptimized \
       -Db_sanitize=address,undefined -Db_lundef=false; then
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      meson test -C build-asan --num-processes 2 --print-errorlogs \
        --suite unit --suite grad --suite planner --suite kernels --suite data 2>&1 | tail -40
    count build-asan
  else
    echo "sanitizer build failed"; failed=$((failed + 1))
  fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
