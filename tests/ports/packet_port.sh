#!/usr/bin/env bash
# uroce's af_packet port on a veth pair in a network namespace of its own
# (tests/ports/packet_port_test.cc): super-frames crossing whole (read straight into their
# packets' frames, then read whole and cut), then cut by the kernel on the way (UDP
# segmentation offload off on the sending end). Needs root (exit 77 = skipped).
set -euo pipefail
bin=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
ns=upp$$
trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
. "$(dirname "$0")/../../tools/lib/netns.sh"
veth_ns "$ns" 10.96.0.1/24 10.96.0.2/24  # not the addresses the test frames carry
ip -n "$ns" link set "${ns}a" mtu 9000
ip -n "$ns" link set "${ns}b" mtu 9000
ip netns exec "$ns" "$bin" "${ns}a" "${ns}b" whole
ip netns exec "$ns" "$bin" "${ns}a" "${ns}b" copied
ip netns exec "$ns" ethtool -K "${ns}a" tx-udp-segmentation off >/dev/null
ip netns exec "$ns" "$bin" "${ns}a" "${ns}b" segmented
