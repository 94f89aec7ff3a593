// uroce-replay: checks uroce's transport against a capture of another RoCEv2 implementation.
//
// A capture holds a conversation between two hosts. uroce takes the place of one of them (the
// "replaced peer"): an Engine is configured with that host's MAC, IP, QPNs, start PSNs, MTU and
// memory regions (from a scenario file or inferred from the capture), the *other* host's
// packets are fed to it in capture order with the capture's timestamps as its clock, the work
// requests the replaced peer posted are posted at the point where its first packet of each
// message appears, and what the engine transmits is compared, semantically, with what the
// replaced peer transmitted. See docs/replay.md.
//
// The pieces, in the order they run:
//   load_capture()  pcap -> RoCE packets between two hosts (other frames are skipped)
//   parse_scenario() / infer_scenario()  the setup: role, QPs, PSNs, MTU, MRs, memory
//   run_replay()    the engine on a ReplayPort: a list of steps (fed packet, posted work
//                   request, fired timer), each with the recorded and uroce's packets
//   compare()       the semantic comparison: divergences and allowed differences
//   print_text() / print_json()
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wire/addr.h"
#include "wire/cm_mad.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace uroce::replay {

// ---- Capture ------------------------------------------------------------------------------

/// One RoCEv2 packet of the capture (or one uroce transmitted), decoded.
struct Pkt {
  size_t frame = 0;        // capture frame number (1-based); 0 for uroce's packets
  uint64_t ts_ns = 0;      // capture time (uroce's: the injected time it was sent)
  std::vector<uint8_t> bytes;
  wire::RoceHeaders hdr;
  const wire::OpcodeInfo* info = nullptr;
  size_t payload_off = 0;
  size_t payload_len = 0;

  wire::Bytes payload() const { return {bytes.data() + payload_off, payload_len}; }
  uint32_t psn() const { return hdr.bth.psn; }
  uint32_t dest_qp() const { return hdr.bth.dest_qp; }
  bool has(wire::Ext e) const { return info->has(e); }
};

/// Decodes one frame; false (and `why`) if it is not a well-formed RoCEv2 packet.
bool decode_pkt(std::vector<uint8_t> bytes, Pkt& out, std::string* why = nullptr);

/// A connection manager MAD of the capture (a UD SEND to QP1 with the GSI Q_Key): not replayed,
/// but a REQ and its REP name both QPs of a connection, their first PSNs and the path MTU.
struct CmMad {
  size_t frame = 0;
  wire::Gid src{};  // IPv4 as an IPv4-mapped address
  wire::CmMessage msg;
};

struct Capture {
  std::vector<Pkt> pkts;  // RoCE packets between the two hosts, capture order (QP1's apart)
  std::vector<CmMad> cm;  // the CM MADs between them, capture order
  wire::Gid ip[2]{};       // the two hosts (IPv4 mapped): [0] sends the first RoCE request
  wire::MacAddr mac[2]{};
  size_t frames = 0;       // frames read
  size_t skipped_other = 0;      // ARP, TCP, ... and RoCE between other hosts
  size_t skipped_bad_icrc = 0;   // a receiver drops them: so do we
  size_t skipped_malformed = 0;
  size_t skipped_snapped = 0;    // cut by the snap length: cannot be replayed
  size_t cm_unparsed = 0;        // MADs to QP1 that are not CM messages uroce knows
  /// Which host sent this packet (0 or 1).
  int host_of(const Pkt& p) const { return src_gid(p) == ip[0] ? 0 : 1; }
  /// A packet's source and destination addresses, IPv4 ones mapped.
  static wire::Gid src_gid(const Pkt& p) {
    return p.hdr.ipv6 ? p.hdr.ip6.src : wire::ipv4_mapped_gid(p.hdr.ip4.src);
  }
  static wire::Gid dst_gid(const Pkt& p) {
    return p.hdr.ipv6 ? p.hdr.ip6.dst : wire::ipv4_mapped_gid(p.hdr.ip4.dst);
  }
  /// A host's address as people write it (dotted for IPv4).
  static std::string name(const wire::Gid& g) {
    if (wire::is_ipv4_mapped(g)) return wire::to_string(wire::Ipv4Addr{g[12], g[13], g[14], g[15]});
    return wire::to_string(g);
  }
};

/// Reads `path`. On failure returns false and sets `error` to one line ("FILE: problem").
bool load_capture(const std::string& path, Capture& cap, std::string& error);

// ---- Scenario -------------------------------------------------------------------------------

enum class Role : uint8_t { kRequester, kResponder };
std::string_view to_string(Role r);

enum class QpType : uint8_t { kRc, kUc, kUd };

struct QpSpec {
  uint32_t qpn = 0;       // the replaced peer's QP (uroce creates it with this number)
  uint32_t peer_qpn = 0;  // the other host's QP
  QpType type = QpType::kRc;
  std::optional<uint32_t> sq_psn;  // first PSN the replaced peer sends
  std::optional<uint32_t> rq_psn;  // first PSN it expects
  uint32_t qkey = 0x11111111;      // UD: the replaced QP's Q_Key
};

/// A memory region of the replaced peer, addressed by the other host with `rkey` at `va`.
struct MrSpec {
  uint64_t va = 0;
  uint32_t rkey = 0;  // as recorded; fed packets are rewritten to the engine's own key
  uint64_t length = 0;
  std::vector<uint8_t> init;  // initial contents (zeros when shorter than length)
};

struct MemExpect {
  uint64_t va = 0;
  std::vector<uint8_t> bytes;
};

