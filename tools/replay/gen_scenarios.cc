// uroce-replay-gen: writes the hand-made conformance scenarios (pcap + .scenario) for corner
// cases that real captures rarely show. Each conversation below is what the IBA spec requires
// of a conforming responder (and requester); uroce-replay checks uroce against it.
//
//   uroce-replay-gen DIR     (the committed ones live in pcaps/scenarios/)
//
// Host A (10.0.0.1, QP 0x11) is the requester, host B (10.0.0.2, QP 0x12) the responder.
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "pcap/pcap_file.h"
#include "wire/packet.h"

namespace {

using namespace uroce::wire;

constexpr uint32_t kQpA = 0x11, kQpB = 0x12;
const MacAddr kMacA = {0x02, 0, 0, 0, 0, 0x01};
const MacAddr kMacB = {0x02, 0, 0, 0, 0, 0x02};
const Ipv4Addr kIpA = {10, 0, 0, 1};
const Ipv4Addr kIpB = {10, 0, 0, 2};

class Conv {
 public:
  explicit Conv(const std::string& path) : w_(path) {}
  bool ok() const { return w_.ok(); }

  /// A request from A. `f` fills the extension headers.
  void req(uint8_t opcode, uint32_t psn, std::vector<uint8_t> payload = {},
           const std::function<void(ExtHeaders&)>& f = {}) {
    RoceHeaders h = base(true);
    h.bth.opcode = opcode;
    h.bth.psn = psn & 0xFFFFFF;
    h.bth.dest_qp = kQpB;
    const OpcodeInfo& info = opcode_info(opcode);
    h.bth.ack_req = info.ends_message() || info.op == Operation::kReadRequest;
    if (f) f(h.ext);
    emit(h, payload);
  }
  /// A response from B.
  void resp(uint8_t opcode, uint32_t psn, uint8_t syndrome, uint32_t msn,
            std::vector<uint8_t> payload = {}, uint64_t orig = 0) {
    RoceHeaders h = base(false);
    h.bth.opcode = opcode;
    h.bth.psn = psn & 0xFFFFFF;
    h.bth.dest_qp = kQpA;
    h.ext.aeth.syndrome = syndrome;
    h.ext.aeth.msn = msn;
    h.ext.atomic_ack.orig = orig;
    emit(h, payload);
  }

 private:
  RoceHeaders base(bool from_a) {
    RoceHeaders h;
    h.eth.src = from_a ? kMacA : kMacB;
    h.eth.dst = from_a ? kMacB : kMacA;
    h.ip4.src = from_a ? kIpA : kIpB;
    h.ip4.dst = from_a ? kIpB : kIpA;
    h.ip4.ident = ip_id_++;
    h.udp.src_port = from_a ? 0xC011 : 0xC012;
    return h;
  }
  void emit(const RoceHeaders& h, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> buf(9000);
    const size_t n = build_frame(h, payload, buf);
    t_ += 10'000;  // 10 us apart
    w_.write(t_, {buf.data(), n});
  }
  uroce::drivers::PcapWriter w_;
  uint64_t t_ = 1'700'000'000'000'000'000ull;
  uint16_t ip_id_ = 1;
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}
std::vector<uint8_t> slice(const std::vector<uint8_t>& v, size_t off, size_t n) {
  return {v.begin() + static_cast<ptrdiff_t>(off), v.begin() + static_cast<ptrdiff_t>(off + n)};
}
std::string hex(const std::vector<uint8_t>& v) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t b : v) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}
std::string le64(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return hex(b);
}

