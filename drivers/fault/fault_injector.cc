#include "fault/fault_injector.h"

#include "common/red.h"
#include "wire/cm_mad.h"
#include "wire/packet.h"

#include <algorithm>
#include <cstring>

namespace uroce::drivers {

namespace {

constexpr size_t kMaxBurst = std::numeric_limits<uint16_t>::max();

uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

// The two lanes draw from separate generators, so the faults one direction sees do not
// depend on how much traffic the other direction carried.
constexpr uint64_t kRxSeedSalt = 0x9E3779B97F4A7C15ull;

bool is_cm_dreq(const Frame& f) {
  wire::ParsedPacket p;
  if (wire::parse_frame(wire::Bytes(f.data, f.len), p, {.verify_icrc = false}) != wire::ParseError::kOk)
    return false;
  // A MAD to the GSI QP: the attribute ID follows the 16 bytes before it in the MAD header.
  return p.hdr.bth.opcode == wire::opcode::kUdSendOnly && p.hdr.bth.dest_qp == 1 &&
         p.payload.size() >= 18 && wire::load_be16(&p.payload[16]) == wire::cm_attr::kDreq;
}

}  // namespace

FaultInjector::FaultInjector(Port& inner, const FaultConfig& cfg)
    : PortDecorator(inner), cfg_(cfg) {
  const size_t hold = std::max<size_t>(cfg.hold_capacity, 1);
  tx_.is_tx = true;
  tx_.enabled = cfg.tx_side;
  rx_.enabled = cfg.rx_side;
  tx_.rng.seed(cfg.seed);
  rx_.rng.seed(cfg.seed ^ kRxSeedSalt);
  for (Lane* l : {&tx_, &rx_}) {
    if (!l->enabled) continue;
    l->aside.reserve(cfg.reorder_window);
    if (delaying()) l->delayq = Ring<Delayed>(hold);
  }
  // Room for every delayed frame, every frame held aside, and one pulled burst plus copies.
  if (rx_.enabled) rx_ready_ = Ring<Frame*>(hold + cfg.reorder_window + 2 * kBurst);
}

FaultInjector::~FaultInjector() {
  for (size_t i = 0; i < tx_out_n_; ++i) inner_.free_frame(tx_out_[i]);
  for (Lane* l : {&tx_, &rx_}) {
    while (!l->delayq.empty()) {
      inner_.free_frame(l->delayq.front().f);
      l->delayq.pop();
    }
    for (const Aside& a : l->aside) inner_.free_frame(a.f);
  }
  while (!rx_ready_.empty()) {
    inner_.free_frame(rx_ready_.front());
    rx_ready_.pop();
  }
}

uint16_t FaultInjector::tx_burst(uint64_t now_ns, std::span<Frame* const> frames) {
  pump(now_ns);  // frames that were due leave ahead of the new ones
  if (!tx_.enabled) return inner_.tx_burst(now_ns, frames);
  const size_t n = std::min(frames.size(), kMaxBurst);
  for (size_t i = 0; i < n; ++i) process(tx_, frames[i], now_ns);
  release_due(tx_, now_ns);  // a zero delay (jitter only) may already be due
  flush_tx(now_ns);
  return static_cast<uint16_t>(n);
}

uint16_t FaultInjector::rx_burst(uint64_t now_ns, std::span<Frame*> out) {
  pump(now_ns);
  if (!rx_.enabled) return inner_.rx_burst(now_ns, out);
  const size_t want = std::min(out.size(), kMaxBurst);
  const size_t w = cfg_.reorder_window;
  std::array<Frame*, kBurst> in{};
  while (rx_ready_.size() < want) {
    // A pulled frame and its copy, plus every frame held aside, may land in the next queue:
    // pull only as many as are sure to fit.
    size_t room = rx_ready_.capacity() - rx_ready_.size();
    if (delaying()) room = std::min(room, rx_.delayq.capacity() - rx_.delayq.size());
    if (room <= w + 1) break;
    const size_t m = std::min({(room - w) / 2, kBurst, want - rx_ready_.size()});
    const uint16_t got = inner_.rx_burst(now_ns, std::span<Frame*>(in.data(), m));
    for (size_t j = 0; j < got; ++j) process(rx_, in[j], now_ns);
    release_due(rx_, now_ns);
    if (got < m) break;  // the inner port is empty
  }
  uint16_t n = 0;
  while (n < want && !rx_ready_.empty()) {
    out[n++] = rx_ready_.front();
    rx_ready_.pop();
  }
  rx_.c.sent += n;
  return n;
}

void FaultInjector::pump(uint64_t now_ns) {
  if (tx_.enabled) {
    release_held(tx_, now_ns);
    release_due(tx_, now_ns);
    flush_tx(now_ns);
  }
  if (rx_.enabled) {
    release_held(rx_, now_ns);
    release_due(rx_, now_ns);
  }
}

void FaultInjector::release_held(Lane& l, uint64_t now_ns) {
  // Held in order, each with the same bound: the ones whose time ran out are a prefix.
  size_t n = 0;
  while (n < l.aside.size() && l.aside[n].until != 0 && l.aside[n].until <= now_ns) {
    delay_stage(l, l.aside[n].f, now_ns);
    ++n;
  }
  if (n != 0) l.aside.erase(l.aside.begin(), l.aside.begin() + static_cast<std::ptrdiff_t>(n));
}

void FaultInjector::flush(uint64_t now_ns) {
  for (Lane* l : {&tx_, &rx_}) {
    if (!l->enabled) continue;
    auto fits = [&] { return l->is_tx || !rx_ready_.full(); };
    while (!l->delayq.empty() && fits()) {
      Frame* f = l->delayq.front().f;
      l->delayq.pop();
      deliver(*l, f, now_ns);
    }
    if (!l->delayq.empty()) continue;  // rx ready queue full: keep the order, wait
    size_t i = 0;
    for (; i < l->aside.size() && fits(); ++i) deliver(*l, l->aside[i].f, now_ns);
    l->aside.erase(l->aside.begin(), l->aside.begin() + static_cast<std::ptrdiff_t>(i));
  }
  flush_tx(now_ns);
}

size_t FaultInjector::held() const {
  return tx_out_n_ + tx_.delayq.size() + tx_.aside.size() + rx_.delayq.size() +
         rx_.aside.size() + rx_ready_.size();
}

uint64_t FaultInjector::next_release() const {
  uint64_t t = kNever;
  for (const Lane* l : {&tx_, &rx_}) {
    if (!l->delayq.empty()) t = std::min(t, l->delayq.front().release_ns);
  }
  return t;
}

FaultInjector::Counters FaultInjector::counters() const {
  const Counters& a = tx_.c;
  const Counters& b = rx_.c;
  Counters s;
  s.sent = a.sent + b.sent;
  s.dropped = a.dropped + b.dropped;
  s.duplicated = a.duplicated + b.duplicated;
  s.dup_skipped = a.dup_skipped + b.dup_skipped;
  s.corrupted = a.corrupted + b.corrupted;
  s.ce_marked = a.ce_marked + b.ce_marked;
  s.reordered = a.reordered + b.reordered;
  s.delayed = a.delayed + b.delayed;
  s.overflowed = a.overflowed + b.overflowed;
  s.refused = a.refused + b.refused;
  return s;
}

bool FaultInjector::chance(Lane& l, double p) {
  if (!(p > 0.0)) return false;  // also NaN
  if (p >= 1.0) return true;
  // 53 random bits -> a double uniform in [0, 1).
  const double u = static_cast<double>(l.rng() >> 11) * 0x1.0p-53;
  return u < p;
}

void FaultInjector::corrupt(Lane& l, Frame* f) {
  if (f->len == 0) return;
  const uint64_t byte = l.rng() % f->len;
  const auto mask = static_cast<uint8_t>(1u << (l.rng() % 8));
  f->data[byte] = static_cast<uint8_t>(f->data[byte] ^ mask);
  ++l.c.corrupted;
}

void FaultInjector::process(Lane& l, Frame* f, uint64_t now_ns) {
  const bool spared = cfg_.spare_dreq && is_cm_dreq(*f);
  if (chance(l, cfg_.loss) && !spared) {
    drop(l, f);
    return;
  }
  Frame* copy = nullptr;
  if (chance(l, cfg_.duplicate)) {
    copy = inner_.alloc_frame();
    if (copy != nullptr && copy->cap >= f->len) {
      std::memcpy(copy->data, f->data, f->len);
      copy->len = f->len;
      ++l.c.duplicated;
    } else {
      if (copy != nullptr) inner_.free_frame(copy);
      copy = nullptr;
      ++l.c.dup_skipped;
    }
  }
  if (chance(l, cfg_.corrupt) && !spared) corrupt(l, f);
  if (chance(l, cfg_.ce) && set_ce(f->data, f->len)) ++l.c.ce_marked;
  reorder_stage(l, f, now_ns);
  if (copy != nullptr) {
    if (chance(l, cfg_.corrupt) && !spared) corrupt(l, copy);
    reorder_stage(l, copy, now_ns);
  }
}

void FaultInjector::reorder_stage(Lane& l, Frame* f, uint64_t now_ns) {
  const uint32_t w = cfg_.reorder_window;
  const bool hold = w > 0 && l.aside.size() < w && chance(l, cfg_.reorder);
  if (!hold) delay_stage(l, f, now_ns);
  // `f` is one more later frame for each frame already aside; release those whose count
  // ran out, in the order they were held.
  size_t keep = 0;
  for (size_t i = 0; i < l.aside.size(); ++i) {
    Aside a = l.aside[i];
    if (--a.remaining == 0) {
      delay_stage(l, a.f, now_ns);
    } else {
      l.aside[keep++] = a;
    }
  }
  l.aside.resize(keep);
  if (hold) {
    const auto k = static_cast<uint32_t>(1 + l.rng() % w);
    const uint64_t until = cfg_.reorder_hold_ns != 0 ? now_ns + cfg_.reorder_hold_ns : 0;
    l.aside.push_back(Aside{f, k, until});  // within the reserved capacity: no allocation
    ++l.c.reordered;
  }
}

void FaultInjector::delay_stage(Lane& l, Frame* f, uint64_t now_ns) {
  if (!delaying()) {
    deliver(l, f, now_ns);
    return;
  }
  if (l.delayq.full()) {
    ++l.c.overflowed;
    drop(l, f);
    return;
  }
  const uint64_t j = cfg_.jitter_ns;
  const uint64_t extra =
      j == 0 ? 0 : (j == std::numeric_limits<uint64_t>::max() ? l.rng() : l.rng() % (j + 1));
  // Never before the frame ahead: the queue stays a FIFO sorted by release time.
  const uint64_t release = std::max(add_sat(add_sat(now_ns, cfg_.delay_ns), extra),
                                    l.last_release);
  l.last_release = release;
  l.delayq.push(Delayed{f, release});
  ++l.c.delayed;
}

void FaultInjector::deliver(Lane& l, Frame* f, uint64_t now_ns) {
  if (l.is_tx) {
    tx_out_[tx_out_n_++] = f;
    if (tx_out_n_ == tx_out_.size()) flush_tx(now_ns);
    return;
  }
  if (!rx_ready_.push(f)) {  // rx_burst pulls only what fits; kept as a safety net
    ++l.c.overflowed;
    drop(l, f);
  }
}

void FaultInjector::release_due(Lane& l, uint64_t now_ns) {
  while (!l.delayq.empty() && l.delayq.front().release_ns <= now_ns) {
    if (!l.is_tx && rx_ready_.full()) break;  // the caller drains rx_burst first
    Frame* f = l.delayq.front().f;
    l.delayq.pop();
    deliver(l, f, now_ns);
  }
}

void FaultInjector::drop(Lane& l, Frame* f) {
  inner_.free_frame(f);
  ++l.c.dropped;
}

void FaultInjector::flush_tx(uint64_t now_ns) {
  if (tx_out_n_ == 0) return;
  const size_t n = tx_out_n_;
  tx_out_n_ = 0;
  const size_t taken =
      std::min<size_t>(inner_.tx_burst(now_ns, std::span<Frame* const>(tx_out_.data(), n)), n);
  tx_.c.sent += taken;
  for (size_t i = taken; i < n; ++i) {  // refused: the transport sees loss and retransmits
    ++tx_.c.refused;
    drop(tx_, tx_out_[i]);
  }
}

}  // namespace uroce::drivers
