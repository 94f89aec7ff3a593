#include "config/config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace uroce::config {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 63) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

/// Sets one key of `dev`; returns an error text (without location) or "".
std::string set_key(DeviceConfig* dev, const std::string& key, const std::string& value) {
  if (key == "iface") {
    if (value.empty() || value.size() >= IFNAMSIZ) return "iface must be a Linux interface name";
    dev->iface = value;
  } else if (key == "devargs") {
    if (value.empty()) return "devargs must not be empty (e.g. net_tap0,iface=tap0)";
    dev->devargs = value;
  } else if (key == "shm") {
    if (value.empty() || value.size() > 107 || value[0] != '/')
      return "shm '" + value + "' must be an absolute path for a unix socket (under 108 bytes), "
             "the same in both processes, e.g. /run/uroce-ab";
    dev->shm = value;
  } else if (key == "ipv4") {
    dev->ipv4 = wire::parse_ipv4(value);
    if (!dev->ipv4) return "ipv4 '" + value + "' is not an IPv4 address (e.g. 10.0.0.1)";
  } else if (key == "ipv6") {
    dev->ipv6 = wire::parse_ipv6(value);
    if (!dev->ipv6) return "ipv6 '" + value + "' is not an IPv6 address (e.g. fd00::1)";
  } else if (key == "mtu") {
    char* end = nullptr;
    const unsigned long m = std::strtoul(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0' ||
        (m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096))
      return "mtu '" + value + "' must be 256, 512, 1024, 2048 or 4096";
    dev->mtu = static_cast<uint32_t>(m);
  } else if (key == "vlan") {
    char* end = nullptr;
    const unsigned long v = std::strtoul(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0' || v > 4094)
      return "vlan '" + value + "' must be a VLAN id from 0 (untagged) to 4094";
    dev->vlan = static_cast<uint16_t>(v);
  } else if (key == "pcap") {
    if (value.empty()) return "pcap must name a file";
    dev->pcap = value;
  } else if (key == "fault") {
    return parse_fault(value, &dev->fault);
  } else if (key == "port") {
    if (value == "af_packet") {
      dev->port = DeviceConfig::PortKind::kPacket;
    } else if (value == "af_xdp") {
      dev->port = DeviceConfig::PortKind::kXdp;
    } else if (value == "dpdk") {
      dev->port = DeviceConfig::PortKind::kDpdk;
    } else if (value == "udp") {
      dev->port = DeviceConfig::PortKind::kUdp;
    } else {
      return "port '" + value + "' must be af_packet (works everywhere), udp (a UDP socket: "
             "no privileges), af_xdp (needs the interface's XDP hook) or dpdk (DPDK's "
             "net_af_packet)";
    }
  } else if (key == "gso") {
    if (value != "yes" && value != "no") return "gso '" + value + "' must be yes or no";
    dev->gso = value == "yes";
  } else if (key == "batch") {
    if (value != "yes" && value != "no") return "batch '" + value + "' must be yes or no";
    dev->batch = value == "yes";
  } else if (key == "exclusive") {
    if (value != "yes" && value != "no") return "exclusive '" + value + "' must be yes or no";
    dev->exclusive = value == "yes";
  } else if (key == "progress") {
    if (value != "park" && value != "poll")
      return "progress '" + value + "' must be park (sleep until traffic) or poll (spin)";
    dev->progress_poll = value == "poll";
  } else if (key == "progress_cpu") {
    char* end = nullptr;
    const long cpu = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || cpu < 0 || cpu >= CPU_SETSIZE)
      return "progress_cpu '" + value + "' must be a CPU number from 0 (see nproc)";
    dev->progress_cpu = static_cast<int>(cpu);
  } else if (key == "ecn") {
    if (value != "yes" && value != "no" && value != "1" && value != "0")
      return "ecn '" + value + "' must be yes (DCQCN congestion control) or no (ECN-blind)";
    dev->ecn = value == "yes" || value == "1";
  } else if (key == "line_rate" || key == "cnp_dscp" || key == "min_time_between_cnps") {
    char* end = nullptr;
    const unsigned long v = std::strtoul(value.c_str(), &end, 10);
    const bool num = !value.empty() && *end == '\0';
    if (key == "line_rate") {
      if (!num || v < 1 || v > 10'000'000)
        return "line_rate '" + value + "' must be the link's rate in Mb/s (1 .. 10000000)";
      dev->line_rate_mbps = static_cast<uint32_t>(v);
    } else if (key == "cnp_dscp") {
      if (!num || v > 63) return "cnp_dscp '" + value + "' must be a DSCP from 0 to 63";
      dev->cnp_dscp = static_cast<uint8_t>(v);
    } else {
      if (!num || v > 1'000'000)
        return "min_time_between_cnps '" + value + "' must be microseconds (0 .. 1000000)";
      dev->min_time_between_cnps_us = static_cast<uint32_t>(v);
    }
  } else if (key == "dcqcn") {
    return parse_dcqcn(value, &dev->dcqcn);
  } else {
    return "unknown setting '" + key +
           "' (known: iface, devargs, shm, port, gso, ipv4, ipv6, mtu, vlan, pcap, fault, exclusive, "
           "progress, progress_cpu, batch, ecn, line_rate, cnp_dscp, min_time_between_cnps, "
           "dcqcn)";
  }
  return "";
}

