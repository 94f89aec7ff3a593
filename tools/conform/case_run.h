// A case carried out: uroce-conform's scripted side, step by step (case_run.cc: the agent's
// steps and the packets; cm.cc: the connection manager's MADs). Internal to uroce-conform.
#pragma once

#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "conform.h"
#include "link.h"
#include "wire/cm_mad.h"

namespace uroce::conform {

// Our end of one of the DUT's QPs.
struct Peer {
  wire::Transport type = wire::Transport::kRc;
  uint32_t qpn = 0;      // ours
  uint32_t dut_qpn = 0;  // the DUT's
  uint32_t psn0 = 0;     // our first request PSN
  uint32_t dpsn0 = 0;    // the DUT's
  uint32_t next = 0;     // our next request PSN, relative to psn0
  uint32_t mtu = 1024;
  std::deque<std::vector<uint8_t>> waiting;  // received for this QP, not yet expected
};

struct Failure {
  Verdict verdict;
  std::string message;
};

class CaseRun {
 public:
  CaseRun(const Options& opt, Link& link, Agent& agent, const wire::MacAddr& dut_mac,
          const wire::Ipv4Addr& dut_ip, uint32_t qpn_base)
      : opt_(opt), link_(link), agent_(agent), dut_mac_(dut_mac), dut_ip_(dut_ip), qpn_base_(qpn_base) {
    cm_.local_comm_id = 0x5c000000 | qpn_base_;
  }

  /// nullopt: the step did what it should.
  std::optional<Failure> step(const Step& s);
  uint64_t sent = 0, received = 0;

 private:
  // $name, $name+N, $name-N, anywhere after a '=' or as a whole word.
  std::optional<std::string> subst(const std::string& w, std::string* bad) const;
  std::optional<std::vector<std::string>> subst_all(const std::vector<std::string>& words, std::string* bad) const;
  int64_t num(const std::map<std::string, std::string>& kv, const std::string& key, int64_t dflt) const;
  uint32_t scaled_ms(int64_t ms) const { return static_cast<uint32_t>(static_cast<double>(ms) * opt_.time_scale); }

  std::string call(const std::string& line);
  std::optional<Failure> dut(const Step& s);
  static std::vector<std::string> split(const std::string& s, char sep = ' ');
  std::optional<Failure> check_poll(const std::map<std::string, std::string>& got, const std::string& ex);
  std::optional<Failure> check_get(const std::map<std::string, std::string>& got, const std::string& ex,
                                   const std::map<std::string, std::string>& kv);
  Peer* peer(const std::string& name, std::string* bad);
  std::optional<Failure> connect(const Step& s);

  // An opcode by name: RC_SEND_ONLY, or SEND_ONLY with the QP's transport, or 0x04.
  static std::optional<uint8_t> opcode_of(const std::string& w, wire::Transport t);
  static std::optional<uint8_t> syndrome_of(const std::string& s);
  // Headers from us to the DUT, the next IPv4 identification taken.
  wire::RoceHeaders to_dut();
  std::optional<Failure> send(const Step& s);

  // Sorts what the link received into the QPs' queues, until `p` has one or the deadline.
  // With `mads`, also stops (false) when a MAD for our QP1 came; `p` null: waits for MADs only.
  bool next_for(Peer* p, uint64_t deadline, std::vector<uint8_t>* out, bool mads = false);
  std::string describe(const wire::ParsedPacket& pk, const Peer& p) const;
  std::optional<Failure> expect(const Step& s);

  // ---- the connection manager: MADs between our QP1 and the DUT's --------------------------

  // The next MAD from the DUT's QP1, until the deadline.
  bool next_mad(uint64_t deadline, wire::CmMessage* out, std::string* raw_desc);
  bool send_mad(const wire::CmMessage& m);

  // The peer a CM exchange is for: made by `as=Q` (cm_send REQ, cm_expect REQ).
  Peer* cm_peer(const std::map<std::string, std::string>& kv, bool make, std::string* bad);
  static uint8_t mtu_code(uint32_t bytes);
  std::optional<Failure> cm_send(const Step& s);
  std::optional<Failure> cm_expect(const Step& s);

  // A MAD of an earlier case's connection (a late REJ or retransmission): it names another
  // communication ID than ours, or a REQ another port than the one this step waits for.
  bool stale(const wire::CmMessage& m, const std::map<std::string, std::string>& kv);
  struct CmState {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint64_t tid = 0, dreq_tid = 0;
    std::string peer;
    std::optional<wire::CmReq> req;  // the DUT's
    std::optional<wire::CmMessage> last_sent;
  } cm_;
  std::deque<std::vector<uint8_t>> cm_waiting_;
  uint32_t mad_psn_ = 0x10;
  const Options& opt_;
  Link& link_;
  Agent& agent_;
  wire::MacAddr dut_mac_;
  wire::Ipv4Addr dut_ip_;
  uint32_t qpn_base_;
  uint16_t ident_ = 1;
  std::map<std::string, int64_t> vars_;
  std::map<std::string, Peer> peers_;
};

}  // namespace uroce::conform
