// Reading and writing pcap capture files (Ethernet link type) through libpcap.
//
// Used by the dissector, the tests and, later, the pcap port and the trace decorator.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

struct pcap;
struct pcap_dumper;

namespace uroce::drivers {

struct PcapRecord {
  uint64_t ts_ns = 0;              // capture time, ns since the epoch
  uint32_t orig_len = 0;           // length on the wire
  std::span<const uint8_t> data;   // captured bytes (may be shorter than orig_len)
};

/// A link type's name for people: "raw IP", "Linux cooked (SLL)", ..., else "link type N"
/// (libpcap's DLT numbers, which is what PcapReader::linktype() gives).
std::string linktype_name(int dlt);
/// libpcap's message on opening a file, in words for people ("not a pcap or pcapng capture
/// (libpcap: ...)").
std::string open_problem(const std::string& pcap_error);
/// Why `path` cannot be read as an Ethernet capture ("" if it can be opened as one): it is
/// missing or a directory, empty, no pcap/pcapng file, its header is cut short, or it holds
/// another link type. Dissector and replay say the same.
std::string capture_problem(const std::string& path);

class PcapReader {
 public:
  /// Opens `path`. On failure ok() is false and error() says why.
  explicit PcapReader(const std::string& path);
  ~PcapReader();
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;

  bool ok() const { return p_ != nullptr && error_.empty(); }
  const std::string& error() const { return error_; }
  /// Link type (1 = Ethernet).
  int linktype() const;
  /// Next record; false at the end of the file or on error (then error() is non-empty).
  /// `rec.data` stays valid until the next call.
  bool next(PcapRecord& rec);

 private:
  pcap* p_ = nullptr;
  std::string error_;
};

class PcapWriter {
 public:
  /// Creates `path` (Ethernet link type, nanosecond timestamps).
  explicit PcapWriter(const std::string& path, uint32_t snaplen = 65535);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  bool ok() const { return d_ != nullptr; }
  const std::string& error() const { return error_; }
  void write(uint64_t ts_ns, std::span<const uint8_t> frame);
  void flush();

 private:
  pcap* p_ = nullptr;
  pcap_dumper* d_ = nullptr;
  std::string error_;
};

}  // namespace uroce::drivers
