#!/usr/bin/env bash
# The af_packet port's kernel shield (drivers/xdp/kernel_shield.h) between two namespaces
# joined by a veth pair:
#   - while uroce runs, its RoCE frames never reach the kernel's IP layer (Ip InReceives in
#     the server's namespace grows by the TCP exchange's few packets, not by the 4000 RoCE
#     frames of 2000 pingpong iterations; with port=af_packet and with DPDK's net_af_packet),
#     and the kernel still gets UDP 4791 for an address that is not the device's;
#   - the program leaves with the process: after a program ends, and after a kill -9, a UDP
#     datagram to port 4791 of the device's address reaches a plain socket again;
#   - without CAP_BPF and CAP_NET_ADMIN the device opens as before, says why in its devinfo
#     line, and libbpf prints nothing on the program's stderr.
# Usage: kernel_shield.sh LIBDIR. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v ibv_rc_pingpong >/dev/null && command -v python3 >/dev/null \
  || { echo "SKIP: ibverbs-utils / python3 not installed"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"
ns_test ks$$ 10.96.0.1/24 10.96.0.2/24 fd96::1/64 fd96::2/64
ifA=ks$$va ifB=ks$$vb
ip -n "$nsB" addr add 10.96.1.2/24 dev "$ifB"  # an address uroce's device does not have
ip -n "$nsA" route add 10.96.1.0/24 dev "$ifA"

fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do [ -s "$f" ] && { echo "-- $f"; tail -20 "$f"; }; done; exit 1; }
on() {  # NS IFACE CMD...: CMD on uroce's default (af_packet) port of IFACE in NS
  local ns=$1 ifc=$2; shift 2
  ip netns exec "$ns" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="$ifc" timeout 60 "$@"
}
ip_in() { ip netns exec "$1" awk '/^Ip: [0-9]/ { print $4 }' /proc/net/snmp; }
# udp_reaches ADDR: a datagram from A to ADDR:4791 reaches a plain UDP socket in B. Both uses
# expect it to arrive: the bounds (30 s) are for a loaded machine, whose Python may take
# seconds to start, and the sender waits until the receiver is bound.
udp_reaches() {
  local addr=$1 ready="$dir/ready.$RANDOM"
  ip netns exec "$nsB" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind((sys.argv[1], 4791))
open(sys.argv[2], "w").close()
s.settimeout(30)
try:
    sys.exit(0 if s.recv(64) == b"shield" else 1)
except socket.timeout:
    sys.exit(1)' "$addr" "$ready" &
  local rx=$!
  for _ in $(seq 600); do [ -e "$ready" ] && break; kill -0 "$rx" 2>/dev/null || break; sleep 0.05; done
  [ -e "$ready" ] || { echo "the UDP receiver never bound $addr:4791"; kill "$rx" 2>/dev/null; wait "$rx" 2>/dev/null; return 1; }
  ip netns exec "$nsA" python3 -c '
import socket, sys
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"shield", (sys.argv[1], 4791))' "$addr"
  wait "$rx"
}

# 1. A pingpong: the kernel's IP layer sees the TCP exchange only. shielded_pingpong PORT
# DRIVER: both sides on port PORT; the server's devinfo line names DRIVER and the program.
shielded_pingpong() {
  local port=$1 driver=$2 before seen server
  before=$(ip_in "$nsB")
  on "$nsB" "$ifB" env UROCE_PORT="$port" UROCE_DEVINFO=1 ibv_rc_pingpong -d uroce0 -g 1 -n 2000 -c \
    >"$dir/server.log" 2>&1 &
  server=$!
  wait_listen "$nsB" 18515 "$server" || fail "$port: pingpong server did not start"
  on "$nsA" "$ifA" env UROCE_PORT="$port" ibv_rc_pingpong -d uroce0 -g 1 -n 2000 -c 10.96.0.2 \
    >"$dir/client.log" 2>&1 || fail "$port: pingpong client"
  wait "$server" || fail "$port: pingpong server"
  grep -q "2000 iters" "$dir/client.log" || fail "$port: no '2000 iters' in the client's output"
  grep -q "$driver.*a tc program at the interface's ingress" "$dir/server.log" \
    || fail "$port: the server's device did not attach the tc program (devinfo above)"
  seen=$(( $(ip_in "$nsB") - before ))
  [ "$seen" -lt 500 ] || fail "$port: the kernel's IP layer saw $seen packets during 2000 iterations (RoCE frames reached it)"
  echo "ok: port=$port: 2000 pingpong iterations, the server's kernel IP layer saw $seen packets (the TCP exchange)"
}
shielded_pingpong af_packet "af_packet socket"
# DPDK's net_af_packet reads through a packet socket too (both sides on it: the af_packet
# port's UDP GSO super-frames cross a veth whole, and net_af_packet takes 10 KiB at most).
shielded_pingpong dpdk net_af_packet

# 2. While uroce runs, UDP 4791 for another address still reaches the kernel.
on "$nsB" "$ifB" ibv_rc_pingpong -d uroce0 -g 1 -n 5 >"$dir/waiting.log" 2>&1 &
waiting=$!
wait_listen "$nsB" 18515 "$waiting" || fail "waiting server did not start"
udp_reaches 10.96.1.2 || fail "UDP 4791 to 10.96.1.2 (not uroce's address) did not reach the kernel while uroce ran"
echo "ok: UDP 4791 to another address reaches the kernel while uroce runs"

# 3. kill -9: the program leaves with the process.
# (the program itself, not the shell that started it: every process in B, which is only it)
pids=$(ip netns pids "$nsB")
[ -n "$pids" ] || fail "the waiting server is gone before the kill"
kill -9 $pids
wait "$waiting" 2>/dev/null || true
# A killed process is gone once the kernel has finished its exit (its descriptors closed):
# wait for that, up to 5 s.
for _ in $(seq 100); do [ -z "$(ip netns pids "$nsB")" ] && break; sleep 0.05; done
[ -z "$(ip netns pids "$nsB")" ] || fail "something still runs in $nsB 5 s after the kill"
udp_reaches 10.96.0.2 || fail "UDP 4791 to 10.96.0.2 does not reach the kernel after a kill -9 (a tc program stayed)"
echo "ok: after a kill -9 and after a normal end, UDP 4791 to the device's address reaches the kernel again"

# 4. Without the privileges (setpriv drops them from the bounding set).
on "$nsB" "$ifB" setpriv --bounding-set=-bpf,-net_admin,-sys_admin \
  --inh-caps=-bpf,-net_admin,-sys_admin env UROCE_DEVINFO=1 ibv_devinfo -d uroce0 \
  >"$dir/unpriv.log" 2>&1 || fail "ibv_devinfo without CAP_BPF/CAP_NET_ADMIN"
grep -q "no tc program: needs CAP_BPF" "$dir/unpriv.log" || fail "devinfo does not say why there is no tc program"
grep -q "PORT_ACTIVE" "$dir/unpriv.log" || fail "the device did not open without the privileges"
! grep -q libbpf "$dir/unpriv.log" || fail "libbpf printed on the program's stderr"
echo "ok: without CAP_BPF/CAP_NET_ADMIN: the device opens, says why, and libbpf stays quiet"
