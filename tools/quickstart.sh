#!/usr/bin/env bash
# Quickstart: install, build, create two "hosts" (network namespaces joined by a veth pair),
# run unmodified ibv_rc_pingpong and ib_write_bw over uroce between them, show the results and
# the first RoCE packets of the recorded traffic (uroce-dissect), and clean up.
# Needs root: started by another user it runs itself again through sudo when there is one.
# Exit status 0 when all of it worked; otherwise 1, and the last line (on stderr) says what
# failed and where its output is.
# UROCE_BUILD_DIR: the build tree (default build/, configured as Release if it is new).
set -eEuo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tools/lib/root.sh"
become_root "$0" "$@" || {
  echo "quickstart: needs root (it creates network namespaces): run it as root" >&2
  exit 1
}
cd "$top"
out=$(mktemp -d -t uroce-quickstart.XXXXXX)
fail() { echo "quickstart: $*" >&2; exit 1; }
# Anything else that fails still ends with one line saying what.
trap 'fail "line $LINENO failed: $BASH_COMMAND"' ERR

bash tools/install-deps.sh || fail "installing the packages failed (tools/install-deps.sh)"
build=${UROCE_BUILD_DIR:-build}
echo "building uroce in $build/ (output: $out/build.log)"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$out/build.log" 2>&1 \
    || fail "configuring the build failed (its output: $out/build.log)"
fi
cmake --build "$build" -j"${UROCE_JOBS:-2}" --target uroce_ibverbs uroce uroce-dissect \
  >>"$out/build.log" 2>&1 || fail "building uroce failed (its output: $out/build.log)"
uroce=$(cd "$build" && pwd)/tools/uroce/uroce
dissect=$(cd "$build" && pwd)/tools/dissect/uroce-dissect

. tools/lib/netns.sh  # two_hosts, drop_hosts, wait_listen
a=uroce-qs-a b=uroce-qs-b
cleanup() { drop_hosts "$a" "$b"; }
trap cleanup EXIT
cleanup
two_hosts "$a" "$b" uqs-a uqs-b 10.90.0 \
  || fail "cannot create the network namespaces $a and $b and their veth pair"
echo "hosts: $a (10.90.0.1, uqs-a) <-> $b (10.90.0.2, uqs-b)"

pair() {  # run "$@" as server in b and client in a (client records a pcap)
  local log=$out/$1-server.txt
  ip netns exec "$b" "$uroce" run --iface uqs-b -- timeout 60 "$@" >"$log" 2>&1 &
  local server=$!
  wait_listen "$b" 18515 "$server" >/dev/null \
    || fail "$1: the server did not start (its output: $log)"
  ip netns exec "$a" "$uroce" run --iface uqs-a --pcap "$out/$1.pcap" -- timeout 60 "$@" \
    10.90.0.2 || fail "$1: the client failed (exit $?; the server's output: $log)"
  wait "$server" || fail "$1: the server failed (exit $?; its output: $log)"
}

echo; echo "=== ibv_rc_pingpong -g 1 (client side; the server prints the same) ==="
pair ibv_rc_pingpong -d uroce0 -g 1 -n 1000
echo; echo "=== ib_write_bw -x 1 -s 65536 ==="
pair ib_write_bw -d uroce0 -x 1 -s 65536 -n 2000
echo; echo "=== the first RoCE packets of ibv_rc_pingpong, as uroce-dissect shows them ==="
"$dissect" "$out/ibv_rc_pingpong.pcap" >"$out/ibv_rc_pingpong.txt" \
  || fail "uroce-dissect cannot read $out/ibv_rc_pingpong.pcap"
# RoCE lines end with the ICRC check; the rest (TCP setup, ARP, IPv6 chatter) is left out.
awk '/  ICRC / && n++ < 12' "$out/ibv_rc_pingpong.txt"
tail -n 1 "$out/ibv_rc_pingpong.txt"
echo; echo "captures kept in $out (try: $dissect --explain $out/ib_write_bw.pcap | less)"
