// Link and network addresses as plain byte arrays, with formatting for tools and tests.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace uroce::wire {

using MacAddr = std::array<uint8_t, 6>;
using Ipv4Addr = std::array<uint8_t, 4>;
using Ipv6Addr = std::array<uint8_t, 16>;
/// A GID is an IPv6 address; RoCEv2 IPv4 GIDs are IPv4-mapped (::ffff:a.b.c.d).
using Gid = Ipv6Addr;

std::string to_string(const MacAddr& a);
std::string to_string(const Ipv4Addr& a);
/// RFC 5952 text form ("fe80::1", "::ffff:10.0.0.1").
std::string to_string(const Ipv6Addr& a);

std::optional<MacAddr> parse_mac(std::string_view s);
std::optional<Ipv4Addr> parse_ipv4(std::string_view s);
std::optional<Ipv6Addr> parse_ipv6(std::string_view s);

/// ::ffff:a.b.c.d — the GID of a RoCEv2 IPv4 address.
Gid ipv4_mapped_gid(const Ipv4Addr& a);
/// fe80::/64 with the modified EUI-64 of `m`: a port's GID 0.
Gid link_local_gid(const MacAddr& m);
bool is_ipv4_mapped(const Gid& g);
/// A multicast group's GID: IPv4-mapped 224.0.0.0/4, or IPv6 ff00::/8.
bool is_multicast_gid(const Gid& g);
/// Where a multicast group's frames go on Ethernet: 01:00:5e and the low 23 bits of the IPv4
/// address (RFC 1112), 33:33 and the low 32 bits of the IPv6 one (RFC 2464).
MacAddr multicast_mac(const Gid& g);
/// The Ethernet address uroce's UDP-socket port gives an IP address in the frames it shows
/// the engine (a socket has none): 02:00 and the IPv4 address, or 06 and five bytes of an
/// FNV-1a hash of the IPv6 one (locally administered, unicast). uroce-dissect knows a frame
/// that port rebuilt by its source address.
MacAddr socket_port_mac(const Gid& ip);

}  // namespace uroce::wire
