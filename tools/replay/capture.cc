// Reading a capture: the RoCEv2 packets between two hosts, in capture order.
#include <cstring>

#include "pcap/pcap_file.h"
#include "replay/replay.h"

namespace uroce::replay {

bool decode_pkt(std::vector<uint8_t> bytes, Pkt& out, std::string* why) {
  out.bytes = std::move(bytes);
  wire::ParsedPacket p;
  const wire::ParseError e = wire::parse_frame(out.bytes, p);
  if (e != wire::ParseError::kOk) {
    if (why != nullptr) *why = std::string(wire::error_name(e));
    return false;
  }
  out.hdr = p.hdr;
  out.info = p.info;
  out.payload_off = static_cast<size_t>(p.payload.data() - out.bytes.data());
  out.payload_len = p.payload.size();
  return true;
}

bool load_capture(const std::string& path, Capture& cap, std::string& error) {
  if (const std::string problem = drivers::capture_problem(path); !problem.empty()) {
    error = path + ": " + problem;
    return false;
  }
  drivers::PcapReader rd(path);
  if (!rd.ok()) {
    error = path + ": " + drivers::open_problem(rd.error());
    return false;
  }
  cap = Capture{};
  bool have_hosts = false;
  drivers::PcapRecord rec;
  while (rd.next(rec)) {
    ++cap.frames;
    std::vector<uint8_t> bytes(rec.data.begin(), rec.data.end());
    Pkt pk;
    pk.frame = cap.frames;
    pk.ts_ns = rec.ts_ns;
    wire::ParsedPacket probe;
    const wire::ParseError e = wire::parse_frame(bytes, probe);
    if (e == wire::ParseError::kNotIp || e == wire::ParseError::kNotUdp ||
        e == wire::ParseError::kNotRoce) {
      ++cap.skipped_other;
      continue;
    }
    if (rec.data.size() < rec.orig_len) {
      ++cap.skipped_snapped;
      continue;
    }
    if (e == wire::ParseError::kBadIcrc) {
      ++cap.skipped_bad_icrc;
      continue;
    }
    if (e != wire::ParseError::kOk || !decode_pkt(std::move(bytes), pk)) {
      ++cap.skipped_malformed;
      continue;
    }
    if (pk.info->transport == wire::Transport::kCnp) {  // congestion notification: not replayed
      ++cap.skipped_other;
      continue;
    }
    if (!have_hosts) {
      // The first RoCE packet fixes the two hosts; [0] is the one that sent the first
      // request (fixed up below if the capture starts with a response).
      cap.ip[0] = Capture::src_gid(pk);
      cap.ip[1] = Capture::dst_gid(pk);
      cap.mac[0] = pk.hdr.eth.src;
      cap.mac[1] = pk.hdr.eth.dst;
      have_hosts = true;
    }
    const wire::Gid s = Capture::src_gid(pk), d = Capture::dst_gid(pk);
    const bool ours = (s == cap.ip[0] && d == cap.ip[1]) || (s == cap.ip[1] && d == cap.ip[0]);
    if (!ours) {
      ++cap.skipped_other;
      continue;
    }
    if (pk.dest_qp() == 1 && pk.has(wire::Ext::kDeth) &&
        pk.hdr.ext.deth.qkey == wire::kGsiQkey) {
      CmMad m;
      m.frame = pk.frame;
      m.src = s;
      if (wire::CmMessage::parse(pk.payload(), m.msg) == wire::ParseError::kOk)
        cap.cm.push_back(std::move(m));
      else
        ++cap.cm_unparsed;
      continue;
    }
    cap.pkts.push_back(std::move(pk));
  }
  if (!rd.error().empty()) {
    error = path + ": capture is truncated or corrupt after frame " + std::to_string(cap.frames) +
            " (" + rd.error() + ")";
    return false;
  }
  if (cap.pkts.empty()) {
    error = path + ": no RoCEv2 packets to replay (" + std::to_string(cap.frames) + " frames)";
    return false;
  }
  // Host 0 is the requester of the first request.
  for (const Pkt& p : cap.pkts) {
    if (!p.info->is_request()) continue;
    if (Capture::src_gid(p) != cap.ip[0]) {
      std::swap(cap.ip[0], cap.ip[1]);
      std::swap(cap.mac[0], cap.mac[1]);
    }
    break;
  }
  return true;
}

}  // namespace uroce::replay
