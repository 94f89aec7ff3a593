// Frames with recognisable contents for the port tests: the first four bytes carry a
// sequence number (big-endian), the rest a pattern derived from it.
#pragma once

#include <cstdint>
#include <vector>

#include "uroce/port.h"

namespace uroce::test {

inline uint32_t frame_len_for(uint32_t seq) { return 60 + seq % 97; }

inline std::vector<uint8_t> frame_bytes(uint32_t seq, uint32_t len) {
  std::vector<uint8_t> b(len);
  for (uint32_t i = 0; i < len; ++i) b[i] = static_cast<uint8_t>(seq * 31u + i * 7u + 1u);
  b[0] = static_cast<uint8_t>(seq >> 24);
  b[1] = static_cast<uint8_t>(seq >> 16);
  b[2] = static_cast<uint8_t>(seq >> 8);
  b[3] = static_cast<uint8_t>(seq);
  return b;
}

inline std::vector<uint8_t> frame_bytes(uint32_t seq) {
  return frame_bytes(seq, frame_len_for(seq));
}

/// A frame from `p`'s pool holding frame_bytes(seq); nullptr if the pool is empty.
inline Frame* make_frame(Port& p, uint32_t seq) {
  Frame* f = p.alloc_frame();
  if (f == nullptr) return nullptr;
  const std::vector<uint8_t> b = frame_bytes(seq);
  for (size_t i = 0; i < b.size(); ++i) f->data[i] = b[i];
  f->len = static_cast<uint32_t>(b.size());
  return f;
}

inline uint32_t seq_of(const Frame* f) {
  return uint32_t{f->data[0]} << 24 | uint32_t{f->data[1]} << 16 | uint32_t{f->data[2]} << 8 |
         uint32_t{f->data[3]};
}

}  // namespace uroce::test
