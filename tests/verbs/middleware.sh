#!/usr/bin/env bash
# The middleware applications reach RDMA through, unmodified, under `uroce run` between two
# network namespaces joined by a veth pair: UCX (its UCT transports rc_verbs and ud_verbs,
# and UCP's tag matching with rendezvous, which Open MPI and MPICH use), libfabric's verbs
# provider (msg, rdm over ofi_rxm and ofi_rxd, dgram), librdmacm's rdma_xserver/xclient and rsockets
# (rstream, riostream, and iperf3 through librspreload with the link checked to carry RoCE
# only), and Open MPI and MPICH over UCX (a byte-checking ping-pong, one rank per namespace). Each case checks exit
# codes and that the program printed its figures.
# Usage: middleware.sh UROCE. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
uroce=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v ucx_perftest >/dev/null && command -v fi_pingpong >/dev/null \
  || { echo "SKIP: ucx-utils / libfabric-bin not installed (tools/install-deps.sh)"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test, wait_listen
tag=m$$
ns_test "$tag" 10.94.0.1/24 10.94.0.2/24 fd00:94::1/64 fd00:94::2/64
srv=10.94.0.2

# run_in NS IFACE CMD...: CMD under `uroce run` in namespace NS (60 s at most).
run_in() { local ns=$1 ifc=$2; shift 2; ip netns exec "$ns" "$uroce" run --iface "$ifc" -- timeout 60 "$@"; }

# pair NAME PORT EXPECT SERVER-CMD... -- CLIENT-CMD...: the server in B (waited for on TCP
# PORT, the programs' own out-of-band exchange), then the client in A; both must exit 0 and
# the client's output must match EXPECT.
pair() {
  local name=$1 port=$2 expect=$3; shift 3
  local sargs=(); while [ "$1" != "--" ]; do sargs+=("$1"); shift; done; shift
  run_in "$nsB" "${tag}vb" "${sargs[@]}" >"$dir/server.log" 2>&1 &
  local server=$!
  wait_listen "$nsB" "$port" "$server" || { cat "$dir/server.log"; exit 1; }
  if ! run_in "$nsA" "${tag}va" "$@" >"$dir/client.log" 2>&1; then
    echo "FAIL: $name client"; cat "$dir/client.log"; echo "-- server:"; cat "$dir/server.log"; exit 1
  fi
  wait "$server" || { echo "FAIL: $name server"; cat "$dir/server.log"; exit 1; }
  grep -qE "$expect" "$dir/client.log" \
    || { echo "FAIL: $name: no '$expect' in the client's output"; cat "$dir/client.log"; exit 1; }
  echo "ok: $name: $(grep -E "$expect" "$dir/client.log" | tail -1 | tr -s ' \t' ' ')"
}

# UCX lists an ibverbs device only if /dev/infiniband/<dev_name> is a character device:
# `uroce run` gives the program one in a mount namespace of its own (README).
run_in "$nsA" "${tag}va" ucx_info -d >"$dir/info.log" 2>&1 || { cat "$dir/info.log"; exit 1; }
for tl in rc_verbs ud_verbs; do
  grep -A1 "Transport: $tl" "$dir/info.log" | grep -q "Device: uroce0:1" \
    || { echo "FAIL: ucx_info -d lists no $tl on uroce0:1"; cat "$dir/info.log"; exit 1; }
done
echo "ok: ucx_info -d: rc_verbs and ud_verbs on uroce0:1"
[ ! -e /dev/infiniband/uverbs-uroce0 ] \
  || { echo "FAIL: the device node showed in the real /dev"; exit 1; }
# ... and /sys/class/infiniband/<dev>/device/net/<interface>, where rdma-core's tests and UCX
# find the device's network interface; the rest of /sys/class stays the real one.
netdev=$(run_in "$nsA" "${tag}va" ls /sys/class/infiniband/uroce0/device/net/ 2>&1) || true
mac=$(run_in "$nsA" "${tag}va" cat "/sys/class/infiniband/uroce0/device/net/${tag}va/address" 2>&1) || true
[ "$netdev" = "${tag}va" ] && [ "$mac" = "$(ip netns exec "$nsA" cat "/sys/class/net/${tag}va/address")" ] \
  || { echo "FAIL: /sys/class/infiniband/uroce0/device/net under uroce run: '$netdev', '$mac'"; exit 1; }
[ ! -e /sys/class/infiniband/uroce0 ] || { echo "FAIL: the device showed in the real /sys/class"; exit 1; }
echo "ok: uroce run: /sys/class/infiniband/uroce0/device/net/$netdev ($mac), not in the real /sys/class"

# UCT, one transport at a time (ucx_perftest's exchange port: 13337).
uct() {  # TRANSPORT TEST ARGS...
  local tl=$1 t=$2; shift 2
  pair "ucx_perftest $tl $t $*" 13337 "^Final:" ucx_perftest -d uroce0:1 -x "$tl" -- \
    ucx_perftest "$srv" -d uroce0:1 -x "$tl" -t "$t" "$@"
}
uct ud_verbs am_lat -n 1000           # UD: IPv4 GRH check on (UCX reads wc.sl for the type)
uct rc_verbs am_lat -n 1000
uct rc_verbs put_bw -n 200 -s 65536 -D zcopy
uct rc_verbs get -n 200 -s 4096 -D zcopy
uct rc_verbs add_lat -n 1000          # atomic fetch-and-add
uct ud_verbs am_bw -n 1000 -s 1000 -D zcopy
# UCP (what MPI uses), on the verbs transports only: tag matching, eager and rendezvous (1 MiB).
ucp() {  # TEST ARGS...
  pair "ucx_perftest UCP $*" 13337 "^Final:" \
    env UCX_NET_DEVICES=uroce0:1 UCX_TLS=rc_verbs,ud_verbs,self ucx_perftest -- \
    env UCX_NET_DEVICES=uroce0:1 UCX_TLS=rc_verbs,ud_verbs,self ucx_perftest "$srv" "$@"
}
ucp -t tag_lat -n 1000
ucp -t tag_bw -n 100 -s 1048576

# libfabric's verbs provider (fi_pingpong's exchange port: 47592).
fab() {  # ARGS...
  pair "fi_pingpong $*" 47592 "^1k " fi_pingpong "$@" -I 100 -- fi_pingpong "$@" -I 100 "$srv"
}
fab -p verbs -e msg                   # rdma_cm connections (binds "localhost" first)
fab -p "verbs;ofi_rxd" -e rdm
fab -p "verbs;ofi_rxm" -e rdm          # rdm over rdma_cm connections
fab -p verbs -e dgram

# librdmacm's example with inline data on a QP created with max_inline_data 0.
pair "rdma_xserver / rdma_xclient" 7471 "end 0" rdma_xserver -- rdma_xclient -s "$srv"

# rsockets (librdmacm's sockets over RDMA): rstream with blocking calls, then with rpoll and
# non-blocking calls, and riostream (riomap/riowrite); each verifies the data it receives.
pair "rstream" 7471 "^custom " rstream -T v -S 65536 -C 500 -- rstream -s "$srv" -T v -S 65536 -C 500
pair "rstream rpoll non-blocking" 7471 "^custom " rstream -T v -T a -T n -S 4096 -C 2000 -- \
  rstream -s "$srv" -T v -T a -T n -S 4096 -C 2000
pair "riostream" 7471 "^custom " riostream -T v -S 65536 -C 10 -I 20 -- \
  riostream -s "$srv" -T v -S 65536 -C 10 -I 20
# The same port over the kernel's TCP just before (rstream -T s): its TIME_WAIT must not keep
# the rdma_cm port (the kernel's rdma_cm has port spaces of its own)...
pair "rstream over the kernel's TCP" 7471 "^custom " rstream -T s -S 4096 -C 10 -- \
  rstream -s "$srv" -T s -S 4096 -C 10
pair "rstream right after" 7471 "^custom " rstream -S 4096 -C 10 -- rstream -s "$srv" -S 4096 -C 10
# ...while a port a process listens on stays its own: a second listener gets EADDRINUSE.
run_in "$nsB" "${tag}vb" rstream -S 4096 -C 10 >"$dir/server.log" 2>&1 &
first=$!
wait_listen "$nsB" 7471 "$first" || { cat "$dir/server.log"; exit 1; }
if run_in "$nsB" "${tag}vb" rstream -S 4096 -C 10 >"$dir/second.log" 2>&1 \
   || ! grep -Eq "r(bind|listen): Address already in use" "$dir/second.log"; then
  echo "FAIL: a second rstream server on the port did not get EADDRINUSE"; cat "$dir/second.log"; exit 1
fi
run_in "$nsA" "${tag}va" rstream -s "$srv" -S 4096 -C 10 >"$dir/client.log" 2>&1 \
  || { echo "FAIL: the first server stopped answering"; cat "$dir/client.log"; exit 1; }
wait "$first" || { echo "FAIL: the first server"; cat "$dir/server.log"; exit 1; }
echo "ok: a second server on the port: $(grep -E "Address already in use" "$dir/second.log"); the first serves on"
# An unmodified TCP program through rdma-core's librspreload: iperf3. librspreload falls back to
# the kernel's TCP without a word when rsocket() fails, so the link must carry RoCE, no TCP.
preload=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)
[ -n "$preload" ] || { echo "FAIL: librspreload.so not found (librdmacm1)"; exit 1; }
ip netns exec "$nsB" tcpdump -i "${tag}vb" -s 96 -w "$dir/rspreload.pcap" >/dev/null 2>&1 &
dump=$!
for _ in $(seq 100); do [ -s "$dir/rspreload.pcap" ] && break; sleep 0.05; done
# (after what is preloaded already: the sanitizer stage preloads its runtimes)
preloads="${LD_PRELOAD:+$LD_PRELOAD:}$preload"
pair "iperf3 through librspreload" 5201 "receiver$" env LD_PRELOAD="$preloads" iperf3 -s -1 -- \
  env LD_PRELOAD="$preloads" iperf3 -c "$srv" -t 2
