// The rdma_cm rendezvous's names (rendezvous.h).
#include "cm/rendezvous.h"

#include <arpa/inet.h>

#include <cstdio>

namespace uroce::cm {

namespace {
constexpr std::string_view kPrefix = "@uroce-cm:";  // /proc/net/unix writes the NUL as '@'
}

std::string rendezvous_name(uint16_t ps, uint16_t port, const wire::Ipv4Addr& ip) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "uroce-cm:%x:%u:%u.%u.%u.%u", ps, port, ip[0], ip[1], ip[2],
                ip[3]);
  return buf;
}

std::optional<wire::Ipv4Addr> rendezvous_find(std::string_view text, uint16_t ps,
                                              uint16_t port) {
  char want[32];
  std::snprintf(want, sizeof want, "%x:%u:", ps, port);
  const std::string_view key = want;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    // The path is the line's last field, "@name" for the abstract namespace.
    const size_t at = line.rfind(' ');
    if (at == std::string_view::npos) continue;
    std::string_view path = line.substr(at + 1);
    if (path.substr(0, kPrefix.size()) != kPrefix) continue;
    path.remove_prefix(kPrefix.size());
    if (path.substr(0, key.size()) != key) continue;
    path.remove_prefix(key.size());
    if (path.empty() || path.size() >= 16) continue;
    const std::string addr(path);
    wire::Ipv4Addr ip;
    if (inet_pton(AF_INET, addr.c_str(), ip.data()) != 1) continue;
    return ip;
  }
  return std::nullopt;
}

}  // namespace uroce::cm
