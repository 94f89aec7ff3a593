#include "config/config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>

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
    } else {
      return "port '" + value + "' must be af_packet (works everywhere), af_xdp (needs the "
             "interface's XDP hook) or dpdk (DPDK's net_af_packet)";
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
  } else {
    return "unknown setting '" + key +
           "' (known: iface, devargs, port, gso, ipv4, ipv6, mtu, vlan, pcap, fault, exclusive, "
           "progress, progress_cpu, batch)";
  }
  return "";
}

bool parse_number(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end != s.c_str() && *end == '\0';
}

}  // namespace

std::string parse_fault(const std::string& text, FaultSpec* out) {
  static const char* const kHelp =
      " (e.g. fault = loss=0.01,reorder=0.05; keys: loss, duplicate, corrupt, reorder, window, "
      "hold_us, delay_us, jitter_us, seed, side)";
  FaultSpec f;
  f.enabled = true;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string k = eq == std::string::npos ? item : trim(item.substr(0, eq));
    const std::string v = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
    if (k == "side") {
      if (v != "tx" && v != "rx" && v != "both") return "fault side '" + v + "' must be tx, rx or both";
      f.tx_side = v != "rx";
      f.rx_side = v != "tx";
      continue;
    }
    double x = 0;
    if (!parse_number(v, &x) || x < 0) return "fault '" + item + "' needs a number >= 0" + kHelp;
    if (k == "loss" || k == "duplicate" || k == "corrupt" || k == "reorder") {
      if (x > 1) return "fault " + k + " '" + v + "' is a probability from 0 to 1" + kHelp;
      (k == "loss" ? f.loss : k == "duplicate" ? f.duplicate : k == "corrupt" ? f.corrupt : f.reorder) = x;
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
  }
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
    if (d.iface.empty() && d.devargs.empty()) {
      *error = source + ": device [" + d.name + "] needs iface = <interface> or devargs = <dpdk devargs>";
      return false;
    }
    if (d.port != DeviceConfig::PortKind::kPacket && (d.iface.empty() || !d.devargs.empty())) {
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
                                         {"UROCE_IPV4", "ipv4"},   {"UROCE_IPV6", "ipv6"},
                                         {"UROCE_MTU", "mtu"},     {"UROCE_VLAN", "vlan"},
                                         {"UROCE_PCAP", "pcap"},   {"UROCE_FAULT", "fault"},
                                         {"UROCE_EXCLUSIVE", "exclusive"},
                                         {"UROCE_PORT", "port"},
                                         {"UROCE_GSO", "gso"},
                                         {"UROCE_BATCH", "batch"},
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
      cfg->devices.front().devargs.empty()) {
    *error = "device " + cfg->devices.front().name +
             " has no interface: set UROCE_IFACE=<interface> (or UROCE_DEVARGS)";
    return false;
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
  bool found_iface = false;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr || dev->iface != a->ifa_name) continue;
    found_iface = true;
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
