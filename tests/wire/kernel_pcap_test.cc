// Every RoCEv2 packet in the kernel Soft-RoCE captures under pcaps/ must parse, verify its
// ICRC with both CRC implementations, and re-emit byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "pcap/pcap_file.h"
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
  size_t roce = 0, other = 0;
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
  }
  EXPECT_TRUE(r.error().empty()) << r.error();
  EXPECT_GT(roce, 0u);
}

INSTANTIATE_TEST_SUITE_P(Pcaps, KernelCapture, ::testing::ValuesIn(kernel_captures()),
                         [](const auto& param_info) {
                           std::string n = std::filesystem::path(param_info.param).stem().string();
                           std::replace_if(n.begin(), n.end(), [](char c) { return !isalnum(c); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace uroce::wire
