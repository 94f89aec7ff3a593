// Device configuration for the verbs provider: which uroce devices exist and what each one
// runs on. Read from a small INI file ($UROCE_CONFIG, else /etc/uroce.conf) and environment
// overrides, so that `UROCE_IFACE=veth0 ibv_devinfo` works with no file at all.
//
//   # one section per device
//   [uroce0]
//   iface = veth0        # Linux interface, opened with uroce's own packet socket
//   mtu   = 4096
//
// Every setting (file key, UROCE_* variable, `uroce run` option, what it takes, its default)
// is one row of config.cc's table, device_settings(): `uroce settings` prints it, and
// docs/settings.md is generated from it. Every problem is reported as one line naming the
// setting, its source and what it takes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/dcqcn.h"
#include "wire/addr.h"

namespace uroce::config {

/// What the `fault` setting asks for (the verbs provider turns it into a FaultInjector).
struct FaultSpec {
  bool enabled = false;
  uint64_t seed = 1;
  double loss = 0.0;
  double duplicate = 0.0;
  double corrupt = 0.0;
  double ce = 0.0;  // mark IP frames congestion experienced (fault_injector.h)
  double reorder = 0.0;
  uint32_t reorder_window = 0;
  uint64_t reorder_hold_ns = 0;  // set with reorder (default 1 ms): see FaultConfig
  uint64_t delay_ns = 0;
  uint64_t jitter_ns = 0;
  bool tx_side = true;
  bool rx_side = false;
  bool spare_dreq = false;  // spare=dreq: the CM's DREQ is never lost (FaultConfig)
};

/// Parses "loss=0.01,reorder=0.05,..." into *out; returns an error text or "".
std::string parse_fault(const std::string& text, FaultSpec* out);

/// Parses "rpg_ai_rate=20,dce_tcp_g=1019,..." over *out (keys not named keep their value);
/// returns an error text or "". Rates in Mb/s, times in microseconds, as NVIDIA's RNICs.
std::string parse_dcqcn(const std::string& text, DcqcnConfig* out);

struct DeviceConfig {
  std::string name = "uroce0";
  std::string iface;
  std::string devargs;
  // Instead of an interface: a shared-memory link to another uroce process on this machine,
  // named by a unix socket path both give (drivers/shm/shm_port.h).
  std::string shm;
  std::optional<wire::Ipv4Addr> ipv4;
  std::optional<wire::Ipv6Addr> ipv6;
  uint32_t mtu = 4096;
  uint16_t vlan = 0;
  std::string pcap;
  FaultSpec fault;
  bool exclusive = false;
  // How iface is opened (devargs always go to DPDK).
  enum class PortKind { kPacket, kXdp, kDpdk, kUdp };
  PortKind port = PortKind::kPacket;
  bool gso = true;  // kPacket: UDP GSO super-frames
  // The progress thread: `park` (default) sleeps in the kernel until traffic, a deadline or
  // posted work; `poll` spins and never sleeps (a core of its own, for people who own the
  // machine). progress_cpu pins it (and only it) to that CPU; -1: left alone.
  bool progress_poll = false;
  int progress_cpu = -1;
  // Doorbell batching: a post right after another is sent with the next pass (the
  // application's next poll or post, else the progress thread's), so a posting loop's
  // packets leave together. `no`: every post is sent at once (docs/threading.md).
  bool batch = true;
  // Congestion control (engine/congestion.cc): ECT(0) marking and DCQCN on CNPs.
  bool ecn = true;
  uint32_t line_rate_mbps = 0;  // 0: the interface's speed (sysfs), else 100000
  uint8_t cnp_dscp = 48;
  uint32_t min_time_between_cnps_us = 50;
  DcqcnConfig dcqcn;
};

struct Config {
  std::vector<DeviceConfig> devices;
};

/// Environment lookup (getenv in production; a map in tests).
using Env = std::function<std::optional<std::string>(const std::string&)>;
Env process_env();

/// Parses INI text. `source` names it in error messages ("/etc/uroce.conf").
/// Returns false with *error set to one line on the first problem.
bool parse(const std::string& text, const std::string& source, Config* out, std::string* error);

/// Applies UROCE_* overrides to the first device (creating "uroce0" if there is none).
bool apply_env(const Env& env, Config* cfg, std::string* error);

/// The whole thing: file ($UROCE_CONFIG, else /etc/uroce.conf if it exists) + environment.
/// A missing default file is fine; a missing $UROCE_CONFIG file is an error.
bool load(const Env& env, Config* out, std::string* error);

/// One setting, as a user meets it: the environment variable, the key in a [device] section
/// of the file (nullptr: not a device setting), the `uroce run` option (nullptr: none), what it
/// takes, its default, what it does and an example value. The parser's keys, apply_env, the
/// options of `uroce run`, `uroce settings` and docs/settings.md all come from one table.
struct Setting {
  const char* key;
  const char* env;
  const char* option;
  const char* values;
  const char* fallback;
  const char* what;
  const char* example;
};
/// The device settings, in the order `uroce settings` shows them.
std::span<const Setting> device_settings();
/// Variables that are no device setting (UROCE_CONFIG, UROCE_LIB_DIR, ...).
std::span<const Setting> process_settings();
/// The setting with that file key, option (--mtu) or variable (UROCE_MTU); nullptr if none.
const Setting* find_setting(const std::string& key_or_option);
/// A value for device setting `key` checked as the file parser checks it: "" or the one
/// line naming the problem (without a location).
std::string check_setting(const std::string& key, const std::string& value);
/// The table for people: plain text (`uroce settings`) or Markdown (docs/settings.md).
std::string settings_text(bool markdown);

/// Fills ipv4/ipv6 from the Linux interface when they are not set (getifaddrs in the
/// current network namespace). Devices given by devargs must set their addresses. The udp
/// port on a loopback interface with neither given keeps both unset: the port takes a free
/// loopback address per process (UdpConfig::loopback_auto).
bool fill_addresses(DeviceConfig* dev, std::string* error);

}  // namespace uroce::config
