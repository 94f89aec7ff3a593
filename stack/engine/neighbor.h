// The neighbour cache: which MAC address an IP next hop has. Filled by ARP (IPv4) replies
// and requests, and by static entries; resolution retries on a timer and gives up cleanly.
#pragma once

#include <cstdint>

#include "engine/timer_wheel.h"
#include "wire/addr.h"

namespace uroce {

enum class NeighborState : uint8_t {
  kIncomplete,  // request(s) sent, no answer yet
  kReachable,   // MAC known
  kFailed,      // no answer after all retries (a later resolve() starts over)
};

struct Neighbor {
  wire::Gid ip{};
  wire::MacAddr mac{};
  NeighborState state = NeighborState::kIncomplete;
  uint8_t tries = 0;
  bool is_static = false;
  Timer timer;  // retry timer while incomplete
};

inline constexpr uint8_t kIpProtoIcmpv6 = 58;
inline constexpr uint8_t kNeighborSolicitation = 135;
inline constexpr uint8_t kNeighborAdvertisement = 136;

/// How resolution goes: requests sent, spaced by kArpRetryNs (as Linux: 3 probes, 1 s apart).
inline constexpr uint8_t kArpTries = 3;
inline constexpr uint64_t kArpRetryNs = 1'000'000'000;

}  // namespace uroce
