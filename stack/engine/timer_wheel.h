// A hashed timing wheel for the transport's per-QP timers (retransmission, RNR wait,
// ACK coalescing). Arming, re-arming and cancelling are O(1); advancing visits the occupied
// slots among those the elapsed ticks cover (a word of the slot bitmap per 64 empty ones,
// bounded by the wheel size) plus the timers found there, so thousands of QPs with armed
// timers stay cheap. Time is whatever the caller passes in (nanoseconds).
//
// Timers are intrusive: a Timer lives inside its owner (a QP) and the wheel links it into a
// slot's list. Nothing allocates after construction.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace uroce {

struct Timer {
  Timer* prev = nullptr;
  Timer* next = nullptr;
  uint64_t expires_ns = 0;
  uint32_t slot = 0;  // wheel slot it is linked into, while armed
  bool armed = false;
  void* owner = nullptr;  // what the timer belongs to (e.g. a QP)
  uint8_t kind = 0;       // which of the owner's timers this is
};

class TimerWheel {
 public:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

  /// `tick_ns` is the resolution; `slots` * `tick_ns` is the span a lap covers (timers further
  /// out simply stay in their slot for more laps).
  /// `slots` is rounded up to a multiple of 64 (a word of the occupancy bitmap).
  explicit TimerWheel(uint64_t start_ns = 0, uint64_t tick_ns = 1024, size_t slots = 4096)
      : tick_ns_(tick_ns),
        heads_((slots + 63) / 64 * 64 + 1, nullptr),
        occupied_(heads_.size() / 64 + 1, 0),
        now_tick_(start_ns / tick_ns) {}

  /// Arms (or re-arms) `t` to fire at the first advance() with now >= expires_ns.
  void arm(Timer& t, uint64_t expires_ns) {
    if (t.armed) {
      unlink(t);
    } else {
      t.armed = true;
      ++armed_;
    }
    t.expires_ns = expires_ns;
    uint64_t tick = expires_ns / tick_ns_;
    // Already due (or due within the current tick): advance() always scans slot now_tick_.
    if (tick < now_tick_) tick = now_tick_;
    link(t, static_cast<uint32_t>(tick % (heads_.size() - 1)));
  }

  void cancel(Timer& t) {
    if (!t.armed) return;
    unlink(t);
    t.armed = false;
    --armed_;
  }

  size_t armed_count() const { return armed_; }

  /// Fires, by calling fire(Timer&), every armed timer with expires_ns <= now_ns, in expiry
  /// order. A timer is disarmed before its callback runs, so the callback may re-arm it and
  /// may cancel or re-arm any other timer; a timer (re-)armed by a callback fires at the next
  /// advance() at the earliest.
  template <typename Fire>
  size_t advance(uint64_t now_ns, Fire&& fire) {
    const uint64_t target = std::max(now_ns / tick_ns_, now_tick_);
    const size_t slots = heads_.size() - 1;
    const uint64_t last = target - now_tick_ >= slots ? now_tick_ + slots - 1 : target;
    // First move every due timer to the pending list (slot now_tick_ itself may hold timers
    // armed after the previous advance), then fire them one by one.
    // Only the slots that hold timers are visited (the bitmap, a word at a time): an engine
    // polled after a long idle spell does not walk a whole lap of empty slots.
    for (uint64_t tick = now_tick_; tick <= last;) {
      const size_t slot = tick % slots;
      const uint64_t ahead = occupied_[slot / 64] >> (slot % 64);
      if (ahead == 0 || (ahead & 1) == 0) {
        // On to the next occupied slot in this word, or to the next word (the wrap back to
        // slot 0 comes at a word boundary: slots is a multiple of 64).
        tick += ahead == 0 ? 64 - slot % 64 : static_cast<uint64_t>(std::countr_zero(ahead));
        continue;
      }
      Timer* t = heads_[slot];
      ++tick;
      while (t != nullptr) {
        Timer* next = t->next;
        if (t->expires_ns <= now_ns) {
          unlink(*t);
          link_pending(*t);
        }
        t = next;
      }
    }
    now_tick_ = target;
    size_t fired = 0;
    while (Timer* t = heads_[pending_slot()]) {
      unlink(*t);
      t->armed = false;
      --armed_;
      ++fired;
      fire(*t);
    }
    return fired;
  }

  /// Earliest expiry among armed timers, or kNever. Visits only the slots that hold timers
  /// (a bitmap of them: a 4096-slot wheel is 65 words), so it is cheap enough to ask often.
  uint64_t next_expiry() const {
    if (armed_ == 0) return kNever;
    uint64_t best = kNever;
    for (size_t w = 0; w < occupied_.size(); ++w) {
      for (uint64_t bits = occupied_[w]; bits != 0; bits &= bits - 1) {
        const size_t slot = w * 64 + static_cast<size_t>(std::countr_zero(bits));
        for (Timer* t = heads_[slot]; t != nullptr; t = t->next)
          if (t->expires_ns < best) best = t->expires_ns;
      }
    }
    return best;
  }

 private:
  uint32_t pending_slot() const { return static_cast<uint32_t>(heads_.size() - 1); }
  /// Inserts into the pending list keeping it sorted by expiry (ties: in insertion order).
  /// Slots are scanned in tick order, so the walk back from the tail is short except after a
  /// jump of a whole lap or more.
  void link_pending(Timer& t) {
    Timer* after = pending_tail_;
    while (after != nullptr && after->expires_ns > t.expires_ns) after = after->prev;
    t.slot = pending_slot();
    t.prev = after;
    t.next = after != nullptr ? after->next : heads_[pending_slot()];
    if (t.next != nullptr) {
      t.next->prev = &t;
    } else {
      pending_tail_ = &t;
    }
    if (after != nullptr) {
      after->next = &t;
    } else {
      heads_[pending_slot()] = &t;
    }
    mark(pending_slot());
  }
  void mark(uint32_t slot) { occupied_[slot / 64] |= uint64_t{1} << (slot % 64); }
  void link(Timer& t, uint32_t slot) {
    t.slot = slot;
    Timer*& head = heads_[slot];
    t.prev = nullptr;
    t.next = head;
    if (head != nullptr) head->prev = &t;
    head = &t;
    mark(slot);
  }
  void unlink(Timer& t) {
    if (t.prev != nullptr) {
      t.prev->next = t.next;
    } else {
      heads_[t.slot] = t.next;
      if (t.next == nullptr) occupied_[t.slot / 64] &= ~(uint64_t{1} << (t.slot % 64));
    }
    if (t.next != nullptr) {
      t.next->prev = t.prev;
    } else if (t.slot == pending_slot()) {
      pending_tail_ = t.prev;
    }
    t.prev = t.next = nullptr;
  }

  uint64_t tick_ns_;
  std::vector<Timer*> heads_;
  std::vector<uint64_t> occupied_;  // bit s: heads_[s] holds a timer
  uint64_t now_tick_;
  Timer* pending_tail_ = nullptr;  // last timer of the pending list (heads_.back())
  size_t armed_ = 0;
};

}  // namespace uroce
