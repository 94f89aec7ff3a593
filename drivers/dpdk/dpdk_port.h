// A uroce::Port on a DPDK ethdev. By default the net_af_packet PMD bound to a named Linux
// interface (plain NICs and veth pairs, no hugepages needed); any other PMD through DPDK
// devargs (net_memif, net_af_xdp, net_tap, ...) or a NIC by its PCI address.
//
// Frames live in mbufs: the Frame header sits in each mbuf's private area, so handing frames
// between the port and the engine costs no allocation. One EAL per process, started by the
// first DpdkPort (hugepages, kept in memory only, for a PCI NIC, else --no-huge; only the
// configured PCI device probed, or no PCI scan; a unique --file-prefix; on a CPU the
// calling thread may already use, whose affinity it restores) and up until the process exits;
// several ports may
// share it, and a port closed is removed from DPDK entirely. Every descriptor DPDK opens is
// made close-on-exec. A port is driven by one thread at a time (the engine's lock): its
// mbuf pool's per-lcore cache counts on that (dpdk_port.cc, MainLcore).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uroce/port.h"

struct rte_mempool;

namespace uroce::drivers {

struct DpdkConfig {
  std::string iface;    // Linux interface for net_af_packet (e.g. "veth0")
  std::string devargs;  // instead of iface: full DPDK devargs, e.g. "net_tap0,iface=t0"
  // net_af_packet: transmit through the kernel's normal path (not PACKET_QDISC_BYPASS), so
  // other packet sockets on the interface (another uroce process sharing it) see our frames.
  bool shared = true;
  uint32_t mbufs = 8191;
  uint16_t rx_desc = 1024;
  uint16_t tx_desc = 1024;
  uint32_t max_frame = 10240;  // mbuf data room: a whole af_packet ring frame (jumbo + VLAN fit)
  std::vector<std::string> eal_args;  // extra EAL arguments
};

class DpdkPort final : public Port {
 public:
  /// Starts the EAL if needed and the device. nullptr and *error (one line naming the problem
  /// and the fix) on failure.
  static std::unique_ptr<DpdkPort> open(const DpdkConfig& cfg, std::string* error);
  ~DpdkPort() override;

  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
  Frame* alloc_frame() override;
  void free_frame(Frame* f) override;
  uint32_t max_frame_len() const override { return max_frame_; }
  std::array<uint8_t, 6> mac() const override { return mac_; }
  /// net_af_packet: its receive ring's packet socket (readable while the ring holds frames
  /// the PMD has not taken); net_tap: its tap descriptor. -1 for other PMDs.
  int wait_fd() const override { return wait_fd_; }
  bool raw_frames() const override { return true; }
  bool receive_all(bool) override { return true; }  // the PMD hands us every frame it gets

  uint16_t port_id() const { return port_id_; }
  /// One line for `uroce devinfo`: the PMD, the device, its queues, memory and how it waits.
  const std::string& describe() const { return description_; }
  /// Device statistics (packets, drops) for `uroce stats`.
  struct Stats {
    uint64_t rx_packets, tx_packets, rx_missed, rx_errors, tx_errors, rx_nombuf;
  };
  Stats stats() const;

 private:
  DpdkPort() = default;
  bool probed_ = false;   // an ethdev exists for port_id_
  bool started_ = false;  // rte_eth_dev_start succeeded
  uint16_t port_id_ = 0;
  rte_mempool* pool_ = nullptr;
  uint32_t max_frame_ = 0;
  std::array<uint8_t, 6> mac_{};
  int wait_fd_ = -1;  // owned by the PMD
  std::string description_;
};

}  // namespace uroce::drivers
