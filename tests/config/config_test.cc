// Device configuration: INI parsing, environment overrides, and one clear line per mistake.
#include "config/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace uroce::config {
namespace {

Env env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Config, ParsesDevicesAndComments) {
  Config c;
  std::string err;
  ASSERT_TRUE(parse("# three devices\n[uroce0]\niface = veth0   # the link\nipv4=10.0.0.1\n"
                    "mtu = 1024\n\n[rxe-like_1]\ndevargs = net_tap0,iface=t0\nipv6 = fd00::1\n"
                    "vlan = 7\npcap = /tmp/x.pcap\nexclusive = yes\nprogress = poll\n"
                    "progress_cpu = 1\n[xdp]\niface = veth1\nport = af_xdp\ngso = no\nbatch = no\n",
                    "test.conf", &c, &err))
      << err;
  ASSERT_EQ(c.devices.size(), 3u);
  using Kind = DeviceConfig::PortKind;
  EXPECT_EQ(c.devices[2].port, Kind::kXdp);
  EXPECT_FALSE(c.devices[2].gso);
  EXPECT_EQ(c.devices[0].port, Kind::kPacket);  // default: uroce's own packet socket
  EXPECT_TRUE(c.devices[0].gso);
  EXPECT_FALSE(c.devices[2].batch);
  EXPECT_TRUE(c.devices[0].batch);  // default: posts in a loop leave together
  EXPECT_EQ(c.devices[0].name, "uroce0");
  EXPECT_EQ(c.devices[0].iface, "veth0");
  EXPECT_EQ(wire::to_string(*c.devices[0].ipv4), "10.0.0.1");
  EXPECT_EQ(c.devices[0].mtu, 1024u);
  EXPECT_EQ(c.devices[1].name, "rxe-like_1");
  EXPECT_EQ(c.devices[1].devargs, "net_tap0,iface=t0");
  EXPECT_EQ(wire::to_string(*c.devices[1].ipv6), "fd00::1");
  EXPECT_EQ(c.devices[1].vlan, 7);
  EXPECT_EQ(c.devices[1].pcap, "/tmp/x.pcap");
  EXPECT_TRUE(c.devices[1].exclusive);
  EXPECT_FALSE(c.devices[0].exclusive);
  EXPECT_TRUE(c.devices[1].progress_poll);
  EXPECT_EQ(c.devices[1].progress_cpu, 1);
  EXPECT_FALSE(c.devices[0].progress_poll);  // defaults: park, not pinned
  EXPECT_EQ(c.devices[0].progress_cpu, -1);
  EXPECT_EQ(c.devices[1].mtu, 4096u);  // default
}

TEST(Config, EachMistakeIsOneLineNamingTheSettingAndTheFix) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"[uroce0]\niface=v0\nmtu = 1500\n", "t.conf:3: mtu '1500' must be 256, 512, 1024, 2048 or 4096"},
      {"[uroce0]\niface=v0\nipv4 = 10.0.0\n", "t.conf:3: ipv4 '10.0.0' is not an IPv4 address"},
      {"[uroce0]\niface=v0\nspeed = 100\n", "t.conf:3: unknown setting 'speed'"},
      {"iface = v0\n", "t.conf:1: setting before any [device] section"},
      {"[uroce0\n", "t.conf:1: section header must look like [uroce0]"},
      {"[uroce0]\niface v0\n", "t.conf:2: expected 'key = value'"},
      {"[uroce0]\nipv4=1.2.3.4\n", "t.conf: device [uroce0] needs iface = <interface>, devargs = <dpdk devargs> or shm"},
      {"[a]\niface=x\n[a]\n", "t.conf:3: device [a] is defined twice"},
      {"[uroce0]\nshm=run/ab\n", "t.conf:2: shm 'run/ab' must be an absolute path for a unix socket"},
      {"[bad name]\n", "t.conf:1: device name 'bad name' must be"},
      {"[uroce0]\niface=v0\nvlan=5000\n", "t.conf:3: vlan '5000' must be a VLAN id from 0"},
      {"[uroce0]\niface=v0\nfault=loss=2\n", "t.conf:3: fault loss '2' is a probability from 0 to 1"},
      {"[uroce0]\niface=v0\nfault=lose=0.1\n", "t.conf:3: fault has unknown key 'lose'"},
      {"[uroce0]\niface=v0\nfault=loss\n", "t.conf:3: fault 'loss' needs a number >= 0"},
      {"[uroce0]\niface=v0\nfault=side=up\n", "t.conf:3: fault side 'up' must be tx, rx or both"},
      {"[uroce0]\niface=v0\nexclusive=1\n", "t.conf:3: exclusive '1' must be yes or no"},
      {"[uroce0]\niface=v0\nport=xdp\n", "t.conf:3: port 'xdp' must be af_packet"},
      {"[uroce0]\ndevargs=net_tap0\nport=af_xdp\n", "t.conf: device [uroce0] has port = af_xdp, which takes iface"},
      {"[uroce0]\nipv4=127.0.0.2\nport=udp\nvlan=5\n", "t.conf: device [uroce0] has port = udp with vlan"},
      {"[uroce0]\nshm=/run/x\nport=udp\n", "t.conf: device [uroce0] has port = udp, which takes iface or ipv4"},
      {"[uroce0]\niface=v0\nprogress=spin\n", "t.conf:3: progress 'spin' must be park"},
      {"[uroce0]\niface=v0\nbatch=maybe\n", "t.conf:3: batch 'maybe' must be yes or no"},
      {"[uroce0]\niface=v0\nprogress_cpu=x\n", "t.conf:3: progress_cpu 'x' must be a CPU"},
      {"[uroce0]\niface=v0\nprogress_cpu=-2\n", "t.conf:3: progress_cpu '-2' must be a CPU"},
  };
  for (const Case& k : cases) {
    Config c;
    std::string err;
    EXPECT_FALSE(parse(k.text, "t.conf", &c, &err)) << k.text;
    EXPECT_EQ(err.rfind(k.expect, 0), 0u) << "got: " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos);
  }
}

