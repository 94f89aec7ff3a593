// Cross-check against a real decoder: frames our builder emits, written to a pcap, must decode
// in tshark (Wireshark's "RRoCE" dissector, UDP port 4791) with the same opcode, QPN, PSN and
// extension-header values. Skips with a message when tshark is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pcap/pcap_file.h"
#include "wire/packet.h"

namespace uroce::wire {
namespace {

bool have_tshark() { return std::system("tshark --version >/dev/null 2>&1") == 0; }

std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// Fields we ask tshark for, in this order.
const std::vector<std::string> kFields = {
    "frame.number",           "infiniband.bth.opcode",      "infiniband.bth.destqp",
    "infiniband.bth.psn",     "infiniband.bth.p_key",       "infiniband.bth.a",
    "infiniband.bth.se",      "infiniband.bth.padcnt",      "infiniband.reth.va",
    "infiniband.reth.r_key",  "infiniband.reth.dmalen",     "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",    "infiniband.deth.q_key",      "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt", "infiniband.immdt", "infiniband.ieth",
    "infiniband.invariant.crc", "udp.srcport"};

uint64_t num(const std::string& s) {
  if (s.empty()) return ~0ull;
  if (s == "True") return 1;
  if (s == "False") return 0;
  return std::stoull(s, nullptr, 0);
}

/// Hex string "aabbccdd" or "aa:bb:cc:dd" as the big-endian number it spells.
uint64_t hexbytes(const std::string& s) {
  uint64_t v = 0;
  for (char c : s) {
    if (c == ':') continue;
    v = v * 16 + static_cast<uint64_t>(std::stoi(std::string(1, c), nullptr, 16));
  }
  return v;
}

struct Built {
  RoceHeaders h;
  size_t payload_len;
  uint32_t icrc;
};

TEST(Tshark, DecodesEveryOpcodeWeBuildTheSameWay) {
  if (!have_tshark()) GTEST_SKIP() << "tshark not installed (apt-get install tshark); cross-check skipped";

  std::mt19937_64 rng(4791);
  std::vector<Built> built;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("uroce-tshark-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir / "built.pcap";
  {
    drivers::PcapWriter w(path);
    ASSERT_TRUE(w.ok()) << w.error();
    std::vector<uint8_t> frame(9000), payload(1100);
    uint64_t ts = 1'700'000'000'000'000'000ull;
    for (int op = 0; op < 256; ++op) {
      const OpcodeInfo& info = opcode_info(static_cast<uint8_t>(op));
      if (!info.valid) continue;
      // Wireshark (4.0) names the XRC opcodes but decodes nothing after their BTH: there is
      // nothing to compare (tests/wire/opcode_test.cc checks their layouts by hand).
      if (info.transport == Transport::kXrc) continue;
      for (int ipv6 = 0; ipv6 < 2; ++ipv6) {
        RoceHeaders h;
        h.eth.src = {0x02, 0, 0, 0, 0, 0x01};
        h.eth.dst = {0x02, 0, 0, 0, 0, 0x02};
        h.eth.has_vlan = (op & 1) != 0;
        h.eth.vid = 77;
        h.ipv6 = ipv6 != 0;
        h.ip4.src = {10, 77, 0, 12};
        h.ip4.dst = {10, 77, 0, 11};
        h.ip4.ident = static_cast<uint16_t>(op);
        h.ip6.src = ipv4_mapped_gid(h.ip4.src);
        h.ip6.src[0] = 0xfd;  // a ULA, not a mapped address
        h.ip6.dst = h.ip6.src;
        h.ip6.dst[15] = 0x11;
        h.ip6.flow_label = 0x12345;
        h.udp.src_port = static_cast<uint16_t>(0xC000 | rng() % 0x3FFF);
        h.bth.opcode = static_cast<uint8_t>(op);
        h.bth.se = (rng() & 1) != 0;
        h.bth.ack_req = (rng() & 1) != 0;
        h.bth.pkey = static_cast<uint16_t>(0x8000 | (rng() & 0x7FFF));
        h.bth.dest_qp = static_cast<uint32_t>(rng() & 0xFFFFFF);
        h.bth.psn = static_cast<uint32_t>(rng() & 0xFFFFFF);
        h.ext.reth = {rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng() % 65536)};
        h.ext.aeth = {static_cast<uint8_t>(rng() % 0x80), static_cast<uint32_t>(rng() & 0xFFFFFF)};
        h.ext.deth = {static_cast<uint32_t>(rng()), 0, static_cast<uint32_t>(rng() & 0xFFFFFF)};
        h.ext.atomic = {rng(), static_cast<uint32_t>(rng()), rng(), rng()};
        h.ext.atomic_ack = {rng()};
        h.ext.imm = {static_cast<uint32_t>(rng())};
        h.ext.ieth = {static_cast<uint32_t>(rng())};
        size_t plen = 0;
        if (info.fixed_payload) plen = info.fixed_payload;
        else if (info.has_payload) plen = info.ends_message() ? rng() % 1025 : 1024;
        for (auto& b : payload) b = static_cast<uint8_t>(rng());
        const size_t n = build_frame(h, Bytes(payload.data(), plen), frame);
        ASSERT_GT(n, 0u);
        ParsedPacket p;
        ASSERT_EQ(parse_frame(Bytes(frame.data(), n), p), ParseError::kOk);
        w.write(ts += 1000, Bytes(frame.data(), n));
        built.push_back({h, plen, p.icrc_wire});
      }
    }
  }

  std::string cmd = "tshark -r '" + path + "' -T fields -E separator=/t -E occurrence=f";
  for (const auto& f : kFields) cmd += " -e " + f;
  cmd += " 2>/dev/null";
  std::istringstream out(run(cmd));
  std::string line;
  size_t rows = 0;
  while (std::getline(out, line)) {
    std::vector<std::string> col;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, '\t')) col.push_back(cell);
    col.resize(kFields.size());
    const size_t idx = num(col[0]) - 1;
    ASSERT_LT(idx, built.size());
    const Built& b = built[idx];
    const RoceHeaders& h = b.h;
    const OpcodeInfo& info = opcode_info(h.bth.opcode);
    SCOPED_TRACE(std::string(info.name) + (h.ipv6 ? " over IPv6" : " over IPv4"));
    ++rows;
    ASSERT_EQ(num(col[1]), h.bth.opcode);
    EXPECT_EQ(num(col[21]), h.udp.src_port);
    // Wireshark 4.0 knows the IBA 1.4 opcodes; FLUSH, ATOMIC WRITE and the CNP came later
    // or are decoded without transport fields, so only the opcode is compared for them.
    if (info.op == Operation::kFlush || info.op == Operation::kAtomicWrite ||
        info.op == Operation::kCnp)
      continue;
    EXPECT_EQ(num(col[2]), h.bth.dest_qp);
    EXPECT_EQ(num(col[3]), h.bth.psn);
    EXPECT_EQ(num(col[4]), h.bth.pkey);
    EXPECT_EQ(num(col[5]), h.bth.ack_req ? 1u : 0u);
    EXPECT_EQ(num(col[6]), h.bth.se ? 1u : 0u);
    EXPECT_EQ(num(col[7]), (4 - (b.payload_len & 3)) & 3);
    if (info.has(Ext::kReth)) {
      EXPECT_EQ(num(col[8]), h.ext.reth.va);
      EXPECT_EQ(num(col[9]), h.ext.reth.rkey);
      EXPECT_EQ(num(col[10]), h.ext.reth.dma_len);
    }
    if (info.has(Ext::kAtomicEth)) {
      // Wireshark shows the AtomicETH's address and key in the RETH fields.
      EXPECT_EQ(num(col[8]), h.ext.atomic.va);
      EXPECT_EQ(num(col[9]), h.ext.atomic.rkey);
      EXPECT_EQ(num(col[15]), h.ext.atomic.swap_add);
      EXPECT_EQ(num(col[16]), h.ext.atomic.compare);
    }
    if (info.has(Ext::kAeth)) {
      EXPECT_EQ(num(col[11]), h.ext.aeth.syndrome);
      EXPECT_EQ(num(col[12]), h.ext.aeth.msn);
    }
    if (info.has(Ext::kDeth)) {
      EXPECT_EQ(num(col[13]), h.ext.deth.qkey);
      EXPECT_EQ(num(col[14]), h.ext.deth.src_qp);
    }
    if (info.has(Ext::kAtomicAckEth)) {
      EXPECT_EQ(num(col[17]), h.ext.atomic_ack.orig);
    }
    if (info.has(Ext::kImmDt)) {
      EXPECT_EQ(hexbytes(col[18]), h.ext.imm.imm);
    }
    if (info.has(Ext::kIeth)) {
      EXPECT_EQ(hexbytes(col[19]), h.ext.ieth.rkey);
    }
    // tshark shows the ICRC's four bytes as a big-endian number; we store the CRC LSB first.
    EXPECT_EQ(num(col[20]), __builtin_bswap32(b.icrc));
  }
  EXPECT_EQ(rows, built.size());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace uroce::wire
