#!/usr/bin/env bash
# A data-verifying soak: two uroce processes in two network namespaces, every byte they move
# checked, on a damaged link, round after round until the time is up. Each round runs, with a
# fault seed of its own on both sides (loss, duplication, corruption, reordering, as
# UROCE_FAULT):
#   - rdma_verify (tests/interop/rdma_verify.c): per iteration an RDMA WRITE, a READ of it
#     back, a READ of a fixed pattern, FETCH_ADD, a missing and a hitting CMP_SWAP and a SEND
#     with immediate, all compared;
#   - rstream -T v over rsockets (the received stream checked byte by byte).
# (Not the pingpongs: on a lossy link they end with a race no transport can win, the last
# ACK lost and its receiver gone; docs/interop.md, "Left out on purpose".)
# A failed round keeps its logs and both sides' captures in the work directory and the soak
# goes on; the summary counts rounds and failures per program, and the exit code is 1 if any
# round failed.
#
# Usage (root, a built tree): tools/soak.sh [SECONDS] [FAULT]
#   SECONDS  how long to run (default 600)
#   FAULT    the UROCE_FAULT damage without seed (default loss=0.02,duplicate=0.01,corrupt=0.005,reorder=0.02)
# Environment: BUILD (default build), WORK (default a new directory under /var/tmp).
# Not run by CI (its time is the point); the figures of a run go in an issue's closing note.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$repo/tools/lib/netns.sh"  # ns_test, wait_listen
seconds=${1:-600}
fault=${2:-loss=0.02,duplicate=0.01,corrupt=0.005,reorder=0.02}
build=${BUILD:-$repo/build}
uroce=$build/tools/uroce/uroce
verify=$build/tests/interop/rdma_verify
[ "$(id -u)" -eq 0 ] || { echo "soak: needs root (network namespaces)"; exit 2; }
for f in "$uroce" "$verify"; do
  [ -x "$f" ] || { echo "soak: $f is not built (cmake --build $build)"; exit 2; }
done
command -v rstream >/dev/null \
  || { echo "soak: rdmacm-utils not installed (tools/install-deps.sh)"; exit 2; }
work=${WORK:-$(mktemp -d /var/tmp/uroce-soak.XXXXXX)}
mkdir -p "$work"
tag=k$$
ns_test "$tag" 10.89.0.1/24 10.89.0.2/24 fd00:89::1/64 fd00:89::2/64
srv=10.89.0.2

declare -A rounds=() failed=()
# one NAME PORT ROUND SERVER-ARGS... -- CLIENT-ARGS...: a pair under `uroce run`, each side
# damaging what it sends with its own seed; the client gets the server's address last.
one() {
  local name=$1 port=$2 round=$3; shift 3
  local sargs=(); while [ "$1" != "--" ]; do sargs+=("$1"); shift; done; shift
  local d="$work/$name.$round"
  mkdir -p "$d"
  ip netns exec "$nsB" env UROCE_FAULT="$fault,seed=$((round * 2 + 1))" "$uroce" run \
    --iface "${tag}vb" --pcap "$d/server.pcap" -- timeout 120 "${sargs[@]}" >"$d/server.log" 2>&1 &
  local s=$!
  local ok=1
  wait_listen "$nsB" "$port" "$s" >"$d/wait.log" 2>&1 || ok=0
  if [ $ok = 1 ]; then
    ip netns exec "$nsA" env UROCE_FAULT="$fault,seed=$((round * 2 + 2))" "$uroce" run \
      --iface "${tag}va" --pcap "$d/client.pcap" -- timeout 120 "$@" >"$d/client.log" 2>&1 || ok=0
  fi
  [ $ok = 1 ] || kill "$s" 2>/dev/null
  wait "$s" || ok=0
  grep -qiE "invalid data|verify failed|mismatch|differ" "$d"/*.log 2>/dev/null && ok=0
  rounds[$name]=$(( ${rounds[$name]:-0} + 1 ))
  if [ $ok = 1 ]; then
    rm -rf "$d"
  else
    failed[$name]=$(( ${failed[$name]:-0} + 1 ))
    echo "soak: round $round: $name FAILED (logs and captures in $d)"
  fi
}

start=$(date +%s)
round=0
echo "soak: $seconds s, damage $fault on both sides, work directory $work"
while [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  round=$((round + 1))
  one rdma_verify 18600 "$round" "$verify" -d uroce0 -g 1 -s 20000 -n 20 -m 1024 -- \
    "$verify" -d uroce0 -g 1 -s 20000 -n 20 -m 1024 "$srv"
  one rstream 7471 "$round" rstream -T v -S 65536 -C 50 -- rstream -s "$srv" -T v -S 65536 -C 50
done
rc=0
for name in rdma_verify rstream; do
  echo "soak: $name: ${rounds[$name]:-0} rounds, ${failed[$name]:-0} failed"
  [ "${failed[$name]:-0}" -eq 0 ] || rc=1
done
echo "soak: $round rounds in $(( $(date +%s) - start )) s"
exit $rc
