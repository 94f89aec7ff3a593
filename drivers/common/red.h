// RED with ECN, the way a switch port marks congestion for DCQCN: above Kmin bytes of queue
// an ECN-capable packet is marked CE with a probability rising linearly to Pmax at Kmax (1
// beyond it); a Not-ECT packet is dropped with that probability instead (or when marking is
// off). Used by the test switch (memlink/mem_switch.h) and the live one (tools/bench/
// ecn_switch.cc), on the frame's own bytes (Ethernet, optional 802.1Q, IPv4 or IPv6).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace uroce::drivers {

struct RedConfig {
  uint64_t kmin_bytes = 16 * 1024;
  uint64_t kmax_bytes = 128 * 1024;
  double pmax = 0.1;
  bool ecn = true;  // mark ECT packets (false: RED drops them too)
};

enum class RedVerdict { kPass, kMarked, kDrop };

/// RED's verdict on the frame `f` (`len` bytes) arriving at (or leaving) a queue of `q`
/// bytes; kMarked means CE was set in the frame (and the IPv4 header checksum redone).
RedVerdict red_judge(const RedConfig& c, uint64_t q, uint8_t* f, size_t len, std::mt19937_64& rng);

/// Sets CE in an IPv4 or IPv6 frame whatever its ECN bits were (the IPv4 checksum redone);
/// false, untouched, if it is neither. For the fault injector, which marks on purpose.
bool set_ce(uint8_t* f, size_t len);

}  // namespace uroce::drivers
