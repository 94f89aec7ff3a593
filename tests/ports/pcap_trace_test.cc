// PcapTrace over a MemLink: what goes out and comes in is in the file, byte for byte, with
// the injected time as the timestamp.
#include "trace/pcap_trace.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "fault/fault_injector.h"
#include "memlink/memlink.h"
#include "pcap/pcap_file.h"
#include "test_frames.h"

namespace uroce::drivers {
namespace {

using test::frame_bytes;
using test::make_frame;

struct Record {
  uint64_t ts_ns = 0;
  std::vector<uint8_t> bytes;
  bool operator==(const Record&) const = default;
};

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "uroce_ports_" + name + ".pcap";
}

std::vector<Record> read_all(const std::string& path) {
  std::vector<Record> out;
  PcapReader r(path);
  EXPECT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.linktype(), 1);  // Ethernet
  PcapRecord rec;
  while (r.next(rec)) {
    EXPECT_EQ(rec.orig_len, rec.data.size());
    out.push_back(Record{rec.ts_ns, {rec.data.begin(), rec.data.end()}});
  }
  EXPECT_TRUE(r.error().empty()) << r.error();
  return out;
}

/// Sends frames `seqs` through `p` at now_ns as one burst.
void send(Port& p, uint64_t now_ns, const std::vector<uint32_t>& seqs) {
  std::vector<Frame*> burst;
  for (uint32_t s : seqs) burst.push_back(make_frame(p, s));
  ASSERT_EQ(p.tx_burst(now_ns, burst), burst.size());
}

TEST(PcapTrace, RecordsBothDirectionsWithInjectedTime) {
  const std::string path = temp_path("both_ways");
  MemLink link;
  std::vector<Record> want;
  {
    PcapTrace trace(link.a(), path);
    ASSERT_TRUE(trace.ok()) << trace.error();
    EXPECT_TRUE(trace.error().empty());

    // Out at time zero (used as-is), then just past one second (checks the ns field).
    send(trace, 0, {1, 2, 3});
    for (uint32_t s : {1, 2, 3}) want.push_back(Record{0, frame_bytes(s)});
    send(trace, 1'500'000'123, {4, 5});
    for (uint32_t s : {4, 5}) want.push_back(Record{1'500'000'123, frame_bytes(s)});

    // The other end answers; the trace records what rx_burst hands over.
    std::array<Frame*, 8> burst{};
    const uint16_t n = link.b().rx_burst(0, burst);
    ASSERT_EQ(n, 5u);
    for (uint16_t i = 0; i < n; ++i) link.b().free_frame(burst[i]);
    send(link.b(), 0, {100, 101});
    ASSERT_EQ(trace.rx_burst(2'000'000'999, burst), 2u);
    for (uint16_t i = 0; i < 2; ++i) trace.free_frame(burst[i]);
    for (uint32_t s : {100, 101}) want.push_back(Record{2'000'000'999, frame_bytes(s)});
    EXPECT_EQ(trace.rx_burst(3'000'000'000, burst), 0u);  // Expect: an empty poll records nothing.

    EXPECT_EQ(trace.tx_recorded(), 5u);
    EXPECT_EQ(trace.rx_recorded(), 2u);
  }  // flushed and closed here
  EXPECT_EQ(read_all(path), want);
  EXPECT_EQ(link.pool().available(), link.pool().capacity());
  std::remove(path.c_str());
}

TEST(PcapTrace, FlushMakesRecordsReadableWhileOpen) {
  const std::string path = temp_path("flush");
  MemLink link;
  {
    PcapTrace trace(link.a(), path);
    ASSERT_TRUE(trace.ok()) << trace.error();
    send(trace, 42, {7, 8, 9, 10});
    trace.flush();
    const std::vector<Record> got = read_all(path);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[3], (Record{42, frame_bytes(10)}));
  }
  std::remove(path.c_str());
}

TEST(PcapTrace, BadPathReportsErrorAndStillForwards) {
  MemLink link;
  PcapTrace trace(link.a(), "/nonexistent-uroce-dir/trace.pcap");
  EXPECT_FALSE(trace.ok());
  EXPECT_FALSE(trace.error().empty());
  send(trace, 0, {1});
  std::array<Frame*, 4> burst{};
  ASSERT_EQ(link.b().rx_burst(0, burst), 1u);
  EXPECT_EQ(std::vector<uint8_t>(burst[0]->bytes().begin(), burst[0]->bytes().end()),
            frame_bytes(1));
  link.b().free_frame(burst[0]);
  EXPECT_EQ(trace.tx_recorded(), 0u);
}

// Stacked decorators: FaultInjector(PcapTrace(MemLink end)). The trace sits below the
// injector, so it holds the corrupted bytes, exactly as the peer receives them.
TEST(PcapTrace, UnderAFaultInjectorRecordsTheDamagedFrames) {
  const std::string path = temp_path("stacked");
  MemLink link;
  std::vector<Record> received;
  {
    PcapTrace trace(link.a(), path);
    ASSERT_TRUE(trace.ok()) << trace.error();
    FaultConfig cfg;
    cfg.seed = 3;
    cfg.corrupt = 1.0;
    cfg.loss = 0.5;
    FaultInjector faults(trace, cfg);
    for (uint32_t i = 0; i < 20; ++i) send(faults, 10 * i, {i});
    std::array<Frame*, 32> burst{};
    const uint16_t n = link.b().rx_burst(0, burst);
    for (uint16_t i = 0; i < n; ++i) {
      received.push_back(Record{0, {burst[i]->bytes().begin(), burst[i]->bytes().end()}});
      link.b().free_frame(burst[i]);
    }
    EXPECT_EQ(n, faults.counters().sent);
    EXPECT_EQ(20u - n, faults.counters().dropped);
    EXPECT_GT(n, 0u);
    EXPECT_LT(n, 20u);
  }
  const std::vector<Record> traced = read_all(path);
  ASSERT_EQ(traced.size(), received.size());
  for (size_t i = 0; i < traced.size(); ++i) {
    EXPECT_EQ(traced[i].bytes, received[i].bytes);
    // Frame i went out at 10 * i: the corrupted bit is still there in the trace.
    const auto seq = static_cast<uint32_t>(traced[i].ts_ns / 10);
    EXPECT_EQ(traced[i].ts_ns, 10u * seq);
    EXPECT_NE(traced[i].bytes, frame_bytes(seq));
    EXPECT_EQ(traced[i].bytes.size(), frame_bytes(seq).size());
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace uroce::drivers