struct Scenario {
  Role role = Role::kResponder;
  bool role_set = false;
  bool both_roles = false;         // "role = both": the test suite runs each
  std::optional<uint32_t> only_qpn;  // replay only the connection of this (replaced) QP
  uint32_t mtu = 0;                // 0: infer
  std::vector<QpSpec> qps;         // empty: infer
  bool qps_set = false;
  std::vector<MrSpec> mrs;         // empty: infer
  bool mrs_set = false;
  bool srq = false;                // the replaced peer's QPs share one SRQ
  bool app_writes_infer = false;   // its application rewrites memory the other host READs
                                   // (see app_writes); off: READ data is checked throughout
  uint32_t recv_size = 0;          // bytes per receive buffer (0: infer)
  uint8_t timeout = 14;            // requester retransmission timeout (IBA code)
  std::optional<uint8_t> min_rnr_timer;  // 0..31 (unset: from the recorded RNR NAKs, else 12)
  // Expected outcome.
  bool expect_conform = true;
  std::string expect_text;         // a substring of the first divergence (when diverging)
  std::vector<MemExpect> expect_mem;  // the replaced peer's memory afterwards
  /// Bytes the replaced peer's application wrote into its own memory between two READs of them
  /// by the other host (inferred: a later recorded READ response shows other data than the
  /// earlier one, with no WRITE in between). Applied just before the READ request is fed.
  struct AppWrite {
    size_t before_pkt = 0;  // Capture::pkts index of the READ request
    size_t mr = 0;          // index into mrs
    uint64_t off = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<AppWrite> app_writes;
  std::vector<std::string> notes;  // what was inferred, for the report
};

/// Parses a scenario file. False and `error` ("FILE:LINE: problem") on a bad file.
bool parse_scenario(const std::string& path, Scenario& sc, std::string& error);
bool parse_scenario_text(const std::string& text, const std::string& name, Scenario& sc,
                         std::string& error);

/// Fills what the scenario left open from the capture. False and `error` when the capture does
/// not allow it (no RoCE packets, no packets of the selected QP, ambiguous pairing, ...).
bool infer_scenario(const Capture& cap, Scenario& sc, std::string& error);

/// The host uroce replaces (index into Capture::ip).
inline int replaced_host(const Scenario& sc) { return sc.role == Role::kRequester ? 0 : 1; }

// ---- Replay ---------------------------------------------------------------------------------

enum class StepKind : uint8_t { kFed, kPosted, kTimer, kEnd };

struct Step {
  StepKind kind = StepKind::kFed;
  size_t pkt = 0;          // index into Capture::pkts: the fed packet / the message's first packet
  uint64_t now_ns = 0;     // injected time
  std::string what;        // kPosted: the work request, in words
  std::vector<size_t> recorded;  // replaced peer's packets (Capture::pkts indices) after it
  std::vector<Pkt> uroce;        // what uroce transmitted while handling it
};

struct Replay {
  std::vector<Step> steps;
  /// Memory of the replaced peer afterwards, per MrSpec (same order).
  std::vector<std::vector<uint8_t>> mem_after;
  /// Messages received (SEND payloads, UD without the GRH), per QP spec index, in order.
  std::vector<std::vector<std::vector<uint8_t>>> received;
  std::vector<std::string> notes;  // setup facts for the report
  /// What the replaced host's READs and atomics brought back into its own memory.
  struct LocalResult {
    size_t spec = 0;  // QpSpec index
    uint32_t psn = 0;
    wire::Operation op = wire::Operation::kReadRequest;
    std::vector<uint8_t> data;  // READ: the local buffer; atomic: the 8-byte original value
    int status = -1;            // ibv_wc_status of its completion; -1: not completed
  };
  std::vector<LocalResult> local_results;
};

/// Sets up the engine from `sc` and runs the capture through it. False and `error` when the
/// engine refuses the setup (e.g. a QPN it cannot allocate).
bool run_replay(const Capture& cap, const Scenario& sc, Replay& out, std::string& error);

// ---- Comparison -----------------------------------------------------------------------------

struct Divergence {
  size_t step = 0;
  std::string text;  // in protocol terms
};

struct Verdict {
  std::vector<Divergence> divergences;  // sorted by step
  std::map<std::string, uint64_t> allowed;  // allowed difference -> count
  uint64_t compared = 0;                    // recorded packets checked
  bool conforms() const { return divergences.empty(); }
};

Verdict compare(const Capture& cap, const Scenario& sc, const Replay& rp);

// ---- Output ---------------------------------------------------------------------------------

struct PrintOptions {
  bool brief = false;  // only the summary and the divergences
};
void print_text(std::ostream& out, const Capture& cap, const Scenario& sc, const Replay& rp,
                const Verdict& v, const PrintOptions& opt);
void print_json(std::ostream& out, const Capture& cap, const Scenario& sc, const Replay& rp,
                const Verdict& v);

/// One line describing a packet: "RC_SEND_ONLY psn=0x000123 ACK msn=3 ...".
std::string describe(const Pkt& p);

/// The whole tool as a function (main.cc only parses arguments). Returns the exit status:
/// 0 the outcome is the expected one (by default: uroce conforms), 1 it is not, 2 bad input.
struct Options {
  std::string pcap;
  std::string scenario;  // empty: <pcap minus .pcap>.scenario if it exists
  std::optional<Role> role;
  std::optional<uint32_t> qpn;
  bool json = false;
  bool brief = false;
};
int run_tool(const Options& o, std::ostream& out, std::ostream& err);

}  // namespace uroce::replay
