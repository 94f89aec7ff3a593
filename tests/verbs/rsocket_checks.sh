#!/usr/bin/env bash
# uroce's rsockets between two network namespaces (tests/verbs/rsocket_checks.c): a peer that
# breaks the protocol (a data message larger than a receive half, more messages than its
# credits allow: the server must end the connection with EPROTO and stay in bounds; under the
# sanitizers ASan watches its buffers), and two threads per socket sending and receiving at
# once (none may miss the wake-up the other took).
# Usage: rsocket_checks.sh UROCE CHECKS. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
uroce=$1 prog=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test, wait_listen
tag=h$$
ns_test "$tag" 10.93.0.1/24 10.93.0.2/24 fd00:93::1/64 fd00:93::2/64
srv=10.93.0.2
run_in() { local ns=$1 ifc=$2; shift 2; ip netns exec "$ns" "$uroce" run --iface "$ifc" -- timeout 60 "$@"; }

for mode in oversize flood; do
  run_in "$nsB" "${tag}vb" "$prog" server "$srv" 7479 >"$dir/server.log" 2>&1 &
  server=$!
  wait_listen "$nsB" 7479 "$server" || { cat "$dir/server.log"; exit 1; }
  if ! run_in "$nsA" "${tag}va" "$prog" client "$srv" 7479 "$mode" >"$dir/client.log" 2>&1; then
    echo "FAIL: $mode: the client"; cat "$dir/client.log"; echo "-- server:"; cat "$dir/server.log"; exit 1
  fi
  wait "$server" || { echo "FAIL: $mode: the server"; cat "$dir/server.log"; cat "$dir/client.log"; exit 1; }
  grep -q "^error EPROTO$" "$dir/server.log" || { echo "FAIL: $mode"; cat "$dir/server.log"; exit 1; }
  echo "ok: $mode: $(grep '^connected' "$dir/client.log"); $(grep '^sent' "$dir/client.log"); the server ended the connection: EPROTO"
done

run_in "$nsB" "${tag}vb" "$prog" duplex-server "$srv" 7479 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 7479 "$server" || { cat "$dir/server.log"; exit 1; }
if ! run_in "$nsA" "${tag}va" "$prog" duplex-client "$srv" 7479 >"$dir/client.log" 2>&1; then
  echo "FAIL: duplex: the client"; cat "$dir/client.log"; echo "-- server:"; cat "$dir/server.log"; exit 1
fi
wait "$server" || { echo "FAIL: duplex: the server"; cat "$dir/server.log"; exit 1; }
echo "ok: two threads per socket: client: $(grep '^duplex' "$dir/client.log"); server: $(grep '^duplex' "$dir/server.log")"
