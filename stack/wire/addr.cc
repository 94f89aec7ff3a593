#include "wire/addr.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

namespace uroce::wire {

std::string to_string(const MacAddr& a) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3], a[4],
                a[5]);
  return buf;
}

std::string to_string(const Ipv4Addr& a) {
  char buf[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, a.data(), buf, sizeof buf) ? buf : "?";
}

std::string to_string(const Ipv6Addr& a) {
  char buf[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, a.data(), buf, sizeof buf) ? buf : "?";
}

std::optional<MacAddr> parse_mac(std::string_view s) {
  MacAddr m{};
  if (s.size() != 17) return std::nullopt;
  for (size_t i = 0; i < 6; ++i) {
    unsigned v = 0;
    for (size_t j = 0; j < 2; ++j) {
      char c = s[i * 3 + j];
      unsigned d;
      if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
      else return std::nullopt;
      v = v * 16 + d;
    }
    if (i < 5 && s[i * 3 + 2] != ':') return std::nullopt;
    m[i] = static_cast<uint8_t>(v);
  }
  return m;
}

std::optional<Ipv4Addr> parse_ipv4(std::string_view s) {
  std::string z(s);
  Ipv4Addr a{};
  if (inet_pton(AF_INET, z.c_str(), a.data()) != 1) return std::nullopt;
  return a;
}

std::optional<Ipv6Addr> parse_ipv6(std::string_view s) {
  std::string z(s);
  Ipv6Addr a{};
  if (inet_pton(AF_INET6, z.c_str(), a.data()) != 1) return std::nullopt;
  return a;
}

Gid link_local_gid(const MacAddr& m) {
  Gid g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  g[8] = static_cast<uint8_t>(m[0] ^ 0x02);  // modified EUI-64
  g[9] = m[1];
  g[10] = m[2];
  g[11] = 0xff;
  g[12] = 0xfe;
  g[13] = m[3];
  g[14] = m[4];
  g[15] = m[5];
  return g;
}

Gid ipv4_mapped_gid(const Ipv4Addr& a) {
  Gid g{};
  g[10] = 0xff;
  g[11] = 0xff;
  std::memcpy(&g[12], a.data(), 4);
  return g;
}

bool is_ipv4_mapped(const Gid& g) {
  for (size_t i = 0; i < 10; ++i)
    if (g[i] != 0) return false;
  return g[10] == 0xff && g[11] == 0xff;
}

bool is_multicast_gid(const Gid& g) {
  return is_ipv4_mapped(g) ? (g[12] & 0xF0) == 0xE0 : g[0] == 0xFF;
}

MacAddr multicast_mac(const Gid& g) {
  if (is_ipv4_mapped(g))
    return MacAddr{0x01, 0x00, 0x5e, static_cast<uint8_t>(g[13] & 0x7F), g[14], g[15]};
  return MacAddr{0x33, 0x33, g[12], g[13], g[14], g[15]};
}

MacAddr socket_port_mac(const Gid& ip) {
  if (is_ipv4_mapped(ip)) return {0x02, 0x00, ip[12], ip[13], ip[14], ip[15]};
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (uint8_t b : ip) h = (h ^ b) * 0x100000001b3ull;
  return {0x06, static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8),
          static_cast<uint8_t>(h >> 16), static_cast<uint8_t>(h >> 24),
          static_cast<uint8_t>(h >> 32)};
}

}  // namespace uroce::wire
