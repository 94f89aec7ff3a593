// DCQCN, the reaction point (RP) of RoCEv2 congestion control (Zhu et al., "Congestion
// Control for Large-Scale RDMA Deployments", SIGCOMM 2015): the rate machine of one QP.
//
// A switch marks packets CE instead of dropping them once its queue grows; the receiver (the
// notification point, NP) answers a marked packet with a CNP to the QP that sent it, and that
// QP cuts its sending rate here. Between CNPs the rate climbs back in three stages, driven
// by two counters that each count one "increase event": a timer (every rpg_time_reset) and a
// byte counter (every rpg_byte_reset bytes sent).
//
//   CNP (at most one cut per rate_reduce_monitor_period):
//       Rt = Rc;  Rc = Rc * (1 - alpha/2);  alpha = (1 - g) alpha + g;  T = BC = 0
//   alpha timer (every dce_tcp_rtt):  alpha = (1 - g) alpha      (+ g if a CNP came uncut)
//   increase event (T or BC += 1), F = rpg_threshold:
//       max(T, BC) <= F        fast recovery:  Rc = (Rt + Rc) / 2
//       min(T, BC) >  F        hyper increase: Rt += (min(T, BC) - F) * rpg_hai_rate;
//                                              Rc = (Rt + Rc) / 2
//       otherwise              additive:       Rt += rpg_ai_rate;  Rc = (Rt + Rc) / 2
//
// The parameter names and defaults are those NVIDIA's RNICs document for their DCQCN
// (mlxreg / sysfs ecn/roce_rp): g = (1024 - dce_tcp_g) / 1024, so dce_tcp_g 1019 is
// g = 5/1024 (the paper uses 1/256). A rate is in Mb/s. The machine knows no clock of its
// own: the engine arms the timers (stack/engine/congestion.cc) and calls in when they fire,
// so tests can step it by hand.
#pragma once

#include <algorithm>
#include <cstdint>

namespace uroce {

struct DcqcnConfig {
  double line_rate_mbps = 100000;  // the rate a QP starts at and returns to (no limit there)
  uint64_t rpg_time_reset_ns = 300'000;      // increase timer period
  uint32_t rpg_byte_reset = 32767;           // bytes per byte-counter increase event
  uint32_t rpg_threshold = 1;                // F: fast-recovery steps of each counter
  double rpg_ai_rate_mbps = 5;               // additive increase step
  double rpg_hai_rate_mbps = 50;             // hyper increase step
  double rpg_min_rate_mbps = 1;              // never below this
  uint32_t rpg_min_dec_fac = 50;             // a cut keeps at least this % of the rate
  uint32_t dce_tcp_g = 1019;                 // alpha gain, g = (1024 - dce_tcp_g) / 1024
  uint64_t dce_tcp_rtt_ns = 55'000;          // alpha timer period (the paper's K)
  uint64_t rate_reduce_monitor_period_ns = 4'000;  // at most one cut per period
  uint32_t initial_alpha_value = 1023;       // alpha at the first cut, in 1/1023ths
  bool clamp_tgt_rate = true;  // every CNP sets Rt = Rc (else only the first cut after an
                                // increase by the timer does: the target stays higher)
};

/// One rate-limited QP, as `uroce stats` shows it (Engine::cc_limited_qps). Plain data: it
/// lives in the shared-memory counters file too.
struct CcQpStats {
  uint32_t qpn;
  uint32_t rate_mbps;
  uint32_t target_mbps;
  uint32_t alpha_1024;  // alpha in 1/1024ths
  uint64_t cnps_rcvd;
  uint64_t cuts;
};

class Dcqcn {
 public:
  enum class Stage : uint8_t { kFastRecovery, kAdditive, kHyper };

  Dcqcn() = default;
  /// `c` must outlive the machine (the engine's configuration does).
  explicit Dcqcn(const DcqcnConfig& c) : cfg_(&c), rc_(c.line_rate_mbps), rt_(rc_) {}

  /// Whether the QP is held below line rate (the pacer and the timers run only then).
  bool limited() const { return limited_; }
  double rate_mbps() const { return rc_; }
  double target_mbps() const { return rt_; }
  double alpha() const { return alpha_; }
  uint32_t time_stage() const { return t_; }
  uint32_t byte_stage() const { return bc_; }
  uint64_t cuts() const { return cuts_; }

