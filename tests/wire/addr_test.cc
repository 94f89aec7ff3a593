// MAC / IPv4 / IPv6 address formatting and parsing, and IPv4-mapped GIDs.
#include "wire/addr.h"

#include <gtest/gtest.h>

namespace uroce::wire {
namespace {

TEST(Addr, FormatsMac) {
  EXPECT_EQ(to_string(MacAddr{0x52, 0x54, 0x00, 0x77, 0x00, 0x11}), "52:54:00:77:00:11");
  EXPECT_EQ(to_string(MacAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "ff:ff:ff:ff:ff:ff");
}

TEST(Addr, ParsesMac) {
  EXPECT_EQ(parse_mac("52:54:00:77:00:11"), (MacAddr{0x52, 0x54, 0x00, 0x77, 0x00, 0x11}));
  EXPECT_EQ(parse_mac("AA:bb:Cc:dD:0e:F0"), (MacAddr{0xaa, 0xbb, 0xcc, 0xdd, 0x0e, 0xf0}));
  for (const char* bad : {"", "52:54:00:77:00", "52:54:00:77:00:11:", "52-54-00-77-00-11",
                          "52:54:00:77:00:1g", "5:54:00:77:00:111", " 52:54:00:77:00:1"}) {
    EXPECT_FALSE(parse_mac(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(Addr, Ipv4TextRoundTrip) {
  EXPECT_EQ(to_string(Ipv4Addr{10, 77, 0, 12}), "10.77.0.12");
  EXPECT_EQ(parse_ipv4("192.168.0.199"), (Ipv4Addr{192, 168, 0, 199}));
  for (const char* bad : {"", "1.2.3", "1.2.3.256", "1.2.3.4.5", "a.b.c.d", "::1"})
    EXPECT_FALSE(parse_ipv4(bad).has_value()) << bad;
}

TEST(Addr, Ipv6TextUsesRfc5952) {
  const Ipv6Addr fe80_1 = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(to_string(fe80_1), "fe80::1");
  EXPECT_EQ(parse_ipv6("fe80::1"), fe80_1);
  EXPECT_EQ(parse_ipv6("FE80:0:0:0:0:0:0:1"), fe80_1);
  EXPECT_EQ(to_string(Ipv6Addr{}), "::");
  EXPECT_EQ(to_string(ipv4_mapped_gid({10, 0, 0, 1})), "::ffff:10.0.0.1");
  for (const char* bad : {"", "fe80::1::2", "12345::", "10.0.0.1", "g::1"})
    EXPECT_FALSE(parse_ipv6(bad).has_value()) << bad;
}

TEST(Addr, Ipv4MappedGid) {
  const Gid g = ipv4_mapped_gid({10, 77, 0, 11});
  const Gid want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 11};
  EXPECT_EQ(g, want);
  EXPECT_TRUE(is_ipv4_mapped(g));
  EXPECT_EQ(parse_ipv6("::ffff:10.77.0.11"), want);
  EXPECT_FALSE(is_ipv4_mapped(Gid{}));
  Gid not_mapped = want;
  not_mapped[9] = 1;
  EXPECT_FALSE(is_ipv4_mapped(not_mapped));
  not_mapped = want;
  not_mapped[11] = 0xfe;
  EXPECT_FALSE(is_ipv4_mapped(not_mapped));
  EXPECT_FALSE(is_ipv4_mapped(*parse_ipv6("fe80::ffff:a4d:b")));
}

}  // namespace
}  // namespace uroce::wire
