#!/usr/bin/env bash
# Quickstart: install, build, create two "hosts" (network namespaces joined by a veth pair),
# run unmodified ibv_rc_pingpong and ib_write_bw over uroce between them, show the results and
# the first packets of the recorded traffic (uroce-dissect), and clean up. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"${UROCE_JOBS:-2}" --target uroce_ibverbs uroce uroce-dissect >/dev/null
uroce=$PWD/build/tools/uroce/uroce
dissect=$PWD/build/tools/dissect/uroce-dissect

a=uroce-qs-a b=uroce-qs-b
out=$(mktemp -d)
cleanup() {
  ip netns pids "$b" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add "$a"; ip netns add "$b"
ip link add uqs-a type veth peer name uqs-b
ip link set uqs-a netns "$a"; ip link set uqs-b netns "$b"
ip -n "$a" link set uqs-a up; ip -n "$b" link set uqs-b up
ip -n "$a" link set lo up; ip -n "$b" link set lo up
ip -n "$a" addr add 10.90.0.1/24 dev uqs-a; ip -n "$b" addr add 10.90.0.2/24 dev uqs-b
echo "hosts: $a (10.90.0.1, uqs-a) <-> $b (10.90.0.2, uqs-b)"

. tools/lib/netns.sh  # wait_listen NS: the server in NS is listening

pair() {  # run "$@" as server in b and client in a (client records a pcap)
  ip netns exec "$b" "$uroce" run --iface uqs-b -- "$@" >"$out/server.txt" 2>&1 &
  local server=$!
  wait_listen "$b"
  ip netns exec "$a" "$uroce" run --iface uqs-a --pcap "$out/$1.pcap" -- "$@" 10.90.0.2
  wait "$server"
}

echo; echo "=== ibv_rc_pingpong -g 1 (client side; the server prints the same) ==="
pair ibv_rc_pingpong -d uroce0 -g 1 -n 1000
echo; echo "=== ib_write_bw -x 1 -s 65536 ==="
pair ib_write_bw -d uroce0 -x 1 -s 65536 -n 2000
echo; echo "=== the first RoCE packets of ibv_rc_pingpong, as uroce-dissect shows them ==="
"$dissect" "$out/ibv_rc_pingpong.pcap" | grep -v ' TCP \| ARP ' | head -n 12
"$dissect" "$out/ibv_rc_pingpong.pcap" | tail -n 1
echo; echo "captures kept in $out (try: $dissect --explain $out/ib_write_bw.pcap | less)"