sleep 0.2; kill "$dump"; wait "$dump" 2>/dev/null || true
tcp=$(tcpdump -r "$dir/rspreload.pcap" tcp 2>/dev/null | wc -l)
roce=$(tcpdump -r "$dir/rspreload.pcap" udp dst port 4791 2>/dev/null | wc -l)
[ "$tcp" -eq 0 ] && [ "$roce" -gt 1000 ] \
  || { echo "FAIL: iperf3 through librspreload: $tcp TCP and $roce RoCE frames on the link"; exit 1; }
echo "ok: iperf3 through librspreload: $roce RoCE frames and no TCP on the link"

# MPI over UCX: a ping-pong that checks every byte (tests/verbs/mpi_pingpong.c, 1 B to 4 MiB,
# eager and rendezvous), one rank per "node": the launcher runs in the host's namespace and
# each rank enters its own (ip netns exec) under `uroce run`. UCX is held to the verbs
# transports, and the link's byte counter shows the data crossed it.
mpi_env=(UCX_NET_DEVICES=uroce0:1 UCX_TLS=rc_verbs,ud_verbs,self)
rank_in() { echo ip netns exec "$1" "$uroce" run --iface "$2" -- timeout 120; }
mpi_case() {  # NAME MPICC LAUNCHER-AND-ARGS... (the launcher gets "RANK0 : RANK1")
  local name=$1 cc=$2; shift 2
  command -v "$cc" >/dev/null || { echo "SKIP: $name: no $cc (tools/install-deps.sh)"; return 0; }
  "$cc" -O2 -o "$dir/mpi_pp_$name" "$(dirname "$0")/mpi_pingpong.c"
  local tx0 tx1 out="$dir/mpi_$name.log"
  tx0=$(ip netns exec "$nsA" cat "/sys/class/net/${tag}va/statistics/tx_bytes")
  # shellcheck disable=SC2046
  if ! timeout 180 "$@" $(rank_in "$nsA" "${tag}va") "$dir/mpi_pp_$name" : \
      "${launch_one[@]}" $(rank_in "$nsB" "${tag}vb") "$dir/mpi_pp_$name" >"$out" 2>&1; then
    echo "FAIL: $name ping-pong"; cat "$out"; exit 1
  fi
  tx1=$(ip netns exec "$nsA" cat "/sys/class/net/${tag}va/statistics/tx_bytes")
  local verified; verified=$(sed -n 's/^verified \([0-9]*\) bytes each way$/\1/p' "$out")
  [ -n "$verified" ] || { echo "FAIL: $name: no 'verified' line"; cat "$out"; exit 1; }
  [ $((tx1 - tx0)) -ge "$verified" ] \
    || { echo "FAIL: $name: $((tx1 - tx0)) bytes left A for $verified verified: not over the link"; exit 1; }
  echo "ok: $name ping-pong over UCX: $verified bytes verified each way; $(grep -E '^ +(64|4194304) bytes' "$out" | tr -s ' ' | paste -sd';')"
}
ompi_env=() mpich_env=()
for e in "${mpi_env[@]}"; do ompi_env+=(-x "$e"); mpich_env+=(-genv "${e%%=*}" "${e#*=}"); done
launch_one=(-n 1)
mpi_case mpich mpicc.mpich mpiexec.mpich "${mpich_env[@]}" -n 1
# Open MPI's ranks reach their launcher over PMIx's TCP transport, on loopback by default,
# which a rank in another namespace does not share: mpirun runs in A and its PMIx server
# listens on A's end of the link instead, where B's rank reaches it over the veth pair.
launch_one=(-np 1)
mpi_case openmpi mpicc.openmpi ip netns exec "$nsA" env PMIX_MCA_ptl_tcp_if_include="${tag}va" \
  PMIX_MCA_ptl_tcp_remote_connections=1 OMPI_MCA_oob_tcp_if_include="${tag}va" \
  mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none \
  --mca pml ucx --mca btl self --mca osc ^ucx "${ompi_env[@]}" -np 1
