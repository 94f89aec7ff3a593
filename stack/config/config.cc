#include "config/config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>

namespace uroce::config {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// A finite decimal number, the whole text (NaN and infinity are no numbers here: every
/// comparison with NaN is false, so it would pass any range check).
bool parse_number(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end != s.c_str() && *end == '\0' && std::isfinite(*out);
}

/// A whole decimal number from 0 to `most`, the whole text (digits only: no sign, no blanks).
bool parse_whole(const std::string& s, uint64_t most, uint64_t* out) {
  if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0 || v > most) return false;
  *out = v;
  return true;
}

/// The CPUs this process may run on, as "0-1" or "0,2-3" (sched_getaffinity).
std::string allowed_cpus(const cpu_set_t& set) {
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(c));
    if (last > c) out.append("-").append(std::to_string(last));
    c = last;
  }
  return out;
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
    uint64_t cpu = 0;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const bool known = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    if (!parse_whole(value, CPU_SETSIZE - 1, &cpu))
      return "progress_cpu '" + value + "' must be a CPU number from 0 (see nproc)";
    if (known && !CPU_ISSET(static_cast<int>(cpu), &allowed))
      return "progress_cpu '" + value + "' must be a CPU this process may run on (" +
             allowed_cpus(allowed) + ")";
    dev->progress_cpu = static_cast<int>(cpu);
  } else if (key == "ecn") {
    if (value != "yes" && value != "no" && value != "1" && value != "0")
      return "ecn '" + value + "' must be yes or 1 (DCQCN congestion control), no or 0 (ECN-blind)";
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
    std::string known;
    for (const Setting& st : device_settings()) {
      if (!known.empty()) known.append(", ");
      known.append(st.key);
    }
    return "unknown setting '" + key + "' (known: " + known + "; uroce settings shows each)";
  }
  return "";
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

