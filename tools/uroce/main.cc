// uroce: run unmodified verbs programs on uroce, and look at what they are doing.
//
//   uroce run [options] -- CMD ARGS...   run CMD with uroce's libibverbs.so.1
//   uroce devinfo [options]              ibv_devinfo -v on uroce
//   uroce stats [PID]                    per-reason counters of running uroce processes
//
// Options (each sets the matching UROCE_* variable, see docs/config in README):
//   --iface IF  --devargs ARGS  --ipv4 A  --ipv6 A  --mtu N  --vlan ID  --pcap FILE
//   --config FILE
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/stats_shm.h"

namespace {

constexpr const char* kUsage =
    "usage: uroce run [options] -- CMD ARGS...   run an unmodified verbs program on uroce\n"
    "       uroce devinfo [options]              show the uroce device (ibv_devinfo -v)\n"
    "       uroce stats [PID]                    counters of running uroce processes\n"
    "options: --iface IF --devargs ARGS --ipv4 ADDR --ipv6 ADDR --mtu N --vlan ID\n"
    "         --pcap FILE (record the traffic) --config FILE\n";

/// Where our libibverbs.so.1 is: next to the build tree's lib/, or the configured path.
std::string lib_dir(const char* argv0) {
  if (const char* env = std::getenv("UROCE_LIB_DIR")) return env;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    dir.resize(dir.rfind('/'));  // .../tools/uroce
    for (const char* rel : {"/../../lib", "/../lib"}) {
      const std::string cand = dir + rel;
      if (access((cand + "/libibverbs.so.1").c_str(), R_OK) == 0) return cand;
    }
  }
  (void)argv0;
  return UROCE_DEFAULT_LIB_DIR;
}

/// Consumes options into the environment; returns the index of the first non-option.
int apply_options(int argc, char** argv, int i) {
  static const char* const kMap[][2] = {{"--iface", "UROCE_IFACE"}, {"--devargs", "UROCE_DEVARGS"},
                                        {"--ipv4", "UROCE_IPV4"},   {"--ipv6", "UROCE_IPV6"},
                                        {"--mtu", "UROCE_MTU"},     {"--vlan", "UROCE_VLAN"},
                                        {"--pcap", "UROCE_PCAP"},   {"--config", "UROCE_CONFIG"}};
  while (i < argc && std::strncmp(argv[i], "--", 2) == 0 && std::strcmp(argv[i], "--") != 0) {
    bool known = false;
    for (const auto& [opt, var] : kMap) {
      if (std::strcmp(argv[i], opt) == 0) {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "uroce: %s needs a value\n", opt);
          std::exit(2);
        }
        setenv(var, argv[i + 1], 1);
        i += 2;
        known = true;
        break;
      }
    }
    if (!known) {
      std::fprintf(stderr, "uroce: unknown option '%s'\n%s", argv[i], kUsage);
      std::exit(2);
    }
  }
  return i;
}

int exec_with_uroce(const char* argv0, char** cmd) {
  const std::string dir = lib_dir(argv0);
  if (access((dir + "/libibverbs.so.1").c_str(), R_OK) != 0) {
    std::fprintf(stderr, "uroce: %s/libibverbs.so.1 not found: build uroce first or set UROCE_LIB_DIR\n",
                 dir.c_str());
    return 1;
  }
  std::string path = dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
    path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  execvp(cmd[0], cmd);
  std::fprintf(stderr, "uroce: cannot run %s: %s\n", cmd[0], std::strerror(errno));
  return 127;
}

int stats(int only_pid) {
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) {
    std::fprintf(stderr, "uroce: cannot read /dev/shm: %s\n", std::strerror(errno));
    return 1;
  }
  int shown = 0;
  while (dirent* e = readdir(d)) {
    int pid = 0;
    char dev[64] = {};
    if (std::sscanf(e->d_name, "uroce-%d-%63s", &pid, dev) != 2) continue;
    if (only_pid != 0 && pid != only_pid) continue;
    const std::string name = std::string("/") + e->d_name;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      shm_unlink(name.c_str());  // the process is gone (killed before it could clean up)
      continue;
    }
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    void* p = mmap(nullptr, sizeof(uroce::StatsShm), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) continue;
    const auto* st = static_cast<const uroce::StatsShm*>(p);
    if (st->magic == uroce::StatsShm::kMagic &&
        st->n_counters == static_cast<uint32_t>(uroce::Counter::kCount)) {
      std::printf("pid %d, device %s\n", pid, st->device);
      for (size_t i = 0; i < uroce::kCounterInfo.size(); ++i) {
        if (st->values[i] == 0) continue;
        std::printf("  %-26s %14llu  %.*s\n", std::string(uroce::kCounterInfo[i].name).c_str(),
                    static_cast<unsigned long long>(st->values[i]),
                    static_cast<int>(uroce::kCounterInfo[i].text.size()),
                    uroce::kCounterInfo[i].text.data());
      }
      for (size_t i = 1; i < static_cast<size_t>(uroce::wire::ParseError::kCount); ++i) {
        if (st->parse_errors[i] == 0) continue;
        const auto err = static_cast<uroce::wire::ParseError>(i);
        std::printf("  rx_parse_%-17s %14llu  %s\n", std::string(uroce::wire::error_name(err)).c_str(),
                    static_cast<unsigned long long>(st->parse_errors[i]),
                    std::string(uroce::wire::error_text(err)).c_str());
      }
      ++shown;
    }
    munmap(p, sizeof(uroce::StatsShm));
  }
  closedir(d);
  if (shown == 0) {
    std::printf(only_pid ? "no uroce device open in process %d\n" : "no running uroce processes\n",
                only_pid);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "run") {
    int i = apply_options(argc, argv, 2);
    if (i < argc && !std::strcmp(argv[i], "--")) ++i;
    if (i >= argc) {
      std::fprintf(stderr, "uroce: run needs a command: uroce run [options] -- CMD ARGS...\n");
      return 2;
    }
    return exec_with_uroce(argv[0], argv + i);
  }
  if (cmd == "devinfo") {
    const int i = apply_options(argc, argv, 2);
    if (i != argc) {
      std::fprintf(stderr, "uroce: devinfo takes only options\n");
      return 2;
    }
    char a0[] = "ibv_devinfo", a1[] = "-v";
    char* args[] = {a0, a1, nullptr};
    return exec_with_uroce(argv[0], args);
  }
  if (cmd == "stats") {
    if (argc > 3) {
      std::fprintf(stderr, "%s", kUsage);
      return 2;
    }
    return stats(argc == 3 ? std::atoi(argv[2]) : 0);
  }
  std::fprintf(stderr, "uroce: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
