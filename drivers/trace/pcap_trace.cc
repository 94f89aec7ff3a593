#include "trace/pcap_trace.h"

namespace uroce::drivers {

PcapTrace::PcapTrace(Port& inner, const std::string& path, uint32_t snaplen)
    : PortDecorator(inner), writer_(path, snaplen) {}

PcapTrace::~PcapTrace() { writer_.flush(); }

uint16_t PcapTrace::rx_burst(uint64_t now_ns, std::span<Frame*> out) {
  const uint16_t n = inner_.rx_burst(now_ns, out);
  for (uint16_t i = 0; i < n; ++i) record(now_ns, out[i]);
  rx_recorded_ += ok() ? n : 0;
  if (n != 0) writer_.flush();  // per burst: a process that is killed leaves a whole trace
  return n;
}

uint16_t PcapTrace::tx_burst(uint64_t now_ns, std::span<Frame* const> frames) {
  for (const Frame* f : frames) record(now_ns, f);
  tx_recorded_ += ok() ? frames.size() : 0;
  if (!frames.empty()) writer_.flush();
  return inner_.tx_burst(now_ns, frames);
}

void PcapTrace::record(uint64_t now_ns, const Frame* f) {
  if (ok()) writer_.write(now_ns, f->bytes());
}

}  // namespace uroce::drivers
