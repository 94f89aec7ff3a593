// A port decorator that records traffic to a pcap file: every frame rx_burst returns and
// every frame handed to tx_burst, stamped with the call's injected now_ns (nanosecond
// precision). The file opens in uroce-dissect, tshark and Wireshark.
//
// tx frames are written before they go to the inner port, since once taken they are no
// longer ours to read. A frame the inner port refuses is therefore in the trace, and shows
// again when the caller offers it again: the trace is what was offered to the wire.
//
// If the file cannot be created, ok() is false, error() says why, and the decorator still
// forwards traffic (without recording). Each burst's records are written out before the
// call returns, so that a process killed mid-run (a hung case's timeout) leaves its trace whole.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "pcap/pcap_file.h"
#include "uroce/port.h"

namespace uroce::drivers {

class PcapTrace final : public PortDecorator {
 public:
  PcapTrace(Port& inner, const std::string& path, uint32_t snaplen = 65535);
  ~PcapTrace() override;
  PcapTrace(const PcapTrace&) = delete;
  PcapTrace& operator=(const PcapTrace&) = delete;

  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;

  bool ok() const { return writer_.ok(); }
  const std::string& error() const { return writer_.error(); }
  /// Pushes buffered records to the file (so a reader sees them while the trace is open).
  void flush() { writer_.flush(); }

  uint64_t rx_recorded() const { return rx_recorded_; }
  uint64_t tx_recorded() const { return tx_recorded_; }

 private:
  void record(uint64_t now_ns, const Frame* f);

  PcapWriter writer_;
  uint64_t rx_recorded_ = 0;
  uint64_t tx_recorded_ = 0;
};

}  // namespace uroce::drivers
