// `uroce doctor`: which of uroce's ports can work on this machine for this user, and for each
// one that cannot, why and the fix. It tries what it can without changing anything: a UDP
// socket bound to a loopback address, a packet socket, a user namespace in a child process
// that exits at once; the rest it reads (capabilities, huge pages, /proc/net/unix, the
// configuration and the interfaces).
#include "doctor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "config/config.h"
#include "util/sys.h"

namespace uroce::doctor {
namespace {

constexpr int kCapNetAdmin = 12, kCapNetRaw = 13, kCapSysAdmin = 21, kCapMknod = 27, kCapBpf = 39;

/// The effective capabilities (/proc/self/status CapEff).
uint64_t effective_caps() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("CapEff:", 0) == 0) return std::strtoull(line.c_str() + 7, nullptr, 16);
  return 0;
}

bool has(uint64_t caps, int cap) { return (caps >> cap) & 1; }

/// One row: the port, yes/no, and what to know (why not, and the fix).
void row(const char* what, bool ok, const std::string& text) {
  std::printf("%-18s %-4s %s\n", what, ok ? "yes" : "no", text.c_str());
}

/// A loopback address one UDP socket can bind on port 4791 (the udp port's), or "".
std::string free_loopback_4791(std::string* why) {
  for (int last = 2; last < 255; ++last) {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *why = std::string("a UDP socket: ") + std::strerror(errno);
      return "";
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(4791);
    a.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(last));
    const int rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    const int e = errno;
    close(fd);
    if (rc == 0) return "127.0.0." + std::to_string(last);
    if (e != EADDRINUSE) {
      *why = std::string("binding 127.0.0.x:4791: ") + std::strerror(e);
      return "";
    }
  }
  *why = "127.0.0.2 to .254 are all taken on port 4791";
  return "";
}