TEST(Config, FaultSettingDescribesTheInjector) {
  FaultSpec f;
  ASSERT_EQ(parse_fault("loss=0.01, reorder=0.05,seed=7,side=both,delay_us=2.5", &f), "");
  EXPECT_TRUE(f.enabled);
  EXPECT_DOUBLE_EQ(f.loss, 0.01);
  EXPECT_DOUBLE_EQ(f.reorder, 0.05);
  EXPECT_EQ(f.reorder_window, 4u);  // reorder without a window gets the default
  EXPECT_EQ(f.reorder_hold_ns, 1'000'000u);  // and a frame is held at most 1 ms
  EXPECT_EQ(f.seed, 7u);
  EXPECT_TRUE(f.tx_side);
  EXPECT_TRUE(f.rx_side);
  EXPECT_EQ(f.delay_ns, 2500u);
  FaultSpec g;
  ASSERT_EQ(parse_fault("corrupt=0.5,window=9,side=rx,reorder=0.1,hold_us=50,ce=0.25", &g), "");
  EXPECT_DOUBLE_EQ(g.ce, 0.25);
  EXPECT_NE(parse_fault("ce=2", &g).find("probability"), std::string::npos);
  EXPECT_EQ(g.reorder_window, 9u);
  EXPECT_EQ(g.reorder_hold_ns, 50'000u);
  EXPECT_NE(parse_fault("reorder=0.1,hold_us=0", &g), "");
  EXPECT_FALSE(g.tx_side);
  EXPECT_TRUE(g.rx_side);
  EXPECT_FALSE(g.spare_dreq);
  ASSERT_EQ(parse_fault("loss=0.05,spare=dreq", &g), "");
  EXPECT_TRUE(g.spare_dreq);
  EXPECT_NE(parse_fault("loss=0.05,spare=rep", &g).find("must be dreq"), std::string::npos);
  Config c;
  std::string err;
  ASSERT_TRUE(apply_env(env_of({{"UROCE_IFACE", "v0"}, {"UROCE_FAULT", "loss=0.2"}}), &c, &err))
      << err;
  EXPECT_TRUE(c.devices[0].fault.enabled);
  EXPECT_DOUBLE_EQ(c.devices[0].fault.loss, 0.2);
}

TEST(Config, CongestionControlSettings) {
  Config c;
  std::string err;
  ASSERT_TRUE(parse("[a]\niface = v0\n[b]\niface = v1\necn = no\nline_rate = 1000\n"
                    "cnp_dscp = 26\nmin_time_between_cnps = 500\n"
                    "dcqcn = rpg_time_reset=3000, rpg_ai_rate=0.5,dce_tcp_g=1020,clamp_tgt_rate=0\n",
                    "cc.conf", &c, &err))
      << err;
  const DeviceConfig& a = c.devices[0];
  const DeviceConfig& b = c.devices[1];
  EXPECT_TRUE(a.ecn);  // on by default, as on RNICs
  EXPECT_EQ(a.line_rate_mbps, 0u);  // 0: the interface's speed
  EXPECT_EQ(a.cnp_dscp, 48);
  EXPECT_EQ(a.min_time_between_cnps_us, 50u);
  EXPECT_EQ(a.dcqcn.rpg_time_reset_ns, 300'000u);
  EXPECT_FALSE(b.ecn);
  EXPECT_EQ(b.line_rate_mbps, 1000u);
  EXPECT_EQ(b.cnp_dscp, 26);
  EXPECT_EQ(b.min_time_between_cnps_us, 500u);
  EXPECT_EQ(b.dcqcn.rpg_time_reset_ns, 3'000'000u);
  EXPECT_DOUBLE_EQ(b.dcqcn.rpg_ai_rate_mbps, 0.5);
  EXPECT_EQ(b.dcqcn.dce_tcp_g, 1020u);
  EXPECT_FALSE(b.dcqcn.clamp_tgt_rate);
  EXPECT_EQ(b.dcqcn.rpg_byte_reset, 32767u);  // not named: the default stays

  // One line per mistake, naming the key and what it takes; nothing half-applied.
  DcqcnConfig d;
  EXPECT_NE(parse_dcqcn("rpg_ai_rate=5,nonsense=1", &d).find("nonsense=1"), std::string::npos);
  EXPECT_DOUBLE_EQ(d.rpg_ai_rate_mbps, 5);
  EXPECT_NE(parse_dcqcn("dce_tcp_g=2000", &d).find("range"), std::string::npos);
  EXPECT_NE(parse_dcqcn("rpg_threshold=1.5", &d), "");
  EXPECT_NE(parse_dcqcn("rpg_time_reset=abc", &d).find("number"), std::string::npos);
  for (const char* bad : {"ecn = maybe", "line_rate = 0", "cnp_dscp = 64", "min_time_between_cnps = x"}) {
    Config e;
    EXPECT_FALSE(parse(std::string("[a]\niface = v0\n") + bad + "\n", "bad.conf", &e, &err)) << bad;
    EXPECT_NE(err.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos) << err;
  }
  Config env;
  ASSERT_TRUE(apply_env(env_of({{"UROCE_IFACE", "v9"}, {"UROCE_ECN", "0"},
                                {"UROCE_DCQCN", "rpg_hai_rate=20"}}),
                        &env, &err))
      << err;
  EXPECT_FALSE(env.devices[0].ecn);
  EXPECT_DOUBLE_EQ(env.devices[0].dcqcn.rpg_hai_rate_mbps, 20);
}

TEST(Config, EnvironmentOverridesTheFirstDeviceOrCreatesOne) {
  Config c;
  std::string err;
  ASSERT_TRUE(apply_env(
      env_of({{"UROCE_IFACE", "veth9"}, {"UROCE_MTU", "2048"}, {"UROCE_PORT", "af_xdp"}}), &c,
      &err));
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].port, DeviceConfig::PortKind::kXdp);
  EXPECT_EQ(c.devices[0].name, "uroce0");
  EXPECT_EQ(c.devices[0].iface, "veth9");
  EXPECT_EQ(c.devices[0].mtu, 2048u);

  Config d;
  ASSERT_TRUE(parse("[x]\niface=a\nmtu=1024\n", "f", &d, &err));
  ASSERT_TRUE(apply_env(env_of({{"UROCE_IPV4", "10.1.2.3"}}), &d, &err));
  EXPECT_EQ(d.devices[0].iface, "a");
  EXPECT_EQ(wire::to_string(*d.devices[0].ipv4), "10.1.2.3");

  Config e;
  EXPECT_FALSE(apply_env(env_of({{"UROCE_MTU", "9000"}}), &e, &err));
  EXPECT_EQ(err.rfind("environment UROCE_MTU: mtu '9000' must be", 0), 0u) << err;
  Config f;
  EXPECT_FALSE(apply_env(env_of({{"UROCE_IPV4", "10.0.0.1"}}), &f, &err));
  EXPECT_NE(err.find("set UROCE_IFACE"), std::string::npos) << err;
  // The shared-memory port names no interface: its socket path is enough.
  Config g;
  ASSERT_TRUE(apply_env(env_of({{"UROCE_SHM", "/run/uroce-ab"}, {"UROCE_IPV4", "10.0.0.1"}}), &g,
                        &err))
      << err;
  EXPECT_EQ(g.devices[0].shm, "/run/uroce-ab");
  EXPECT_TRUE(g.devices[0].iface.empty());
  // Nor does the UDP port: the address it binds is enough (no interface, no privileges).
  Config h;
  ASSERT_TRUE(apply_env(env_of({{"UROCE_PORT", "udp"}, {"UROCE_IPV4", "127.0.0.2"}}), &h, &err))
      << err;
  EXPECT_EQ(h.devices[0].port, DeviceConfig::PortKind::kUdp);
  EXPECT_TRUE(h.devices[0].iface.empty());
  Config i;
  // port = udp alone: loopback, each process a 127.0.0.x of its own (fill_addresses), from
  // the environment and from a file.
  ASSERT_TRUE(apply_env(env_of({{"UROCE_PORT", "udp"}}), &i, &err)) << err;
  EXPECT_EQ(i.devices[0].iface, "lo");
  Config j;
  ASSERT_TRUE(parse("[uroce0]\nport = udp\n", "t.conf", &j, &err)) << err;
  EXPECT_EQ(j.devices[0].iface, "lo");
  Config k;
  EXPECT_FALSE(apply_env(env_of({{"UROCE_MTU", "1024"}}), &k, &err));
  EXPECT_NE(err.find("UROCE_PORT=udp with UROCE_IPV4"), std::string::npos) << err;
}