  /// A CNP arrived at `now_ns`. True if it cut the rate (the caller re-arms both timers
  /// from now); false when it falls in the monitor period after the previous cut.
  /// `sending_mbps` (0: unknown) is the rate the QP was really sending at: the first cut
  /// starts from it when below the line rate. An RNIC sends at line rate; software may not,
  /// and a cut of a rate it never reached would change nothing.
  bool on_cnp(uint64_t now_ns, double sending_mbps = 0) {
    if (limited_ && now_ns - last_cut_ns_ < cfg_->rate_reduce_monitor_period_ns) {
      cnp_uncut_ = true;
      return false;
    }
    if (!limited_) {
      alpha_ = cfg_->initial_alpha_value / 1023.0;
      if (sending_mbps > 0) rc_ = std::max(std::min(rc_, sending_mbps), cfg_->rpg_min_rate_mbps);
      rt_ = rc_;
    } else if (cfg_->clamp_tgt_rate || timer_increased_) {
      rt_ = rc_;
    }
    const double keep = std::max(1 - alpha_ / 2, cfg_->rpg_min_dec_fac / 100.0);
    rc_ = std::max(rc_ * keep, cfg_->rpg_min_rate_mbps);
    alpha_ = (1 - g()) * alpha_ + g();
    t_ = bc_ = 0;
    bytes_ = 0;
    timer_increased_ = false;
    cnp_uncut_ = false;
    last_cut_ns_ = now_ns;
    limited_ = true;
    ++cuts_;
    return true;
  }

  /// The alpha timer fired (every dce_tcp_rtt while limited).
  void on_alpha_timer() {
    alpha_ = (1 - g()) * alpha_ + (cnp_uncut_ ? g() : 0);
    cnp_uncut_ = false;
  }

  /// The increase timer fired (every rpg_time_reset while limited).
  void on_rate_timer() {
    ++t_;
    timer_increased_ = true;
    increase();
  }

  /// `n` bytes went out; true if that made a byte-counter increase event.
  bool on_bytes(uint32_t n) {
    if (!limited_) return false;
    bytes_ += n;
    bool any = false;
    while (limited_ && bytes_ >= cfg_->rpg_byte_reset) {
      bytes_ -= cfg_->rpg_byte_reset;
      ++bc_;
      increase();
      any = true;
    }
    return any;
  }

  /// The stage the counters are in: the one the last increase event ran in.
  Stage stage() const {
    const uint32_t f = cfg_->rpg_threshold;
    if (std::max(t_, bc_) <= f) return Stage::kFastRecovery;
    if (std::min(t_, bc_) > f) return Stage::kHyper;
    return Stage::kAdditive;
  }

  /// Nanoseconds `bytes` take on the wire at the current rate.
  uint64_t wire_time_ns(uint32_t bytes) const {
    return static_cast<uint64_t>(bytes * 8000.0 / rc_);
  }

 private:
  double g() const { return (1024 - std::min(cfg_->dce_tcp_g, 1024u)) / 1024.0; }

  /// An increase event: T or BC has just been counted.
  void increase() {
    switch (stage()) {
      case Stage::kFastRecovery:  // halfway back to the target
        break;
      case Stage::kHyper:
        rt_ += (std::min(t_, bc_) - cfg_->rpg_threshold) * cfg_->rpg_hai_rate_mbps;
        break;
      case Stage::kAdditive:
        rt_ += cfg_->rpg_ai_rate_mbps;
        break;
    }
    rt_ = std::min(rt_, cfg_->line_rate_mbps);
    rc_ = (rt_ + rc_) / 2;
    // Within a step of line rate: the QP is free again (its state is dropped, as an RNIC
    // releases the rate limiter it held for the QP).
    if (cfg_->line_rate_mbps - rc_ < cfg_->rpg_ai_rate_mbps) {
      rc_ = rt_ = cfg_->line_rate_mbps;
      limited_ = false;
      t_ = bc_ = 0;
      bytes_ = 0;
    }
  }

  const DcqcnConfig* cfg_ = nullptr;
  double rc_ = 0;  // current rate
  double rt_ = 0;  // target rate
  double alpha_ = 1;
  uint32_t t_ = 0;   // time stage: increase-timer events since the last cut
  uint32_t bc_ = 0;  // byte stage: byte-counter events since the last cut
  uint64_t bytes_ = 0;
  uint64_t last_cut_ns_ = 0;
  uint64_t cuts_ = 0;
  bool limited_ = false;
  bool cnp_uncut_ = false;        // a CNP in the monitor period: alpha rises at its timer
  bool timer_increased_ = false;  // the timer raised the rate since the last cut
};

}  // namespace uroce
