#!/usr/bin/env bash
# uroce's AF_XDP port (port=af_xdp) between two namespaces joined by a veth pair at MTU 9000,
# the interface shared with the kernel as on a plain NIC that keeps its driver:
#   - perftest over uroce while the kernel's own ping and a TCP transfer (data checked) run on
#     the same interfaces, and no RoCE frame reaches the kernel's UDP (its counters);
#   - RoCE MTU 4096 with data checked (two-descriptor frames), IPv6 GIDs, and rdma_cm's rping
#     with the kernel's neighbour tables flushed first (the port answers the engine's ARP and
#     neighbour solicitations from the kernel's table, having made the kernel resolve them);
#   - no XDP program left behind by a program that ends, one taken off after a kill -9, and a
#     second process on the same interface refused with one line, as is a process without
#     the capabilities (naming them, libbpf silent).
# Usage: af_xdp.sh LIBDIR UROCE_BIN. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1 uroce_bin=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces and XDP"; exit 77; }
command -v ib_write_bw >/dev/null && command -v rping >/dev/null && command -v ping >/dev/null \
  || { echo "SKIP: perftest / rdmacm-utils / iputils-ping not installed"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"
ns_test ax$$ 10.94.0.1/24 10.94.0.2/24 fd94::1/64 fd94::2/64
ifA=ax$$va ifB=ax$$vb
ip -n "$nsA" link set "$ifA" mtu 9000
ip -n "$nsB" link set "$ifB" mtu 9000

fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do [ -s "$f" ] && { echo "-- $f"; tail -20 "$f"; }; done; exit 1; }
# on NS IFACE CMD...: CMD on uroce's AF_XDP port of IFACE in NS.
on() {
  local ns=$1 ifc=$2; shift 2
  ip netns exec "$ns" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="$ifc" UROCE_PORT=af_xdp \
    timeout 60 "$@"
}
# pair NAME EXPECT SERVER_ADDR ARGS...: ARGS on both sides (server in B), the client to ADDR.
pair() {
  local name=$1 expect=$2 addr=$3; shift 3
  on "$nsB" "$ifB" "$@" >"$dir/server.log" 2>&1 &
  local server=$!
  wait_listen "$nsB" 18515 "$server" || fail "$name: server did not start"
  on "$nsA" "$ifA" "$@" "$addr" >"$dir/client.log" 2>&1 || fail "$name client"
  wait "$server" || fail "$name server"
  grep -qE "$expect" "$dir/client.log" || fail "$name: no '$expect' in the client's output"
  echo "ok: $name: $(grep -E "$expect" "$dir/client.log" | tail -1 | tr -s ' \t' ' ')"
}
xdp_attached() { ip -n "$1" link show dev "$2" | grep -q 'prog/xdp'; }
udp_in() {  # datagrams the kernel's UDP took in NS (delivered or not: InDatagrams + NoPorts)
  ip netns exec "$1" awk '/^Udp:/ { if (h) { print $2 + $3; exit } h = 1 }' /proc/net/snmp
}

# 1. perftest beside the kernel's own traffic on the same interfaces.
udp_before=$(udp_in "$nsB")
on "$nsB" "$ifB" env UROCE_DEVINFO=1 ib_write_bw -d uroce0 -x 1 -s 65536 -D 4 -F \
  >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 18515 "$server" || fail "ib_write_bw server did not start"
xdp_attached "$nsB" "$ifB" || fail "no XDP program on $ifB while uroce runs"
on "$nsA" "$ifA" ib_write_bw -d uroce0 -x 1 -s 65536 -D 4 -F 10.94.0.2 >"$dir/client.log" 2>&1 &
client=$!
# What the XDP programs do meanwhile (uroce stats: both processes' port counters), sampled
# while the client runs: the kernel's traffic below may outlast the 4 s transfer on a loaded
# machine, and a stats call after the programs exit finds nothing.
( while kill -0 "$client" 2>/dev/null; do
    "$uroce_bin" stats >"$dir/stats.new" 2>&1 && grep -q xdp_to_uroce "$dir/stats.new" \
      && mv "$dir/stats.new" "$dir/stats.log"
    sleep 0.3
  done ) &
sampler=$!
sleep 1  # the transfer is under way (4 s): the kernel's traffic goes beside it
ip netns exec "$nsA" ping -c 10 -i 0.2 -W 1 10.94.0.2 >"$dir/ping.log" 2>&1 || fail "ping beside uroce"
# 32 MiB over the kernel's TCP, checked at the far end.
ip netns exec "$nsB" python3 -c '
import hashlib, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.94.0.2", 18600)); s.listen(1); c, _ = s.accept(); h = hashlib.sha256(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b: break
    h.update(b); n += len(b)
