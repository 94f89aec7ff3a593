#!/usr/bin/env bash
# The README's first command, tools/quickstart.sh, on the build tree of this test: it must exit
# 0 and print all of its output, down to the dissector's summary line and where the captures
# are kept, and the packets it shows must all be RoCE packets.
# Usage: quickstart_test.sh BUILD-DIR. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
build=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v ibv_rc_pingpong >/dev/null && command -v ib_write_bw >/dev/null \
  || { echo "SKIP: ibverbs-utils / perftest not installed"; exit 77; }
log=$(mktemp)
kept=""
trap 'rm -rf "$log" $kept' EXIT
fail() { echo "FAIL: $*"; cat "$log"; exit 1; }

rc=0
UROCE_BUILD_DIR=$build bash "$(dirname "$0")/../../tools/quickstart.sh" >"$log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "the quickstart exited with status $rc"
kept=$(sed -n 's/^captures kept in \([^ ]*\) .*/\1/p' "$log")
[ -d "$kept" ] || fail "no 'captures kept in DIR' line naming a directory"
summary=$(grep '^summary: ' "$log") || fail "no summary line from uroce-dissect"
grep -qE 'RoCE [1-9][0-9]* \(bad ICRC 0\)' <<<"$summary" || fail "summary: $summary"
# The dissected packets: the lines between the heading and the summary, RoCE ones only.
shown=$(sed -n '/^=== the first RoCE packets/,/^summary: /p' "$log" | sed '1d;$d')
[ "$(grep -c . <<<"$shown")" -eq 12 ] || fail "expected 12 dissected packets"
! grep -v '  ICRC ok' <<<"$shown" || fail "a packet shown is not a good RoCE packet"
grep -q 'iters in' "$log" || fail "ibv_rc_pingpong printed no result"
echo "ok: quickstart exited 0; $summary"
echo "ok: $(grep -c . <<<"$shown") RoCE packets shown; captures kept in $kept (removed)"
