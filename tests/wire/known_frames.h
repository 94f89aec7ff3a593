// Whole frames with known contents, as hex. The first group is copied from
// pcaps/kernel-rxe-write_bw_64.pcap (Linux Soft-RoCE, so their ICRCs were computed by the
// kernel); the second was built by an independent Python model of IBA A17.3.3 using zlib's
// CRC-32, to cover IPv6, 802.1Q and IPv4 options, which the captures lack.
#pragma once

#include <cstdint>

namespace uroce::wire::test {

// Frame 22: RC_RDMA_WRITE_ONLY, 10.77.0.12 -> 10.77.0.11, QP 0x11, PSN 12481691, AckReq,
// RETH {VA 0x000055933e3b6000, R_Key 0x27c, len 64}, 64 payload bytes, ICRC bytes bb b3 45 ec.
inline constexpr const char* kCapturedWriteOnly =
    "525400770011 525400770012 0800"
    "4500 007c e67e 4000 4011 3f42 0a4d000c 0a4d000b"
    "c121 12b7 0068 0000"
    "0a 00 ffff 00 000011 80 be749b"
    "000055933e3b6000 0000027c 00000040"
    "e95bb48b120407cf32f873c6d0480d99a5b3fefb5585d09a61f0374c9745bf80"
    "a0730bb3771282a90af56fda3e7d73e33072df85f7af1f589f57a4379c63b73c"
    "bbb345ec";
inline constexpr uint32_t kCapturedWriteOnlyIcrc = 0xEC45B3BB;

// Frame 150: RC_ACKNOWLEDGE, 10.77.0.11 -> 10.77.0.12, QP 0x11, PSN 12481691,
// AETH {syndrome 0x1f, MSN 1}. 62 bytes: the kernel sends it without Ethernet padding.
inline constexpr const char* kCapturedAck =
    "525400770012 525400770011 0800"
    "4500 0030 f2d8 4000 4011 3334 0a4d000b 0a4d000c"
    "c121 12b7 001c 0000"
    "11 00 ffff 00 000011 00 be749b"
    "1f 000001"
    "5e4d232d";
inline constexpr uint32_t kCapturedAckIcrc = 0x2D234D5E;

// Frame 3: a TCP SYN (the perftest control connection), 10.77.0.12 -> 10.77.0.11.
inline constexpr const char* kCapturedTcpSyn =
    "525400770011 525400770012 0800"
    "4500 003c 2aee 4000 4006 fb1d 0a4d000c 0a4d000b"
    "e5284853152f55fd00000000a002faf014df0000020405b40402080a86869f010000000001030307";

// Frame 1: ARP who-has 10.77.0.11 tell 10.77.0.12.
inline constexpr const char* kCapturedArp =
    "ffffffffffff 525400770012 0806"
    "0001 0800 06 04 0001 525400770012 0a4d000c 000000000000 0a4d000b";

// UD_SEND_ONLY_WITH_IMMEDIATE over IPv6 in VLAN 100 (PCP 3):
//   fd00::a -> fd00::b, TC 0x6a, flow label 0xabcde, hop limit 64;
//   UDP 0xe000 -> 4791, checksum 0x1357 (carried as-is);
//   BTH SE=1 pad 3, BECN, QP 0xab, PSN 0x10; DETH {Q_Key 0x11111111, src QP 0xcd};
//   ImmDt 0xdeadbeef; payload "hello" + 3 zero pad bytes.
inline constexpr const char* kModelUdImmIpv6Vlan =
    "02000000000b 02000000000a 8100 6064 86dd"
    "66aabcde 002c 11 40"
    "fd00 0000 0000 0000 0000 0000 0000 000a"
    "fd00 0000 0000 0000 0000 0000 0000 000b"
    "e000 12b7 002c 1357"
    "65 b0 ffff 40 0000ab 00 000010"
    "11111111 00 0000cd"
    "deadbeef"
    "68656c6c6f 000000"
    "dfceaf1b";
inline constexpr uint32_t kModelUdImmIpv6VlanIcrc = 0x1BAFCEDF;

// RC_COMPARE_SWAP over IPv4 with a 4-byte Router Alert option (IHL 6):
//   192.168.1.1 -> 192.168.1.2, DSCP 26 ECN 2, ident 0x1234, DF, TTL 64, checksum 0x0fab;
//   UDP 0xd00d -> 4791; BTH QP 0x102, PSN 7, AckReq;
//   AtomicETH {VA 0x00007f0000001000, R_Key 0x1234, swap 5, compare 4}.
inline constexpr const char* kModelCasIpv4Options =
    "020000000002 020000000001 0800"
    "466a 004c 1234 4000 4011 0fab c0a80101 c0a80102 94040000"
    "d00d 12b7 0034 0000"
    "13 00 ffff 00 000102 80 000007"
    "00007f0000001000 00001234 0000000000000005 0000000000000004"
    "8e525c60";
inline constexpr uint32_t kModelCasIpv4OptionsIcrc = 0x605C528E;

}  // namespace uroce::wire::test