/// Can this user make a user and mount namespace and mount a tmpfs in it (what `uroce run`
/// does for the device view without root)? Tried in a child that exits at once.
bool user_namespace_works(std::string* why) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    const char* step = "";
    int err = 0;
    const std::string uid = std::to_string(getuid()), gid = std::to_string(getgid());
    const auto put = util::write_file;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      step = "unshare(CLONE_NEWUSER)";
      err = errno;
    } else if (!put("/proc/self/setgroups", "deny") ||
               !put("/proc/self/uid_map", uid + " " + uid + " 1\n") ||
               !put("/proc/self/gid_map", gid + " " + gid + " 1\n")) {
      step = "the uid and gid maps";
      err = errno;
    } else if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0 ||
               mount("uroce", "/tmp", "tmpfs", MS_NOSUID, "mode=0755") != 0) {
      step = "a mount in it";
      err = errno;
    }
    const std::string msg = *step ? std::string(step) + ": " + std::strerror(err) : "";
    [[maybe_unused]] const ssize_t w = write(pipefd[1], msg.data(), msg.size());
    _exit(0);
  }
  close(pipefd[1]);
  char buf[256] = {};
  const ssize_t n = pid > 0 ? read(pipefd[0], buf, sizeof buf - 1) : -1;
  close(pipefd[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  if (pid < 0) {
    *why = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (n > 0) *why = buf;
  return n == 0;
}

std::string read_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

bool can_mount_and_mknod() {
  const uint64_t caps = effective_caps();
  return has(caps, kCapSysAdmin) && has(caps, kCapMknod);
}

int run() {
  const uint64_t caps = effective_caps();
  const bool root = geteuid() == 0;
  std::printf("uroce doctor: uid %u, %s\n", static_cast<unsigned>(geteuid()),
              caps == 0 ? "no capability" : root ? "root" : "some capabilities");

  std::string why;
  const std::string lo = free_loopback_4791(&why);
  row("udp", !lo.empty(),
      !lo.empty() ? "UDP sockets on address:4791, no privilege (on loopback: " + lo +
                        " is free); with nothing configured, `uroce run` uses it"
                  : why + ": the udp port cannot bind here");

  const int ps = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  const int ps_err = errno;
  if (ps >= 0) close(ps);
  row("af_packet", ps >= 0,
      ps >= 0 ? "packet sockets: any Ethernet interface (iface = ...)"
              : std::string(std::strerror(ps_err)) +
                    ": needs CAP_NET_RAW: run as root, or `setcap cap_net_raw+ep` on the "
                    "program, or use the udp port");

  const bool xdp = has(caps, kCapNetRaw) && has(caps, kCapNetAdmin) &&
                   (has(caps, kCapBpf) || has(caps, kCapSysAdmin));
  row("af_xdp", xdp,
      xdp ? "an XDP program and AF_XDP sockets (port = af_xdp, one process per interface)"
          : "needs CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN): run as root, "
            "or use the udp port");

  const std::string huge = read_line("/proc/sys/vm/nr_hugepages");
#ifdef UROCE_HAVE_DPDK
  const bool built = true;
#else
  const bool built = false;
#endif
  const bool dpdk = root && built;
  row("dpdk", dpdk,
      (!built  ? "this uroce was built without DPDK (libdpdk-dev, then cmake again); "
       : dpdk ? "DPDK's PMDs (port = dpdk, devargs = ...); "
              : "needs root (DPDK maps huge pages and devices): run as root, or use the udp "
                "port; ") +
          std::string("2 MiB huge pages reserved: ") + (huge.empty() ? "?" : huge) +
          (huge == "0" ? " (DPDK falls back to plain memory; as root: echo 256 > "
                         "/proc/sys/vm/nr_hugepages)"
                       : ""));

  row("shm", true, "uroce's shared-memory link between two processes on this machine "
                   "(shm = <socket path>, ipv4 = ...), no privilege");

  std::string ns_why;
  const bool admin = root && can_mount_and_mknod();
  const bool view = admin || user_namespace_works(&ns_why);
  row("device view", view,
      admin ? "as root, `uroce run` shows /dev/infiniband and /sys/class/infiniband entries "
              "through overlays (UCX, MPI and rdma-core's tests look there)"
      : view ? "user namespaces work: `uroce run` shows the device in /dev/infiniband and "
               "/sys/class/infiniband (UCX, MPI and rdma-core's tests look there)"
             : ns_why + ": no user namespace for the device view (a container's seccomp "
                        "profile, kernel.unprivileged_userns_clone = 0, AppArmor's "
                        "apparmor_restrict_unprivileged_userns = 1): verbs programs still "
                        "run, UCX does not list the device");

  const bool unix_list = std::ifstream("/proc/net/unix").good();
  row("rdma_cm on lo", unix_list,
      unix_list ? "clients of 127.0.0.1 find their server's own 127.0.0.x (/proc/net/unix)"
                : "/proc/net/unix cannot be read: rdma_cm clients must connect to the server's "
                  "own 127.0.0.x (mount /proc)");

  config::Config cfg;
  std::string err;
  if (!config::load(config::process_env(), &cfg, &err)) {
    std::printf("configuration: %s\n", err.c_str());
  } else if (cfg.devices.empty()) {
    std::printf("configuration: none (no /etc/uroce.conf device, no UROCE_* device setting): "
                "`uroce run` makes uroce0 the udp port on loopback\n");
  } else {
    for (const auto& d : cfg.devices)
      std::printf("configuration: %s on %s\n", d.name.c_str(),
                  !d.iface.empty() ? ("interface " + d.iface).c_str()
                  : !d.devargs.empty() ? ("devargs " + d.devargs).c_str()
                  : !d.shm.empty() ? ("shm " + d.shm).c_str()
                                    : "addresses given");
  }
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) == 0) {
    std::string list;
    for (ifaddrs* a = all; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      char ip[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, ip, sizeof ip);
      list += (list.empty() ? "" : ", ") + std::string(a->ifa_name) + " " + ip;
    }
    freeifaddrs(all);
    std::printf("interfaces: %s\n", list.empty() ? "none with an IPv4 address" : list.c_str());
  }
  return !lo.empty() || ps >= 0 ? 0 : 1;  // a port that reaches the network
}

}  // namespace uroce::doctor
