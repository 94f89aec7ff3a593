#include "pcap/pcap_file.h"

#include <pcap/pcap.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace uroce::drivers {

std::string linktype_name(int dlt) {
  switch (dlt) {
    case 0: return "NULL/loopback";
    case 12:  // DLT_RAW (LINKTYPE_RAW 101 in the file)
    case 14:  // DLT_RAW on OpenBSD
    case 101: return "raw IP";
    case 228: return "raw IPv4";
    case 229: return "raw IPv6";
    case 105: return "IEEE 802.11";
    case 113: return "Linux cooked (SLL)";
    case 127: return "802.11 radiotap";
    case 276: return "Linux cooked v2 (SLL2)";
    default: return "link type " + std::to_string(dlt);
  }
}

std::string open_problem(const std::string& pcap_error) {
  if (pcap_error.find("unknown file format") != std::string::npos ||
      pcap_error.find("bad dump file format") != std::string::npos) {
    return "not a pcap or pcapng capture (libpcap: " + pcap_error + ")";
  }
  if (pcap_error.find("truncated") != std::string::npos) {
    return "not a usable capture: its file header is incomplete (libpcap: " + pcap_error + ")";
  }
  return "cannot read the capture (libpcap: " + pcap_error + ")";
}

std::string capture_problem(const std::string& path) {
  // libpcap's own message for a missing file is fine, but a plain errno reads better.
  struct stat st{};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "cannot open: it is a directory";
  if (std::FILE* fp = std::fopen(path.c_str(), "rbe"); fp == nullptr) {
    return std::string("cannot open: ") + std::strerror(errno);
  } else {
    std::fclose(fp);
  }
  if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
    return "empty file, not a capture";
  PcapReader rd(path);
  if (!rd.ok()) return open_problem(rd.error());
  if (rd.linktype() != 1)
    return linktype_name(rd.linktype()) + " capture, not Ethernet: only Ethernet captures can be read";
  return "";
}

PcapReader::PcapReader(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE] = {};
  p_ = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (p_ == nullptr) error_ = err[0] ? err : "cannot open capture";
}

PcapReader::~PcapReader() {
  if (p_ != nullptr) pcap_close(p_);
}

int PcapReader::linktype() const { return p_ != nullptr ? pcap_datalink(p_) : -1; }

bool PcapReader::next(PcapRecord& rec) {
  if (p_ == nullptr) return false;
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  int rc = pcap_next_ex(p_, &h, &data);
  if (rc == 1) {
    rec.ts_ns = static_cast<uint64_t>(h->ts.tv_sec) * 1'000'000'000ull +
                static_cast<uint64_t>(h->ts.tv_usec);  // nanosecond precision was requested
    rec.orig_len = h->len;
    rec.data = std::span<const uint8_t>(data, h->caplen);
    return true;
  }
  if (rc == PCAP_ERROR) error_ = pcap_geterr(p_);
  return false;
}

PcapWriter::PcapWriter(const std::string& path, uint32_t snaplen) {
  p_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, static_cast<int>(snaplen),
                                            PCAP_TSTAMP_PRECISION_NANO);
  if (p_ == nullptr) {
    error_ = "pcap_open_dead failed";
    return;
  }
  d_ = pcap_dump_open(p_, path.c_str());
  if (d_ == nullptr) error_ = pcap_geterr(p_);
}

PcapWriter::~PcapWriter() {
  if (d_ != nullptr) pcap_dump_close(d_);
  if (p_ != nullptr) pcap_close(p_);
}

void PcapWriter::write(uint64_t ts_ns, std::span<const uint8_t> frame) {
  if (d_ == nullptr) return;
  pcap_pkthdr h{};
  h.ts.tv_sec = static_cast<time_t>(ts_ns / 1'000'000'000ull);
  h.ts.tv_usec = static_cast<suseconds_t>(ts_ns % 1'000'000'000ull);
  h.caplen = static_cast<bpf_u_int32>(frame.size());
  h.len = h.caplen;
  pcap_dump(reinterpret_cast<u_char*>(d_), &h, frame.data());
}

void PcapWriter::flush() {
  if (d_ != nullptr) pcap_dump_flush(d_);
}

}  // namespace uroce::drivers
