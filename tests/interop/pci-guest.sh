# Runs inside the rxe-vm guest started by pci_nic.sh (as /host/cmd.sh, cwd /host, root).
# eth0 (virtio-net, the kernel's driver) carries rdma_rxe; the second NIC (emulated e1000 or
# virtio-net, MAC $PCI_MAC) is bound to vfio-pci in no-IOMMU mode (or uio_pci_generic) and driven by uroce through
# DPDK's PCI PMD. Both NICs are on one host bridge, so uroce on the second NIC and rdma_rxe on
# eth0 talk RoCEv2 across it. Prints "ok: ..." per step; exits non-zero at the first failure.
set -uo pipefail
. /host/env  # PCI_MAC, PCI_DRIVER (the DPDK driver name we expect), UROCE_IP
fail() { echo "FAIL: $*"; for f in /host/*.log; do [ -s "$f" ] && { echo "-- $f"; tail -15 "$f"; }; done; exit 1; }

# The NIC under test: the network controller with that MAC (a virtio NIC's interface hangs
# under its virtioN device), or the one no kernel driver took (the guest loads virtio_net
# only: an e1000 stays unclaimed).
dev=
for n in /sys/class/net/*; do
  [ "$(cat "$n/address")" = "$PCI_MAC" ] || continue
  p=$(readlink -f "$n/device")
  case $(basename "$p") in virtio*) p=$(dirname "$p") ;; esac
  dev=$(basename "$p")
done
for d in /sys/bus/pci/devices/*; do
  [ -z "$dev" ] || break
  case $(cat "$d/class") in 0x0200*) [ -e "$d/driver" ] || dev=$(basename "$d") ;; esac
done
[ -n "$dev" ] || fail "no network controller with MAC $PCI_MAC, nor one without a driver"
# uroce's side: our libibverbs (and the libraries this minimal guest lacks) from /host/lib.
U=(env LD_LIBRARY_PATH=/host/lib UROCE_DEVARGS="$dev" UROCE_IPV4="$UROCE_IP" UROCE_MTU=1024)
# expect_refusal WHAT PATTERN: uroce must not open the device yet, and say why in one line.
expect_refusal() {
  if "${U[@]}" timeout 60 ibv_devinfo -d uroce0 > refusal.log 2>&1; then fail "uroce opened $dev $1"; fi
  grep -q "$2" refusal.log || fail "no '$2' in what uroce said $1: $(cat refusal.log)"
  echo "ok: $1: $(grep -m1 "$2" refusal.log)"
}
expect_refusal "before the device is bound to vfio-pci or uio" "bind it to vfio-pci"

# vfio-pci in no-IOMMU mode where the kernel has it; Debian's 6.1 kernel is built without
# VFIO_NOIOMMU, so there: uio_pci_generic (DPDK then uses physical addresses too).
modprobe vfio enable_unsafe_noiommu_mode=1 2>/dev/null
if [ -e /sys/module/vfio/parameters/enable_unsafe_noiommu_mode ] && modprobe vfio-pci; then
  kdrv=vfio-pci
else
  modprobe uio_pci_generic || fail "modprobe uio_pci_generic"
  kdrv=uio_pci_generic
fi
[ -e "/sys/bus/pci/devices/$dev/driver" ] && echo "$dev" > "/sys/bus/pci/devices/$dev/driver/unbind"
echo $kdrv > "/sys/bus/pci/devices/$dev/driver_override"
echo "$dev" > /sys/bus/pci/drivers_probe
[ "$(basename "$(readlink -f "/sys/bus/pci/devices/$dev/driver")")" = $kdrv ] || { dmesg | tail -5; fail "$dev not on $kdrv"; }
echo 0 > /proc/sys/vm/nr_hugepages
expect_refusal "without hugepages" "free hugepages"
echo 160 > /proc/sys/vm/nr_hugepages
echo "ok: PCI device $dev ($(cat /sys/bus/pci/devices/$dev/vendor):$(cat /sys/bus/pci/devices/$dev/device)) bound to $kdrv, $(awk '/HugePages_Free/ {print $2}' /proc/meminfo) hugepages"

"${U[@]}" UROCE_DEVINFO=1 timeout 120 ibv_devinfo -d uroce0 > devinfo.log 2>&1 || fail "ibv_devinfo on uroce"
grep -q "port $PCI_DRIVER" devinfo.log || fail "devinfo does not name $PCI_DRIVER"
echo "ok: $(grep -m1 'port ' devinfo.log)"

# pair NAME SERVER(uroce|rxe) ARGS...: ARGS on both sides, the client to the guest's own eth0
# address (the TCP exchange stays in the guest; RoCE crosses the bridge).
pair() {
  local name=$1 server=$2; shift 2
  local s=("$@") c=("$@")
  if [ "$server" = rxe ]; then
    s=(env "${@/uroce0/rxe0}")  # rxe's RoCEv2 IPv4 GID is index 1 too
    c=("${U[@]}" "$@")
  else
    s=("${U[@]}" "$@"); c=("${@/uroce0/rxe0}")
  fi
  timeout 300 "${s[@]}" > server.log 2>&1 &
  local sp=$!
  for _ in $(seq 300); do ss -Hltn 'sport = :18515' | grep -q . && break; sleep 0.2; done
  timeout 300 "${c[@]}" "$RXE_IP" > client.log 2>&1 || fail "$name: client"
  wait "$sp" || fail "$name: server"
  echo "ok: $name: $(grep -hE 'iters in|^ *[0-9]+ +[0-9]+ ' client.log server.log | tail -1 | tr -s ' \t' ' ')"
}
pair "ibv_rc_pingpong, rdma_rxe serves, uroce on $PCI_DRIVER connects" rxe \
  ibv_rc_pingpong -d uroce0 -g 1 -m 1024 -s 4096 -n 100 -c
pair "ibv_rc_pingpong, uroce on $PCI_DRIVER serves" uroce \
  ibv_rc_pingpong -d uroce0 -g 1 -m 1024 -s 4096 -n 100 -c
# One process per NIC: a second one is refused while the first holds it.
timeout 300 "${U[@]}" ib_write_bw -d uroce0 -x 1 -F > holder.log 2>&1 &
holder=$!
for _ in $(seq 300); do ss -Hltn 'sport = :18515' | grep -q . && break; sleep 0.2; done
expect_refusal "while another process holds it" "in use by another uroce process"
kill "$holder"; wait "$holder" 2>/dev/null
for _ in $(seq 100); do ss -Hltn 'sport = :18515' | grep -q . || break; sleep 0.2; done
pair "ib_write_bw 64 KiB, uroce on $PCI_DRIVER the client" rxe \
  ib_write_bw -d uroce0 -x 1 -s 65536 -n 100 -F
pair "ib_read_bw 4 KiB, uroce on $PCI_DRIVER the server" uroce \
  ib_read_bw -d uroce0 -x 1 -s 4096 -n 100 -F
