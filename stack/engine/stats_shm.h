// Live counters of a running process, published for `uroce stats`: each open device writes
// its engine counters into a small shared-memory file /dev/shm/uroce-<pid>-<device>, refreshed
// by the progress thread; the tool maps it read-only and prints the counters by name.
#pragma once

#include <cstdint>
#include <string>

#include "engine/counters.h"

namespace uroce {

struct StatsShm {
  static constexpr uint64_t kMagic = 0x75726f6365737473ull;  // "urocests"
  uint64_t magic;
  uint32_t n_counters;      // Counter::kCount when written
  uint32_t n_parse_errors;  // wire::ParseError::kCount when written
  char device[64];
  uint64_t updated_ns;
  uint64_t values[static_cast<size_t>(Counter::kCount)];
  uint64_t parse_errors[static_cast<size_t>(wire::ParseError::kCount)];
  // The progress thread, written by it as it goes (docs/threading.md): whether it is parked
  // (sleeping in the kernel until traffic, a deadline or posted work) right now, how often it
  // parked, and what woke it each time.
  uint64_t progress_parked;
  uint64_t progress_parks;
  uint64_t progress_woke_traffic;   // a frame arrived
  uint64_t progress_woke_kick;      // an application thread left work
  uint64_t progress_woke_deadline;  // a timer (retransmit, ARP, ...) or the link watch
};

inline std::string stats_shm_name(int pid, const std::string& device) {
  return "/uroce-" + std::to_string(pid) + "-" + device;
}

}  // namespace uroce
