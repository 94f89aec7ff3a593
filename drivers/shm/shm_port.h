// A uroce::Port to another uroce process on the same machine through shared memory, with no
// copy of its own: the sender's engine builds each frame in a slot of the shared region, the
// receiver's engine parses it there and copies the payload straight into the MR. (DPDK's
// memif copies every frame twice more: from the sender's mbuf into its ring and out of the
// ring into the receiver's mbuf; docs/shm.md.)
//
// Pairing: both processes name the same unix socket path. The first to open listens on it;
// the second connects, creates the region (a memfd) and passes it over the socket. Once
// paired, the path is removed: no file is left behind, and a third process that names it
// starts a new pair. One peer per open port: if the peer exits, frames to it are dropped
// (as on an unplugged cable) until the device is opened again.
//
// The region holds two directions, each with its slots and two single-producer rings of
// slot numbers: `sent` (sender -> receiver: a slot and its length) and `returned` (receiver
// -> sender: slots it is done with). Everything read from the peer is checked (slot numbers,
// lengths, ring indexes, a slot handed over twice): a faulty or hostile peer can garble the
// frames it sends, never make us touch memory outside the region.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uroce/port.h"

namespace uroce::drivers {

struct ShmConfig {
  std::string path;  // the unix socket both processes name
  uint32_t slots = 1024;   // per direction, a power of two
  uint32_t max_frame = 9018;  // jumbo frame (9000 + Ethernet + VLAN), as the other ports
};

class ShmPort final : public Port {
 public:
  /// Opens (listens or connects). nullptr and *error (one line naming the fix) on failure.
  static std::unique_ptr<ShmPort> open(const ShmConfig& cfg, std::string* error);
  ~ShmPort() override;

  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
  Frame* alloc_frame() override;
  void free_frame(Frame* f) override;
  uint32_t max_frame_len() const override { return max_frame_; }
  std::array<uint8_t, 6> mac() const override { return mac_; }
  bool raw_frames() const override { return true; }
  bool receive_all(bool) override { return true; }  // the peer's frames, all of them

  bool paired() const { return ctl_fd_ >= 0; }
  /// The shared region as this process maps it (where every frame's bytes are).
  std::span<const uint8_t> region() const { return {region_, region_len_}; }
  /// One line for `uroce devinfo`.
  std::string describe() const;
  struct Stats {
    uint64_t rx_frames = 0, tx_frames = 0;
    uint64_t tx_dropped = 0;    // no peer (yet, or any more)
    uint64_t rx_bad_slot = 0;   // from the peer: a slot number, length or index out of range
  };
  const Stats& stats() const { return stats_; }

  struct Ring;  // in the shared region (shm_port.cc)

 private:
  ShmPort() = default;
  void try_accept();
  void map_region(int fd, bool create);
  bool peer_gone();
  uint32_t take_returned();

  ShmConfig cfg_;
  uint32_t max_frame_ = 0;
  uint32_t slot_size_ = 0;
  std::array<uint8_t, 6> mac_{};
  int listen_fd_ = -1;  // until paired (the first process)
  int ctl_fd_ = -1;     // the paired socket: its end tells that the peer exited
  int region_fd_ = -1;  // the listener's memfd, until sent to the peer
  uint64_t next_accept_ns_ = 0;
  bool listening_path_ = false;
  uint8_t* region_ = nullptr;
  size_t region_len_ = 0;
  int mine_ = 0;  // the direction this side sends on: 0 the connecting side's, 1 the listener's
  Ring* tx_sent_ = nullptr;      // we produce
  Ring* tx_returned_ = nullptr;  // the peer produces
  Ring* rx_sent_ = nullptr;      // the peer produces
  Ring* rx_returned_ = nullptr;  // we produce
  uint8_t* tx_slots_ = nullptr;
  uint8_t* rx_slots_ = nullptr;
  std::vector<Frame> tx_frames_, rx_frames_;
  std::vector<uint32_t> free_;        // our slots ready for alloc_frame (a stack: hot first)
  std::vector<uint8_t> tx_with_peer_;  // our slot is in the peer's hands
  std::vector<uint8_t> rx_held_;       // the peer's slot is in our engine's hands
  uint32_t tx_head_ = 0, rx_tail_ = 0, ret_head_ = 0, ret_tail_ = 0;  // our copies of our indexes
  bool gone_ = false;
  Stats stats_;
};

}  // namespace uroce::drivers
