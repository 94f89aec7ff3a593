#!/usr/bin/env bash
# Unmodified rdma-core tools on uroce's libibverbs.so.1:
#   1. the library exports exactly the symbol versions of Debian's libibverbs.so.1;
#   2. ibv_devices lists the configured device; a bad setting prints one clear line;
#   3. ibv_devinfo -v (in a network namespace with a veth end) shows the RoCEv2 port.
# Usage: verbs_tools.sh LIBDIR LOOPBACK_ACCESS LOOPBACK_EXT. Needs root for step 3 (skipped with exit 77 otherwise).
set -euo pipefail
lib=$1 loopback=$2 loopback_ext=$3
fail() { echo "FAIL: $*"; exit 1; }
command -v ibv_devinfo >/dev/null || { echo "SKIP: ibverbs-utils not installed"; exit 77; }

sym() { objdump -T "$1" | awk '/IBVERBS/ && $4!="*ABS*" && $6 !~ /^\(/ {print $3,$6,$7}' | sort -k3; }
diff <(sym "$lib/libibverbs.so.1") <(sym /usr/lib/x86_64-linux-gnu/libibverbs.so.1) \
  || fail "exported symbols differ from Debian's libibverbs.so.1"
echo "ok: exported symbol versions match Debian's libibverbs.so.1"

export LD_LIBRARY_PATH=$lib
# (ldd's output is captured first: grep -q closing the pipe early would fail under pipefail)
deps=$(LD_LIBRARY_PATH=$lib ldd "$(command -v ibv_devices)")
grep -q "$lib/libibverbs.so.1" <<<"$deps" || fail "ibv_devices does not load our library: $deps"
out=$(UROCE_CONFIG=/nonexistent/none UROCE_IFACE=lo ibv_devices 2>&1 || true)
[ -n "$out" ] || fail "no output"
out=$(env -u UROCE_CONFIG UROCE_IFACE=lo ibv_devices)
echo "$out" | grep -qE '^\s+uroce0\s+[0-9a-f]{16}$' || fail "ibv_devices did not list uroce0: $out"
echo "ok: ibv_devices lists uroce0"
err=$(UROCE_IFACE=lo UROCE_MTU=9000 ibv_devices 2>&1 >/dev/null || true)
[ "$err" = "uroce: environment UROCE_MTU: mtu '9000' must be 256, 512, 1024, 2048 or 4096" ] \
  || fail "bad config message: '$err'"
