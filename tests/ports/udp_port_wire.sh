#!/usr/bin/env bash
# What the kernel really sends for uroce's UDP port (tests/ports/udp_port_wire_test.cc): two
# namespaces joined by a veth pair whose sending end cannot segment UDP GSO sends (so the
# kernel cuts them into the packets the wire carries), the packets captured on the other end
# and checked: the ICRC the engine computed holds over the headers the kernel wrote. Needs
# root for the namespaces and the capture (exit 77 = skipped).
set -euo pipefail
bin=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"
tag=uuw$$
trap 'ip netns del "${tag}a" 2>/dev/null || true; ip netns del "${tag}b" 2>/dev/null || true' EXIT
ns_pair "$tag" 10.79.0.1/24 10.79.0.2/24 fd00:79::1/64 fd00:79::2/64
ip netns exec "${tag}a" ethtool -K "${tag}va" tx-udp-segmentation off >/dev/null
ip netns exec "${tag}a" "$bin" "/run/netns/${tag}b" "${tag}vb"
