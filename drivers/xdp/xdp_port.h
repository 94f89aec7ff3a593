// A uroce::Port on an AF_XDP socket of its own (no DPDK), for a plain NIC or veth that keeps
// its kernel driver. uroce's XDP program (steer.bpf.c) hands the socket only RoCEv2 frames
// for the device's addresses; ARP, ICMP, the kernel's TCP and everything else on the
// interface stay the kernel's.
//
// Why not DPDK's net_af_xdp: its frames are umem chunks of at most one page (the kernel
// refuses larger chunks, with or without hugepages), and without multi-buffer support a RoCE
// MTU 4096 packet (4.2 KB on the wire) cannot arrive. This port uses multi-buffer AF_XDP
// (XDP_USE_SG): each frame slot is two adjacent 4 KiB chunks, a frame longer than one chunk
// is sent as two descriptors and received as two, the second copied behind the first (a few
// hundred bytes for RoCE MTU 4096). Frames are built and parsed in the umem itself: no copy in
// user space otherwise.
//
// Neighbours: ARP and neighbour discovery stay the kernel's too (it owns the same addresses
// and MAC), so the engine's own requests never get answers. The port answers them itself:
// it takes the engine's ARP requests and neighbour solicitations off the transmit path, looks
// the address up in the kernel's neighbour table (netlink), makes the kernel resolve it if it
// does not know it yet (a zero-length UDP datagram to the discard port), and hands the engine
// the reply the neighbour would have sent.
//
// The interface's XDP hook belongs to one process, claimed with an abstract Unix socket that
// the kernel releases however the process ends; a program of ours left attached by a killed
// process is taken off before a new one goes on. A socket on every receive queue of the
// interface (up to 64), all sharing one umem: a NIC spreads RoCE flows over its queues by
// their UDP source ports; queue 0's socket also sends. Memory: the umem (32 MiB) is pinned by
// the kernel.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uroce/port.h"

namespace uroce::drivers {

struct XdpConfig {
  std::string iface;
  /// Whose RoCE frames the socket gets: 16 bytes each, IPv4 as ::ffff:a.b.c.d. The
  /// interface's link-local IPv6 address (uroce's GID 0) is added by the port.
  std::vector<std::array<uint8_t, 16>> addresses;
  uint32_t slots = 4096;  // frame slots of 8 KiB in the umem
};

class XdpPort final : public Port {
 public:
  /// nullptr and *error (one line naming the problem and the fix) on failure.
  static std::unique_ptr<XdpPort> open(const XdpConfig& cfg, std::string* error);
  ~XdpPort() override;

  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
  Frame* alloc_frame() override;
  void free_frame(Frame* f) override;
  uint32_t max_frame_len() const override { return max_frame_; }
  std::array<uint8_t, 6> mac() const override { return mac_; }
  /// An epoll descriptor over the queues' sockets (and the raw socket while it is open).
  int wait_fd() const override { return fd_; }
  bool raw_frames() const override { return true; }
  /// The steering program hands the sockets RoCE's frames only and passes the rest to the
  /// kernel: while `on`, a packet socket on the interface takes a copy of every frame the
  /// kernel receives there (not what it sends), merged into rx_burst. The kernel keeps its
  /// copy (as IBV_FLOW_ATTR_FLAGS_DONT_TRAP).
  bool receive_all(bool on) override;

  /// One line for `uroce devinfo`.
  const std::string& describe() const { return description_; }
  struct Stats {
    uint64_t rx_frames = 0, tx_frames = 0;
    uint64_t rx_dropped = 0;         // the kernel: no fill buffer or ring full (XDP_STATISTICS)
    uint64_t rx_oversize = 0;        // frames longer than two chunks, dropped here
    uint64_t steered = 0, passed = 0;  // the XDP program: to us, to the kernel
  };
  Stats stats() const;

 private:
  struct Impl;
  struct Queue;
  explicit XdpPort(std::unique_ptr<Impl> impl);
  void refill(Queue& q);
  /// Takes up to out.size() frames from queue q's receive ring.
  uint16_t receive(Queue& q, std::span<Frame*> out);
  void reap_completions();
  void kick_tx();
  void release_slot(uint32_t slot);
  /// An ARP request or neighbour solicitation from the engine: answered here (true).
  bool take_neighbor_request(Frame* f, uint64_t now_ns);
  void answer_neighbors(uint64_t now_ns);

  struct NeighborQuery {
    bool v6 = false;
    std::array<uint8_t, 16> target{};  // IPv4: the first 4 bytes
    std::array<uint8_t, 16> asker{};
    std::array<uint8_t, 4> vlan_tag{};  // 802.1Q tag of the request, if it had one
    bool tagged = false;
    uint64_t give_up_ns = 0;
  };

  std::unique_ptr<Impl> impl_;
  uint8_t* umem_ = nullptr;
  std::vector<Frame> frames_;     // one per slot
  std::vector<uint32_t> free_;    // free slots (a stack)
  std::atomic_flag free_lock_ = ATOMIC_FLAG_INIT;
  std::vector<NeighborQuery> queries_;  // waiting for the kernel to resolve
  std::vector<Frame*> answers_;          // replies for the engine's next rx_burst
  uint64_t next_query_ns_ = 0;
  uint32_t fill_target_ = 0;      // slots each queue's fill ring is kept at (at most kRing)
  size_t next_queue_ = 0;         // where the next rx_burst starts
  uint32_t max_frame_ = 0;
  std::array<uint8_t, 6> mac_{};
  int fd_ = -1;                   // wait_fd()
  int raw_fd_ = -1;               // receive_all: the packet socket, -1 when closed
  int tx_fd_ = -1;                // queue 0's socket
  std::string description_;
  uint64_t rx_frames_ = 0, tx_frames_ = 0, rx_oversize_ = 0;
};

}  // namespace uroce::drivers