bool parse_number(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end != s.c_str() && *end == '\0';
}

/// Calls `item(key, value, text)` for each "key=value" of a comma-separated list (blanks
/// trimmed, empty items skipped); stops at the first error text it returns.
template <typename Item>
std::string for_each_item(const std::string& list, Item&& item) {
  std::istringstream in(list);
  std::string text;
  while (std::getline(in, text, ',')) {
    text = trim(text);
    if (text.empty()) continue;
    const size_t eq = text.find('=');
    const std::string k = eq == std::string::npos ? text : trim(text.substr(0, eq));
    const std::string v = eq == std::string::npos ? "" : trim(text.substr(eq + 1));
    std::string e = item(k, v, text);
    if (!e.empty()) return e;
  }
  return "";
}

/// port = udp needs no interface: the address it binds is enough.
bool udp_by_address(const DeviceConfig& d) {
  return d.port == DeviceConfig::PortKind::kUdp && (d.ipv4 || d.ipv6);
}

/// What port = udp cannot be combined with ("" if nothing).
std::string check_udp(const DeviceConfig& d) {
  if (d.port != DeviceConfig::PortKind::kUdp) return "";
  if (!d.devargs.empty() || !d.shm.empty())
    return "has port = udp, which takes iface or ipv4/ipv6 (no devargs, no shm)";
  if (d.vlan != 0)
    return "has port = udp with vlan: the kernel tags (or not) what a UDP socket sends; use a "
           "VLAN interface's address instead";
  return "";
}

}  // namespace

