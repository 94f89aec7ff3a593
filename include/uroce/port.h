// The packet port interface: everything the engine knows about the network.
//
// A port hands out frame buffers, receives bursts and transmits bursts; DPDK ethdevs, the
// in-memory link, pcap files, the fault injector and the tracer all implement it, and the
// decorators wrap another port (FaultInjector(Tracer(MemLink))). Time is passed in so that
// decorators that delay or timestamp frames work with the engine's injected clock.
//
// Ownership: a Frame belongs to whoever holds it. rx_burst() gives frames to the caller, who
// returns them with free_frame() (or passes them to tx_burst()). alloc_frame() gives an empty
// frame; tx_burst() takes the frames it reports as sent, the rest stay with the caller.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace uroce {

struct Frame {
  uint8_t* data = nullptr;  // first byte of the Ethernet header
  uint32_t len = 0;         // bytes in use
  uint32_t cap = 0;         // bytes available at data
  void* cookie = nullptr;   // the port's own handle (e.g. the rte_mbuf)

  std::span<const uint8_t> bytes() const { return {data, len}; }
  std::span<uint8_t> room() const { return {data, cap}; }
};

class Port {
 public:
  virtual ~Port() = default;

  /// Receives up to out.size() frames; returns how many were written to `out`.
  virtual uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) = 0;
  /// Transmits frames in order; returns how many were taken (the first n).
  virtual uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) = 0;
  /// An empty frame with cap >= max_frame_len(), or nullptr when the pool is exhausted.
  virtual Frame* alloc_frame() = 0;
  virtual void free_frame(Frame* f) = 0;
  /// Largest frame this port can carry (Ethernet header included, no FCS).
  virtual uint32_t max_frame_len() const = 0;
  /// The port's Ethernet address.
  virtual std::array<uint8_t, 6> mac() const = 0;
  /// A descriptor that poll() reports readable (POLLIN) while received frames wait, so that
  /// a thread with nothing to do can sleep in the kernel until traffic comes; -1 if the port
  /// has none (the caller then naps in time slices).
  virtual int wait_fd() const { return -1; }
  /// The process is going and nothing will receive from this port again: hand on what it
  /// holds for others (a port whose address other processes share: what the kernel queued
  /// here for them) and stop taking their traffic. The port stays usable for sending.
  virtual void leave() {}
  /// Whether the port carries whole Ethernet frames of any kind, so that raw-packet QPs can
  /// send through it (the UDP port carries RoCE's UDP payloads only).
  virtual bool raw_frames() const { return false; }
  /// While `on`, every frame the interface receives is wanted, not only RoCE's (raw-packet
  /// QPs have flow rules): a port that filters what it takes in lets everything through.
  /// False: this port cannot (nothing changed).
  virtual bool receive_all(bool on) {
    (void)on;
    return false;
  }
};

/// A decorator's base: forwards everything to the wrapped port.
class PortDecorator : public Port {
 public:
  explicit PortDecorator(Port& inner) : inner_(inner) {}
  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override {
    return inner_.rx_burst(now_ns, out);
  }
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override {
    return inner_.tx_burst(now_ns, frames);
  }
  Frame* alloc_frame() override { return inner_.alloc_frame(); }
  void free_frame(Frame* f) override { inner_.free_frame(f); }
  uint32_t max_frame_len() const override { return inner_.max_frame_len(); }
  std::array<uint8_t, 6> mac() const override { return inner_.mac(); }
  int wait_fd() const override { return inner_.wait_fd(); }
  void leave() override { inner_.leave(); }
  bool raw_frames() const override { return inner_.raw_frames(); }
  bool receive_all(bool on) override { return inner_.receive_all(on); }

 protected:
  Port& inner_;
};

}  // namespace uroce