TEST(Config, LoadReadsUroceConfigAndRejectsAMissingOne) {
  const std::string path = ::testing::TempDir() + "uroce-config-test.conf";
  std::ofstream(path) << "[dev1]\niface = lo\n";
  Config c;
  std::string err;
  ASSERT_TRUE(load(env_of({{"UROCE_CONFIG", path}}), &c, &err)) << err;
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].name, "dev1");
  EXPECT_FALSE(load(env_of({{"UROCE_CONFIG", path + ".missing"}}), &c, &err));
  EXPECT_NE(err.find("cannot be read"), std::string::npos);
}

TEST(Config, AConfigurationPathThatIsADirectoryIsRefused) {
  Config c;
  std::string err;
  EXPECT_FALSE(load(env_of({{"UROCE_CONFIG", "/tmp"}}), &c, &err));
  EXPECT_EQ(err, "UROCE_CONFIG names '/tmp', a directory: name the configuration file itself "
                 "(e.g. /etc/uroce.conf)");
}

TEST(Config, TheSettingsTableIsTheOneTheParserReads) {
  std::string err;
  for (const Setting& st : device_settings()) {
    SCOPED_TRACE(st.key);
    // Its example is a good value, from the file, the environment and as an option.
    EXPECT_EQ(check_setting(st.key, st.example), "");
    Config c;
    const std::string base = std::string(st.key) == "iface" ? "" : "iface = v0\n";
    EXPECT_TRUE(parse("[d]\n" + base + st.key + " = " + st.example + "\n", "t.conf", &c, &err) ||
                err.find("device [d]") != std::string::npos)  // a combination, not the value
        << err;
    Config e;
    std::map<std::string, std::string> vars = {{st.env, st.example}};
    if (std::string(st.key) != "iface") vars["UROCE_IFACE"] = "v0";
    EXPECT_TRUE(apply_env(env_of(vars), &e, &err) || err.find("device ") == 0) << err;
    // Found by each of its names; the option is the key with dashes.
    EXPECT_EQ(find_setting(st.key), &st);
    EXPECT_EQ(find_setting(st.env), &st);
    ASSERT_NE(st.option, nullptr);
    EXPECT_EQ(find_setting(st.option), &st);
    std::string opt = std::string("--") + st.key;
    std::replace(opt.begin(), opt.end(), '_', '-');
    EXPECT_EQ(opt, st.option);
    EXPECT_EQ(std::string(st.env), "UROCE_" + [&] {
      std::string up = st.key;
      for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      return up;
    }());
  }
  EXPECT_EQ(check_setting("speed", "100").rfind("unknown setting 'speed' (known: iface, devargs", 0), 0u);
  EXPECT_EQ(find_setting("UROCE_CONFIG"), &process_settings()[0]);
  EXPECT_EQ(find_setting("--nonsense"), nullptr);
}