std::string parse_dcqcn(const std::string& text, DcqcnConfig* out) {
  static const char* const kHelp =
      " (e.g. dcqcn = rpg_ai_rate=20,rpg_time_reset=100; keys: rpg_time_reset, rpg_byte_reset, "
      "rpg_threshold, rpg_ai_rate, rpg_hai_rate, rpg_min_rate, rpg_min_dec_fac, dce_tcp_g, "
      "dce_tcp_rtt, rate_reduce_monitor_period, initial_alpha_value, clamp_tgt_rate)";
  DcqcnConfig d = *out;
  const std::string err = for_each_item(text, [&d](const std::string& k, const std::string& v,
                                                   const std::string& item) -> std::string {
    double x = 0;
    if (!parse_number(v, &x) || x < 0) return "dcqcn '" + item + "' needs a number >= 0" + kHelp;
    const auto us = [x] { return static_cast<uint64_t>(x * 1000.0); };
    const auto whole = [x](double lo, double hi) { return x >= lo && x <= hi && std::trunc(x) == x; };
    if (k == "rpg_time_reset" && x >= 1 && x <= 1e7) {
      d.rpg_time_reset_ns = us();
    } else if (k == "dce_tcp_rtt" && x >= 1 && x <= 1e7) {
      d.dce_tcp_rtt_ns = us();
    } else if (k == "rate_reduce_monitor_period" && x <= 1e7) {
      d.rate_reduce_monitor_period_ns = us();
    } else if (k == "rpg_byte_reset" && whole(1, 1e9)) {
      d.rpg_byte_reset = static_cast<uint32_t>(x);
    } else if (k == "rpg_threshold" && whole(0, 1000)) {
      d.rpg_threshold = static_cast<uint32_t>(x);
    } else if (k == "rpg_ai_rate" && x > 0) {
      d.rpg_ai_rate_mbps = x;
    } else if (k == "rpg_hai_rate" && x > 0) {
      d.rpg_hai_rate_mbps = x;
    } else if (k == "rpg_min_rate" && x > 0) {
      d.rpg_min_rate_mbps = x;
    } else if (k == "rpg_min_dec_fac" && whole(1, 100)) {
      d.rpg_min_dec_fac = static_cast<uint32_t>(x);
    } else if (k == "dce_tcp_g" && whole(0, 1023)) {
      d.dce_tcp_g = static_cast<uint32_t>(x);
    } else if (k == "initial_alpha_value" && whole(0, 1023)) {
      d.initial_alpha_value = static_cast<uint32_t>(x);
    } else if (k == "clamp_tgt_rate" && whole(0, 1)) {
      d.clamp_tgt_rate = x == 1;
    } else {
      return "dcqcn '" + item + "' is not a known key with a value in its range" + kHelp;
    }
    return "";
  });
  if (err.empty()) *out = d;
  return err;
}

std::string parse_fault(const std::string& text, FaultSpec* out) {
  static const char* const kHelp =
      " (e.g. fault = loss=0.01,reorder=0.05; keys: loss, duplicate, corrupt, ce, reorder, window, "
      "hold_us, delay_us, jitter_us, seed, side, spare=dreq)";
  FaultSpec f;
  f.enabled = true;
  const std::string err = for_each_item(text, [&f](const std::string& k, const std::string& v,
                                                   const std::string& item) -> std::string {
    if (k == "side") {
      if (v != "tx" && v != "rx" && v != "both") return "fault side '" + v + "' must be tx, rx or both";
      f.tx_side = v != "rx";
      f.rx_side = v != "tx";
      return "";
    }
    if (k == "spare") {
      if (v != "dreq") return "fault spare '" + v + "' must be dreq (the CM's disconnect request)";
      f.spare_dreq = true;
      return "";
    }
    double x = 0;
    if (!parse_number(v, &x) || x < 0) return "fault '" + item + "' needs a number >= 0" + kHelp;
    if (k == "loss" || k == "duplicate" || k == "corrupt" || k == "reorder" || k == "ce") {
      if (x > 1) return "fault " + k + " '" + v + "' is a probability from 0 to 1" + kHelp;
      (k == "loss"        ? f.loss
       : k == "duplicate" ? f.duplicate
       : k == "corrupt"   ? f.corrupt
       : k == "ce"        ? f.ce
                          : f.reorder) = x;
    } else if (k == "window") {
      if (x < 1 || x > 64) return "fault window '" + v + "' must be 1..64";
      f.reorder_window = static_cast<uint32_t>(x);
    } else if (k == "hold_us") {
      if (x < 1 || x > 1e7) return "fault hold_us '" + v + "' must be 1..10000000 (10 s)";
      f.reorder_hold_ns = static_cast<uint64_t>(x * 1000.0);
    } else if (k == "delay_us" || k == "jitter_us") {
      if (x > 1e7) return "fault " + k + " '" + v + "' must be at most 10000000 (10 s)";
      (k == "delay_us" ? f.delay_ns : f.jitter_ns) = static_cast<uint64_t>(x * 1000.0);
    } else if (k == "seed") {
      f.seed = static_cast<uint64_t>(x);
    } else {
      return "fault has unknown key '" + k + "'" + kHelp;
    }
    return "";
  });
  if (!err.empty()) return err;
  if (f.reorder > 0 && f.reorder_window == 0) f.reorder_window = 4;
  // A frame overtaken on a link arrives a little late; it does not wait for the next frame,
  // which in request/response traffic comes only after a retransmission timeout.
  if (f.reorder > 0 && f.reorder_hold_ns == 0) f.reorder_hold_ns = 1'000'000;
  *out = f;
  return "";
}

