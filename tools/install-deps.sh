#!/usr/bin/env bash
# Installs everything uroce needs to build and test, from Debian's packages only.
# Safe to run again. Installing needs root: started by another user it runs itself again
# through sudo when there is one.
set -euo pipefail
. "$(dirname "$0")/lib/root.sh"

packages=(
  build-essential cmake pkg-config           # toolchain
  clang libclang-rt-14-dev                   # libFuzzer + sanitizer runtimes for the fuzz target
  libpcap-dev libisal-dev libgtest-dev       # pcap files, fast CRC, unit tests
  tshark                                     # cross-check of our packets with Wireshark's decoder
  libdpdk-dev libibverbs-dev iproute2        # DPDK port (static), verbs headers, network namespaces
  libxdp-dev libbpf-dev llvm iputils-ping     # the AF_XDP port and its XDP program (clang -target bpf)
  ethtool                                    # tests/ports/packet_port.sh: a device without UDP GSO
  ibverbs-utils perftest binutils            # unmodified verbs programs to test the provider with
  librdmacm-dev rdmacm-utils                 # rdma_cma.h for our librdmacm; rping, ucmatose, udaddy
  ucx-utils libfabric-bin                    # middleware over uroce (tests/verbs/middleware.sh)
  openmpi-bin libopenmpi-dev mpich libmpich-dev  # MPI over UCX (middleware.sh's ping-pong)
  iperf3 qperf                               # the kernel sockets side of tools/bench/side_by_side.sh
  python3-pyverbs time                       # pyverbs smoke test; /usr/bin/time for the bench
  gnuplot-nox                                # plots of the benchmark scripts
  chromium                                   # uroce-dissect --ladder's page tested in a browser
  emscripten                                 # the engine in WebAssembly (tools/lab, issue 46)
  podman crun runc catatonit netavark         # containers (tests/verbs/podman.sh; runc where crun
                                             #   refuses the host's cgroup layout)
  qemu-system-x86 qemu-utils debootstrap     # the kernel Soft-RoCE VM (../shared/rxe-vm) for
  e2fsprogs tcpdump xz-utils cpio            #   the interop tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

become_root "$0" "$@" || {
  echo "install-deps: installing ${missing[*]} needs root, and there is no sudo: run it as root" >&2
  exit 1
}
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer "no" without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
