// libFuzzer target over the frame parser: Ethernet -> IP -> UDP -> BTH -> extension headers
// -> payload -> ICRC. Any crash, sanitizer report or broken invariant is a finding.
//
// Invariants checked on every input the parser accepts:
//   - the payload and pad lie inside the frame,
//   - re-building the frame from the parsed headers gives a frame that parses to the same
//     headers, payload and ICRC verdict (parse and build are inverses);
//   - a datagram to QP1 with the GSI Q_Key goes on to the CM message codecs: a message they
//     accept, emitted again, parses to the same message.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "wire/cm_mad.h"
#include "wire/packet.h"

using namespace uroce::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Bytes frame(data, size);
  ParsedPacket p;
  // With the ICRC checked, as the engine parses ...
  (void)parse_frame(frame, p);
  // ... and without, so that mutated frames reach the deeper layers and the round trip.
  const ParseError e = parse_frame(frame, p, {.verify_icrc = false});
  if (e != ParseError::kOk) return 0;

  if (p.payload.data() < data || p.payload.data() + p.payload.size() > data + size) std::abort();
  if (p.pad.size() > 3) std::abort();

  std::vector<uint8_t> out(frame_len(p.hdr, p.payload.size(), p.trailer.size()));
  const size_t n = build_frame(p.hdr, p.payload, out, {.pad = p.pad, .trailer = p.trailer});
  if (n != out.size()) std::abort();
  ParsedPacket q;
  if (parse_frame(Bytes(out.data(), n), q) != ParseError::kOk) std::abort();
  // Lengths and checksums are recomputed by the builder; everything else must survive.
  RoceHeaders a = p.hdr, b = q.hdr;
  a.ip4.checksum = b.ip4.checksum = 0;
  if (!(a == b)) std::abort();
  if (!std::equal(p.payload.begin(), p.payload.end(), q.payload.begin(), q.payload.end()))
    std::abort();

  if (p.hdr.bth.dest_qp == 1 && p.info->has(Ext::kDeth) && p.hdr.ext.deth.qkey == kGsiQkey) {
    CmMessage m;
    if (CmMessage::parse(p.payload, m) != ParseError::kOk) return 0;
    std::vector<uint8_t> mad(kMadLen);
    m.emit(mad);
    CmMessage again;
    if (CmMessage::parse(mad, again) != ParseError::kOk || !(again == m)) std::abort();
    if (const auto* req = m.get<CmReq>()) {
      CmaIpHeader ip;
      (void)CmaIpHeader::parse(req->private_data, ip);
    }
  }
  return 0;
}