print(n, h.hexdigest())' >"$dir/tcp_server.log" 2>&1 &
tcp_server=$!
for _ in $(seq 50); do [ -n "$(ip netns exec "$nsB" ss -Hltn 'sport = :18600')" ] && break; sleep 0.1; done
want=$(ip netns exec "$nsA" python3 -c '
import hashlib, socket
d = bytes(range(256)) * 4096; s = socket.create_connection(("10.94.0.2", 18600)); h = hashlib.sha256()
for _ in range(32): s.sendall(d); h.update(d)
s.close(); print(32 * len(d), h.hexdigest())') || fail "TCP transfer beside uroce"
wait "$tcp_server" || fail "TCP receiver"
[ "$(cat "$dir/tcp_server.log")" = "$want" ] || fail "TCP data differs: sent $want, got $(cat "$dir/tcp_server.log")"
wait "$sampler"
[ -s "$dir/stats.log" ] || fail "uroce stats never showed the XDP programs' counters"
to_us=$(awk '$1 == "xdp_to_uroce" {s += $2} END {print s + 0}' "$dir/stats.log")
to_kernel=$(awk '$1 == "xdp_to_kernel" {s += $2} END {print s + 0}' "$dir/stats.log")
[ "$to_us" -gt 1000 ] && [ "$to_kernel" -gt 10 ] \
  || fail "uroce stats: xdp_to_uroce $to_us, xdp_to_kernel $to_kernel (want RoCE to us, the rest to the kernel)"
wait "$client" || fail "ib_write_bw client"
wait "$server" || fail "ib_write_bw server"
grep -q "uroce's XDP program" "$dir/server.log" || fail "devinfo does not describe the AF_XDP port"
row=$(grep -E '^ 65536 ' "$dir/client.log" | tail -1 | tr -s ' \t' ' ')
[ -n "$row" ] || fail "ib_write_bw printed no result"
udp_leak=$(( $(udp_in "$nsB") - udp_before ))
# ib_write_bw moved some 10^5 RoCE frames: had the program passed them on, the kernel's UDP
# would have counted each (no socket on 4791).
[ "$udp_leak" -lt 100 ] || fail "$udp_leak UDP datagrams reached B's kernel during the RoCE run"
echo "ok: ib_write_bw 64 KiB over AF_XDP:$row; beside it $(grep -o '[0-9]* received' "$dir/ping.log") pings and 32 MiB of TCP, checked; B's kernel UDP saw $udp_leak datagrams; the XDP programs: $to_us frames to uroce, $to_kernel to the kernel"
xdp_attached "$nsB" "$ifB" && fail "the XDP program stayed on $ifB after uroce ended"
xdp_attached "$nsA" "$ifA" && fail "the XDP program stayed on $ifA after uroce ended"
echo "ok: no XDP program left on either interface"

# 2. RoCE MTU 4096 with the data checked (frames of two descriptors), and an IPv6 GID.
pair "ibv_rc_pingpong MTU 4096, 64 KiB, checked" "iters in" 10.94.0.2 \
  ibv_rc_pingpong -d uroce0 -g 1 -m 4096 -s 65536 -n 300 -c
ip -n "$nsA" neigh flush all; ip -n "$nsB" neigh flush all
pair "ib_send_bw over IPv6 (GID 2), neighbours flushed" "^ 65536 " 10.94.0.2 \
  ib_send_bw -d uroce0 -x 2 -s 65536 -n 2000 -F

# 3. rdma_cm, its address resolution starting from empty neighbour tables.
ip -n "$nsA" neigh flush all; ip -n "$nsB" neigh flush all
on "$nsB" "$ifB" rping -s -a 10.94.0.2 -C 200 -V >"$dir/rping_s.log" 2>&1 &
server=$!
wait_listen "$nsB" 7174 "$server" || fail "rping server did not start"  # its port reservation
on "$nsA" "$ifA" rping -c -a 10.94.0.2 -C 200 -V -v >"$dir/rping_c.log" 2>&1 || fail "rping client"
wait "$server" || fail "rping server"
pings=$(grep -c '^ping data: rdma-ping-' "$dir/rping_c.log" || true)
[ "$pings" -eq 200 ] || fail "rping: $pings of 200 pings came back"
echo "ok: rping over rdma_cm: $pings pings verified, neighbour tables flushed before"

# 4. One process per interface; what a killed one leaves is taken off by the next.
on "$nsB" "$ifB" ib_write_bw -d uroce0 -x 1 -F >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 18515 "$server" || fail "server did not start"
if on "$nsB" "$ifB" ibv_devinfo -d uroce0 >"$dir/second.log" 2>&1; then
  fail "a second process opened $ifB's AF_XDP port"
fi
grep -q "used through AF_XDP by another uroce process" "$dir/second.log" \
  || fail "the second process did not say why"
echo "ok: second process refused: $(grep -m1 'AF_XDP' "$dir/second.log")"
# Without the privileges (setpriv drops them): one line naming what is missing, nothing from
# libbpf, and the running server untouched.
if on "$nsB" "$ifB" setpriv --bounding-set=-bpf,-net_admin,-sys_admin,-net_raw \
    --inh-caps=-bpf,-net_admin,-sys_admin,-net_raw ibv_devinfo -d uroce0 >"$dir/unpriv.log" 2>&1; then
  fail "a process without CAP_NET_RAW/CAP_BPF/CAP_NET_ADMIN opened an AF_XDP port"
fi
grep -q "port=af_xdp: this process lacks CAP_BPF (or CAP_SYS_ADMIN), CAP_NET_ADMIN, CAP_NET_RAW" \
  "$dir/unpriv.log" || fail "the unprivileged process was not told what it lacks"
! grep -qi libbpf "$dir/unpriv.log" || fail "libbpf printed on the program's stderr"
echo "ok: without the privileges: $(grep -m1 'port=af_xdp' "$dir/unpriv.log")"
# (the program itself, not only `timeout` above it: everything in B)
ip netns pids "$nsB" | xargs -r kill -9; wait "$server" 2>/dev/null || true
# SIGKILL is asynchronous: a process tearing down its AF_XDP socket and umem may take a
# moment to leave (seen under load in a CI run); 5 s is plenty, a survivor is a failure.
for _ in $(seq 50); do [ -z "$(ip netns pids "$nsB")" ] && break; sleep 0.1; done
[ -z "$(ip netns pids "$nsB")" ] || fail "processes outlived kill -9 in B: $(ip netns pids "$nsB" | xargs -r ps -o pid=,stat=,comm= -p)"
xdp_attached "$nsB" "$ifB" || fail "expected the killed process's program still on $ifB"
ip netns exec "$nsA" ping -c 2 -i 0.2 -W 1 10.94.0.2 >/dev/null || fail "ping after the kill"
pair "ib_write_bw after a kill -9" "^ 65536 " 10.94.0.2 ib_write_bw -d uroce0 -x 1 -s 65536 -n 1000 -F
xdp_attached "$nsB" "$ifB" && fail "the XDP program stayed on $ifB"
echo "ok: the killed process's program was taken off and replaced; none left now"

# 5. An interface with four receive queues, as a NIC has: it spreads RoCE flows over them by
# UDP source port, which uroce gives each QP its own of. The port binds a socket on every
# queue; with queue 0's alone, the frames that land on the others would go to the kernel. The
# client sends through the kernel (port=af_packet), whose transmit hash picks the veth queue
# (and so the receiving one) per flow; eight QPs are eight flows.
mqA=mq$$a mqB=mq$$b
ip link add "$mqA" numtxqueues 4 numrxqueues 4 type veth peer name "$mqB" numtxqueues 4 numrxqueues 4
ip link set "$mqA" netns "$nsA"; ip link set "$mqB" netns "$nsB"
ip -n "$nsA" addr add 10.96.0.1/24 dev "$mqA"; ip -n "$nsB" addr add 10.96.0.2/24 dev "$mqB"
for side in "$nsA $mqA" "$nsB $mqB"; do
  set -- $side
  ip -n "$1" link set "$2" mtu 9000 up
done
xdp_queue_packets() {  # per receive queue of B's interface: frames the XDP program redirected to sockets there
  ip netns exec "$nsB" ethtool -S "$mqB" 2>/dev/null | awk -F: '/rx_queue_[0-9]+_xdp_redirect/ {gsub(/ /, "", $2); printf "%s ", $2}'
}
on "$nsB" "$mqB" env UROCE_DEVINFO=1 ib_write_bw -d uroce0 -x 1 -s 65536 -q 8 -n 2000 -F \
  >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 18515 "$server" || fail "ib_write_bw server on four queues did not start"
# (Seen once in a CI's sanitizer stage and once in --quick, not since: the client exiting
# mid-transfer without a word. Its exit status and time are named, to tell a timeout (124), a
# signal (128 + n) and perftest's own failure apart next time.)
t0=$SECONDS
rc=0
ip netns exec "$nsA" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="$mqA" UROCE_PORT=af_packet \
  timeout 60 ib_write_bw -d uroce0 -x 1 -s 65536 -q 8 -n 2000 -F 10.96.0.2 >"$dir/client.log" 2>&1 \
  || rc=$?
[ $rc -eq 0 ] || fail "ib_write_bw to four queues (client): exit status $rc after $((SECONDS - t0)) s"
wait "$server" || fail "ib_write_bw to four queues (server)"
grep -q "queues 0-3 (one socket each)" "$dir/server.log" || fail "devinfo does not show the four queues' sockets"
per_queue=$(xdp_queue_packets)
busy=$(echo "$per_queue" | awk '{n = 0; for (i = 1; i <= NF; ++i) if ($i > 100) ++n; print n}')
row=$(grep -E '^ 65536 ' "$dir/client.log" | tail -1 | tr -s ' \t' ' ')
[ -n "$row" ] || fail "ib_write_bw to four queues printed no result"
# ethtool shows per-queue XDP counts on veth since Linux 5.9; without them the transfer's
# success is the evidence (frames on queues 1-3 would otherwise have gone to the kernel).
[ -z "$per_queue" ] || [ "$busy" -ge 2 ] \
  || fail "the eight flows all landed on one queue (frames redirected per queue: $per_queue): the test proves nothing"
echo "ok: ib_write_bw, 8 QPs into an interface of four receive queues:$row; frames redirected to uroce per queue: ${per_queue:-not shown}"
