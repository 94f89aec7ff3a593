#!/usr/bin/env bash
# Runs rc_over_dpdk between two network namespaces joined by a veth pair (created here,
# removed on exit). Needs root; exits 77 (ctest: skipped) without it.
set -euo pipefail
bin=$1
size=${2:-100000}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and iproute2 to create network namespaces"; exit 77
fi
tag=u$$
nsA=${tag}a nsB=${tag}b
dir=$(mktemp -d)
cleanup() { ip netns del "$nsA" 2>/dev/null || true; ip netns del "$nsB" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
ip netns add "$nsA"; ip netns add "$nsB"
ip link add "${tag}va" type veth peer name "${tag}vb"
ip link set "${tag}va" netns "$nsA"; ip link set "${tag}vb" netns "$nsB"
ip -n "$nsA" link set "${tag}va" up; ip -n "$nsB" link set "${tag}vb" up
# The kernel gets no IP address on these interfaces: it must not answer UDP 4791 itself.
macA=$(ip -n "$nsA" -br link show "${tag}va" | awk '{print $3}')
macB=$(ip -n "$nsB" -br link show "${tag}vb" | awk '{print $3}')
ip netns exec "$nsB" "$bin" server "${tag}vb" 10.99.0.2 10.99.0.1 "$macA" "$dir" "$size" &
server=$!
ip netns exec "$nsA" "$bin" client "${tag}va" 10.99.0.1 10.99.0.2 "$macB" "$dir" "$size"
wait "$server"
