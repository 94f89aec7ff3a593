#!/usr/bin/env bash
# Two uroce processes joined by uroce's own shared-memory port (shm = <socket path>: frames
# built and parsed in place in a shared memfd, drivers/shm/shm_port.h), as two containers on
# one host would be. Unmodified ibv_rc_pingpong (checking every byte) and perftest run over
# it; their TCP exchange goes over the loopback of a network namespace of our own. After
# each pair, the socket path must be gone (removed once paired).
# Usage: shm_programs.sh LIBDIR. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for a network namespace"; exit 77; }
command -v ibv_rc_pingpong >/dev/null && command -v ib_write_bw >/dev/null \
  || { echo "SKIP: ibverbs-utils / perftest not installed"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # drop_hosts, wait_listen
ns=shm$$
dir=$(mktemp -d)
trap 'drop_hosts "$ns"; rm -rf "$dir"' EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
mkdir "$dir/run" "$dir/logs"

# side N CMD...: CMD on a uroce device whose port is shm on $dir/run/link, address
# 10.94.0.N, in the namespace.
side() {
  local n=$1; shift
  ip netns exec "$ns" env LD_LIBRARY_PATH="$lib" UROCE_IPV4=10.94.0.$n UROCE_MTU=4096 \
    UROCE_SHM="$dir/run/link" timeout 60 "$@"
}

pair() {  # NAME EXPECT ARGS...: ARGS on both sides, the client to 127.0.0.1
  local name=$1 expect=$2; shift 2
  side 2 "$@" >"$dir/logs/server" 2>&1 &
  local server=$!
  wait_listen "$ns" 18515 "$server" || { cat "$dir/logs/server"; exit 1; }
  side 1 "$@" 127.0.0.1 >"$dir/logs/client" 2>&1 \
    || { echo "FAIL: $name client"; cat "$dir/logs/client"; echo "-- server:"; cat "$dir/logs/server"; exit 1; }
  wait "$server" || { echo "FAIL: $name server"; cat "$dir/logs/server"; exit 1; }
  grep -qE "$expect" "$dir/logs/client" \
    || { echo "FAIL: $name: no '$expect' in the client's output"; cat "$dir/logs/client"; exit 1; }
  [ -z "$(ls -A "$dir/run")" ] || { echo "FAIL: $name left $(ls "$dir/run") behind"; exit 1; }
  echo "ok: $name over shm: $(grep -E "$expect" "$dir/logs/client" | tail -1 | tr -s ' \t' ' ')"
}

pair ibv_rc_pingpong "iters in" ibv_rc_pingpong -d uroce0 -g 1 -n 1000 -s 65536 -c
pair "ib_write_bw 64 KiB" "^ 65536 " ib_write_bw -d uroce0 -x 1 -s 65536 -n 5000
pair "ib_send_bw 4 KiB" "^ 4096 " ib_send_bw -d uroce0 -x 1 -s 4096 -n 5000
pair "ib_send_lat 8 B" "^ 8 " ib_send_lat -d uroce0 -x 1 -s 8 -n 2000
pair "ib_read_bw 64 KiB" "^ 65536 " ib_read_bw -d uroce0 -x 1 -s 65536 -n 2000
pair "ib_atomic_bw" "^ 8 " ib_atomic_bw -d uroce0 -x 1 -n 2000
