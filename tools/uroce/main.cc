// uroce: run unmodified verbs programs on uroce, and look at what they are doing.
//
//   uroce run [options] -- CMD ARGS...   run CMD with uroce's libibverbs.so.1
//   uroce devinfo [options]              ibv_devinfo -v on uroce
//   uroce stats [PID]                    per-reason counters of running uroce processes
//   uroce settings [--markdown]          every setting: variable, file key, option, default
//
// Options: one per setting (--iface IF, --mtu N, --progress-cpu N, ...; each sets the
// matching UROCE_* variable), made from config::device_settings() and checked when parsed.
// `uroce --help` and `uroce CMD --help` say the same in full; the man page is made from them.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include <cctype>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "doctor.h"
#include "util/sys.h"
#include "engine/objects.h"
#include "engine/stats_shm.h"

namespace {

constexpr const char* kUsage =
    "usage: uroce run [options] -- CMD ARGS...   run an unmodified verbs program on uroce\n"
    "       uroce devinfo [options]              show the uroce device (ibv_devinfo -v)\n"
    "       uroce stats [PID]                    counters of running uroce processes\n"
    "       uroce doctor                         which ports can work here, and the fixes\n"
    "       uroce settings [--markdown]          every setting, its default and what it does\n"
    "       uroce CMD --help                     what CMD does, in full\n"
    "       uroce --version\n"
    "options: --iface IF --ipv4 ADDR --port udp --mtu N --pcap FILE --config FILE ...\n"
    "         (one per setting: uroce settings)\n";

constexpr const char* kRunHelp =
    "usage: uroce run [options] [--] CMD ARGS...\n"
    "\n"
    "Runs CMD, an unmodified verbs program (ibv_rc_pingpong, perftest, ...), on uroce's\n"
    "libibverbs.so.1 instead of rdma-core's: uroce's library directory goes first in\n"
    "LD_LIBRARY_PATH, nothing else changes. The device is uroce0; GID index 1 is its RoCEv2\n"
    "IPv4 GID (-g 1 for the pingpongs, -x 1 for perftest).\n"
    "The library is found from where this uroce is: an install's private directory\n"
    "(bin/../lib/uroce), or the build tree's lib/; $UROCE_LIB_DIR overrides both.\n";

constexpr const char* kDevinfoHelp =
    "usage: uroce devinfo [options]\n"
    "\n"
    "Shows the uroce device as rdma-core's ibv_devinfo -v does (ibverbs-utils must be\n"
    "installed): uroce run [options] -- ibv_devinfo -v, with UROCE_DEVINFO=1, which makes\n"
    "the library first print one line per device saying how its port is set up: which port\n"
    "(af_packet, udp, af_xdp, shm or a DPDK device), the interface or address it uses, its\n"
    "rings or frames, how runs of packets are sent and received, and what it needs.\n";

constexpr const char* kDoctorHelp =
    "usage: uroce doctor\n"
    "\n"
    "Says which of uroce's ports can work on this machine for this user (udp, af_packet,\n"
    "af_xdp, dpdk, shm), whether `uroce run` can show the device to UCX, MPI and rdma-core's\n"
    "tests without root (user namespaces), whether rdma_cm clients of 127.0.0.1 find their\n"
    "server, what is configured and which interfaces there are: one row each, yes or no, and\n"
    "for a no the reason and the fix. It changes nothing. Exit status 0 when the udp or the\n"
    "af_packet port can work.\n";

constexpr const char* kStatsHelp =
    "usage: uroce stats [PID]\n"
    "\n"
    "Prints, for every running process with a uroce device open (or only process PID), each\n"
    "non-zero counter with its meaning: drops by reason, NAKs sent and received,\n"
    "retransmissions, timeouts, ARP. Counters left behind by processes that are gone are\n"
    "removed. Exit status: 0; 1 when process PID has no uroce device open; 2 bad usage.\n";

constexpr const char* kSettingsHelp =
    "usage: uroce settings [--markdown]\n"
    "\n"
    "Lists every setting: its environment variable, its key in a [device] section of the\n"
    "configuration file, its uroce run option, what it takes, its default and what it does.\n"
    "--markdown prints the same as the table of docs/settings.md.\n";

bool is_help(const char* arg) { return !std::strcmp(arg, "--help") || !std::strcmp(arg, "-h"); }

/// Prints a command's help (with the device options where it takes them); returns 0.
int help(const char* text, bool with_options) {
  std::fputs(text, stdout);
  if (!with_options) return 0;
  std::fputs("\nOptions (each sets the UROCE_* variable named; unset, the configuration file\n"
             "$UROCE_CONFIG, else /etc/uroce.conf, decides; --opt VALUE or --opt=VALUE):\n",
             stdout);
  auto line = [](const uroce::config::Setting& st) {
    if (st.option == nullptr) return;
    std::string opt = std::string(st.option) + " " + (st.key ? st.key : "file");
    for (size_t k = std::strlen(st.option) + 1; k < opt.size(); ++k)
      opt[k] = static_cast<char>(std::toupper(static_cast<unsigned char>(opt[k])));
    const bool long_list = std::strlen(st.values) > 48;  // fault, dcqcn: uroce settings has it
    std::printf("  %-30s %s (%s)\n", opt.c_str(), long_list ? "key=value,... (uroce settings)" : st.values,
                st.env);
  };
  for (const auto& st : uroce::config::device_settings()) line(st);
  for (const auto& st : uroce::config::process_settings()) line(st);
  std::fputs("uroce settings says what each does and its default. With no device configured at\n"
             "all, uroce0 is the udp port on loopback (UDP sockets, no privileges): each process\n"
             "takes a free 127.0.0.x of its own, and clients reach a server at 127.0.0.1\n"
             "(ib_write_bw 127.0.0.1, rping -c -a 127.0.0.1).\n",
             stdout);
  return 0;
}

bool readable(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

/// Where uroce's libibverbs.so.1 is, found from where this program is: $UROCE_LIB_DIR, else
/// an install's private directory (UROCE_LIB_FROM_BIN, relative to the bin directory), else
/// the build tree's lib/ (tools/uroce/../../lib). The build tree is recognised by its
/// CMakeCache.txt, so an installed uroce never takes a system library directory for it.
/// Returns "" with *looked set to the places tried when there is none.
std::string lib_dir(std::string* looked) {
  if (const char* env = std::getenv("UROCE_LIB_DIR")) {
    *looked = env;
    return readable(std::string(env) + "/libibverbs.so.1") ? env : "";
  }
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    *looked = "(cannot read /proc/self/exe)";
    return "";
  }
  exe[n] = '\0';
  std::string dir(exe);
  dir.resize(dir.rfind('/'));
  const std::string installed = dir + "/" UROCE_LIB_FROM_BIN;
  const std::string build_tree = dir + "/../../lib";
  *looked = installed + " (an install), " + build_tree + " (a build tree)";
  std::vector<std::string> candidates = {installed};
  if (readable(dir + "/../../CMakeCache.txt")) candidates.push_back(build_tree);
  for (const std::string& cand : candidates) {
    if (!readable(cand + "/libibverbs.so.1")) continue;
    char real[PATH_MAX];
    return realpath(cand.c_str(), real) != nullptr ? std::string(real) : cand;
  }
  return "";
}

/// Consumes options into the environment; returns the index of the first non-option.
/// `--help` among them prints `help_text` and exits 0. Each value is checked as the
/// configuration parser checks it: a bad one exits 2 with one line naming the option.
int apply_options(int argc, char** argv, int i, const char* help_text) {
  while (i < argc && argv[i][0] == '-' && std::strcmp(argv[i], "--") != 0) {
    if (is_help(argv[i])) std::exit(help(help_text, true));
    std::string opt = argv[i], value;
    const size_t eq = opt.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = opt.substr(eq + 1);
      opt.resize(eq);
    }
    const uroce::config::Setting* st = uroce::config::find_setting(opt);
    if (st == nullptr || st->option == nullptr || opt != st->option) {
      std::fprintf(stderr, "uroce: unknown option '%s' (uroce settings lists them)\n%s", opt.c_str(),
                   kUsage);
      std::exit(2);
    }
    if (!inline_value) {
      if (i + 1 >= argc || std::strcmp(argv[i + 1], "--") == 0) {
        std::fprintf(stderr, "uroce: %s needs a value: %s\n", opt.c_str(), st->values);
        std::exit(2);
      }
      value = argv[++i];
    }
    ++i;
    std::string problem;
    if (st->key != nullptr) {
      problem = uroce::config::check_setting(st->key, value);
    } else if (opt == "--config") {
      struct stat sb{};
      if (stat(value.c_str(), &sb) != 0)
        problem = "'" + value + "' cannot be read: " + std::strerror(errno);
      else if (!S_ISREG(sb.st_mode))
        problem = "'" + value + "' is no file: name the configuration file itself";
    }
    if (!problem.empty()) {
      std::fprintf(stderr, "uroce: %s %s: %s\n", opt.c_str(), value.c_str(), problem.c_str());
      std::exit(2);
    }
    setenv(st->env, value.c_str(), 1);
  }
  return i;
}

