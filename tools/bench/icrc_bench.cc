// ICRC benchmark: ISA-L's CRC-32 against the bit-at-a-time reference, on whole RoCEv2
// packets (masking included) of typical sizes. Prints a table (median of several runs) and,
// with --csv FILE, the same figures as CSV for plotting.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "wire/packet.h"

using namespace uroce::wire;
using Clock = std::chrono::steady_clock;

namespace {

struct Frame {
  std::vector<uint8_t> bytes;
  size_t l3_off, l3_len;
};

Frame make_frame(size_t payload_len, std::mt19937& rng) {
  RoceHeaders h;
  h.bth.opcode = payload_len > 0 ? opcode::kRcWriteOnly : opcode::kRcAck;
  std::vector<uint8_t> payload(payload_len);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  Frame f;
  f.bytes.resize(frame_len(h, payload_len));
  build_frame(h, payload, f.bytes);
  f.l3_off = h.eth.header_len();
  f.l3_len = f.bytes.size() - f.l3_off - kIcrcLen;
  return f;
}

double ns_per_packet(const Frame& f, CrcImpl impl, size_t iters) {
  const Bytes l3(f.bytes.data() + f.l3_off, f.l3_len);
  volatile uint32_t sink = 0;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < iters; ++i) sink = sink + icrc_compute(l3, false, 20, impl);
  const auto t1 = Clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(iters);
}

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv_path = argv[++i];
    else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: icrc_bench [--runs N] [--csv FILE]\n");
      return 2;
    }
  }
  std::mt19937 rng(1);
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv_path && !csv) {
    std::fprintf(stderr, "icrc_bench: cannot write %s\n", csv_path);
    return 1;
  }
  if (csv) std::fprintf(csv, "payload,impl,ns_per_packet,gbytes_per_s\n");
  std::printf("%-9s %-10s %14s %10s   (median of %d runs)\n", "payload", "impl", "ns/packet",
              "GB/s", runs);
  for (size_t size : {0, 64, 256, 1024, 4096}) {
    const Frame f = make_frame(size, rng);
    for (CrcImpl impl : {CrcImpl::kFast, CrcImpl::kReference}) {
      const bool fast = impl == CrcImpl::kFast;
      // Aim for roughly 50 ms per run.
      const size_t iters = std::max<size_t>(200, (fast ? 50'000'000 : 400'000) / (f.l3_len + 8));
      std::vector<double> t;
      for (int r = 0; r < runs; ++r) t.push_back(ns_per_packet(f, impl, iters));
      std::sort(t.begin(), t.end());
      const double med = t[t.size() / 2];
      const double gbps = static_cast<double>(f.l3_len + 8) / med;
      std::printf("%-9zu %-10s %14.1f %10.3f\n", size, fast ? "isa-l" : "reference", med, gbps);
      if (csv) std::fprintf(csv, "%zu,%s,%.1f,%.3f\n", size, fast ? "isa-l" : "reference", med, gbps);
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
