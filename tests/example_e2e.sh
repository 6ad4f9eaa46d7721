#!/bin/sh
# example_e2e.sh: installs the build into a temporary root, compiles
# examples/train_tiny.c against the installed header and library with
# `pkg-config --cflags --libs iabn` alone, runs it (its loss must fall), and
# checks that the installed libiabn exports the session and trainer entry
# points.  Usage: example_e2e.sh MESON BUILD_DIR EXAMPLE.c
set -eu
meson=$1 build=$2 example=$3
root=$(mktemp -d "${TMPDIR:-/tmp}/iabn_e2e.XXXXXX")
trap 'rm -rf "$root"' EXIT
"$meson" install -C "$build" --no-rebuild --quiet --destdir "$root" >/dev/null
pc=$(find "$root" -name iabn.pc | head -n 1)
[ -n "$pc" ] || { echo "no iabn.pc installed under $root"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$root"
flags=$(pkg-config --cflags --libs iabn)
libdir=$(dirname "$(dirname "$pc")")   # the .pc lies in LIBDIR/pkgconfig
${CC:-cc} -std=c11 -Wall -Wextra -Werror "$example" $flags -o "$root/train_tiny"
out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$root/train_tiny")
echo "$out"
echo "$out" | grep -q "loss fell: yes" || { echo "FAIL: the example's loss did not fall"; exit 1; }
syms=$(nm -D --defined-only "$libdir/libiabn.so")
for s in iabn_session_build iabn_session_run iabn_session_largest iabn_trainer_run \
         iabn_trainer_evaluate iabn_trainer_request_stop iabn_l1_loss iabn_mse_loss \
         iabn_graph_input_requires_grad iabn_config_load iabn_ckpt_load iabn_confusion_miou; do
    echo "$syms" | grep -q " T $s\$" || { echo "FAIL: $s is not exported by the installed libiabn"; exit 1; }
done
echo "installed libiabn exports iabn_session_* and iabn_trainer_*: ok"
