#include "memlink/mem_switch.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace uroce::drivers {

MemSwitch::MemSwitch(const Config& cfg)
    : cfg_(cfg), pool_(cfg.frames, cfg.max_frame_len), rng_(cfg.seed) {
  for (uint32_t i = 0; i < cfg.ports; ++i) {
    auto p = std::make_unique<SwitchPort>();
    p->sw_ = this;
    p->mac_ = {0x02, 0, 0, 0, 0x5c, static_cast<uint8_t>(i + 1)};
    p->q_ = Ring<SwitchPort::Queued>(cfg.frames);
    p->in_ = Ring<SwitchPort::Queued>(cfg.frames);
    p->gbps_ = i == cfg.bottleneck ? cfg.rate_gbps : cfg.link_gbps;
    ports_.push_back(std::move(p));
  }
}

MemSwitch::~MemSwitch() {
  for (auto& p : ports_) {
    for (Ring<SwitchPort::Queued>* q : {&p->q_, &p->in_}) {
      while (!q->empty()) {
        pool_.free(q->front().f);
        q->pop();
      }
    }
  }
}

size_t MemSwitch::in_flight() const {
  size_t n = 0;
  for (const auto& p : ports_) n += p->q_.size() + p->in_.size();
  return n;
}

uint64_t MemSwitch::next_arrival() const {
  uint64_t t = std::numeric_limits<uint64_t>::max();
  for (const auto& p : ports_) {
    if (!p->q_.empty()) t = std::min(t, p->q_.front().arrive_ns);
    if (!p->in_.empty()) t = std::min(t, p->in_.front().arrive_ns);
  }
  return t;
}

void MemSwitch::advance(uint64_t now_ns) {
  for (;;) {
    SwitchPort* first = nullptr;
    for (auto& p : ports_)
      if (!p->in_.empty() && p->in_.front().arrive_ns <= now_ns &&
          (first == nullptr || p->in_.front().arrive_ns < first->in_.front().arrive_ns))
        first = p.get();
    if (first == nullptr) return;
    const SwitchPort::Queued e = first->in_.front();
    first->in_.pop();
    first->forward(e.arrive_ns, e.f);
  }
}

uint64_t MemSwitch::SwitchPort::backlog(uint64_t now_ns) const {
  if (last_depart_ns_ <= now_ns) return 0;
  return static_cast<uint64_t>(static_cast<double>(last_depart_ns_ - now_ns) * gbps_ / 8.0);
}

bool MemSwitch::SwitchPort::red(uint64_t q, Frame* f) {
  const Config& c = sw_->cfg_;
  const RedConfig rc{c.kmin_bytes, c.kmax_bytes, c.pmax, c.ecn};
  const RedVerdict v = red_judge(rc, q, f->data, f->len, sw_->rng_);
  if (v == RedVerdict::kMarked) ++stats_.marked;
  return v != RedVerdict::kDrop;
}

void MemSwitch::SwitchPort::enqueue(uint64_t now_ns, Frame* f) {
  const Config& c = sw_->cfg_;
  const uint64_t q = backlog(now_ns);
  stats_.max_backlog = std::max(stats_.max_backlog, q);
  if (q + f->len > c.queue_bytes || q_.full() || (!c.mark_on_dequeue && !red(q, f))) {
    ++stats_.dropped;
    sw_->pool_.free(f);
    return;
  }
  const uint64_t start = std::max(now_ns, last_depart_ns_);
  last_depart_ns_ = start + static_cast<uint64_t>(f->len * 8.0 / gbps_);
  q_.push({f, last_depart_ns_ + c.delay_ns});
  ++stats_.frames;
  stats_.bytes += f->len;
}

uint16_t MemSwitch::SwitchPort::rx_burst(uint64_t now_ns, std::span<Frame*> out) {
  sw_->advance(now_ns);
  uint16_t n = 0;
  while (n < out.size() && !q_.empty() && q_.front().arrive_ns <= now_ns) {
    Frame* f = q_.front().f;
    const uint64_t left = q_.front().arrive_ns - sw_->cfg_.delay_ns;
    q_.pop();
    // Marking on dequeue: RED judges by the backlog the frame left behind it.
    if (sw_->cfg_.mark_on_dequeue && !red(backlog(left), f)) {
      ++stats_.dropped;
      sw_->pool_.free(f);
      continue;
    }
    out[n++] = f;
  }
  return n;
}

uint16_t MemSwitch::SwitchPort::tx_burst(uint64_t now_ns, std::span<Frame* const> frames) {
  sw_->advance(now_ns);
  uint16_t n = 0;
  for (Frame* f : frames) {
    if (in_.full()) break;  // the NIC's ring is full: the rest waits
    const uint64_t start = std::max(now_ns, last_in_ns_);
    last_in_ns_ = start + static_cast<uint64_t>(f->len * 8.0 / sw_->cfg_.link_gbps);
    in_.push({f, last_in_ns_});
    ++n;
  }
  return n;
}

void MemSwitch::SwitchPort::forward(uint64_t now_ns, Frame* f) {
  const uint8_t* dst = f->data;
  if ((dst[0] & 1) != 0) {  // broadcast / multicast: a copy to every other port
    for (auto& p : sw_->ports_) {
      if (p.get() == this) continue;
      Frame* copy = sw_->pool_.alloc();
      if (copy == nullptr) continue;
      std::memcpy(copy->data, f->data, f->len);
      copy->len = f->len;
      p->enqueue(now_ns, copy);
    }
    sw_->pool_.free(f);
    return;
  }
  for (auto& p : sw_->ports_) {
    if (p.get() != this && std::equal(p->mac_.begin(), p->mac_.end(), dst)) {
      p->enqueue(now_ns, f);
      return;
    }
  }
  sw_->pool_.free(f);
}

}  // namespace uroce::drivers