namespace op = uroce::wire::opcode;
const uint8_t kAck = AethRepr::make_ack();
auto reth(uint64_t va, uint32_t rkey, uint32_t len) {
  return [=](ExtHeaders& e) { e.reth = {va, rkey, len}; };
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: uroce-replay-gen DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;
  auto done = [&](Conv& c, const std::string& name, const std::string& scenario) {
    ok = ok && c.ok() && write_file(dir + "/" + name + ".scenario", scenario);
  };

  {  // PSN wrap: a 3-packet SEND across 0xFFFFFF -> 0, then a WRITE and a READ after it.
    Conv c(dir + "/psn_wrap.pcap");
    const auto msg = pattern(600, 1), wr = pattern(64, 2), init = pattern(512, 3);
    auto mem = init;
    std::copy(wr.begin(), wr.end(), mem.begin());
    c.req(op::kRcSendFirst, 0xFFFFFE, slice(msg, 0, 256));
    c.req(op::kRcSendMiddle, 0xFFFFFF, slice(msg, 256, 256));
    c.req(op::kRcSendLast, 0x000000, slice(msg, 512, 88));
    c.resp(op::kRcAck, 0x000000, kAck, 1);
    c.req(op::kRcWriteOnly, 0x000001, wr, reth(0x1000, 0x100, 64));
    c.resp(op::kRcAck, 0x000001, kAck, 2);
    c.req(op::kRcReadRequest, 0x000002, {}, reth(0x1000, 0x100, 300));
    c.resp(op::kRcReadResponseFirst, 0x000002, kAck, 3, slice(mem, 0, 256));
    c.resp(op::kRcReadResponseLast, 0x000003, kAck, 3, slice(mem, 256, 44));
    done(c, "psn_wrap",
         "# PSN wrap: the requester starts at 0xfffffe; a SEND crosses 0xffffff -> 0, a WRITE\n"
         "# and a 2-packet READ follow. Expect: one ACK (PSN 0, MSN 1) for the SEND.\n"
         "[replay]\nrole = both\nmtu = 256\n\n[mr]\nva = 0x1000\nrkey = 0x100\nlength = 512\n"
         "data = 0 " + hex(init) + "\n\n[expect]\nresult = conform\nmemory = 0x1000 " + hex(wr) +
         "\n");
  }
  {  // Duplicate READ asking for a subset of the original range.
    Conv c(dir + "/dup_read_subset.pcap");
    const auto mem = pattern(1024, 9);
    c.req(op::kRcReadRequest, 10, {}, reth(0x2000, 0x200, 1024));
    c.resp(op::kRcReadResponseFirst, 10, kAck, 1, slice(mem, 0, 256));
    c.resp(op::kRcReadResponseMiddle, 11, kAck, 1, slice(mem, 256, 256));
    c.resp(op::kRcReadResponseMiddle, 12, kAck, 1, slice(mem, 512, 256));
    c.resp(op::kRcReadResponseLast, 13, kAck, 1, slice(mem, 768, 256));
    // The requester lost responses 12 and 13 and asks again for the rest only.
    c.req(op::kRcReadRequest, 12, {}, reth(0x2200, 0x200, 512));
    c.resp(op::kRcReadResponseFirst, 12, kAck, 1, slice(mem, 512, 256));
    c.resp(op::kRcReadResponseLast, 13, kAck, 1, slice(mem, 768, 256));
    c.req(op::kRcWriteOnly, 14, pattern(16, 5), reth(0x2000, 0x200, 16));
    c.resp(op::kRcAck, 14, kAck, 2);
    done(c, "dup_read_subset",
         "# Duplicate READ for a subset: READ PSN 10 (1 KiB, 4 responses), then the same READ\n"
         "# again from PSN 12 for its last 512 bytes. Expect: a new response message\n"
         "# (FIRST 12, LAST 13) with the right bytes, MSN unchanged, and the stream going on.\n"
         "[replay]\nrole = responder\nmtu = 256\n\n[mr]\nva = 0x2000\nrkey = 0x200\n"
         "length = 1024\ndata = 0 " + hex(mem) + "\n\n[expect]\nresult = conform\nmemory = 0x2000 " +
         hex(pattern(16, 5)) + "\n");
  }
  {  // Duplicate atomic: answered from the saved result, never executed twice.
    Conv c(dir + "/dup_atomic.pcap");
    auto fadd = [](ExtHeaders& e) { e.atomic = {0x3000, 0x300, 5, 0}; };
    auto cas = [](ExtHeaders& e) { e.atomic = {0x3000, 0x300, 7, 105}; };
    c.req(op::kRcFetchAdd, 20, {}, fadd);
    c.resp(op::kRcAtomicAck, 20, kAck, 1, {}, 100);
    c.req(op::kRcFetchAdd, 20, {}, fadd);  // the ACK was lost: the requester resends
    c.resp(op::kRcAtomicAck, 20, kAck, 1, {}, 100);
    c.req(op::kRcCompareSwap, 21, {}, cas);
    c.resp(op::kRcAtomicAck, 21, kAck, 2, {}, 105);
    done(c, "dup_atomic",
         "# Duplicate FETCH_ADD: the second copy of PSN 20 is answered with the saved original\n"
         "# value (100), not executed again; the CAS then sees 105 and swaps in 7.\n"
         "[replay]\nrole = both\n\n[mr]\nva = 0x3000\nrkey = 0x300\nlength = 8\ndata = 0 " +
             le64(100) + "\n\n[expect]\nresult = conform\nmemory = 0x3000 " + le64(7) + "\n");
  }
  {  // NAK for an invalid R_Key.
    Conv c(dir + "/invalid_rkey.pcap");
    c.req(op::kRcWriteOnly, 30, pattern(32, 4), reth(0x4000, 0x400, 32));
    c.resp(op::kRcAck, 30, kAck, 1);
    c.req(op::kRcWriteOnly, 31, pattern(32, 6), reth(0x4000, 0x999, 32));
    c.resp(op::kRcAck, 31, AethRepr::make_nak(NakCode::kRemoteAccessError), 1);
    done(c, "invalid_rkey",
         "# WRITE with an R_Key the responder never issued: NAK remote access error at its PSN,\n"
         "# MSN unchanged, nothing written.\n"
         "[replay]\nrole = both\n\n[mr]\nva = 0x4000\nrkey = 0x400\nlength = 64\n\n[expect]\n"
         "result = conform\nmemory = 0x4000 " + hex(pattern(32, 4)) + "\n");
  }
  {  // Out-of-order middle packet: one PSN sequence NAK, then go-back-N.
    Conv c(dir + "/ooo_middle.pcap");
    const auto msg = pattern(868, 8);
    c.req(op::kRcSendFirst, 40, slice(msg, 0, 256));
    c.req(op::kRcSendMiddle, 42, slice(msg, 512, 256));  // 41 was lost
    c.resp(op::kRcAck, 41, AethRepr::make_nak(NakCode::kPsnSeqError), 0);
    c.req(op::kRcSendMiddle, 41, slice(msg, 256, 256));
    c.req(op::kRcSendMiddle, 42, slice(msg, 512, 256));
    c.req(op::kRcSendLast, 43, slice(msg, 768, 100));
    c.resp(op::kRcAck, 43, kAck, 1);
    done(c, "ooo_middle",
         "# A SEND whose second packet is lost: the responder NAKs PSN 41 (sequence error) once,\n"
         "# the requester goes back to 41, the message completes (ACK 43, MSN 1).\n"
         "[replay]\nrole = both\nmtu = 256\n\n[expect]\nresult = conform\n");
  }
  {  // A wrong recorded responder: it ACKs across a gap. uroce must disagree.
    Conv c(dir + "/negative_ack_across_gap.pcap");
    c.req(op::kRcSendOnly, 50, pattern(64, 1));
    c.resp(op::kRcAck, 50, kAck, 1);
    c.req(op::kRcSendOnly, 52, pattern(64, 2));  // 51 never arrived
    c.resp(op::kRcAck, 52, kAck, 2);             // wrong: must be NAK PSN sequence error 51
    done(c, "negative_ack_across_gap",
         "# Negative case: the recorded responder ACKs PSN 52 although 51 never arrived.\n"
         "# A conforming responder NAKs PSN 51 (sequence error): the runner must say so.\n"
         "[replay]\nrole = responder\n\n[expect]\nresult = diverge\n"
         "divergence = uroce saw an error the recorded responder did not\n");
  }
  if (!ok) {
    std::cerr << "uroce-replay-gen: cannot write to " << dir << "\n";
    return 1;
  }
  return 0;
}
