// The semantic comparison of what the replaced peer sent with what uroce sent.
//
// Requests (uroce as requester): the first transmission of every PSN must match — opcode,
// RETH, AtomicETH, immediate, invalidated R_Key, Q_Key and payload bytes. Retransmissions
// driven by timers are timing, not behaviour; but when the other host NAKed (sequence error
// or RNR) and the recorded requester went back, uroce must go back too.
// Responses (uroce as responder): every NAK and RNR NAK of the recorded responder, in order,
// with the same code, PSN and MSN, and no NAK it did not send; every ACK it sent covered by an
// ACK of uroce (coalescing is free), with the same MSN where both ACK the same PSN, and never
// an ACK for a PSN not yet received; READ responses and atomic ACKs PSN by PSN with the same
// opcode, payload / original value and MSN; the memory the other host wrote and the messages
// it sent, as the recorded responder acknowledged them.
#include <algorithm>
#include <cstring>
#include <set>

#include "replay/replay.h"

namespace uroce::replay {

using wire::Ext;
using wire::Operation;
using wire::Psn;

namespace {

std::string hx(uint64_t v, int w = 6) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%0*llx", w, static_cast<unsigned long long>(v));
  return b;
}

struct Item {
  size_t step = 0;
  const Pkt* p = nullptr;
};

std::string aeth_words(const wire::AethRepr& a) {
  switch (a.kind()) {
    case wire::AckKind::kAck: return "ACK";
    case wire::AckKind::kRnrNak:
      return "RNR NAK (timer code " + std::to_string(a.rnr_timer_code()) + ")";
    case wire::AckKind::kNak: return "NAK (" + std::string(wire::to_string(a.nak_code())) + ")";
    default: return "a reserved AETH syndrome";
  }
}

/// Why a responder sends `rec` where another sends `got`: the reading of the difference.
std::string nak_hint(const wire::AethRepr& rec, const wire::AethRepr* got) {
  if (got == nullptr || got->is_ack()) {
    if (rec.is_rnr_nak()) return "uroce had a receive buffer where the recorded responder had none";
    if (rec.is_nak() && rec.nak_code() == wire::NakCode::kPsnSeqError)
      return "uroce accepted a packet the recorded responder saw as out of sequence";
    if (rec.is_nak() && rec.nak_code() == wire::NakCode::kRemoteAccessError)
      return "uroce accepted an R_Key / address range the recorded responder rejected";
    if (rec.is_nak() && rec.nak_code() == wire::NakCode::kInvalidRequest)
      return "uroce accepted a request the recorded responder found invalid";
    return "uroce did not report the error the recorded responder reported";
  }
  if (got->kind() != rec.kind() || got->value() != rec.value())
    return "the two responders classify the same situation differently";
  return "same verdict, different PSN or MSN: the responders disagree on where the stream stands";
}

}  // namespace

