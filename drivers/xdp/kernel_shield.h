// The af_packet port's kernel shield: uroce's tc program (xdp/shield.bpf.c) at an interface's
// ingress hook, so that the kernel's IP and UDP layers skip the RoCE frames uroce reads from
// its packet socket (the socket's tap sees them first). Attached through a BPF link (tcx,
// Linux 6.6): the link belongs to this process's descriptor, so the program leaves with the
// process however it ends (a crash or SIGKILL too), and nothing is left on the interface.
// Needs CAP_BPF and CAP_NET_ADMIN; where it cannot attach, the port works as before and
// `uroce devinfo` says why.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct bpf_object;

namespace uroce::drivers {

class KernelShield {
 public:
  /// Attaches the program to `iface` for frames to `addresses` (16 bytes each, IPv4 as
  /// ::ffff:a.b.c.d). nullptr and *why_not when that is not possible.
  static std::unique_ptr<KernelShield> attach(const std::string& iface,
                                              const std::vector<std::array<uint8_t, 16>>& addresses,
                                              std::string* why_not);
  ~KernelShield();
  KernelShield(const KernelShield&) = delete;
  KernelShield& operator=(const KernelShield&) = delete;

  /// Frames the program has kept from the kernel so far (all CPUs).
  uint64_t dropped() const;

 private:
  KernelShield() = default;
  ::bpf_object* obj_ = nullptr;
  int link_fd_ = -1;
  int count_fd_ = -1;
};

}  // namespace uroce::drivers
