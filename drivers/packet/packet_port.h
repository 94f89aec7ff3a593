// A uroce::Port on a Linux packet socket of its own (no DPDK): the default port, for any
// interface the kernel drives (veth, a plain NIC, a bridge port), with no hugepages, no
// XDP and no driver of ours.
//
// Why not DPDK's net_af_packet: the kernel's cost per frame dominates a packet socket (an
// skb built, passed through veth or the driver, and copied to each packet socket), and at
// 4 KiB per RoCE packet it caps bulk transfers far below TCP, which moves 64 KiB per skb.
// This port sends runs of RoCE packets as UDP GSO super-frames (PACKET_VNET_HDR,
// VIRTIO_NET_HDR_GSO_UDP_L4): one skb for up to 15 MTU-4096 packets, which crosses veth
// whole and which the kernel cuts into the original packets wherever a device needs it
// (another host, a bridge to a VM). A run is packets the engine built back to back for one
// flow: same addresses and ports, consecutive IPv4 identifications, one size (the last may
// be shorter). Segmentation gives every segment the run's headers with the lengths, the
// next IPv4 identification and a UDP checksum filled in, so each segment is byte for byte
// the packet the engine built, except that the checksum is no longer zero, which RoCEv2
// allows and the ICRC does not cover. Received super-frames (from a uroce peer on the same
// veth) are cut back into packets here.
//
// Frames are sent with sendmmsg() straight from the engine's buffers (an iovec per packet,
// no copy in user space) and received in a TPACKET_V2 ring, where the engine reads them in
// place: polling an idle port costs no system call. A frame longer than a ring slot (a
// super-frame) is also queued whole on the socket (PACKET_COPY_THRESH) and read with one
// recvmsg: a uroce run straight into its packets' frames, each payload behind room for the
// headers (the slot shows where each begins), anything else whole and cut from there. 802.1Q tags the kernel took
// off on receive are put back. A socket filter keeps everything but ARP, RoCEv2 and ICMPv6
// off the socket (the kernel's own traffic on a shared interface is not copied to us). `shared` (the default) transmits through the kernel's
// normal path, so that other packet sockets on the interface (another uroce process) see
// our frames; otherwise PACKET_QDISC_BYPASS.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/shared_pool.h"
#include "uroce/port.h"

namespace uroce::drivers {

struct PacketConfig {
  std::string iface;
  bool shared = true;    // false: PACKET_QDISC_BYPASS, other packet sockets miss our frames
  bool gso = true;       // send runs of packets as UDP GSO super-frames
  bool scatter = true;   // read a queued super-frame straight into its packets' frames
                         // (false: whole, then cut: the way tests compare it with)
  uint32_t frames = 4096;  // frame buffers (each the interface MTU + 22 bytes)
};

struct VnetHdr;  // struct virtio_net_hdr
struct Udp;      // where a UDP packet's headers are

class PacketPort final : public Port {
 public:
  /// nullptr and *error (one line naming the problem and the fix) on failure.
  static std::unique_ptr<PacketPort> open(const PacketConfig& cfg, std::string* error);
  ~PacketPort() override;

  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
  Frame* alloc_frame() override;
  void free_frame(Frame* f) override;
  uint32_t max_frame_len() const override { return max_frame_; }
  std::array<uint8_t, 6> mac() const override { return mac_; }
  int wait_fd() const override { return fd_; }
  bool raw_frames() const override { return true; }
  /// Swaps the socket's filter: RoCE's frames only, or every frame the interface receives
  /// (not what this host sends).
  bool receive_all(bool on) override;

  /// One line for `uroce devinfo`.
  const std::string& describe() const { return description_; }
  struct Stats {
    uint64_t rx_frames = 0, tx_frames = 0;  // packets (a super-frame counts its segments)
    uint64_t rx_dropped = 0;    // the kernel's (socket buffer full) and ours (no free frame)
    uint64_t rx_oversize = 0;   // longer than a super-frame can be, or not cut cleanly
    uint64_t rx_super = 0, tx_super = 0;  // super-frames received / sent
    uint64_t rx_scattered = 0;  // of rx_super: read straight into their packets' frames
  };
  Stats stats() const;

  /// The largest super-frame: its IP length field (tests size their runs by it).
  static constexpr uint32_t kMaxSuper = 65535;  // IPv4 total length / IPv6 payload length

 private:
  PacketPort() = default;
  uint16_t take_ready(std::span<Frame*> out, uint16_t n);
  /// Cuts the super-frame received in `head` (and the overflow buffer behind it) into
  /// packets on ready_; false if it cannot be cut (dropped).
  bool cut(Frame* head, const uint8_t* overflow, uint32_t len, uint32_t mss);
  /// The packets of a super-frame of `payload` UDP payload bytes in frames of their own (the
  /// first with the headers, the others with their payload behind room for them): their
  /// headers, and onto ready_.
  void headers_of_cut(std::span<Frame* const> seg, const Udp& u, uint32_t payload,
                      uint32_t mss);
  /// A super-frame queued on the socket whose ring slot (`slot_frame`, `slot_len` bytes of
  /// its `len`) shows a uroce run: read with each packet's payload put straight into a frame
  /// of its own. False: not such a run, or short of frames (receive_queued reads it).
  bool receive_scattered(const uint8_t* slot_frame, uint32_t slot_len, uint32_t len);
  /// A received frame of `len` bytes (`tag` of them an 802.1Q tag put back) and its
  /// virtio_net_hdr: to ready_, cut if it is a super-frame, or dropped.
  void accept(Frame* f, const VnetHdr& vh, uint32_t len, uint32_t tag,
              const uint8_t* overflow);
  void receive_queued();
  static uint32_t put_tag_back(Frame* f, uint32_t status, uint16_t tpid, uint16_t tci);

  SharedPool pool_;
  std::vector<Frame*> ready_;     // cut packets waiting for the next rx_burst (FIFO)
  size_t ready_head_ = 0;
  std::unique_ptr<uint8_t[]> overflow_;  // a queued super-frame's bytes past its first packet
  uint8_t* ring_ = nullptr;               // the receive ring (TPACKET_V2), mapped
  size_t ring_bytes_ = 0;
  uint32_t ring_slot_ = 0;                // bytes per slot
  uint32_t ring_head_ = 0;                // the next slot the kernel fills
  std::vector<Frame> ring_frames_;        // a Frame per slot, handed out in place
  uint32_t max_frame_ = 0;
  std::array<uint8_t, 6> mac_{};
  int fd_ = -1;
  bool gso_ = true;
  bool scatter_ = true;
  std::string description_;
  uint64_t rx_frames_ = 0, tx_frames_ = 0, rx_no_frame_ = 0, rx_oversize_ = 0;
  uint64_t rx_super_ = 0, tx_super_ = 0;
  uint64_t rx_scattered_ = 0;  // super-frames read straight into their packets' frames
  mutable std::atomic<uint64_t> kernel_drops_{0};  // PACKET_STATISTICS resets when read
};

}  // namespace uroce::drivers
