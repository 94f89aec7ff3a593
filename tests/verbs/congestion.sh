#!/usr/bin/env bash
# Congestion control end to end (issue 23): rdma_verify (WRITE, READ back, atomics, SEND with
# immediate, every byte checked) between two uroce processes in two namespaces, the server's
# port marking every packet it receives CE with probability 0.3 (UROCE_FAULT=ce=0.3,side=rx:
# what a congested switch in front of it would do). The client records its traffic.
#   - DCQCN on (the default): the server answers marked packets with CNPs, the client's QP
#     is cut and paced (its .verbs trace has 'rate ... cut' lines, which uroce-dissect
#     --ladder draws), its data leaves ECT(0), and every byte still checks out;
#   - UROCE_ECN=0 on the client: its packets leave Not-ECT, the CNPs still come (the server
#     answers what is marked) and nothing is cut.
# Usage: congestion.sh LIBDIR RDMA_VERIFY UROCE DISSECT. Needs root (exit 77 = skipped).
set -euo pipefail
lib=$1 verify=$2 uroce=$3 dissect=$4
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test
tag=cc$$
ns_test "$tag" 10.97.3.1/24 10.97.3.2/24 fd00:973::1/64 fd00:973::2/64

# run NAME CLIENT_ENV...: one verified transfer; the client's capture is $dir/NAME.pcap.
run() {
  local name=$1; shift
  ip netns exec "$nsB" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}vb" \
    UROCE_FAULT=ce=0.3,side=rx,seed=5 \
    timeout 60 "$verify" -d uroce0 -g 1 -n 300 -s 20000 -m 1024 >"$dir/$name.server" 2>&1 &
  local server=$!
  wait_listen "$nsB" 18600 "$server"
  local rc=0
  ip netns exec "$nsA" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}va" \
    UROCE_PCAP="$dir/$name.pcap" "$@" \
    timeout 60 "$verify" -d uroce0 -g 1 -n 300 -s 20000 -m 1024 10.97.3.2 >"$dir/$name.client" 2>&1 || rc=$?
  wait "$server" || rc=$?
  if [ $rc -ne 0 ] || ! grep -q verified "$dir/$name.server"; then
    echo "FAIL: $name: the transfer (exit $rc)"; cat "$dir/$name.client"; echo "-- server:"; cat "$dir/$name.server"; exit 1
  fi
}
# count PCAP JQ-LIKE-PATTERN: packets of the capture whose JSON matches the regex.
count() { "$dissect" --json "$1" | grep -cE "$2" || true; }

run on
cnps=$(count "$dir/on.pcap" '"opcode_name":"CNP"')
cuts=$(grep -cP '\trate\t[0-9]+\t-\tcut\t' "$dir/on.pcap.verbs" || true)
ect=$(count "$dir/on.pcap" '"src":"10.97.3.1".*"ecn":2,.*"opcode_name":"RC_(RDMA|SEND|FETCH|COMPARE)')
notect=$(count "$dir/on.pcap" '"src":"10.97.3.1".*"ecn":0,.*"opcode_name":"RC_(RDMA|SEND|FETCH|COMPARE)')
echo "DCQCN on: $cnps CNPs reached the client, $cuts cuts, $ect of its requests ECT(0), $notect Not-ECT"
[ "$cnps" -gt 0 ] || { echo "FAIL: no CNP came back for the marked packets"; exit 1; }
[ "$cuts" -gt 0 ] || { echo "FAIL: no DCQCN cut in the client's .verbs trace"; head "$dir/on.pcap.verbs"; exit 1; }
[ "$ect" -gt 0 ] && [ "$notect" = 0 ] || { echo "FAIL: the client's requests should all leave ECT(0)"; exit 1; }
# A CNP as RNICs send it: BECN set, P_Key 0xFFFF, PSN 0, DSCP 48.
bad=$("$dissect" --json "$dir/on.pcap" | grep '"opcode_name":"CNP"' |
      grep -vcE '"dscp":48,"ecn":0,.*"pkey":65535,"fecn":false,"becn":true,.*"psn":0' || true)
[ "$bad" = 0 ] || { echo "FAIL: $bad CNPs not as an RNIC sends them"; exit 1; }
"$dissect" --ladder "$dir/on.html" "$dir/on.pcap" >/dev/null
grep -q 'DCQCN cut: QP 0x' "$dir/on.html" || { echo "FAIL: the ladder does not show the cuts"; exit 1; }

run off UROCE_ECN=0
cnps=$(count "$dir/off.pcap" '"opcode_name":"CNP"')
cuts=$(grep -cP '\trate\t' "$dir/off.pcap.verbs" || true)
notect=$(count "$dir/off.pcap" '"src":"10.97.3.1".*"ecn":0,.*"opcode_name":"RC_(RDMA|SEND|FETCH|COMPARE)')
ect=$(count "$dir/off.pcap" '"src":"10.97.3.1".*"ecn":2,')
echo "DCQCN off: $cnps CNPs reached the client, $cuts rate changes, $notect requests Not-ECT, $ect ECT(0)"
[ "$cnps" -gt 0 ] && [ "$cuts" = 0 ] && [ "$notect" -gt 0 ] && [ "$ect" = 0 ] ||
  { echo "FAIL: with ecn off: CNPs counted only, packets Not-ECT"; exit 1; }
echo "PASS"