Verdict compare(const Capture& cap, const Scenario& sc, const Replay& rp) {
  Verdict v;
  const int x = replaced_host(sc);
  auto div = [&](size_t step, std::string text) { v.divergences.push_back({step, std::move(text)}); };
  auto allow = [&](const std::string& what, uint64_t n = 1) {
    if (n != 0) v.allowed[what] += n;
  };
  const size_t end_step = rp.steps.empty() ? 0 : rp.steps.size() - 1;

  for (size_t s = 0; s < sc.qps.size(); ++s) {
    const QpSpec& q = sc.qps[s];
    const std::string qname = "QP " + hx(q.qpn);
    std::vector<Item> rec, uro, fed;
    for (size_t k = 0; k < rp.steps.size(); ++k) {
      const Step& st = rp.steps[k];
      for (size_t i : st.recorded)
        if (cap.pkts[i].dest_qp() == q.peer_qpn) rec.push_back({k, &cap.pkts[i]});
      for (const Pkt& p : st.uroce)
        if (p.dest_qp() == q.peer_qpn) uro.push_back({k, &p});
      if (st.kind == StepKind::kFed && cap.pkts[st.pkt].dest_qp() == q.qpn &&
          cap.host_of(cap.pkts[st.pkt]) != x)
        fed.push_back({k, &cap.pkts[st.pkt]});
    }
    v.compared += rec.size();
    const Psn sq0(*q.sq_psn), rq0(*q.rq_psn);

    // ================= Requests =================
    {
      std::vector<Item> rnew, unew;
      std::multiset<uint32_t> rretx, uretx;
      std::set<uint32_t> seen_r, seen_u;
      auto classify = [&](const std::vector<Item>& items, std::set<uint32_t>& seen,
                          std::vector<Item>& fresh, std::multiset<uint32_t>& retx) {
        for (const Item& it : items) {
          if (!it.p->info->is_request()) continue;
          if (q.type != QpType::kUd && !seen.insert(it.p->psn()).second) {
            retx.insert(it.p->psn());
            continue;
          }
          fresh.push_back(it);
          if (it.p->info->op == Operation::kReadRequest) {  // its responses' PSNs are taken
            const uint32_t n = std::max<uint32_t>(1, (it.p->hdr.ext.reth.dma_len + sc.mtu - 1) / sc.mtu);
            for (uint32_t k = 1; k < n; ++k) seen.insert((Psn(it.p->psn()) + static_cast<int32_t>(k)).value());
          }
        }
      };
      classify(rec, seen_r, rnew, rretx);
      classify(uro, seen_u, unew, uretx);
      if (q.type != QpType::kUd) {
        auto by_psn = [&](const Item& a, const Item& b) {
          return (Psn(a.p->psn()) - sq0) < (Psn(b.p->psn()) - sq0);
        };
        std::stable_sort(rnew.begin(), rnew.end(), by_psn);
        std::stable_sort(unew.begin(), unew.end(), by_psn);
      }
      // Pair the first transmissions: by PSN (RC/UC), in order (UD).
      std::vector<std::pair<const Item*, const Item*>> pairs;
      size_t missing_u = 0, only_u = 0;
      const Item* first_missing = nullptr;
      if (q.type == QpType::kUd) {
        for (size_t i = 0; i < std::max(rnew.size(), unew.size()); ++i)
          pairs.push_back({i < rnew.size() ? &rnew[i] : nullptr, i < unew.size() ? &unew[i] : nullptr});
      } else {
        std::map<int32_t, const Item*> um;
        for (const Item& it : unew) um.emplace(Psn(it.p->psn()) - sq0, &it);
        for (const Item& it : rnew) {
          auto f = um.find(Psn(it.p->psn()) - sq0);
          pairs.push_back({&it, f != um.end() ? f->second : nullptr});
          if (f != um.end()) um.erase(f);
        }
        const int32_t rmax_d = rnew.empty() ? -1 : Psn(rnew.back().p->psn()) - sq0;
        for (const auto& [d, it] : um) {
          if (d > rmax_d) allow("request packets past the end of the capture");
          else allow("request packets the capture never saw from the recorded requester (lost before the capture point)");
          (void)it;
        }
      }
      for (const auto& [ra, ub] : pairs) {
        if (ra == nullptr) {
          ++only_u;
          continue;
        }
        if (ub == nullptr) {
          if (missing_u++ == 0) first_missing = ra;
          continue;
        }
        const Pkt& a = *ra->p;
        const Pkt& b = *ub->p;
        const size_t at = std::min(ra->step, ub->step);
        std::string why;
        wire::AtomicEthRepr aa = a.hdr.ext.atomic, ba = b.hdr.ext.atomic;
        if (a.info->op == Operation::kFetchAdd && aa.compare != ba.compare) {
          allow("Compare Data of FETCH_ADD (unused by the operation)");
          aa.compare = ba.compare = 0;
        }
        if (a.psn() != b.psn()) {
          why = "uroce's next new request has PSN " + hx(b.psn()) + ", the recorded one " +
                hx(a.psn());
        } else if (a.hdr.bth.opcode != b.hdr.bth.opcode) {
          why = "recorded " + std::string(a.info->name) + ", uroce " + std::string(b.info->name) +
                ": the message is segmented differently (path MTU or length)";
        } else if (a.has(Ext::kReth) && !(a.hdr.ext.reth == b.hdr.ext.reth)) {
          why = "RETH differs: recorded va=" + hx(a.hdr.ext.reth.va, 1) + " rkey=" +
                hx(a.hdr.ext.reth.rkey, 1) + " len=" + std::to_string(a.hdr.ext.reth.dma_len) +
                ", uroce va=" + hx(b.hdr.ext.reth.va, 1) + " rkey=" + hx(b.hdr.ext.reth.rkey, 1) +
                " len=" + std::to_string(b.hdr.ext.reth.dma_len);
        } else if (a.has(Ext::kAtomicEth) && !(aa == ba)) {
          why = "AtomicETH differs (va, R_Key or operands)";
        } else if (a.has(Ext::kImmDt) && a.hdr.ext.imm.imm != b.hdr.ext.imm.imm) {
          why = "immediate data differs";
        } else if (a.has(Ext::kIeth) && a.hdr.ext.ieth.rkey != b.hdr.ext.ieth.rkey) {
          why = "invalidated R_Key differs";
        } else if (a.has(Ext::kDeth) && a.hdr.ext.deth.qkey != b.hdr.ext.deth.qkey) {
          why = "DETH Q_Key differs";
        } else if (a.payload_len != b.payload_len ||
                   !std::equal(a.payload().begin(), a.payload().end(), b.payload().begin())) {
          why = "payload differs (" + std::to_string(a.payload_len) + " vs " +
                std::to_string(b.payload_len) + " bytes)";
        }
        if (!why.empty()) {
          div(at, qname + " request at PSN " + hx(a.psn()) + ": " + why);
          break;
        }
        if (a.hdr.bth.ack_req != b.hdr.bth.ack_req) allow("AckReq bit placement");
        if (a.hdr.udp.src_port != b.hdr.udp.src_port) allow("UDP source port");
        if (a.hdr.ip4.ident != b.hdr.ip4.ident) allow("IP ID");
      }
      if (first_missing != nullptr) {
        div(first_missing->step, qname + ": the recorded requester sent " +
                                     describe(*first_missing->p) +
                                     " (a new PSN); uroce never sent it (" +
                                     std::to_string(missing_u) + " of " +
                                     std::to_string(rnew.size()) + " new request packets missing)");
      }
      if (only_u > 0) allow("request packets past the end of the capture", only_u);
      // Retransmissions: timing, except that a NAK must send both requesters back.
      for (uint32_t psn : std::set<uint32_t>(rretx.begin(), rretx.end())) {
        const size_t a = rretx.count(psn), b = uretx.count(psn);
        if (a > b) allow("retransmissions by the recorded requester only (its timers)", a - b);
      }
      for (uint32_t psn : std::set<uint32_t>(uretx.begin(), uretx.end())) {
        const size_t a = rretx.count(psn), b = uretx.count(psn);
        if (b > a) allow("retransmissions by uroce only (timing)", b - a);
      }
      for (const Item& f : fed) {
        if (!f.p->has(Ext::kAeth)) continue;
        const wire::AethRepr& ae = f.p->hdr.ext.aeth;
        if (ae.is_ack()) continue;
        if (ae.is_nak() && ae.nak_code() != wire::NakCode::kPsnSeqError) continue;
        const uint32_t psn = f.p->psn();
        auto later = [&](const std::vector<Item>& items) {
          for (const Item& it : items)
            if (it.step >= f.step && it.p->info->is_request() && it.p->psn() == psn) return true;
          return false;
        };
        if (later(rec) && !later(uro)) {
          div(f.step, qname + ": after the responder's " + aeth_words(ae) + " for PSN " + hx(psn) +
                          " the recorded requester resent PSN " + hx(psn) +
                          ", uroce did not: it did not go back");
          break;
        }
      }
    }

    // ================= Responses =================
    {
      // NAKs and RNR NAKs, in order.
      std::vector<Item> rn, un;
      for (const Item& it : rec)
        if (it.p->has(Ext::kAeth) && !it.p->hdr.ext.aeth.is_ack()) rn.push_back(it);
      for (const Item& it : uro)
        if (it.p->has(Ext::kAeth) && !it.p->hdr.ext.aeth.is_ack()) un.push_back(it);
      // A sequence NAK of uroce's for a gap in what it was fed, which the recorded responder's
      // packets do not contradict (no NAK for that PSN at any time, nothing acknowledged or
      // answered at or past it until the request at the gap came again): a responder must
      // NAK such a gap (IBA 9.7.4), so the recorded one's NAK was lost on its side before the
      // capture point (a capture with loss at the hosts' egress, as
      // ../shared/rxe-vm/pair.sh --lossy makes). Not a divergence.
      const auto unseen_nak = [&](const Item& u) {
        const wire::AethRepr& a = u.p->hdr.ext.aeth;
        if (!a.is_nak() || a.nak_code() != wire::NakCode::kPsnSeqError) return false;
        const Psn gap(u.p->psn());
        size_t refed = SIZE_MAX;  // when the request at the gap came (again) after the NAK
        for (const Item& f : fed)
          if (f.step > u.step && f.p->info->is_request() && Psn(f.p->psn()) == gap)
            refed = std::min(refed, f.step);
        for (const Item& r : rec) {
          if (!r.p->has(Ext::kAeth)) continue;
          const int32_t d = Psn(r.p->psn()) - gap;
          if (!r.p->hdr.ext.aeth.is_ack() && d == 0) return false;  // its NAK, late or not
          if (r.step < refed && r.p->hdr.ext.aeth.is_ack() && d >= 0 && d < (1 << 22)) return false;
        }
        return true;
      };
      {
        std::vector<Item> kept;
        for (const Item& u : un) {
          if (unseen_nak(u)) allow("sequence NAKs for a gap that the capture shows no NAK of (lost before the capture point)");
          else kept.push_back(u);
        }
        un.swap(kept);
      }
      auto uroce_at = [&](size_t step) -> const Pkt* {  // uroce's response around that step
        for (const Item& it : uro)
          if (it.step >= step && it.p->has(Ext::kAeth)) return it.p;
        return nullptr;
      };
      const size_t n = std::min(rn.size(), un.size());
      bool nak_div = false;
      for (size_t i = 0; i < n && !nak_div; ++i) {
        const wire::AethRepr& a = rn[i].p->hdr.ext.aeth;
        const wire::AethRepr& b = un[i].p->hdr.ext.aeth;
        if (a.syndrome == b.syndrome && rn[i].p->psn() == un[i].p->psn() && a.msn == b.msn) continue;
        nak_div = true;
        const size_t at = std::min(rn[i].step, un[i].step);
        if (un[i].step < rn[i].step && rn[i].p->psn() != un[i].p->psn()) {
          div(at, qname + ": at PSN " + hx(un[i].p->psn()) + " uroce sent " + aeth_words(b) +
                      " (msn " + std::to_string(b.msn) + "), the recorded responder did not: " +
                      "uroce saw an error the recorded responder did not");
        } else {
          div(at, qname + ": at PSN " + hx(rn[i].p->psn()) + " the recorded responder sent " +
                      aeth_words(a) + " (msn " + std::to_string(a.msn) + "), uroce sent " +
                      aeth_words(b) + " for PSN " + hx(un[i].p->psn()) + " (msn " +
                      std::to_string(b.msn) + "): " + nak_hint(a, &b));
        }
      }
      if (!nak_div && rn.size() > un.size()) {
        const Item& it = rn[un.size()];
        const Pkt* got = uroce_at(it.step);
        const wire::AethRepr* ga = got != nullptr ? &got->hdr.ext.aeth : nullptr;
        div(it.step, qname + ": at PSN " + hx(it.p->psn()) + " the recorded responder sent " +
                         aeth_words(it.p->hdr.ext.aeth) + ", uroce " +
                         (got != nullptr ? "sent " + aeth_words(*ga) + " for PSN " + hx(got->psn())
                                         : std::string("sent nothing")) +
                         ": " + nak_hint(it.p->hdr.ext.aeth, ga));
      } else if (!nak_div && un.size() > rn.size()) {
        const Item& it = un[rn.size()];
        div(it.step, qname + ": at PSN " + hx(it.p->psn()) + " uroce sent " +
                         aeth_words(it.p->hdr.ext.aeth) + ", the recorded responder did not: " +
                         "uroce saw an error the recorded responder did not");
      }

      // ACKs: coverage and MSNs.
      std::map<uint32_t, uint32_t> racks, uacks;  // PSN -> MSN (first seen)
      std::optional<Psn> rmax, umax;
      auto upd = [](std::optional<Psn>& m, Psn p, Psn base) {
        if (!m || (p - base) > (*m - base)) m = p;
      };
      for (const Item& it : rec)
        if (it.p->has(Ext::kAeth) && it.p->hdr.ext.aeth.is_ack()) {
          upd(rmax, Psn(it.p->psn()), rq0);
          if (it.p->info->op == Operation::kAck) racks.emplace(it.p->psn(), it.p->hdr.ext.aeth.msn);
        }
      std::optional<Psn> fed_max;
      size_t fi = 0;
      bool ahead_reported = false;
      for (const Item& it : uro) {
        while (fi < fed.size() && fed[fi].step <= it.step) {
          if (fed[fi].p->info->is_request()) upd(fed_max, Psn(fed[fi].p->psn()), rq0);
          ++fi;
        }
        if (!it.p->has(Ext::kAeth) || !it.p->hdr.ext.aeth.is_ack()) continue;
        upd(umax, Psn(it.p->psn()), rq0);
        if (it.p->info->op != Operation::kAck) continue;  // READ responses: compared below
        uacks.emplace(it.p->psn(), it.p->hdr.ext.aeth.msn);
        if (!ahead_reported && (!fed_max || (Psn(it.p->psn()) - rq0) > (*fed_max - rq0))) {
          ahead_reported = true;
          div(it.step, qname + ": uroce acknowledged PSN " + hx(it.p->psn()) +
                           " before that PSN was received");
        }
      }
      std::map<uint32_t, const Pkt*> rack_pkt, uack_pkt;
      for (const Item& it : rec)
        if (it.p->info->op == Operation::kAck) rack_pkt.emplace(it.p->psn(), it.p);
      for (const Item& it : uro)
        if (it.p->info->op == Operation::kAck) uack_pkt.emplace(it.p->psn(), it.p);
      for (const auto& [psn, a] : rack_pkt) {
        auto b = uack_pkt.find(psn);
        if (b == uack_pkt.end()) continue;
        if (a->hdr.udp.src_port != b->second->hdr.udp.src_port) allow("UDP source port");
        if (a->hdr.ip4.ident != b->second->hdr.ip4.ident) allow("IP ID");
        if (a->hdr.ext.aeth.syndrome != b->second->hdr.ext.aeth.syndrome)
          allow("ACK credit count (AETH syndrome value of an ACK)");
      }
      for (const auto& [psn, msn] : racks) {
        auto it = uacks.find(psn);
        if (it != uacks.end()) {
          if (it->second != msn) {
            size_t at = end_step;
            for (const Item& r : rec)
              if (r.p->psn() == psn && r.p->has(Ext::kAeth)) {
                at = r.step;
                break;
              }
            div(at, qname + ": ACK for PSN " + hx(psn) + " carries MSN " + std::to_string(msn) +
                        " from the recorded responder, " + std::to_string(it->second) +
                        " from uroce: they count completed messages differently");
          }
          continue;
        }
        if (umax && (*umax - rq0) >= (Psn(psn) - rq0)) {
          allow("ACK coalescing (an ACK covered by a later one)");
        } else {
          size_t at = end_step;
          for (const Item& r : rec)
            if (r.p->psn() == psn) {
              at = r.step;
              break;
            }
          div(at, qname + ": the recorded responder acknowledged PSN " + hx(psn) +
                      ", uroce never acknowledged that far");
        }
      }
      for (const auto& [psn, msn] : uacks) {
        if (racks.count(psn) != 0) continue;
        if (rmax && (Psn(psn) - rq0) > (*rmax - rq0))
          allow("responses past the end of the capture");
        else
          allow("ACK coalescing (an ACK the recorded responder folded into another)");
      }

      // READ responses and atomic ACKs, PSN by PSN (duplicates in order).
      std::map<uint32_t, std::vector<Item>> rr, ur;
      for (const Item& it : rec)
        if (it.p->info->op == Operation::kReadResponse || it.p->info->op == Operation::kAtomicAck)
          rr[it.p->psn()].push_back(it);
      for (const Item& it : uro)
        if (it.p->info->op == Operation::kReadResponse || it.p->info->op == Operation::kAtomicAck)
          ur[it.p->psn()].push_back(it);
      std::optional<Psn> rr_max;
      for (const auto& [psn, items] : rr) upd(rr_max, Psn(psn), rq0);
      // Where the requester went back (go-back-N: a request at or below a PSN it had sent
      // before): from then on it had every response before that PSN.
      std::vector<std::pair<size_t, Psn>> restarts;  // (step, PSN it restarted from)
      {
        std::optional<Psn> seen;
        for (const Item& f : fed) {
          if (!f.p->info->is_request()) continue;
          const Psn req(f.p->psn());
          if (seen && (*seen - rq0) >= (req - rq0)) restarts.push_back({f.step, req});
          upd(seen, req, rq0);
        }
      }
      const auto stale = [&](size_t step, uint32_t psn) {
        for (const auto& [at, from] : restarts)
          if (at < step && (from - Psn(psn)) > 0) return true;
        return false;
      };
      for (const auto& [psn, items] : rr) {
        const auto& us = ur[psn];
        size_t j = 0;  // uroce's response matched with the recorded i-th
        for (size_t i = 0; i < items.size(); ++i, ++j) {
          const Pkt& a = *items[i].p;
          // A response the recorded responder sent that never reached the capture point (a
          // fault between them) shows as one more of uroce's at this PSN: e.g. a READ's MIDDLE
          // lost, then the re-request's FIRST at that PSN. uroce's extra ones before the match
          // are those.
          size_t k = j;
          while (k < us.size() && us[k].p->hdr.bth.opcode != a.hdr.bth.opcode &&
                 us.size() - k > items.size() - i)
            ++k;
          if (k < us.size() && k > j && us[k].p->hdr.bth.opcode == a.hdr.bth.opcode) {
            allow("responses the capture did not see (lost before the capture point)", k - j);
            j = k;
          }
          if (j >= us.size()) {
            if (i == 0) {
              div(items[i].step, qname + ": the recorded responder sent " + describe(a) +
                                     ", uroce never sent a response with PSN " + hx(psn));
            } else if (stale(items[i].step, psn)) {
              // A duplicate READ answered after the requester had already gone back to a later
              // PSN (so it held this response, and drops the replay as a duplicate response,
              // IBA 9.7.5). When a responder answers a duplicate is left to it (IBA 9.7.4):
              // rxe queues requests and answers the duplicates after the newer ones that came
              // first; uroce answers on arrival and gives a replay's slot to the next new
              // READ, the requester having at most max_dest_rd_atomic outstanding.
              allow("late replays of duplicate READs the requester no longer waited for "
                    "(it had gone back to a later PSN)", items.size() - i);
              j = us.size();
            } else {
              div(items[i].step, qname + ": the recorded responder answered a duplicate request" +
                                     " again with " + describe(a) + ", uroce did not");
            }
            break;
          }
          const Pkt& b = *us[j].p;
          const size_t at = std::min(items[i].step, us[j].step);
          std::string why;
          if (a.hdr.bth.opcode != b.hdr.bth.opcode) {
            why = "recorded " + std::string(a.info->name) + ", uroce " + std::string(b.info->name);
          } else if (a.has(Ext::kAtomicAckEth) &&
                     a.hdr.ext.atomic_ack.orig != b.hdr.ext.atomic_ack.orig) {
            why = "original value " + hx(a.hdr.ext.atomic_ack.orig, 16) + " recorded, " +
                  hx(b.hdr.ext.atomic_ack.orig, 16) +
                  " from uroce: the atomic did not see the same memory (executed twice, or lost)";
          } else if (a.payload_len != b.payload_len ||
                     !std::equal(a.payload().begin(), a.payload().end(), b.payload().begin())) {
            why = "READ response data differs (" + std::to_string(a.payload_len) + " vs " +
                  std::to_string(b.payload_len) + " bytes)";
          }
          if (!why.empty()) {
            div(at, qname + ": response PSN " + hx(psn) + ": " + why);
            break;
          }
          if (a.hdr.udp.src_port != b.hdr.udp.src_port) allow("UDP source port");
          if (a.hdr.ip4.ident != b.hdr.ip4.ident) allow("IP ID");
          // A READ response or atomic ACK carries the responder's MSN at the moment it is
          // sent (rxe's prepare_ack_packet and rdmavt do so; a replayed duplicate too): how
          // many later messages completed first depends on timing, and a requester
          // completes READs and atomics by PSN, never by this MSN.
          if (a.has(Ext::kAeth) && a.hdr.ext.aeth.msn != b.hdr.ext.aeth.msn)
            allow("MSN of a READ response or atomic ACK (the MSN when it was sent)");
        }
        if (us.size() > j) allow("extra duplicate responses from uroce", us.size() - j);
      }
      for (const auto& [psn, items] : ur) {
        if (rr.count(psn) != 0) continue;
        if (!rr_max || (Psn(psn) - rq0) > (*rr_max - rq0)) {
          allow("responses past the end of the capture", items.size());
        } else {
          div(items[0].step, qname + ": uroce sent " + describe(*items[0].p) +
                                 ", the recorded responder sent no response with PSN " + hx(psn));
        }
      }

      // Messages received (SEND): as the recorded responder accepted them.
      std::map<int32_t, const Pkt*> sends;  // distance from rq_psn -> first sight
      std::vector<const Pkt*> ud_sends;
      for (const Item& f : fed) {
        if (f.p->info->op != Operation::kSend) continue;
        if (q.type == QpType::kUd) ud_sends.push_back(f.p);
        else sends.emplace(Psn(f.p->psn()) - rq0, f.p);
      }
      std::vector<std::pair<int32_t, std::vector<uint8_t>>> expect;  // last PSN distance, data
      if (q.type == QpType::kUd) {
        for (const Pkt* p : ud_sends) expect.push_back({0, {p->payload().begin(), p->payload().end()}});
      } else {
        bool in = false;
        int32_t last = 0;
        std::vector<uint8_t> cur;
        for (const auto& [d, p] : sends) {
          if (in && d != last + 1) in = false;  // a gap: incomplete
          if (p->info->starts_message()) {
            in = true;
            cur.clear();
          }
          last = d;
          if (!in) continue;
          cur.insert(cur.end(), p->payload().begin(), p->payload().end());
          if (p->info->ends_message()) {
            expect.push_back({d, cur});
            in = false;
          }
        }
      }
      if (q.type == QpType::kRc) {  // only what the recorded responder acknowledged
        std::erase_if(expect, [&](const auto& e) { return !rmax || e.first > (*rmax - rq0); });
      }
      const auto& got = rp.received[s];
      for (size_t i = 0; i < expect.size(); ++i) {
        if (i >= got.size()) {
          div(end_step, qname + ": the recorded peer received " + std::to_string(expect.size()) +
                            " SEND messages, uroce completed only " + std::to_string(got.size()) +
                            " receive work requests");
          break;
        }
        if (got[i] != expect[i].second) {
          div(end_step, qname + ": received message " + std::to_string(i + 1) + " (" +
                            std::to_string(got[i].size()) + " bytes) differs from the one sent (" +
                            std::to_string(expect[i].second.size()) + " bytes)");
          break;
        }
      }
      if (got.size() > expect.size()) allow("messages received past the end of the capture", got.size() - expect.size());

      // Memory written by RDMA WRITEs (and ATOMIC WRITEs) the recorded responder acknowledged.
      auto writes = [](Operation o) { return o == Operation::kWrite || o == Operation::kAtomicWrite; };
      if (q.type != QpType::kUd && !sc.mrs.empty()) {
        struct W {
          uint32_t first = 0;
          uint64_t va = 0;
          uint32_t rkey = 0;
        } w;
        std::set<uint32_t> done;
        bool bad = false;
        for (const Item& f : fed) {
          const Pkt& p = *f.p;
          if (!writes(p.info->op) || bad) continue;
          if (p.has(Ext::kReth)) w = {p.psn(), p.hdr.ext.reth.va, p.hdr.ext.reth.rkey};
          if (!done.insert(p.psn()).second) continue;
          if (q.type == QpType::kRc && (!rmax || (Psn(p.psn()) - rq0) > (*rmax - rq0))) continue;
          if (!rn.empty()) continue;  // an error stream: the memory is not well defined
          const uint64_t va = w.va + static_cast<uint64_t>(Psn(p.psn()) - Psn(w.first)) * sc.mtu;
          for (size_t m = 0; m < sc.mrs.size(); ++m) {
            const MrSpec& mr = sc.mrs[m];
            if (mr.rkey != w.rkey || va < mr.va || va + p.payload_len > mr.va + mr.length) continue;
            const uint8_t* have = rp.mem_after[m].data() + (va - mr.va);
            if (!std::equal(p.payload().begin(), p.payload().end(), have)) {
              // A later WRITE to the same bytes may have replaced it.
              bool overwritten = false;
              for (const Item& g : fed)
                if (g.step > f.step && writes(g.p->info->op)) overwritten = true;
              if (!overwritten) {
                const char* what = p.info->op == Operation::kWrite ? "RDMA WRITE" : "ATOMIC WRITE";
                div(end_step, qname + ": " + what + " PSN " + hx(p.psn()) + " to VA " + hx(va, 1) +
                                  " was acknowledged, but uroce's memory does not hold its data");
                bad = true;
              }
            }
          }
        }
      }
    }
  }

  // What the replaced requester's READs and atomics returned: the data it was fed.
  for (const Replay::LocalResult& lr : rp.local_results) {
    if (lr.status != 0) continue;  // not completed (capture ended) or failed: NAKs cover it
    const QpSpec& q = sc.qps[lr.spec];
    std::map<uint32_t, const Pkt*> resp;  // PSN -> first fed response
    for (const Step& st : rp.steps) {
      if (st.kind != StepKind::kFed) continue;
      const Pkt& p = cap.pkts[st.pkt];
      if (p.dest_qp() == q.qpn && p.info->is_response() && p.info->op != Operation::kAck)
        resp.emplace(p.psn(), &p);
    }
    const std::string what = lr.op == Operation::kReadRequest ? "RDMA READ" : "atomic";
    std::vector<uint8_t> expect;
    bool known = true;
    if (lr.op == Operation::kReadRequest) {
      const size_t n = lr.data.empty() ? 1 : (lr.data.size() + sc.mtu - 1) / sc.mtu;
      for (size_t k = 0; k < n && known; ++k) {
        auto it = resp.find((Psn(lr.psn) + static_cast<int32_t>(k)).value());
        if (it == resp.end()) known = false;
        else expect.insert(expect.end(), it->second->payload().begin(), it->second->payload().end());
      }
    } else {
      auto it = resp.find(lr.psn);
      if (it == resp.end() || !it->second->has(Ext::kAtomicAckEth)) known = false;
      else {
        expect.resize(8);
        std::memcpy(expect.data(), &it->second->hdr.ext.atomic_ack.orig, 8);
      }
    }
    if (known && expect != lr.data)
      div(end_step, "QP " + hx(q.qpn) + ": uroce's " + what + " (PSN " + hx(lr.psn) +
                        ") completed, but its local buffer does not hold what the responses carried");
  }

  // Expected memory from the scenario: the responder's (the host the requests address).
  for (const MemExpect& me : sc.expect_mem) {
    if (sc.role == Role::kRequester) break;
    bool found = false;
    for (size_t m = 0; m < sc.mrs.size(); ++m) {
      const MrSpec& mr = sc.mrs[m];
      if (me.va < mr.va || me.va + me.bytes.size() > mr.va + mr.length) continue;
      found = true;
      const uint8_t* have = rp.mem_after[m].data() + (me.va - mr.va);
      for (size_t i = 0; i < me.bytes.size(); ++i)
        if (have[i] != me.bytes[i]) {
          char b[64];
          std::snprintf(b, sizeof b, "expected 0x%02x, uroce has 0x%02x", me.bytes[i], have[i]);
          div(end_step, "memory at VA " + hx(me.va + i, 1) + ": " + b);
          break;
        }
    }
    if (!found) div(end_step, "expected memory at VA " + hx(me.va, 1) + " is in no [mr] of the scenario");
  }

  std::stable_sort(v.divergences.begin(), v.divergences.end(),
                   [](const Divergence& a, const Divergence& b) { return a.step < b.step; });
  return v;
}

}  // namespace uroce::replay
