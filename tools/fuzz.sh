#!/bin/sh
# fuzz.sh: build the libFuzzer targets with clang (ASan + UBSan, the library
# instrumented too) in build-fuzz/ and run each for a bounded time.
#
#   tools/fuzz.sh [SECONDS] [NAME...]
#
# SECONDS (default 60) is the run time per target; NAMEs restrict the run to
# those targets (default: every target tests/fuzz/meson.build builds).
# Per target, tests/fuzz/<name>.seeds lists glob patterns (relative to the
# repository root) of seed files, and tests/fuzz/<name>.dict, if present, is
# passed as the dictionary.  The working corpus is kept in
# build-fuzz/corpus/<name>, crashes go to build-fuzz/artifacts/.
# Exit status: 0 when every target ran its time without a finding.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
[ $# -gt 0 ] && shift
build="$root/build-fuzz"
cd "$root"

if [ ! -f "$build/build.ninja" ]; then
    CC=clang meson setup "$build" -Dfuzz=true -Dcuda=disabled -Dnccl=disabled \
        -Dmpi=disabled -Dopenmp=disabled -Dbuildtype=debugoptimized \
        -Ddefault_library=static -Db_lundef=false \
        "-Dc_args=-fsanitize=fuzzer-no-link,address,undefined" \
        "-Dc_link_args=-fsanitize=address,undefined"
fi

# Regenerate first: a build directory set up before a target was added would
# otherwise list (and run) nothing.
ninja -C "$build" build.ninja >/dev/null
# Fuzz targets are the executables defined under tests/fuzz.
targets=$(meson introspect --targets "$build" | /usr/bin/python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t["type"] == "executable" and "/tests/fuzz/" in t["defined_in"]:
        print(t["name"], t["filename"][0])
')
[ -n "$targets" ] || { echo "fuzz.sh: no fuzz targets in $build" >&2; exit 1; }

list="$build/fuzz-targets.txt"
echo "$targets" > "$list"
failed=""
while read -r name exe; do
    if [ $# -gt 0 ]; then
        want=0
        for n in "$@"; do [ "$n" = "$name" ] && want=1; done
        [ $want = 1 ] || continue
    fi
    ninja -C "$build" "$(realpath --relative-to="$build" "$exe")"
    corpus="$build/corpus/$name"
    mkdir -p "$corpus" "$build/artifacts"
    if [ -f "tests/fuzz/$name.seeds" ]; then
        for pat in $(grep -v '^[[:space:]]*\(#\|$\)' "tests/fuzz/$name.seeds"); do
            for f in $pat; do [ -f "$f" ] && cp "$f" "$corpus/"; done
        done
    fi
    dict=""
    [ -f "tests/fuzz/$name.dict" ] && dict="-dict=tests/fuzz/$name.dict"
    echo "== $name: ${secs}s"
    # shellcheck disable=SC2086
    if "$exe" -max_total_time="$secs" -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$name-" $dict "$corpus" </dev/null; then
        echo "== $name: ok"
    else
        echo "== $name: FAILED (see $build/artifacts/)" >&2
        failed="$failed $name"
    fi
done < "$list"
if [ -n "$failed" ]; then
    echo "fuzz.sh: findings in:$failed" >&2
    exit 1
fi
