#!/usr/bin/env bash
# uroce on DPDK's PCI PMD for a real (emulated) NIC, against the kernel's Soft-RoCE: a qemu
# guest of ../shared/rxe-vm with two NICs on one host bridge, eth0 (virtio-net, kernel driver,
# rdma_rxe) and the NIC under test (e1000 or virtio-net-pci), which the guest binds to vfio-pci
# in no-IOMMU mode and uroce drives with DPDK's net_e1000_em / net_virtio. The guest runs
# pci-guest.sh: ibv_rc_pingpong (data checked) and perftest, each side serving in turn.
# Functional only: the guest is emulated (TCG), so its speed means nothing.
# Usage: pci_nic.sh e1000|virtio. Environment: UROCE_LIB (our libibverbs' directory), RXEVM
# (../shared/rxe-vm), RXEVM_DIR (its artifacts, /var/tmp/rxe-vm). Needs root (77: skipped).
set -euo pipefail
nic=${1:?usage: pci_nic.sh e1000|virtio}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
LIB=${UROCE_LIB:-$repo/build/lib}
RXEVM=${RXEVM:-$repo/../shared/rxe-vm}
RXEVM_DIR=${RXEVM_DIR:-/var/tmp/rxe-vm}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (tap, bridge)"; exit 77; }
command -v qemu-system-x86_64 >/dev/null || { echo "SKIP: qemu-system-x86_64 not installed"; exit 77; }
[ -x "$RXEVM/run.sh" ] || { echo "FAIL: rxe-vm scripts not found at $RXEVM"; exit 1; }
if [ ! -f "$RXEVM_DIR/rootfs.ext4" ]; then
  bash "$RXEVM/build.sh" >/dev/null 2>&1 || { echo "FAIL: rxe-vm build.sh failed"; exit 1; }
fi
case $nic in
  e1000) device=e1000 driver=net_e1000_em ;;
  virtio) device=virtio-net-pci driver=net_virtio ;;
  *) echo "usage: pci_nic.sh e1000|virtio"; exit 2 ;;
esac
BR=urpbr0 TAP0=urptap0 TAP1=urptap1
MAC0=52:54:00:79:00:11 MAC1=52:54:00:79:00:12
run=$(mktemp -d /var/tmp/uroce-pci.XXXXXX)
cleanup() {
  [ -n "${qpid:-}" ] && kill "$qpid" 2>/dev/null
  ip link del $TAP0 2>/dev/null; ip link del $TAP1 2>/dev/null; ip link del $BR 2>/dev/null
  rm -rf "$run"
}
trap cleanup EXIT
ip link del $BR 2>/dev/null || true
ip link add name $BR type bridge stp_state 0 forward_delay 0
echo 1 > /proc/sys/net/ipv6/conf/$BR/disable_ipv6
ip link set $BR up
for t in $TAP0 $TAP1; do
  ip link del $t 2>/dev/null || true
  ip tuntap add dev $t mode tap
  echo 1 > /proc/sys/net/ipv6/conf/$t/disable_ipv6
  ip link set $t master $BR up
done

# What the guest needs from us: the script, its settings, our library and the shared
# libraries it uses that the minimal guest lacks (same Debian release: copied from here).
cp "$here/pci-guest.sh" "$run/cmd.sh"
printf 'PCI_MAC=%s\nPCI_DRIVER=%s\nUROCE_IP=10.79.0.12\n' $MAC1 $driver > "$run/env"
mkdir "$run/lib"
cp -a "$LIB"/libibverbs.so* "$run/lib/"
ldd "$LIB/libibverbs.so.1" | awk '$3 ~ /^\// {print $3}' | while read -r so; do
  case $(basename "$so") in libc.so*|libm.so*|libgcc_s*|libstdc++*|ld-linux*) continue ;; esac
  cp -L "$so" "$run/lib/"
done

# rxe-vm's kernel, initrd and image, booted as its run.sh does, plus the NIC under test.
append="root=/dev/vda rw init=/sbin/rxe-init console=ttyS0 quiet loglevel=4 panic=1"
append+=" rxe.name=uroce-pci rxe.ipv6=0 rxe.rxe=1 rxe.ip=10.79.0.11/24"
kernel=$RXEVM_DIR/vmlinux; [ -f "$kernel" ] || kernel=$RXEVM_DIR/vmlinuz
TMPDIR=$RXEVM_DIR timeout 900 qemu-system-x86_64 -name uroce-pci -machine pc -accel tcg -cpu max \
  -smp 1 -m 2048 -nodefaults -no-user-config -display none -vga none -no-reboot \
  -kernel "$kernel" -initrd "$RXEVM_DIR/initrd.img" -append "$append" \
  -drive "file=$RXEVM_DIR/rootfs.ext4,if=virtio,format=raw,snapshot=on" \
  -netdev tap,id=n0,ifname=$TAP0,script=no,downscript=no \
  -device "virtio-net-pci,netdev=n0,mac=$MAC0,romfile=" \
  -netdev tap,id=n1,ifname=$TAP1,script=no,downscript=no \
  -device "$device,netdev=n1,mac=$MAC1,romfile=" \
  -virtfs "local,path=$run,mount_tag=hostshare,security_model=none,id=hs" \
  -serial "file:$run/console.log" -serial "file:$run/out.log" 2>"$run/qemu.err" &
qpid=$!
wait $qpid || true
qpid=
cat "$run/out.log" 2>/dev/null || true
rc=$(cat "$run/rc" 2>/dev/null || echo 125)
if [ "$rc" != 0 ]; then
  echo "FAIL: the guest's test ended with $rc"; tail -20 "$run/console.log" 2>/dev/null; cat "$run/qemu.err"
  exit 1
fi
echo "ok: uroce on DPDK's $driver ($device in qemu, no kernel driver) against rdma_rxe"