TEST(Config, EveryBadValueIsOneLineNamingTheSettingAndWhatItTakes) {
  // At least one bad value per setting (a new setting without one fails below), the NaNs and
  // infinities included: every comparison with NaN is false, so a range check alone passes it.
  struct Bad {
    const char* key;
    const char* value;
    const char* expect;  // the start of the one line
  };
  const Bad cases[] = {
      {"iface", "", "iface must be a Linux interface name"},
      {"iface", "a-name-longer-than-15", "iface must be a Linux interface name"},
      {"devargs", "", "devargs must not be empty"},
      {"shm", "relative/path", "shm 'relative/path' must be an absolute path"},
      {"port", "xdp", "port 'xdp' must be af_packet"},
      {"gso", "1", "gso '1' must be yes or no"},
      {"ipv4", "10.0.0", "ipv4 '10.0.0' is not an IPv4 address"},
      {"ipv6", "fd00::g", "ipv6 'fd00::g' is not an IPv6 address"},
      {"mtu", "1500", "mtu '1500' must be 256, 512, 1024, 2048 or 4096"},
      {"mtu", "nan", "mtu 'nan' must be 256"},
      {"vlan", "5000", "vlan '5000' must be a VLAN id from 0 (untagged) to 4094"},
      {"vlan", "-1", "vlan '-1' must be a VLAN id"},
      {"pcap", "", "pcap must name a file"},
      {"fault", "delay_us=nan", "fault 'delay_us=nan' needs a number >= 0"},
      {"fault", "hold_us=nan", "fault 'hold_us=nan' needs a number >= 0"},
      {"fault", "window=nan", "fault 'window=nan' needs a number >= 0"},
      {"fault", "window=2.5", "fault window '2.5' must be a whole number 1..64"},
      {"fault", "loss=nan", "fault 'loss=nan' needs a number >= 0"},
      {"fault", "loss=inf", "fault 'loss=inf' needs a number >= 0"},
      {"fault", "jitter_us=inf", "fault 'jitter_us=inf' needs a number >= 0"},
      {"fault", "seed=1e300", "fault seed '1e300' must be a whole number from 0 to 18446744073709551615"},
      {"fault", "seed=-1", "fault seed '-1' must be a whole number"},
      {"fault", "seed=18446744073709551616", "fault seed '18446744073709551616' must be a whole number"},
      {"exclusive", "maybe", "exclusive 'maybe' must be yes or no"},
      {"progress", "spin", "progress 'spin' must be park"},
      {"progress_cpu", "x", "progress_cpu 'x' must be a CPU number from 0"},
      {"progress_cpu", "-2", "progress_cpu '-2' must be a CPU number from 0"},
      {"progress_cpu", "1023", "progress_cpu '1023' must be a CPU this process may run on ("},
      {"progress_cpu", "99999", "progress_cpu '99999' must be a CPU number from 0"},
      {"batch", "2", "batch '2' must be yes or no"},
      {"ecn", "maybe", "ecn 'maybe' must be yes"},
      {"line_rate", "0", "line_rate '0' must be the link's rate in Mb/s (1 .. 10000000)"},
      {"line_rate", "inf", "line_rate 'inf' must be the link's rate"},
      {"cnp_dscp", "64", "cnp_dscp '64' must be a DSCP from 0 to 63"},
      {"min_time_between_cnps", "x", "min_time_between_cnps 'x' must be microseconds"},
      {"dcqcn", "rpg_ai_rate=inf", "dcqcn rpg_ai_rate 'inf' must be a number of Mb/s above 0 up to 1e+07"},
      {"dcqcn", "rpg_ai_rate=0", "dcqcn rpg_ai_rate '0' must be a number of Mb/s above 0"},
      {"dcqcn", "dce_tcp_g=nan", "dcqcn dce_tcp_g 'nan' must be a whole number of 1024ths from 0 to 1023"},
      {"dcqcn", "rpg_threshold=1.5", "dcqcn rpg_threshold '1.5' must be a whole number"},
      {"dcqcn", "rpg_time_reset=0", "dcqcn rpg_time_reset '0' must be a number of microseconds from 1"},
      {"dcqcn", "g=1", "dcqcn 'g=1' is not a known key"},
  };
  std::set<std::string> covered;
  for (const Bad& b : cases) {
    const std::string e = check_setting(b.key, b.value);
    EXPECT_EQ(e.rfind(b.expect, 0), 0u) << b.key << " = " << b.value << ": got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    covered.insert(b.key);
    // The same from the environment: one line naming the variable too.
    Config c;
    std::string err;
    const Setting* st = find_setting(b.key);
    ASSERT_NE(st, nullptr);
    std::map<std::string, std::string> vars = {{st->env, b.value}};
    vars.emplace("UROCE_IFACE", "v0");  // (iface's own bad value stays)
    EXPECT_FALSE(apply_env(env_of(vars), &c, &err)) << b.key;
    EXPECT_EQ(err.rfind(std::string("environment ") + st->env + ": " + b.expect, 0), 0u) << err;
  }
  for (const Setting& st : device_settings()) EXPECT_EQ(covered.count(st.key), 1u) << "no bad value for " << st.key;
}