echo "ok: a bad setting gives one line: $err"
# ib_write_bw links libmlx5/libefa/librdmacm: with our library it must still start.
ib_write_bw --help >/dev/null 2>&1 || [ $? -ne 127 ] || fail "ib_write_bw does not load"
echo "ok: perftest loads against our library"
uroce=$(dirname "$lib")/tools/uroce/uroce
"$uroce" run --bogus x -- true 2>/dev/null && fail "uroce run accepted an unknown option"
# Options are checked when parsed, each error one line naming the option and what it takes;
# the command never starts.
expect_refused() {  # WANT ARGS...: `uroce ARGS` exits 2 and says WANT (its stderr's first line)
  local want=$1; shift
  local err rc=0
  err=$("$uroce" "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -eq 2 ] || fail "uroce $*: exit $rc, not 2"
  [ "$(head -1 <<<"$err")" = "$want" ] || fail "uroce $*: said '$(head -1 <<<"$err")', not '$want'"
}
expect_refused "uroce: --vlan 5000: vlan '5000' must be a VLAN id from 0 (untagged) to 4094" \
  run --vlan 5000 -- touch /tmp/uroce-never-ran.$$
[ ! -e /tmp/uroce-never-ran.$$ ] || fail "uroce run started the program despite a bad option"
expect_refused "uroce: --mtu 1500: mtu '1500' must be 256, 512, 1024, 2048 or 4096" run --mtu 1500 -- true
expect_refused "uroce: --fault loss=nan: fault 'loss=nan' needs a number >= 0 (e.g. fault = loss=0.01,reorder=0.05; keys: loss, duplicate, corrupt, ce, reorder, window, hold_us, delay_us, jitter_us, seed, side, spare=dreq)" \
  run --fault loss=nan -- true
expect_refused "uroce: --config /tmp: '/tmp' is no file: name the configuration file itself" \
  devinfo --config /tmp
expect_refused "uroce: --iface needs a value: a Linux interface name" run --iface -- true
expect_refused "uroce: stats: 'abc' is not a process id (a number from 1, as ps shows)" stats abc
expect_refused "uroce: stats: '0' is not a process id (a number from 1, as ps shows)" stats 0
expect_refused "uroce: stats: '-5' is not a process id (a number from 1, as ps shows)" stats -5
rc=0; err=$("$uroce" stats 999999999 2>&1) || rc=$?
[ "$rc" -eq 1 ] && [ "$err" = "uroce: stats: no uroce device open in process 999999999 (no such process)" ] \
  || fail "uroce stats 999999999: exit $rc: $err"
out=$("$uroce" run --iface lo -- ibv_devices)
echo "$out" | grep -qE '^\s+uroce0\s' || fail "uroce run --iface lo -- ibv_devices: $out"
out=$("$uroce" run --iface=lo --mtu=1024 -- ibv_devices)
echo "$out" | grep -qE '^\s+uroce0\s' || fail "uroce run --iface=lo -- ibv_devices: $out"
# Every setting has an option, listed by --help and explained by `uroce settings`.
settings=$("$uroce" settings)
help=$("$uroce" run --help)
for v in $(grep -oE '^UROCE_[A-Z0-9_]+' <<<"$settings"); do
  grep -q "($v)" <<<"$help" || [ "$v" = UROCE_DEVINFO ] || [ "$v" = UROCE_DEVNODE ] || [ "$v" = UROCE_LIB_DIR ] \
    || fail "uroce run --help has no option for $v"
done
echo "ok: uroce run / stats / settings: $(grep -cE '^UROCE_' <<<"$settings") settings, bad options refused with one line"

if [ "$(id -u)" -ne 0 ]; then echo "SKIP: ibv_devinfo part needs root (network namespaces)"; exit 77; fi
ns=uv$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
. "$(dirname "$0")/../../tools/lib/netns.sh"
veth_ns "$ns" 10.97.0.1/24  # both ends up inside the namespace: a carrier, so PORT_ACTIVE
info=$(ip netns exec "$ns" env UROCE_IFACE="${ns}a" ibv_devinfo -v)
for want in 'hca_id:\s+uroce0' 'transport:\s+InfiniBand \(0\)' 'state:\s+PORT_ACTIVE' \
            'link_layer:\s+Ethernet' 'GID\[\s*1\]:\s+::ffff:10.97.0.1, RoCE v2' \
            'active_mtu:\s+1024 \(3\)' 'atomic_cap:\s+ATOMIC_HCA'; do
  echo "$info" | grep -qE "$want" || fail "ibv_devinfo -v lacks /$want/:
$info"
done
echo "ok: ibv_devinfo -v shows uroce0 with a RoCEv2 GID for 10.97.0.1 (1500-byte link: MTU 1024)"
# A jumbo link offers the 4096-byte RoCE MTU.
ip -n "$ns" link set "${ns}a" mtu 9000
jumbo=$(ip netns exec "$ns" env UROCE_IFACE="${ns}a" ibv_devinfo)
grep -qE 'active_mtu:\s+4096 \(5\)' <<<"$jumbo" \
  || fail "a 9000-byte link should give active_mtu 4096"
echo "ok: a 9000-byte link gives active_mtu 4096"
# `uroce devinfo`: how the port is set up, then ibv_devinfo -v's own lines. The default port
# is uroce's own packet socket; port = dpdk is DPDK's net_af_packet.
dev=$(ip netns exec "$ns" "$uroce" devinfo --iface "${ns}a")
head -1 <<<"$dev" | grep -qE "^uroce0: port af_packet socket on ${ns}a \(interface MTU 9000; .*UDP GSO super-frames of up to 64 packets.*sleeps on the socket" \
  || fail "uroce devinfo's first line should describe the af_packet port on ${ns}a:
$dev"
dpdk=$(ip netns exec "$ns" env UROCE_PORT=dpdk "$uroce" devinfo --iface "${ns}a")
head -1 <<<"$dpdk" | grep -qE "^uroce0: port net_af_packet .* on ${ns}a \(interface MTU 9000; .*1 RX \+ 1 TX queue.*plain pages" \
  || fail "with UROCE_PORT=dpdk, uroce devinfo's first line should describe net_af_packet:
$dpdk"
grep -qE 'hca_id:\s+uroce0' <<<"$dev" || fail "uroce devinfo shows no device: $dev"
echo "ok: uroce devinfo: $(head -1 <<<"$dev" | cut -c1-100)..."

# A C program on our library: loopback RDMA WRITE between two QPs of one device, then a wrong
# R_Key -> IBV_WC_REM_ACCESS_ERR with the target untouched.
out=$(ip netns exec "$ns" env UROCE_IFACE="${ns}a" "$loopback") || fail "loopback_access: $out"
echo "$out"
# The extended verbs: ibv_create_cq_ex + ibv_start_poll, ibv_create_qp_ex + ibv_wr_* batches.
out=$(ip netns exec "$ns" env UROCE_IFACE="${ns}a" "$loopback_ext") || fail "loopback_ext: $out"
echo "$out"

# pyverbs, rdma-core's Python binding (use Debian's python3: the one on PATH may be another).
if /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  out=$(ip netns exec "$ns" env UROCE_IFACE="${ns}a" /usr/bin/python3 \
        "$(dirname "$0")/pyverbs_smoke.py" 10.97.0.1 2>&1) || fail "pyverbs: $out"
  echo "$out"
else
  echo "note: python3-pyverbs not installed: pyverbs check skipped"
fi
