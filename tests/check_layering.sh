#!/bin/sh
# check_layering.sh SRC_ROOT: the layering rules of src/tensor, checked on
# the source tree (run by meson, suite unit).
#  1. nothing in src/tensor includes a header of a layer above it
#     (src/graph, src/layers, src/models, src/data);
#  2. the build flag IABN_HAVE_CUDA is read only by the CUDA backend
#     (src/tensor/cuda/) and the one dispatch file (src/tensor/device.c);
#     everything else asks iabn_backend_available() at run time.
# Prints each offending line and exits 1; exits 0 when the tree is clean.
root=${1:?usage: check_layering.sh SRC_ROOT}
cd "$root" || exit 2
[ -d src/tensor ] || { echo "no src/tensor under $root"; exit 2; }
bad=0
up=$(grep -rnE '#[[:space:]]*include[[:space:]]*"(graph|layers|models|data)/' src/tensor)
if [ -n "$up" ]; then
    echo "src/tensor includes a header of a higher layer:"
    echo "$up"
    bad=1
fi
flag=$(grep -rn 'IABN_HAVE_CUDA' src tools tests examples 2>/dev/null \
       --include='*.c' --include='*.h' --include='*.cu' --include='*.cpp' |
       grep -v -e '^src/tensor/cuda/' -e '^src/tensor/device\.c:')
if [ -n "$flag" ]; then
    echo "IABN_HAVE_CUDA outside src/tensor/cuda/ and src/tensor/device.c:"
    echo "$flag"
    bad=1
fi
[ $bad -eq 0 ] && echo "layering ok"
exit $bad
