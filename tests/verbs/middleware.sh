#!/usr/bin/env bash
# The middleware applications reach RDMA through, unmodified, under `uroce run` between two
# network namespaces joined by a veth pair: UCX (its UCT transports rc_verbs and ud_verbs,
# and UCP's tag matching with rendezvous, which Open MPI and MPICH use), libfabric's verbs
# provider (msg, rdm over ofi_rxm and ofi_rxd, dgram) and librdmacm's rdma_xserver/xclient.
# Each case checks exit codes and that the program printed its figures.
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
fab -p verbs -e dgram

# librdmacm's example with inline data on a QP created with max_inline_data 0.
pair "rdma_xserver / rdma_xclient" 7471 "end 0" rdma_xserver -- rdma_xclient -s "$srv"
