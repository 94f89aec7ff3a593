#!/usr/bin/env bash
# Two uroce processes joined by DPDK's net_memif (shared memory rings over a Unix socket, as
# two containers on one host would be joined): no kernel network interface carries RoCE.
# Unmodified ibv_rc_pingpong and perftest run over it; their TCP exchange goes over the
# loopback of a network namespace of our own (the memif socket is an abstract one, also
# scoped to that namespace: no file is left behind).
# Usage: memif_programs.sh LIBDIR. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for a network namespace"; exit 77; }
command -v ibv_rc_pingpong >/dev/null && command -v ib_write_bw >/dev/null \
  || { echo "SKIP: ibverbs-utils / perftest not installed"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # drop_hosts, wait_listen
ns=mf$$
dir=$(mktemp -d)
trap 'drop_hosts "$ns"; rm -rf "$dir"' EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up

# side ROLE N CMD...: CMD on a uroce device whose port is memif ROLE (server or client),
# address 10.93.0.N, in the namespace. $client_opts: more devargs for the client.
client_opts=
side() {
  local role=$1 n=$2 opts=; shift 2
  [ "$role" = client ] && opts=$client_opts
  ip netns exec "$ns" env LD_LIBRARY_PATH="$lib" UROCE_IPV4=10.93.0.$n UROCE_MTU=4096 \
    UROCE_DEVARGS="net_memif0,role=$role,id=0,socket=/uroce-memif-$ns,mac=02:00:00:00:93:0$n$opts" \
    timeout 60 "$@"
}

pair() {  # NAME EXPECT ARGS...: ARGS on both sides, the client to 127.0.0.1
  local name=$1 expect=$2; shift 2
  side server 2 "$@" >"$dir/server.log" 2>&1 &
  local server=$!
  wait_listen "$ns" 18515 "$server" || { cat "$dir/server.log"; exit 1; }
  side client 1 "$@" 127.0.0.1 >"$dir/client.log" 2>&1 \
    || { echo "FAIL: $name client"; cat "$dir/client.log"; echo "-- server:"; cat "$dir/server.log"; exit 1; }
  wait "$server" || { echo "FAIL: $name server"; cat "$dir/server.log"; exit 1; }
  grep -qE "$expect" "$dir/client.log" \
    || { echo "FAIL: $name: no '$expect' in the client's output"; cat "$dir/client.log"; exit 1; }
  echo "ok: $name over memif: $(grep -E "$expect" "$dir/client.log" | tail -1 | tr -s ' \t' ' ')"
}

pair ibv_rc_pingpong "iters in" ibv_rc_pingpong -d uroce0 -g 1 -n 1000 -c
pair "ib_write_bw 64 KiB" "^ 65536 " ib_write_bw -d uroce0 -x 1 -s 65536 -n 2000
pair "ib_send_lat 8 B" "^ 8 " ib_send_lat -d uroce0 -x 1 -s 8 -n 2000
pair "ib_read_bw 4 KiB" "^ 4096 " ib_read_bw -d uroce0 -x 1 -s 4096 -n 2000
# memif's zero-copy client (it shares the EAL's memory: uroce gives the EAL
# --single-file-segments for it, without which DPDK refuses the device).
client_opts=,zero-copy=yes
pair "ib_write_bw 64 KiB, zero-copy client" "^ 65536 " ib_write_bw -d uroce0 -x 1 -s 65536 -n 2000
