#!/usr/bin/env bash
# uroce-replay over every capture the kernel's rxe made in ../shared/pcaps/kernel-rxe (both
# roles): each must conform, except those tests/replay/shared_captures.expected lists with
# the reason. Usage: shared_captures.sh UROCE_REPLAY [PCAP_DIR]. Exit 77 when there are none.
set -euo pipefail
replay=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=${2:-$(cd "$here/../../.." && pwd)/shared/pcaps/kernel-rxe}
[ -d "$dir" ] || { echo "SKIP: no captures at $dir"; exit 77; }
expected=$here/shared_captures.expected
rc=0 n=0
for f in "$dir"/*.pcap; do
  for role in responder requester; do
    name="$(basename "$f" .pcap).$role"
    want=$(awk -v n="$name" '$1 == n {print $2}' "$expected")
    want=${want:-CONFORMS}
    got=$({ "$replay" --role "$role" "$f" 2>&1 || true; } | awk '/^summary:/ {print $2}' | tr -d ';')
    n=$((n + 1))
    if [ "$got" != "$want" ]; then
      echo "FAIL: $name: $got, expected $want"
      "$replay" --role "$role" "$f" 2>&1 | grep -A3 '^divergences' || true
      rc=1
    fi
  done
done
[ $rc -eq 0 ] && echo "PASS: $n replays of $(ls "$dir"/*.pcap | wc -l) captures as expected"
exit $rc
