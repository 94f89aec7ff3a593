#!/usr/bin/env bash
# The README's first command, tools/quickstart.sh, on the build tree of this test. It must exit
# 0 and print all of its output, down to the dissector's summary line and where the captures
# are kept, and the packets it shows must all be RoCE packets. When a step fails (here: a bad
# UROCE_MTU, so the pingpong server cannot start), it must exit 1 with one last line on stderr
# saying which step failed.
# Usage: quickstart_test.sh BUILD-DIR. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
build=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v ibv_rc_pingpong >/dev/null && command -v ib_write_bw >/dev/null \
  || { echo "SKIP: ibverbs-utils / perftest not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
log=$dir/out.txt
fail() { echo "FAIL: $*"; cat "$log"; exit 1; }
quickstart() {  # the quickstart, its captures and logs kept in $dir
  TMPDIR=$dir UROCE_BUILD_DIR=$build bash "$(dirname "$0")/../../tools/quickstart.sh" "$@"
}

rc=0
quickstart >"$log" 2>&1 || rc=$?
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
echo "ok: 12 RoCE packets shown; then: $(grep '^captures kept in' "$log")"

rc=0
UROCE_MTU=7 quickstart >"$log" 2>"$dir/err.txt" || rc=$?
last=$(tail -n 1 "$dir/err.txt")
[ "$rc" -eq 1 ] && [[ $last == "quickstart: ibv_rc_pingpong: the server did not start"* ]] \
  || { cat "$dir/err.txt"; fail "with a bad setting: exit $rc, last line: $last"; }
echo "ok: a failed step: exit 1, $last"
