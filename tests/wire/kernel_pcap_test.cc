// Every RoCEv2 packet in the kernel Soft-RoCE captures under pcaps/ must parse, verify its
// ICRC with both CRC implementations, and re-emit byte for byte; so must every connection
// manager MAD in them (the UD SENDs to QP1), through the CM message codecs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "pcap/pcap_file.h"
#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace uroce::wire {
namespace {

std::vector<std::string> kernel_captures() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(UROCE_PCAP_DIR)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("kernel-rxe-") && name.ends_with(".pcap")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class KernelCapture : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelCapture, EveryRocePacketParsesVerifiesAndReemitsExactly) {
  drivers::PcapReader r(GetParam());
  ASSERT_TRUE(r.ok()) << r.error();
  drivers::PcapRecord rec;
  size_t roce = 0, other = 0, cm = 0;
  std::vector<uint8_t> buf(16384);
  while (r.next(rec)) {
    ASSERT_EQ(rec.data.size(), rec.orig_len) << "capture was snapped";
    ParsedPacket p;
    ParseError e = parse_frame(rec.data, p);
    if (is_not_roce(e)) {
      ++other;
      continue;
    }
    ASSERT_EQ(e, ParseError::kOk) << "packet " << (roce + other + 1) << ": " << error_name(e);
    ++roce;

    ParsedPacket q;
    ASSERT_EQ(parse_frame(rec.data, q, {.verify_icrc = true, .crc = CrcImpl::kReference}),
              ParseError::kOk);
    EXPECT_EQ(q.icrc_calc, p.icrc_calc);

    const size_t n = build_frame(p.hdr, p.payload, buf, {.pad = p.pad, .trailer = p.trailer});
    ASSERT_EQ(n, rec.data.size());
    ASSERT_TRUE(std::equal(rec.data.begin(), rec.data.end(), buf.begin()))
        << "re-emitted frame differs, packet " << (roce + other);

    if (p.hdr.bth.dest_qp == 1 && p.info->has(Ext::kDeth) && p.hdr.ext.deth.qkey == kGsiQkey) {
      CmMessage m;
      ASSERT_EQ(CmMessage::parse(p.payload, m), ParseError::kOk)
          << "CM MAD, packet " << (roce + other);
      std::vector<uint8_t> mad(kMadLen);
      m.emit(mad);
      ASSERT_TRUE(std::equal(mad.begin(), mad.end(), p.payload.begin()))
          << "re-emitted CM " << m.name() << " differs, packet " << (roce + other);
      ++cm;
    }
  }
  EXPECT_TRUE(r.error().empty()) << r.error();
  EXPECT_GT(roce, 0u);
  // The captures of rdma_cm programs (named *_cm*) hold the whole handshake at least.
  if (GetParam().find("_cm") != std::string::npos) {
    EXPECT_GE(cm, 3u);
  }
}

INSTANTIATE_TEST_SUITE_P(Pcaps, KernelCapture, ::testing::ValuesIn(kernel_captures()),
                         [](const auto& param_info) {
                           std::string n = std::filesystem::path(param_info.param).stem().string();
                           std::replace_if(n.begin(), n.end(), [](char c) { return !isalnum(c); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace uroce::wire