/// The mount points under `root` (e.g. "/tmp/old"), relative to it, from
/// /proc/self/mountinfo (its fifth field; octal escapes, for spaces and the like, are left as
/// they are: such names do not occur under /dev). Each appears once, in mount order, and a
/// mount inside another one listed is left out (binding the outer one recursively brings it).
std::vector<std::string> submounts(const std::string& root) {
  std::vector<std::string> out;
  FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (f == nullptr) return out;
  char* line = nullptr;
  size_t cap = 0;
  const std::string prefix = root + "/";
  while (getline(&line, &cap, f) > 0) {
    std::string mp;
    {
      const char* p = line;
      for (int field = 0; field < 4 && p != nullptr; ++field) {
        p = std::strchr(p, ' ');
        if (p != nullptr) ++p;
      }
      if (p == nullptr) continue;
      mp.assign(p, std::strcspn(p, " "));
    }
    if (mp.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = mp.substr(prefix.size());
    bool covered = rest.empty();
    for (const std::string& o : out)
      covered = covered || rest == o || rest.compare(0, o.size() + 1, o + "/") == 0;
    if (!covered) out.push_back(rest);
  }
  std::free(line);
  std::fclose(f);
  return out;
}

/// The fallback that needs no privilege (give_device_files as another user than root, or as
/// root without CAP_SYS_ADMIN and CAP_MKNOD, as in a container): a user
/// namespace of the program's own in which it keeps its uid and gid (mapped to themselves)
/// and, once it runs, has no capability (exec by a uid other than 0 drops them), with a mount
/// namespace in which
/// - /dev is a tmpfs that holds each entry of the real /dev again (directories and device
///   nodes bound, symbolic links copied), and infiniband/uverbs-<name>, a bind of /dev/null;
/// - /sys/class is a tmpfs that holds each class of the real one bound, and infiniband/<name>
///   /device/net/<iface> links (with the real infiniband class's entries, if there are any).
/// Nothing is written outside the namespace, so nothing stays after the program. The real
/// directories are reached through descriptors opened before the tmpfs covers them
/// (/proc/self/fd/N/...). Fails (one line in *why) where user namespaces are not allowed
/// (a container's seccomp profile, kernel.unprivileged_userns_clone = 0): docs/udp.md.
bool view_without_root(const std::vector<std::string>& names,
                       const std::vector<std::pair<std::string, std::string>>& netdevs,
                       std::string* why) {
  auto failed = [why](const std::string& step) {
    *why = step + ": " + std::strerror(errno);
    return false;
  };
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return failed("a user namespace (unshare)");
  const auto put = uroce::util::write_file;
  if (!put("/proc/self/setgroups", "deny") ||
      !put("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n") ||
      !put("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n"))
    return failed("the user namespace's uid and gid maps");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
    return failed("making / a slave mount");
  std::vector<std::string> covered;  // the tmpfs mounted
  // `dir` again as a tmpfs holding its old entries (through `old`, a descriptor of it).
  auto rebuild = [&](const char* dir, int old) -> bool {
    DIR* d = fdopendir(dup(old));
    if (d == nullptr) return failed(std::string("reading ") + dir);
    std::vector<std::pair<std::string, unsigned char>> entries;
    for (dirent* e; (e = readdir(d)) != nullptr;)
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        entries.emplace_back(e->d_name, e->d_type);
    closedir(d);
    if (mount("uroce", dir, "tmpfs", MS_NOSUID, "mode=0755") != 0)
      return failed(std::string("a tmpfs over ") + dir);
    covered.emplace_back(dir);
    const std::string from = "/proc/self/fd/" + std::to_string(old) + "/";
    for (const auto& [name, type] : entries) {
      const std::string src = from + name, dst = std::string(dir) + "/" + name;
      if (type == DT_LNK) {
        char target[PATH_MAX];
        const ssize_t n = readlinkat(old, name.c_str(), target, sizeof target - 1);
        if (n < 0) continue;
        target[n] = '\0';
        if (symlink(target, dst.c_str()) != 0) return failed(dst);
        continue;
      }
      const bool is_dir = type == DT_DIR;
      if (is_dir ? mkdir(dst.c_str(), 0755) != 0
                 : close(open(dst.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644)) != 0)
        return failed(dst);
      // An entry that cannot be bound (a device node the user may not reach, say) stays empty.
      mount(src.c_str(), dst.c_str(), nullptr, MS_BIND | (is_dir ? MS_REC : 0), nullptr);
    }
    return true;
  };
  const int dev = open("/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int cls = open("/sys/class", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool ok = dev >= 0 && cls >= 0;
  if (!ok) failed("opening /dev and /sys/class");
  if (ok && !names.empty()) {
    ok = rebuild("/dev", dev);
    if (ok && mkdir("/dev/infiniband", 0755) != 0 && errno != EEXIST)
      ok = failed("/dev/infiniband");
    for (size_t i = 0; ok && i < names.size(); ++i) {
      const std::string node = "/dev/infiniband/" + names[i];
      const std::string null = "/proc/self/fd/" + std::to_string(dev) + "/null";
      if (close(open(node.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666)) != 0 ||
          mount(null.c_str(), node.c_str(), nullptr, MS_BIND, nullptr) != 0)
        ok = failed(node);
    }
  }
  if (ok && !netdevs.empty()) {
    ok = rebuild("/sys/class", cls);
    // The real infiniband class (if the host has one) is bound there: ours beside it.
    const std::string ib = "/sys/class/infiniband";
    if (ok) umount2(ib.c_str(), MNT_DETACH);
    if (ok && mkdir(ib.c_str(), 0755) != 0 && errno != EEXIST) ok = failed(ib);
    for (size_t i = 0; ok && i < netdevs.size(); ++i) {
      const auto& [name, iface] = netdevs[i];
      const std::string d = ib + "/" + name, net = d + "/device/net";
      for (const std::string& m : {d, d + "/device", net})
        if (ok && mkdir(m.c_str(), 0755) != 0) ok = failed(m);
      if (ok && symlink(("/sys/class/net/" + iface).c_str(), (net + "/" + iface).c_str()) != 0)
        ok = failed(net + "/" + iface);
    }
  }
  if (dev >= 0) close(dev);
  if (cls >= 0) close(cls);
  if (!ok)  // the real directories again, whatever stands over them
    for (const std::string& d : covered) umount2(d.c_str(), MNT_DETACH);
  return ok;
}

/// Gives the program what a kernel RDMA device shows in the file system and what middleware
/// and test suites look for, without touching the host's view: in a mount namespace of the
/// program's own,
/// - /dev is an overlay whose upper layer (a tmpfs nobody else sees) holds
///   infiniband/uverbs-<name> for each uroce device, made as /dev/null's device numbers
///   (reading or writing it does nothing; uroce's library never opens it): UCX lists a device
///   only with its node (uct_ib_device_is_accessible). Mounts under /dev (shm, pts, mqueue,
///   hugepages) are bound back, so the program shares them with everyone as before;
/// - /sys/class is an overlay whose upper layer holds infiniband/<name>/device/net/<iface>, a
///   link to /sys/class/net/<iface>, for each uroce device on a network interface: how
///   rdma-core's own tests (and UCX) find a device's interface and so its IP address.
/// Each only where the host has none of its own. As root (CAP_SYS_ADMIN, CAP_MKNOD) here;
/// as another user, view_without_root. Returns false with *why set to one line when a step
/// failed; the program then runs without them (UCX then does not list the device).
bool give_device_files(std::string* why) {
  const char* off = std::getenv("UROCE_DEVNODE");
  if (off != nullptr && std::strcmp(off, "no") == 0) return true;
  uroce::config::Config cfg;
  std::string err;
  if (!uroce::config::load(uroce::config::process_env(), &cfg, &err)) return true;  // the library says
  std::vector<std::string> names;                           // device nodes to make
  std::vector<std::pair<std::string, std::string>> netdevs;  // (device, interface) for sysfs
  for (const auto& d : cfg.devices) {
    const std::string node = "/dev/infiniband/uverbs-" + d.name;
    struct stat st {};
    if (stat(node.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) names.push_back("uverbs-" + d.name);
    if (!d.iface.empty() && d.iface.find('/') == std::string::npos &&
        stat(("/sys/class/infiniband/" + d.name).c_str(), &st) != 0 &&
        stat(("/sys/class/net/" + d.iface).c_str(), &st) == 0)
      netdevs.emplace_back(d.name, d.iface);
  }
  if (names.empty() && netdevs.empty()) return true;
  // Root's way needs CAP_SYS_ADMIN and CAP_MKNOD; root in a container (podman's and Docker's
  // default capabilities) takes an ordinary user's.
  if (geteuid() != 0 || !uroce::doctor::can_mount_and_mknod())
    return view_without_root(names, netdevs, why);
  auto failed = [why](const char* step) {
    *why = std::string(step) + ": " + std::strerror(errno);
    return false;
  };
  if (unshare(CLONE_NEWNS) != 0) return failed("unshare(CLONE_NEWNS)");
  // Slave, as `ip netns exec` makes it: nothing mounted here reaches the host, and mounts the
  // host makes later (a new network namespace's file, say) still show in the program's view.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
    return failed("making / a slave mount");
  // A scratch tmpfs over /tmp (only in this namespace, and only until the overlays stand):
  // their upper and work directories, and the old /dev and /sys/class to take from.
  char real_tmp[PATH_MAX];
  if (realpath("/tmp", real_tmp) == nullptr) return failed("/tmp");
  const std::string tmp = real_tmp, old = tmp + "/old", sys_old = tmp + "/sys_old";
  if (mount("uroce", tmp.c_str(), "tmpfs", MS_NOSUID, "mode=0755") != 0)
    return failed("a scratch tmpfs");
  std::vector<std::string> overlaid;
  auto undo = [&](const std::string& step) {
    const int e = errno;
    for (const std::string& o : overlaid) umount2(o.c_str(), MNT_DETACH);
    umount2(old.c_str(), MNT_DETACH);
    umount2(sys_old.c_str(), MNT_DETACH);
    umount2(tmp.c_str(), MNT_DETACH);
    errno = e;
    return failed(step.c_str());
  };
  // An overlay over `target`: its own contents bound at `lower`, `up` (made already, with
  // what the program is to see besides) the upper layer.
  auto overlay = [&](const std::string& target, const std::string& lower, const std::string& up) {
    const std::string work = up + ".work";
    if (mkdir(lower.c_str(), 0755) != 0 || mkdir(work.c_str(), 0755) != 0) return false;
    if (mount(target.c_str(), lower.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) return false;
    const std::string opts = "lowerdir=" + lower + ",upperdir=" + up + ",workdir=" + work;
    if (mount("overlay", target.c_str(), "overlay", MS_NOSUID, opts.c_str()) != 0) return false;
    overlaid.push_back(target);
    return true;
  };
  if (!names.empty()) {
    const std::string up = tmp + "/up";
    if (mkdir(up.c_str(), 0755) != 0) return undo("a scratch directory");
    if (!overlay("/dev", old, up)) return undo("an overlay over /dev");
    for (const std::string& m : submounts(old)) {
      // A real /dev/infiniband mounted in (a container's RDMA devices) stays below the
      // overlay: binding it back would put our node into it.
      if (m == "infiniband" || m.rfind("infiniband/", 0) == 0) continue;
      const std::string from = old + "/" + m, to = "/dev/" + m;
      if (mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
        return undo("binding /dev/" + m + " back");
    }
    if (mkdir("/dev/infiniband", 0755) != 0 && errno != EEXIST) return undo("/dev/infiniband");
    for (const std::string& n : names) {
      const std::string node = "/dev/infiniband/" + n;
      if (mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) return undo(node);
      chmod(node.c_str(), 0666);  // past the umask
    }
  }
  if (!netdevs.empty()) {
    // Written into the upper layer before the overlay stands (sysfs below takes no writes).
    const std::string up = tmp + "/sys_up", ib = up + "/infiniband";
    if (mkdir(up.c_str(), 0755) != 0 || mkdir(ib.c_str(), 0755) != 0)
      return undo("a scratch directory");
    for (const auto& [name, iface] : netdevs) {
      const std::string dev = ib + "/" + name, net = dev + "/device/net";
      for (const std::string& d : {dev, dev + "/device", net})
        if (mkdir(d.c_str(), 0755) != 0) return undo(d);
      if (symlink(("/sys/class/net/" + iface).c_str(), (net + "/" + iface).c_str()) != 0)
        return undo(net + "/" + iface);
    }
    if (!overlay("/sys/class", sys_old, up)) return undo("an overlay over /sys/class");
  }
  umount2(old.c_str(), MNT_DETACH);
  umount2(sys_old.c_str(), MNT_DETACH);
  umount2(tmp.c_str(), MNT_DETACH);  // /tmp is the real one again; the overlays keep their layers
  return true;
}

/// With no device configured anywhere (no configuration file, no UROCE_* device setting):
/// uroce0 is the udp port on loopback, where each process takes a free 127.0.0.x of its own
/// and a client finds a server at 127.0.0.1 (docs/udp.md). No privilege needed. Says so in
/// one line.
void zero_config() {
  for (const char* where : {"UROCE_IFACE", "UROCE_DEVARGS", "UROCE_SHM", "UROCE_IPV4",
                            "UROCE_IPV6", "UROCE_PORT"})
    if (std::getenv(where) != nullptr) return;
  // The file alone (other settings, --pcap say, apply to whichever device there is).
  const uroce::config::Env env = uroce::config::process_env();
  uroce::config::Config cfg;
  std::string err;
  if (!uroce::config::load([&env](const std::string& var) -> std::optional<std::string> {
        if (var == "UROCE_CONFIG") return env(var);
        return std::nullopt;
      }, &cfg, &err) || !cfg.devices.empty())
    return;  // configured (or wrongly: the library says how)
  setenv("UROCE_PORT", "udp", 1);
  setenv("UROCE_IFACE", "lo", 1);
  std::fprintf(stderr,
               "uroce: no device configured: uroce0 is the udp port on loopback, at a "
               "127.0.0.x of this program's own; clients reach a server at 127.0.0.1\n");
}

int exec_with_uroce(char** cmd) {
  zero_config();
  std::string looked;
  const std::string dir = lib_dir(&looked);
  if (dir.empty()) {
    std::fprintf(stderr,
                 "uroce: uroce's libibverbs.so.1 is not in %s: install uroce, build the "
                 "uroce_ibverbs target, or set UROCE_LIB_DIR\n",
                 looked.c_str());
    return 1;
  }
  std::string path = dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
    path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  if (std::string why; !give_device_files(&why))
    std::fprintf(stderr,
                 "uroce: no /dev/infiniband node or /sys/class/infiniband entry for the program "
                 "(%s): UCX will not list the device; set UROCE_DEVNODE=no to skip this step\n",
                 why.c_str());
  execvp(cmd[0], cmd);
  std::fprintf(stderr, "uroce: cannot run %s: %s\n", cmd[0], std::strerror(errno));
  return 127;
}

/// One line per QP past RESET: its state, what its send and receive sides hold, and what it
/// waits for (a stuck program's first question: who is waiting for whom).
void print_qps(const uroce::StatsShm& st) {
  using uroce::QpStats;
  using uroce::Role;
  using uroce::role_state_name;
  const auto type_name = [](uint8_t t) {
    switch (t) {
      case IBV_QPT_RC: return "RC";
      case IBV_QPT_UC: return "UC";
      case IBV_QPT_UD: return "UD";
      case IBV_QPT_XRC_SEND: return "XRC_SEND";
      case IBV_QPT_XRC_RECV: return "XRC_RECV";
      default: return "?";
    }
  };
  const auto state_name = [](uint8_t s) {
    static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return s < std::size(names) ? names[s] : "?";
  };
  for (uint32_t i = 0; i < std::min<uint32_t>(st.qps, uroce::StatsShm::kQps); ++i) {
    const QpStats& q = st.qp[i];
    std::printf("  qp 0x%06x %s %s: send %u posted, next PSN 0x%06x, oldest unacked 0x%06x, "
                "cwnd %u, retries left %u/%u rnr",
                q.qpn, type_name(q.type), state_name(q.state), q.sq_posted, q.sq_psn, q.comp_psn,
                q.cwnd, q.retry_left, q.rnr_retry_left);
    if (q.flags & QpStats::kRetransmitArmed)
      std::printf(", ACK timer in %llu us", static_cast<unsigned long long>(q.timer_in_us));
    std::printf("; recv %u posted, ePSN 0x%06x, MSN %u; requester %s, completer %s, responder %s",
                q.rq_posted, q.epsn, q.msn, role_state_name(Role::kRequester, q.req_state),
                role_state_name(Role::kCompleter, q.comp_state),
                role_state_name(Role::kResponder, q.resp_state));
    static constexpr std::pair<uint32_t, const char*> kFlags[] = {
        {QpStats::kAckPending, "ack-pending"}, {QpStats::kScheduled, "scheduled"},
        {QpStats::kDoorbell, "doorbell"}};
    for (const auto& [bit, name] : kFlags)
      if (q.flags & bit) std::printf(" [%s]", name);
    std::printf("\n");
  }
  if (st.qps_total > st.qps) std::printf("  (%u more QPs)\n", st.qps_total - st.qps);
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
    // Written by another build of uroce (another size): its layout is not this one's.
    struct stat sb{};
    if (fstat(fd, &sb) != 0 || static_cast<size_t>(sb.st_size) != sizeof(uroce::StatsShm)) {
      close(fd);
      std::printf("pid %d, device %s: counters of another uroce version (not shown)\n", pid, dev);
      ++shown;
      continue;
    }
    void* p = mmap(nullptr, sizeof(uroce::StatsShm), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) continue;
    const auto* st = static_cast<const uroce::StatsShm*>(p);
    if (st->magic == uroce::StatsShm::kMagic &&
        st->n_counters == static_cast<uint32_t>(uroce::Counter::kCount) &&
        st->n_parse_errors == static_cast<uint32_t>(uroce::wire::ParseError::kCount)) {
      std::printf("pid %d, device %s\n", pid, st->device);
      for (size_t i = 0; i < uroce::kCounterInfo.size(); ++i) {
        if (st->values[i] == 0) continue;
        std::printf("  %-26s %14llu  %.*s\n", std::string(uroce::kCounterInfo[i].name).c_str(),
                    static_cast<unsigned long long>(st->values[i]),
                    static_cast<int>(uroce::kCounterInfo[i].text.size()),
                    uroce::kCounterInfo[i].text.data());
      }
      // The progress thread: always shown (zeros say something too).
      const std::pair<const char*, const volatile uint64_t*> progress[] = {
          {"progress_parked", &st->progress_parked},
          {"progress_parks", &st->progress_parks},
          {"progress_woke_traffic", &st->progress_woke_traffic},
          {"progress_woke_kick", &st->progress_woke_kick},
          {"progress_woke_deadline", &st->progress_woke_deadline},
          {"progress_answers", &st->progress_answers},
          {"progress_yields", &st->progress_yields},
          {"progress_backoffs", &st->progress_backoffs}};
      const char* const progress_text[] = {
          "1 while the progress thread sleeps until traffic, a deadline or posted work",
          "times it went to sleep so", "woken by a frame", "woken by work an application left",
          "woken by a timer or the link watch",
          "polls that received the packet the application waited for before returning",
          "empty polls that let other threads run while DCQCN's pacer held the data",
          "progress = poll: times the spinning thread found the CPUs crowded and stopped spinning"};
      for (size_t i = 0; i < std::size(progress); ++i)
        std::printf("  %-26s %14llu  %s\n", progress[i].first,
                    static_cast<unsigned long long>(*progress[i].second), progress_text[i]);
      for (size_t i = 0; i < uroce::kCmCounters; ++i) {
        if (st->cm[i] == 0) continue;
        std::printf("  %-26s %14llu  %s\n", uroce::kCmCounterInfo[i].name,
                    static_cast<unsigned long long>(st->cm[i]), uroce::kCmCounterInfo[i].text);
      }
      for (size_t i = 0; i < uroce::kPortCounters; ++i) {
        if (st->port[i] == 0) continue;
        std::printf("  %-26s %14llu  %s\n", uroce::kPortCounterInfo[i].name,
                    static_cast<unsigned long long>(st->port[i]), uroce::kPortCounterInfo[i].text);
      }
      // DCQCN: every QP it holds below the line rate, with its rate and alpha.
      for (uint32_t i = 0; i < std::min<uint32_t>(st->cc_qps, uroce::StatsShm::kCcQps); ++i) {
        const uroce::CcQpStats& q = st->cc[i];
        std::printf("  dcqcn qp 0x%06x: rate %u Mb/s of %u (target %u), alpha %.3f, %llu CNPs, "
                    "%llu cuts\n",
                    q.qpn, q.rate_mbps, st->line_rate_mbps, q.target_mbps, q.alpha_1024 / 1024.0,
                    static_cast<unsigned long long>(q.cnps_rcvd),
                    static_cast<unsigned long long>(q.cuts));
      }
      print_qps(*st);
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
  if (shown == 0 && only_pid != 0) {
    std::fprintf(stderr, "uroce: stats: no uroce device open in process %d%s\n", only_pid,
                 kill(only_pid, 0) != 0 && errno == ESRCH ? " (no such process)" : "");
    return 1;
  }
  if (shown == 0) std::printf("no running uroce processes\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || is_help(argv[1])) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version") {
    std::printf("uroce %s\n", UROCE_VERSION);
    return 0;
  }
  if (cmd == "run") {
    int i = apply_options(argc, argv, 2, kRunHelp);
    if (i < argc && !std::strcmp(argv[i], "--")) ++i;
    if (i >= argc) {
      std::fprintf(stderr, "uroce: run needs a command: uroce run [options] -- CMD ARGS...\n");
      return 2;
    }
    return exec_with_uroce(argv + i);
  }
  if (cmd == "devinfo") {
    const int i = apply_options(argc, argv, 2, kDevinfoHelp);
    if (i != argc) {
      std::fprintf(stderr, "uroce: devinfo takes only options (uroce devinfo --help)\n");
      return 2;
    }
    char a0[] = "ibv_devinfo", a1[] = "-v";
    char* args[] = {a0, a1, nullptr};
    setenv("UROCE_DEVINFO", "1", 1);  // the library says how each port is set up
    return exec_with_uroce(args);
  }
  if (cmd == "doctor") {
    if (argc == 3 && is_help(argv[2])) return help(kDoctorHelp, false);
    if (argc != 2) {
      std::fprintf(stderr, "uroce: doctor takes no arguments (uroce doctor --help)\n");
      return 2;
    }
    return uroce::doctor::run();
  }
  if (cmd == "stats") {
    if (argc == 3 && is_help(argv[2])) return help(kStatsHelp, false);
    if (argc > 3) {
      std::fprintf(stderr, "uroce: stats takes one process id at most: uroce stats [PID]\n");
      return 2;
    }
    long pid = 0;
    if (argc == 3) {
      char* end = nullptr;
      errno = 0;
      pid = std::strtol(argv[2], &end, 10);
      if (end == argv[2] || *end != '\0' || errno != 0 || pid <= 0 || pid > INT_MAX) {
        std::fprintf(stderr, "uroce: stats: '%s' is not a process id (a number from 1, as ps shows)\n",
                     argv[2]);
        return 2;
      }
    }
    return stats(static_cast<int>(pid));
  }
  if (cmd == "settings") {
    if (argc == 3 && is_help(argv[2])) return help(kSettingsHelp, false);
    const bool markdown = argc == 3 && !std::strcmp(argv[2], "--markdown");
    if (argc > 3 || (argc == 3 && !markdown)) {
      std::fprintf(stderr, "uroce: settings takes --markdown at most: uroce settings [--markdown]\n");
      return 2;
    }
    std::fputs(uroce::config::settings_text(markdown).c_str(), stdout);
    return 0;
  }
  std::fprintf(stderr, "uroce: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
