#!/usr/bin/env bash
# A raw-packet QP beside RoCE on one interface (af_packet port): tests/verbs/raw_udp.c in
# namespace A takes UDP datagrams the kernel's socket in namespace B sends it (through its
# flow rule) and answers each with a frame it builds itself, which B's socket must receive
# byte for byte; meanwhile ibv_rc_pingpong runs between the same two interfaces, as its own
# uroce processes, and must finish as always. Neither sees the other's frames.
# The port is the default's (af_packet) or UROCE_PORT's (dpdk: net_af_packet; af_xdp: one
# process per interface holds the XDP hook, so the pingpong runs without it there). Then
# perftest's raw_ethernet_bw paced by a per-QP rate limit.
# Usage: raw_udp.sh LIBDIR UROCE RAW_UDP. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1 uroce=$2 prog=$3
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v ibv_rc_pingpong >/dev/null || { echo "SKIP: ibverbs-utils not installed"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test, wait_listen
tag=r$$
ns_test "$tag" 10.93.0.1/24 10.93.0.2/24 fd00:93::1/64 fd00:93::2/64
mac() { ip netns exec "$1" cat "/sys/class/net/$2/address"; }
mac_a=$(mac "$nsA" "${tag}va") mac_b=$(mac "$nsB" "${tag}vb")
count=50

# RoCE: ibv_rc_pingpong, server in B, client in A, both under uroce (one process each).
pingpong=1
[ "${UROCE_PORT:-}" != af_xdp ] || pingpong=0
if [ "$pingpong" = 1 ]; then
  ip netns exec "$nsB" "$uroce" run --iface "${tag}vb" -- timeout 60 \
    ibv_rc_pingpong -d uroce0 -g 1 -n 2000 >"$dir/pp_server.log" 2>&1 &
  pp_server=$!
  wait_listen "$nsB"
  ip netns exec "$nsA" "$uroce" run --iface "${tag}va" -- timeout 60 \
    ibv_rc_pingpong -d uroce0 -g 1 -n 2000 10.93.0.2 >"$dir/pp_client.log" 2>&1 &
  pp_client=$!
fi

# Raw: the program in A, the kernel's UDP socket in B.
ip netns exec "$nsA" "$uroce" run --iface "${tag}va" -- timeout 60 \
  "$prog" "$mac_a" 10.93.0.1 7001 "$mac_b" 10.93.0.2 7000 "$count" >"$dir/raw.log" 2>&1 &
raw=$!
for _ in $(seq 200); do grep -q '^ready' "$dir/raw.log" && break; kill -0 "$raw" 2>/dev/null || break; sleep 0.1; done
grep -q '^ready' "$dir/raw.log" || { echo "FAIL: the raw program did not start"; cat "$dir/raw.log"; exit 1; }
if ! ip netns exec "$nsB" timeout 60 /usr/bin/python3 - "$count" <<'PY'; then
import socket, sys
count = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.93.0.2", 7000))
s.settimeout(1.0)
want, got = {}, {}
for i in range(count):
    msg = f"datagram {i} ".encode() * (1 + i % 7)
    want[b"re: " + msg] = i
    s.sendto(msg, ("10.93.0.1", 7001))
    try:  # an answer may come at once; the rest are read below
        data, src = s.recvfrom(4096)
        if src == ("10.93.0.1", 7001): got[data] = src
    except socket.timeout:
        pass
for _ in range(count * 2):
    if len(got) == count: break
    try:
        data, src = s.recvfrom(4096)
    except socket.timeout:
        continue
    if src == ("10.93.0.1", 7001): got[data] = src
missing = [i for m, i in want.items() if m not in got]
extra = [m for m in got if m not in want]
print(f"peer: {len(got)} answers of {count}, missing {missing[:5]}, unexpected {len(extra)}")
sys.exit(0 if not missing and not extra else 1)
PY
  echo "FAIL: the peer's socket did not get every answer"; cat "$dir/raw.log"; exit 1
fi
wait "$raw" || { echo "FAIL: the raw program"; cat "$dir/raw.log"; exit 1; }
if [ "$pingpong" = 0 ]; then
  echo "ok: raw QP on ${UROCE_PORT:-af_packet}: $(tail -1 "$dir/raw.log")"
  exit 0
fi
wait "$pp_client" || { echo "FAIL: ibv_rc_pingpong client beside it"; cat "$dir/pp_client.log"; exit 1; }
wait "$pp_server" || { echo "FAIL: ibv_rc_pingpong server"; cat "$dir/pp_server.log"; exit 1; }
grep -q "iters in" "$dir/pp_client.log" || { echo "FAIL: pingpong printed no result"; cat "$dir/pp_client.log"; exit 1; }
echo "ok: raw QP on ${UROCE_PORT:-af_packet}: $(tail -1 "$dir/raw.log"); beside it ibv_rc_pingpong: $(grep 'iters in' "$dir/pp_client.log")"

# perftest's raw_ethernet_bw with packet pacing (ibv_modify_qp_rate_limit on its raw QP, from
# packet_pacing_caps): 2 MiB/s, far below what any machine sends without a limit (100 MiB/s
# and more), must hold. The sender alone: its own figure is what it got out.
if command -v raw_ethernet_bw >/dev/null; then
  ip netns exec "$nsA" "$uroce" run --iface "${tag}va" -- timeout 60 raw_ethernet_bw --client \
    -d uroce0 -B "$mac_a" -E "$mac_b" -s 1400 -D 2 --rate_limit=2 --rate_units=M \
    --rate_limit_type=PP >"$dir/paced.log" 2>&1 || { echo "FAIL: raw_ethernet_bw"; cat "$dir/paced.log"; exit 1; }
  bw=$(awk '$1 == 1400 && NF >= 5 {print $4}' "$dir/paced.log" | tail -1)
  awk -v b="${bw:-0}" 'BEGIN { exit !(b > 0.2 && b <= 2.2) }' \
    || { echo "FAIL: raw_ethernet_bw paced at 2 MiB/s sent ${bw:-nothing} MiB/s"; cat "$dir/paced.log"; exit 1; }
  echo "ok: raw_ethernet_bw --rate_limit=2 --rate_units=M --rate_limit_type=PP sends $bw MiB/s"
else
  echo "skipped: perftest's raw_ethernet_bw is not installed (the rate limit is not tried)"
fi
