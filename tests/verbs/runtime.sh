#!/usr/bin/env bash
# The provider's process model (tests/verbs/runtime_test.c) in a network namespace of its
# own: a veth pair with both ends inside it, so that one process can open a device on each.
# Usage: runtime.sh LIBDIR RUNTIME_TEST MODE [ARGS...]. Needs root (exit 77 = skipped).
set -euo pipefail
lib=$1 bin=$2; shift 2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
ns=ur$$
dir=$(mktemp -d)
cleanup() { ip netns del "$ns" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link add "${ns}a" type veth peer name "${ns}b"
ip -n "$ns" link set lo up
ip -n "$ns" link set "${ns}a" up
ip -n "$ns" link set "${ns}b" up
ip -n "$ns" addr add 10.99.0.1/24 dev "${ns}a"
ip -n "$ns" addr add 10.99.0.2/24 dev "${ns}b"
# uroce0 on one end; uroce1 on the other (mode "devices") or on a missing interface ("failed").
second=${ns}b
[ "$1" = "failed" ] && second=${ns}none
printf '[uroce0]\niface = %s\n[uroce1]\niface = %s\n' "${ns}a" "$second" >"$dir/uroce.conf"
counters() { ls /dev/shm | grep -E '^uroce-[0-9]+-' | sort || true; }
before=$(counters)
ip netns exec "$ns" env -u UROCE_IFACE LD_LIBRARY_PATH="$lib" UROCE_CONFIG="$dir/uroce.conf" \
  timeout 300 "$bin" "$@"
# A clean exit leaves no counters file: a new one whose process is gone is ours, left behind.
for f in $(comm -13 <(echo "$before") <(counters)); do
  pid=${f#uroce-}; pid=${pid%%-*}
  kill -0 "$pid" 2>/dev/null || { echo "FAIL: /dev/shm/$f left behind"; exit 1; }
done
