#!/usr/bin/env bash
# test_trust.sh: issue 16's command-line cases, end to end through `iabn`:
# each case runs the program as a user would and checks its exit status and
# the message that names the problem.
#   usage: test_trust.sh IABN WORKDIR
set -u
IABN=$1
W=$2
rm -rf "$W" && mkdir -p "$W" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
# expect NAME WANT_RC PATTERN CMD...: runs CMD, checks rc and that stdout+stderr match PATTERN
expect() {
    local name=$1 want=$2 pat=$3; shift 3
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ "$rc" != "$want" ]; then fail "$name: exit $rc, expected $want: $out"; return; fi
    if ! grep -qE -- "$pat" <<<"$out"; then fail "$name: output lacks /$pat/: $out"; return; fi
    ok "$name"
}

# 16.6: sizes whose products overflow int are refused with the bytes needed
expect "mem 100000x100000" 1 "does not fit: needs 3840000000000 bytes" \
    "$IABN" mem resnet50 --size 100000x100000
expect "mem: an intermediate tensor too large" 1 "mod1.conv1 .*does not fit: needs [0-9]+ bytes" \
    "$IABN" mem resnet50 --batch 1 --size 20000x20000
expect "mem --size past int" 2 "--size" "$IABN" mem resnet50 --size 3000000000x2
expect "mem still plans a normal size" 0 "inplace_abn_ii" "$IABN" mem resnet50 --batch 2 --size 64
expect "mem budget search past the limit" 0 "largest batch" "$IABN" mem resnet50 --budget 4G --bn standard

echo "$fails failed"
[ "$fails" = 0 ]
