// RDMA Extended Transport Header (IBA 9.3.3), 16 bytes: where an RDMA WRITE / READ / FLUSH /
// ATOMIC WRITE goes in the responder's memory.
//
//   | virtual address (64) | R_Key (32) | DMA length (32) |
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class RethView {
 public:
  static constexpr size_t kLen = 16;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit RethView(Bytes b) : b_(b) {}
  uint64_t va() const { return load_be64(&b_[0]); }
  uint32_t rkey() const { return load_be32(&b_[8]); }
  uint32_t dma_len() const { return load_be32(&b_[12]); }

 private:
  Bytes b_;
};

struct RethRepr {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_len = 0;

  static constexpr size_t header_len() { return RethView::kLen; }
  static ParseError parse(Bytes b, RethRepr& out) {
    if (auto e = RethView::check(b); e != ParseError::kOk) return e;
    RethView v(b);
    out = {v.va(), v.rkey(), v.dma_len()};
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be64(&out[0], va);
    store_be32(&out[8], rkey);
    store_be32(&out[12], dma_len);
  }
  bool operator==(const RethRepr&) const = default;
};

}  // namespace uroce::wire