/// port = udp with neither an interface nor an address: loopback, where each process takes a
/// free 127.0.0.x of its own (as with nothing configured at all; fill_addresses).
void udp_on_loopback_unless_told(DeviceConfig* d) {
  if (d->port == DeviceConfig::PortKind::kUdp && d->iface.empty() && d->devargs.empty() &&
      d->shm.empty() && !d->ipv4 && !d->ipv6)
    d->iface = "lo";
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
  // Each knob: its range, whether it is a whole number, and where it goes.
  struct Knob {
    const char* key;
    double lo, hi;
    bool above_lo;  // lo itself is out (a rate of 0 would stop the QP)
    bool whole;
    const char* unit;
    void (*set)(DcqcnConfig&, double);
  };
  static const Knob kKnobs[] = {
      {"rpg_time_reset", 1, 1e7, false, false, "microseconds",
       [](DcqcnConfig& d, double x) { d.rpg_time_reset_ns = static_cast<uint64_t>(x * 1000.0); }},
      {"rpg_byte_reset", 1, 1e9, false, true, "bytes",
       [](DcqcnConfig& d, double x) { d.rpg_byte_reset = static_cast<uint32_t>(x); }},
      {"rpg_threshold", 0, 1000, false, true, "steps",
       [](DcqcnConfig& d, double x) { d.rpg_threshold = static_cast<uint32_t>(x); }},
      {"rpg_ai_rate", 0, 1e7, true, false, "Mb/s",
       [](DcqcnConfig& d, double x) { d.rpg_ai_rate_mbps = x; }},
      {"rpg_hai_rate", 0, 1e7, true, false, "Mb/s",
       [](DcqcnConfig& d, double x) { d.rpg_hai_rate_mbps = x; }},
      {"rpg_min_rate", 0, 1e7, true, false, "Mb/s",
       [](DcqcnConfig& d, double x) { d.rpg_min_rate_mbps = x; }},
      {"rpg_min_dec_fac", 1, 100, false, true, "percent",
       [](DcqcnConfig& d, double x) { d.rpg_min_dec_fac = static_cast<uint32_t>(x); }},
      {"dce_tcp_g", 0, 1023, false, true, "1024ths",
       [](DcqcnConfig& d, double x) { d.dce_tcp_g = static_cast<uint32_t>(x); }},
      {"dce_tcp_rtt", 1, 1e7, false, false, "microseconds",
       [](DcqcnConfig& d, double x) { d.dce_tcp_rtt_ns = static_cast<uint64_t>(x * 1000.0); }},
      {"rate_reduce_monitor_period", 0, 1e7, false, false, "microseconds",
       [](DcqcnConfig& d, double x) {
         d.rate_reduce_monitor_period_ns = static_cast<uint64_t>(x * 1000.0);
       }},
      {"initial_alpha_value", 0, 1023, false, true, "1023ths",
       [](DcqcnConfig& d, double x) { d.initial_alpha_value = static_cast<uint32_t>(x); }},
      {"clamp_tgt_rate", 0, 1, false, true, "0 or 1",
       [](DcqcnConfig& d, double x) { d.clamp_tgt_rate = x == 1; }},
  };
  DcqcnConfig d = *out;
  const std::string err = for_each_item(text, [&d](const std::string& k, const std::string& v,
                                                   const std::string& item) -> std::string {
    const Knob* knob = nullptr;
    for (const Knob& n : kKnobs)
      if (k == n.key) knob = &n;
    if (knob == nullptr) return "dcqcn '" + item + "' is not a known key" + kHelp;
    auto text_of = [](double x) {
      std::ostringstream o;
      o << x;
      return o.str();
    };
    const std::string range = std::string(knob->whole ? "a whole number" : "a number") + " of " +
                              knob->unit + (knob->above_lo ? " above " : " from ") +
                              text_of(knob->lo) + (knob->above_lo ? " up to " : " to ") +
                              text_of(knob->hi);
    double x = 0;
    if (!parse_number(v, &x) || x < knob->lo || x > knob->hi || (knob->above_lo && x == knob->lo) ||
        (knob->whole && std::trunc(x) != x))
      return "dcqcn " + k + " '" + v + "' must be " + range + " (its range)";
    knob->set(d, x);
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
    if (k == "seed") {
      uint64_t seed = 0;
      if (!parse_whole(v, UINT64_MAX, &seed))
        return "fault seed '" + v + "' must be a whole number from 0 to 18446744073709551615";
      f.seed = seed;
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
      if (x < 1 || x > 64 || std::trunc(x) != x) return "fault window '" + v + "' must be a whole number 1..64";
      f.reorder_window = static_cast<uint32_t>(x);
    } else if (k == "hold_us") {
      if (x < 1 || x > 1e7) return "fault hold_us '" + v + "' must be 1..10000000 (10 s)";
      f.reorder_hold_ns = static_cast<uint64_t>(x * 1000.0);
    } else if (k == "delay_us" || k == "jitter_us") {
      if (x > 1e7) return "fault " + k + " '" + v + "' must be at most 10000000 (10 s)";
      (k == "delay_us" ? f.delay_ns : f.jitter_ns) = static_cast<uint64_t>(x * 1000.0);
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
  for (auto& d : out->devices) {
    udp_on_loopback_unless_told(&d);
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
  for (const Setting& st : device_settings()) {
    const char* var = st.env;
    const char* key = st.key;
    const auto v = env(var);
    if (!v) continue;
    if (cfg->devices.empty()) cfg->devices.push_back(DeviceConfig{});
    const std::string e = set_key(&cfg->devices.front(), key, trim(*v));
    if (!e.empty()) {
      *error = std::string("environment ") + var + ": " + e;
      return false;
    }
  }
  if (!cfg->devices.empty()) udp_on_loopback_unless_told(&cfg->devices.front());
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
  struct stat st{};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    *error = (explicit_path ? "UROCE_CONFIG names '" : "'") + path +
             "', a directory: name the configuration file itself (e.g. /etc/uroce.conf)";
    return false;
  }
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

namespace uroce::config {

namespace {

// The one list of settings. `set_key` reads each key; apply_env, `uroce run`'s options, the
// "unknown setting" message, `uroce settings` and docs/settings.md (generated from it, and a
// test keeps it so) all come from here.
constexpr Setting kDeviceSettings[] = {
    {"iface", "UROCE_IFACE", "--iface", "a Linux interface name", "none",
     "The device's Ethernet interface, opened with uroce's own packet socket (port). One of "
     "iface, devargs or shm is needed, but with port = udp (an address will do, or nothing: "
     "loopback).",
     "veth0"},
    {"devargs", "UROCE_DEVARGS", "--devargs", "DPDK devargs", "none",
     "A DPDK device instead of iface: a virtual one (net_tap0,iface=tap0; "
     "net_memif0,role=server,socket=/NAME) or a NIC's PCI address. Needs ipv4 or ipv6.",
     "net_tap0,iface=tap0"},
    {"shm", "UROCE_SHM", "--shm", "an absolute unix socket path, under 108 bytes", "none",
     "Instead of an interface: a shared-memory link to another uroce process on this machine "
     "that names the same path (docs/shm.md). Needs ipv4 or ipv6.",
     "/run/uroce-ab"},
    {"port", "UROCE_PORT", "--port", "af_packet, af_xdp, dpdk or udp",
     "af_packet (udp on loopback when nothing is configured)",
     "How iface is opened: uroce's packet socket (af_packet, needs CAP_NET_RAW), its AF_XDP port "
     "and XDP program (af_xdp: only RoCE leaves the kernel; one process per interface), DPDK's "
     "net_af_packet (dpdk) or UDP sockets on ipv4/ipv6:4791 (udp: no privileges, any "
     "interface, loopback too: with neither iface nor an address, each process takes a free "
     "127.0.0.x of its own; docs/udp.md).",
     "udp"},
    {"gso", "UROCE_GSO", "--gso", "yes or no", "yes",
     "af_packet: send runs of packets as UDP GSO super-frames; no writes one packet at a time.",
     "no"},
    {"ipv4", "UROCE_IPV4", "--ipv4", "an IPv4 address", "the interface's first IPv4 address",
     "The RoCEv2 IPv4 address (GID index 1). port = udp binds it.", "10.0.0.1"},
    {"ipv6", "UROCE_IPV6", "--ipv6", "an IPv6 address (not link-local with port = udp)",
     "the interface's first global IPv6 address", "The RoCEv2 IPv6 address (the GID after 1).",
     "fd00::1"},
    {"mtu", "UROCE_MTU", "--mtu", "256, 512, 1024, 2048 or 4096", "4096",
     "The largest RoCE path MTU the port offers (a QP uses the smaller of both sides').", "1024"},
    {"vlan", "UROCE_VLAN", "--vlan", "0 to 4094", "0 (untagged)",
     "802.1Q VLAN id of the RoCE frames (not with port = udp: use a VLAN interface's address).",
     "7"},
    {"pcap", "UROCE_PCAP", "--pcap", "a file path", "none (nothing recorded)",
     "Record the device's traffic there, and the verbs side (work requests, completions, QP "
     "states) in FILE.verbs beside it; read both with uroce-dissect.",
     "/tmp/uroce0.pcap"},
    {"fault", "UROCE_FAULT", "--fault",
     "key=value,...: loss, duplicate, corrupt, ce, reorder (0 to 1); window (1 to 64); hold_us "
     "(1 to 10000000); delay_us, jitter_us (0 to 10000000); seed (0 to 2^64-1); "
     "side=tx|rx|both; spare=dreq",
     "none (no damage)",
     "Damage the traffic on purpose, for tests: ce marks packets congestion experienced, as a "
     "congested switch would; a reordered frame waits for 1 to window (4) later frames and at "
     "most hold_us (1000); spare=dreq keeps loss and corruption off the CM's disconnect "
     "request, which nobody resends once its sender destroys the id. As the device closes, one "
     "line on stderr counts what was damaged (drivers/fault/fault_injector.h).",
     "loss=0.01,reorder=0.05,seed=7"},
    {"exclusive", "UROCE_EXCLUSIVE", "--exclusive", "yes or no", "no",
     "Only this process uses the interface: af_packet transmits past the kernel's queueing "
     "(other uroce processes on it no longer see its frames).",
     "yes"},
    {"progress", "UROCE_PROGRESS", "--progress", "park or poll", "park",
     "The progress thread: park sleeps in the kernel until traffic, a deadline or posted work; "
     "poll spins on a core of its own and backs off to park's ways while the CPUs are crowded "
     "(uroce stats: progress_backoffs; docs/threading.md).",
     "poll"},
    {"progress_cpu", "UROCE_PROGRESS_CPU", "--progress-cpu",
     "a CPU this process may run on (see nproc)", "none (not pinned)",
     "Pin the progress thread, and only it, to that CPU.", "1"},
    {"batch", "UROCE_BATCH", "--batch", "yes or no", "yes",
     "Doorbell batching: a post that comes within 1 us of the previous one leaves with the next "
     "pass, so a posting loop's packets go out together; no sends every post at once "
     "(docs/threading.md).",
     "no"},
    {"ecn", "UROCE_ECN", "--ecn", "yes or no (1 or 0)", "yes",
     "RC/UC packets leave ECT(0) and a CNP slows the QP down with DCQCN; no: ECN-blind "
     "(Not-ECT, CNPs only counted; docs/congestion.md).",
     "no"},
    {"line_rate", "UROCE_LINE_RATE", "--line-rate", "Mb/s, 1 to 10000000",
     "the interface's speed, else 100000", "The rate a QP starts at and DCQCN returns to.",
     "10000"},
    {"cnp_dscp", "UROCE_CNP_DSCP", "--cnp-dscp", "0 to 63", "48",
     "DSCP of the CNPs sent for CE-marked packets.", "26"},
    {"min_time_between_cnps", "UROCE_MIN_TIME_BETWEEN_CNPS", "--min-time-between-cnps",
     "microseconds, 0 to 1000000", "50", "At most one CNP per QP in that time.", "500"},
    {"dcqcn", "UROCE_DCQCN", "--dcqcn",
     "key=value,... of rpg_time_reset, rpg_byte_reset, rpg_threshold, rpg_ai_rate, "
     "rpg_hai_rate, rpg_min_rate, rpg_min_dec_fac, dce_tcp_g, dce_tcp_rtt, "
     "rate_reduce_monitor_period, initial_alpha_value, clamp_tgt_rate",
     "NVIDIA's: rpg_time_reset=300, rpg_byte_reset=32767, rpg_threshold=1, rpg_ai_rate=5, "
     "rpg_hai_rate=50, rpg_min_rate=1, rpg_min_dec_fac=50, dce_tcp_g=1019, dce_tcp_rtt=55, "
     "rate_reduce_monitor_period=4, initial_alpha_value=1023, clamp_tgt_rate=1",
     "DCQCN's knobs, with NVIDIA's names and units (Mb/s, microseconds; docs/congestion.md).",
     "rpg_ai_rate=20,rpg_time_reset=100"},
};

constexpr Setting kProcessSettings[] = {
    {nullptr, "UROCE_CONFIG", "--config", "a file path", "/etc/uroce.conf (if it exists)",
     "The INI file: a [name] section per device, key = value lines (the keys above). The "
     "variables above override the first device's keys (and make uroce0 when there is none).",
     "/etc/uroce.conf"},
    {nullptr, "UROCE_DEVINFO", nullptr, "1", "unset",
     "The library first prints how each device's port is set up (uroce devinfo sets it).", "1"},
    {nullptr, "UROCE_DEVNODE", nullptr, "no", "unset",
     "uroce run does not make /dev/infiniband/uverbs-* and /sys/class/infiniband/* in the "
     "program's own mount namespace (UCX and rdma-core's tests look for them).",
     "no"},
    {nullptr, "UROCE_LIB_DIR", nullptr, "a directory", "an install's lib/uroce, else the build tree's lib/",
     "Where uroce run finds uroce's libibverbs.so.1 (another build, to compare).", "/opt/uroce/lib"},
};

}  // namespace

std::span<const Setting> device_settings() { return kDeviceSettings; }
std::span<const Setting> process_settings() { return kProcessSettings; }

const Setting* find_setting(const std::string& key_or_option) {
  for (const Setting& s : kDeviceSettings)
    if (key_or_option == s.key || key_or_option == s.option || key_or_option == s.env) return &s;
  for (const Setting& s : kProcessSettings)
    if ((s.option != nullptr && key_or_option == s.option) || key_or_option == s.env) return &s;
  return nullptr;
}

std::string check_setting(const std::string& key, const std::string& value) {
  DeviceConfig scratch;
  return set_key(&scratch, key, trim(value));
}

std::string settings_text(bool markdown) {
  std::ostringstream o;
  // Plain text: `text` after `lead`, words wrapped at 92 columns, continued 4 spaces in.
  auto wrapped = [&o](const std::string& lead, const std::string& text) {
    std::istringstream words(text);
    std::string line = lead, w;
    bool first = true;
    while (words >> w) {
      if (!first && line.size() + 1 + w.size() > 92) {
        o << line << "\n";
        line = "    " + w;
      } else {
        line += (first ? "" : " ") + w;
      }
      first = false;
    }
    o << line << "\n";
  };
  auto row = [&](const Setting& s) {
    const std::string key = s.key != nullptr ? s.key : "";
    const std::string opt = s.option != nullptr ? s.option : "";
    if (markdown) {
      auto md = [](const char* text) {  // a | inside a cell would end it
        std::string t;
        for (const char* c = text; *c != '\0'; ++c) t += *c == '|' ? std::string("\\|") : std::string(1, *c);
        return t;
      };
      o << "| `" << s.env << "` | " << (key.empty() ? "" : "`" + key + "`") << " | "
        << (opt.empty() ? "" : "`" + opt + "`") << " | " << md(s.values) << " | " << md(s.fallback)
        << " | " << md(s.what) << " Example: `" << (key.empty() ? s.env : key) << "="
        << md(s.example) << "`. |\n";
    } else {
      o << s.env << (key.empty() ? "" : "  (file: " + key + ")")
        << (opt.empty() ? "" : "  (uroce run " + opt + ")") << "\n";
      wrapped("    takes: ", s.values);
      wrapped("    default: ", s.fallback);
      wrapped("    ", s.what);
      o << "    e.g. " << (key.empty() ? s.env : key) << "=" << s.example << "\n";
    }
  };
  if (markdown) {
    o << "| variable | file key | `uroce run` option | takes | default | what it does |\n"
         "|---|---|---|---|---|---|\n";
  } else {
    o << "Device settings: the environment variable, the key in a [device] section of the\n"
         "configuration file, the `uroce run` option; a variable overrides the first device's key.\n\n";
  }
  for (const Setting& s : kDeviceSettings) row(s);
  if (markdown) {
    o << "\nNot device settings: read by `uroce run` or by the library as a whole.\n\n"
         "| variable | file key | `uroce run` option | takes | default | what it does |\n"
         "|---|---|---|---|---|---|\n";
  } else {
    o << "\nNot device settings (read by uroce run or by the library as a whole):\n\n";
  }
  for (const Setting& s : kProcessSettings) row(s);
  return o.str();
}

}  // namespace uroce::config