TEST(Config, TheSettingsDocumentIsTheTable) {
  std::ifstream in(UROCE_SETTINGS_DOC);
  ASSERT_TRUE(in.good()) << UROCE_SETTINGS_DOC;
  std::stringstream all;
  all << in.rdbuf();
  const std::string doc = all.str();
  const std::string begin = "from `uroce settings --markdown`: do not edit -->\n";
  const std::string end = "<!-- end of the generated table -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_TRUE(doc.substr(b + begin.size(), e - b - begin.size()) == settings_text(true))
      << "docs/settings.md is not the table the parser reads: run tools/settings_doc.sh";
}

TEST(Config, TheSampleFileNamesEverySetting) {
  std::ifstream in(UROCE_SAMPLE_CONF);
  std::stringstream all;
  all << in.rdbuf();
  for (const Setting& st : device_settings())
    EXPECT_TRUE(all.str().find(std::string("\n") + st.key + " =") != std::string::npos ||
                all.str().find(std::string("\n# ") + st.key + " =") != std::string::npos)
        << st.key;
}

TEST(Config, TheSampleFileThatIsInstalledIsValid) {
  Config c;
  std::string err;
  ASSERT_TRUE(load(env_of({{"UROCE_CONFIG", UROCE_SAMPLE_CONF}}), &c, &err)) << err;
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].name, "uroce0");
  EXPECT_EQ(c.devices[0].iface, "eth0");
  EXPECT_EQ(c.devices[0].mtu, 4096u);
}

