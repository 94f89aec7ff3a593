#!/usr/bin/env bash
# uroce installed as a user gets it, from this build tree:
#   install_test.sh prefix BUILD-DIR   `cmake --install` into a fresh prefix
#   install_test.sh deb BUILD-DIR      `cpack -G DEB`, its Depends and files, unpacked (dpkg -x)
#                                      into a fresh directory, then unmodified ibv_rc_pingpong
#                                      between two network namespaces through its `uroce run`
# Both check the installed tree: every command and subcommand answers --help, the man pages
# and the sample uroce.conf are there, and `uroce run` puts the installed private library
# directory (never the build tree's) on the library path. deb needs root (exit 77 otherwise).
set -euo pipefail
mode=$1 build=$(cd "$2" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
case $mode in
  prefix) ;;
  deb)
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
    for c in dpkg-deb dpkg-shlibdeps ibv_rc_pingpong; do
      command -v $c >/dev/null || { echo "SKIP: $c not installed"; exit 77; }
    done ;;
  *) fail "usage: install_test.sh prefix|deb BUILD-DIR" ;;
esac
. "$(dirname "$0")/../../tools/lib/netns.sh"  # two_hosts, drop_hosts, wait_listen
dir=$(mktemp -d)
tag=i$$
nsA=${tag}a nsB=${tag}b
cleanup() { [ "$mode" != deb ] || drop_hosts "$nsA" "$nsB"; rm -rf "$dir"; }
trap cleanup EXIT

# check_installed PREFIX: the installed tree works on its own.
check_installed() {
  local p=$1 c lib ld
  for c in uroce "uroce run" "uroce devinfo" "uroce stats" uroce-dissect uroce-replay uroce-conform; do
    # shellcheck disable=SC2086  # "uroce run" is a command and its subcommand
    "$p/bin/"$c --help | grep -q '^usage: ' || fail "$c --help"
  done
  [ -f "$p/share/uroce/conform/cases/rc.resp.send.case" ] || fail "no conformance cases"
  "$p/bin/uroce-conform" --check "$p/share/uroce/conform/cases" >/dev/null || fail "the installed cases do not read"
  cc -O2 -o "$dir/agent" "$p/share/uroce/conform/agent/agent.c" -libverbs -lrdmacm || fail "the agent's source does not build"
  "$dir/agent" --help | grep -q '^usage: ' || fail "uroce-conform-agent --help"
  for c in uroce uroce-dissect uroce-replay uroce-conform; do
    grep -q "^\.SH NAME" "$p/share/man/man1/$c.1" 2>/dev/null || fail "no man page for $c"
  done
  grep -q '^\.SS "uroce run"' "$p/share/man/man1/uroce.1" || fail "uroce.1 lacks uroce run"
  [ -f "$p/share/doc/uroce/examples/uroce.conf" ] || fail "no sample uroce.conf"
  lib=$(find "$p" -name libibverbs.so.1)
  [[ $lib == "$p"/lib*/uroce/libibverbs.so.1 ]] || fail "libibverbs.so.1 not in lib/uroce: $lib"
  [ -z "$(find "$p" -name 'libibverbs*' ! -path '*/uroce/*')" ] \
    || fail "a libibverbs outside the private directory: $(find "$p" -name 'libibverbs*')"
  lib=$(realpath "$(dirname "$lib")")
  ld=$("$p/bin/uroce" run -- printenv LD_LIBRARY_PATH) || fail "uroce run -- printenv"
  [ "${ld%%:*}" = "$lib" ] || fail "uroce run: LD_LIBRARY_PATH=$ld, not $lib"
  echo "ok: $p: every command answers --help, man pages, sample uroce.conf; uroce run uses $lib"
}

if [ "$mode" = prefix ]; then
  cmake --install "$build" --prefix "$dir/prefix" >"$dir/install.log" \
    || { cat "$dir/install.log"; fail "cmake --install"; }
  check_installed "$dir/prefix"
  exit 0
fi

(cd "$dir" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$dir/pkg") >"$dir/cpack.log" 2>&1 \
  || { cat "$dir/cpack.log"; fail "cpack -G DEB"; }
deb=$(echo "$dir"/pkg/uroce_*.deb)
[ -f "$deb" ] || { cat "$dir/cpack.log"; fail "cpack made no uroce_*.deb"; }
depends=$(dpkg-deb -f "$deb" Depends)
names=$(tr ',|' '\n\n' <<<"$depends" | awk '{print $1}')
for p in libc6 libstdc++6 libpcap0.8 libisal2 libnuma1 libbsd0; do
  grep -qxF "$p" <<<"$names" || fail "Depends lacks $p: $depends"
done
! grep -q libibverbs <<<"$names" || fail "Depends names rdma-core's libibverbs: $depends"
echo "ok: $(basename "$deb"): Depends: $depends"
dpkg -x "$deb" "$dir/root"
check_installed "$dir/root/usr"

two_hosts "$nsA" "$nsB" "${tag}va" "${tag}vb" 10.97.0 || fail "cannot create the namespaces"
uroce=$dir/root/usr/bin/uroce
ip netns exec "$nsB" "$uroce" run --iface "${tag}vb" -- timeout 60 ibv_rc_pingpong -d uroce0 -g 1 \
  -n 200 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 18515 "$server" || { cat "$dir/server.log"; fail "server"; }
ip netns exec "$nsA" "$uroce" run --iface "${tag}va" -- timeout 60 ibv_rc_pingpong -d uroce0 -g 1 \
  -n 200 10.97.0.2 >"$dir/client.log" 2>&1 \
  || { cat "$dir/client.log" "$dir/server.log"; fail "ibv_rc_pingpong client"; }
wait "$server" || { cat "$dir/server.log"; fail "ibv_rc_pingpong server"; }
echo "ok: ibv_rc_pingpong through the packaged uroce run: $(grep 'iters in' "$dir/client.log")"