Env process_env() {
  return [](const std::string& k) -> std::optional<std::string> {
    const char* v = std::getenv(k.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

bool parse(const std::string& text, const std::string& source, Config* out, std::string* error) {
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  DeviceConfig* dev = nullptr;
  while (std::getline(in, line)) {
    ++lineno;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = source + ":" + std::to_string(lineno) + ": ";
    if (line.front() == '[') {
      if (line.back() != ']') {
        *error = where + "section header must look like [uroce0]";
        return false;
      }
      const std::string name = trim(line.substr(1, line.size() - 2));
      if (!valid_name(name)) {
        *error = where + "device name '" + name + "' must be letters, digits, '-' or '_'";
        return false;
      }
      for (const auto& d : out->devices) {
        if (d.name == name) {
          *error = where + "device [" + name + "] is defined twice";
          return false;
        }
      }
      out->devices.push_back(DeviceConfig{});
      dev = &out->devices.back();
      dev->name = name;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      *error = where + "expected 'key = value', got '" + line + "'";
      return false;
    }
    if (dev == nullptr) {
      *error = where + "setting before any [device] section: start with e.g. [uroce0]";
      return false;
    }
    const std::string e = set_key(dev, trim(line.substr(0, eq)), trim(line.substr(eq + 1)));
    if (!e.empty()) {
      *error = where + e;
      return false;
    }
  }
  for (const auto& d : out->devices) {
    if (d.iface.empty() && d.devargs.empty() && d.shm.empty() && !udp_by_address(d)) {
      *error = source + ": device [" + d.name +
               "] needs iface = <interface>, devargs = <dpdk devargs> or shm = <socket path>";
      return false;
    }
    if (const std::string e = check_udp(d); !e.empty()) {
      *error = source + ": device [" + d.name + "] " + e;
      return false;
    }
    if ((d.port == DeviceConfig::PortKind::kXdp || d.port == DeviceConfig::PortKind::kDpdk) &&
        (d.iface.empty() || !d.devargs.empty())) {
      *error = source + ": device [" + d.name + "] has port = " +
               (d.port == DeviceConfig::PortKind::kXdp ? "af_xdp" : "dpdk") +
               ", which takes iface = <interface> and no devargs";
      return false;
    }
  }
  return true;
}

bool apply_env(const Env& env, Config* cfg, std::string* error) {
  static const char* const kVars[][2] = {{"UROCE_IFACE", "iface"}, {"UROCE_DEVARGS", "devargs"},
                                         {"UROCE_SHM", "shm"},
                                         {"UROCE_IPV4", "ipv4"},   {"UROCE_IPV6", "ipv6"},
                                         {"UROCE_MTU", "mtu"},     {"UROCE_VLAN", "vlan"},
                                         {"UROCE_PCAP", "pcap"},   {"UROCE_FAULT", "fault"},
                                         {"UROCE_EXCLUSIVE", "exclusive"},
                                         {"UROCE_PORT", "port"},
                                         {"UROCE_GSO", "gso"},
                                         {"UROCE_BATCH", "batch"},
                                         {"UROCE_ECN", "ecn"},
                                         {"UROCE_LINE_RATE", "line_rate"},
                                         {"UROCE_CNP_DSCP", "cnp_dscp"},
                                         {"UROCE_MIN_TIME_BETWEEN_CNPS", "min_time_between_cnps"},
                                         {"UROCE_DCQCN", "dcqcn"},
                                         {"UROCE_PROGRESS", "progress"},
                                         {"UROCE_PROGRESS_CPU", "progress_cpu"}};
  for (const auto& [var, key] : kVars) {
    const auto v = env(var);
    if (!v) continue;
    if (cfg->devices.empty()) cfg->devices.push_back(DeviceConfig{});
    const std::string e = set_key(&cfg->devices.front(), key, trim(*v));
    if (!e.empty()) {
      *error = std::string("environment ") + var + ": " + e;
      return false;
    }
  }
  if (!cfg->devices.empty() && cfg->devices.front().iface.empty() &&
      cfg->devices.front().devargs.empty() && cfg->devices.front().shm.empty() &&
      !udp_by_address(cfg->devices.front())) {
    *error = "device " + cfg->devices.front().name +
             " has no interface: set UROCE_IFACE=<interface> (or UROCE_DEVARGS, UROCE_SHM; "
             "or UROCE_PORT=udp with UROCE_IPV4)";
    return false;
  }
  if (!cfg->devices.empty()) {
    if (const std::string e = check_udp(cfg->devices.front()); !e.empty()) {
      *error = "device " + cfg->devices.front().name + " " + e;
      return false;
    }
  }
  return true;
}

bool load(const Env& env, Config* out, std::string* error) {
  *out = Config{};
  const auto explicit_path = env("UROCE_CONFIG");
  const std::string path = explicit_path ? *explicit_path : "/etc/uroce.conf";
  std::ifstream f(path);
  if (f.good()) {
    std::stringstream ss;
    ss << f.rdbuf();
    if (!parse(ss.str(), path, out, error)) return false;
  } else if (explicit_path) {
    *error = "UROCE_CONFIG names '" + path + "', which cannot be read: fix the path";
    return false;
  }
  return apply_env(env, out, error);
}

bool fill_addresses(DeviceConfig* dev, std::string* error) {
  if (dev->ipv4 || dev->iface.empty()) {
    if (!dev->ipv4 && !dev->ipv6) {
      *error = "device " + dev->name + " has no address: set ipv4 = ... (or UROCE_IPV4)";
      return false;
    }
    return true;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    *error = "cannot list interface addresses: " + std::string(std::strerror(errno));
    return false;
  }
  const bool none_given = !dev->ipv6;  // (and no ipv4: returned above)
  bool found_iface = false;
  bool loopback = false;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr || dev->iface != a->ifa_name) continue;
    found_iface = true;
    loopback = loopback || (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (a->ifa_addr == nullptr) continue;
    if (a->ifa_addr->sa_family == AF_INET && !dev->ipv4) {
      wire::Ipv4Addr ip;
      std::memcpy(ip.data(), &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
      dev->ipv4 = ip;
    } else if (a->ifa_addr->sa_family == AF_INET6 && !dev->ipv6) {
      wire::Ipv6Addr ip;
      std::memcpy(ip.data(), &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
      if (ip[0] != 0xfe || (ip[1] & 0xc0) != 0x80) dev->ipv6 = ip;  // skip link-local
    }
  }
  freeifaddrs(list);
  if (loopback && none_given && dev->port == DeviceConfig::PortKind::kUdp) {
    // The udp port on loopback with no address given: each process takes a free 127.0.0.x
    // of its own when it opens the device (UdpConfig::loopback_auto), not lo's 127.0.0.1 and
    // ::1, which two processes could not both bind.
    dev->ipv4.reset();
    dev->ipv6.reset();
    return true;
  }
  if (!dev->ipv4 && !dev->ipv6) {
    *error = found_iface ? "interface '" + dev->iface +
                               "' has no IP address: give it one (ip addr add) or set ipv4 = ..."
                         : "interface '" + dev->iface +
                               "' does not exist in this network namespace: check iface";
    return false;
  }
  return true;
}

}  // namespace uroce::config