TEST(Config, AddressesComeFromTheInterface) {
  DeviceConfig d;
  d.iface = "lo";
  std::string err;
  ASSERT_TRUE(fill_addresses(&d, &err)) << err;
  ASSERT_TRUE(d.ipv4.has_value());
  EXPECT_EQ(wire::to_string(*d.ipv4), "127.0.0.1");
  DeviceConfig none;
  none.iface = "no-such-if0";
  EXPECT_FALSE(fill_addresses(&none, &err));
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

TEST(Config, TheUdpPortOnLoopbackLeavesTheAddressToEachProcess) {
  // lo's own 127.0.0.1 and ::1 could be bound by one process only: the port picks a free
  // 127.0.0.x per process (UdpConfig::loopback_auto).
  DeviceConfig d;
  d.iface = "lo";
  d.port = DeviceConfig::PortKind::kUdp;
  std::string err;
  ASSERT_TRUE(fill_addresses(&d, &err)) << err;
  EXPECT_FALSE(d.ipv4.has_value());
  EXPECT_FALSE(d.ipv6.has_value());
  // An address given is kept (and nothing is added to it).
  DeviceConfig given = d;
  given.ipv4 = wire::Ipv4Addr{127, 0, 0, 9};
  ASSERT_TRUE(fill_addresses(&given, &err)) << err;
  EXPECT_EQ(wire::to_string(*given.ipv4), "127.0.0.9");
  // The same from the environment, as `uroce run` sets it with nothing configured.
  Config c;
  ASSERT_TRUE(load(env_of({{"UROCE_CONFIG", "/dev/null"}, {"UROCE_PORT", "udp"},
                           {"UROCE_IFACE", "lo"}}),
                   &c, &err))
      << err;
  ASSERT_EQ(c.devices.size(), 1u);
  ASSERT_TRUE(fill_addresses(&c.devices[0], &err)) << err;
  EXPECT_FALSE(c.devices[0].ipv4.has_value());
}

}  // namespace
}  // namespace uroce::config
