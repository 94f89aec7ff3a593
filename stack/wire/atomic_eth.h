// Atomic Extended Transport Header (IBA 9.3.4), 28 bytes, on COMPARE_SWAP and FETCH_ADD:
//
//   | virtual address (64) | R_Key (32) | swap or add data (64) | compare data (64) |
//
// and the Atomic ACK Extended Transport Header (IBA 9.3.6), 8 bytes, on ATOMIC ACKNOWLEDGE:
//
//   | original remote data (64) |
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class AtomicEthView {
 public:
  static constexpr size_t kLen = 28;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit AtomicEthView(Bytes b) : b_(b) {}
  uint64_t va() const { return load_be64(&b_[0]); }
  uint32_t rkey() const { return load_be32(&b_[8]); }
  uint64_t swap_add() const { return load_be64(&b_[12]); }
  uint64_t compare() const { return load_be64(&b_[20]); }

 private:
  Bytes b_;
};

struct AtomicEthRepr {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;  // swap value (CAS) or addend (FETCH_ADD)
  uint64_t compare = 0;   // compare value (CAS only)

  static constexpr size_t header_len() { return AtomicEthView::kLen; }
  static ParseError parse(Bytes b, AtomicEthRepr& out) {
    if (auto e = AtomicEthView::check(b); e != ParseError::kOk) return e;
    AtomicEthView v(b);
    out = {v.va(), v.rkey(), v.swap_add(), v.compare()};
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be64(&out[0], va);
    store_be32(&out[8], rkey);
    store_be64(&out[12], swap_add);
    store_be64(&out[20], compare);
  }
  bool operator==(const AtomicEthRepr&) const = default;
};

class AtomicAckEthView {
 public:
  static constexpr size_t kLen = 8;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit AtomicAckEthView(Bytes b) : b_(b) {}
  uint64_t orig() const { return load_be64(&b_[0]); }

 private:
  Bytes b_;
};

struct AtomicAckEthRepr {
  uint64_t orig = 0;  // value at the target before the atomic executed

  static constexpr size_t header_len() { return AtomicAckEthView::kLen; }
  static ParseError parse(Bytes b, AtomicAckEthRepr& out) {
    if (auto e = AtomicAckEthView::check(b); e != ParseError::kOk) return e;
    out.orig = AtomicAckEthView(b).orig();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const { store_be64(&out[0], orig); }
  bool operator==(const AtomicAckEthRepr&) const = default;
};

}  // namespace uroce::wire
