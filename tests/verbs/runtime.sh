#!/usr/bin/env bash
# The provider's process model (tests/verbs/runtime_test.c) in a network namespace of its
# own: a veth pair with both ends inside it, so that one process can open a device on each.
# Usage: runtime.sh LIBDIR RUNTIME_TEST MODE [ARGS...]. Needs root (exit 77 = skipped).
# MODE "reap": what a killed uroce process leaves (its counters file in /dev/shm, a DPDK runtime
# directory) is removed by the next process that opens a device (the program runs "affinity").
set -euo pipefail
lib=$1 bin=$2; shift 2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
ns=ur$$
dir=$(mktemp -d)
cleanup() { ip netns del "$ns" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
. "$(dirname "$0")/../../tools/lib/netns.sh"
veth_ns "$ns" 10.99.0.1/24 10.99.0.2/24
# uroce0 on one end; uroce1 on the other (mode "devices") or on a missing interface ("failed").
second=${ns}b
[ "$1" = "failed" ] && second=${ns}none
printf '[uroce0]\niface = %s\n[uroce1]\niface = %s\n' "${ns}a" "$second" >"$dir/uroce.conf"
[ "$1" = "link" ] && set -- link "${ns}a" "${@:2}"  # the interface the program takes down and up
[ "$1" = "mcast" ] && set -- mcast "${ns}a"  # the interface whose memberships it checks
reap=0
if [ "$1" = "reap" ]; then
  reap=1
  shift
  set -- affinity "$@"
  # A process that is gone: its pid, and the files a kill -9 would have left of it.
  true & dead=$!; wait "$dead"
  : >"/dev/shm/uroce-$dead-uroce0"
  mkdir -p "/var/run/dpdk/uroce-$dead"
fi
# In the sanitizer build the program itself runs with leak checking on (the ASan options
# given to this script keep it off for the shell's tools) and a small quarantine, so that its
# memory figures mean what they say.
[ -z "${ASAN_OPTIONS:-}" ] || set -- env ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=4:abort_on_error=1 "$bin" "$@"
[ -n "${ASAN_OPTIONS:-}" ] || set -- "$bin" "$@"
# The program's pid (the shell execs it), so that the check below looks at its files only:
# tests running beside this one kill uroce processes of their own, whose files stay until the
# next open reaps them.
ip netns exec "$ns" env -u UROCE_IFACE LD_LIBRARY_PATH="$lib" UROCE_CONFIG="$dir/uroce.conf" \
  timeout 300 sh -c 'echo $$ >"$0"; exec "$@"' "$dir/pid" "$@" || {
  rc=$?
  [ $rc -ne 124 ] || echo "FAIL: still running after 300 s (stopped by timeout)"
  [ $rc -le 128 ] || [ $rc -eq 124 ] || echo "FAIL: the program died by signal $((rc - 128))"
  exit $rc
}
# A clean exit leaves no counters file.
pid=$(cat "$dir/pid")
for f in /dev/shm/uroce-"$pid"-*; do
  [ ! -e "$f" ] || { echo "FAIL: $f left behind"; exit 1; }
done
if [ $reap -eq 1 ]; then
  [ ! -e "/dev/shm/uroce-$dead-uroce0" ] || { echo "FAIL: /dev/shm/uroce-$dead-uroce0 not reaped"; exit 1; }
  [ ! -e "/var/run/dpdk/uroce-$dead" ] || { echo "FAIL: /var/run/dpdk/uroce-$dead not reaped"; exit 1; }
  echo "ok: the counters file and DPDK directory of a dead process were reaped by the next open"
fi
