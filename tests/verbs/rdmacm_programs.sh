#!/usr/bin/env bash
# Unmodified Debian librdmacm programs (rdmacm-utils, perftest -R) over uroce's librdmacm.so.1
# and libibverbs.so.1 between two network namespaces joined by a veth pair: the connection
# manager's REQ/REP/RTU/DREQ/DREP (and SIDR for UD) on the wire, IPv4 and IPv6, and
# multicast (mckey).
# Usage: rdmacm_programs.sh LIBDIR RDMACM_EXIT. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1 leaver=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v rping >/dev/null && command -v ib_send_bw >/dev/null \
  || { echo "SKIP: rdmacm-utils / perftest not installed"; exit 77; }
[ -e "$lib/librdmacm.so.1" ] || { echo "FAIL: no librdmacm.so.1 in $lib"; exit 1; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test, wait_listen
tag=r$$
ns_test "$tag" 10.97.0.1/24 10.97.0.2/24 fd00:97::1/64 fd00:97::2/64

# An rdma_cm server reserves its port with a kernel socket (TCP listening for RDMA_PS_TCP, UDP
# bound for RDMA_PS_UDP): waiting for it to show is waiting for rdma_listen.
wait_udp() {
  for _ in $(seq 200); do
    [ -n "$(ip netns exec "$1" ss -Huan "sport = :$2" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  echo "server never bound UDP $2"; return 1
}

# In the sanitizer stage ctest preloads the ASan/UBSan runtimes for the programs under test
# (LD_PRELOAD). Only those get them (in_ns, in_ns_bg): this script's own tools (ip, ss,
# tcpdump, ...) run as they are (procps' pkill has been seen to hang with them preloaded).
preload=${LD_PRELOAD:-}
unset LD_PRELOAD
in_ns() { local ns=$1 ifc=$2; shift 2; ip netns exec "$ns" env ${preload:+"LD_PRELOAD=$preload"} LD_LIBRARY_PATH="$lib" UROCE_IFACE="$ifc" timeout 60 "$@"; }
# The same for a program started in the background (`in_ns_bg ... &`): the background subshell
# becomes the program's `timeout` (exec), so $! is a process whose end is the program's end.
# Killing a subshell that merely waits for it would leave the program running (and its rdma_cm
# port bound: the retry's server then could not bind it, issue 25).
in_ns_bg() { local ns=$1 ifc=$2; shift 2; exec ip netns exec "$ns" env ${preload:+"LD_PRELOAD=$preload"} LD_LIBRARY_PATH="$lib" UROCE_IFACE="$ifc" timeout 60 "$@"; }

# clean FILE...: no sanitizer report in these logs. A case that expects its program to fail
# checks this too: under ASan a program that fails because of a memory error exits with 1,
# like one that failed as expected.
clean() { ! grep -qE "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer" "$@"; }
# ended RC: the program ended by itself: not timeout's 124-127, not killed by a signal
# (128 + its number). rping's exit(-1) is 255.
ended() { [ "$1" -lt 124 ] || [ "$1" -gt 192 ]; }

# stop_server PID NS PORT: ends a server started with in_ns_bg and checks that nothing of it is
# left: no process in its namespace, nothing listening on its TCP port. (`timeout` passes the
# signal on to its whole process group, a server's forked children too, e.g. qperf's child of
# the last test: a process killed a moment ago may still be on its way out, for 5 s at most.)
stop_server() {
  kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true
  local left
  for _ in $(seq 50); do [ -z "$(ip netns pids "$2" 2>/dev/null)" ] && break; sleep 0.1; done
  left=$(for p in $(ip netns pids "$2" 2>/dev/null); do
           printf '%s:%s ' "$p" "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)"; done)
  [ -z "$left" ] || { echo "FAIL: the server's namespace still runs: $left"; exit 1; }
  [ -z "$(ip netns exec "$2" ss -Hltn "sport = :$3" 2>/dev/null)" ] \
    || { echo "FAIL: TCP $3 is still listened on after its server ended"; exit 1; }
}

# perftest 4.5's race (docs/interop.md; perftest issue 93, fixed upstream in 3d9d8d0, Dec. 2025):
# with -R its client makes a control connection, then sends the data connection's REQ without
# waiting for the server to listen again; when the server is slower, the REQ is rejected
# ("invalid service ID", reason 8, as for any port nobody listens on) and perftest 4.5's retry
# path fails. Only a perftest pair whose client saw exactly that, while its server was still
# running (so it was between its two listens, not gone), is run again: at most 5 times, each
# printed with the evidence (three were not always enough in the sanitizer build, whose slower
# server lost the race three times in a row once). Any other failure fails at once, with both logs.
perftest_race() {  # SERVER-PID
  grep -q "RDMA_CM_EVENT_REJECTED; error: 8" "$dir/client.log" && kill -0 "$1" 2>/dev/null
}

srv_ns=$nsB srv_if=${tag}vb cli_ns=$nsA cli_if=${tag}va  # the server in B, unless swapped
run_pair() {  # NAME WAIT(tcp:PORT|udp:PORT) EXPECT SERVER-ARGS... -- CLIENT-ARGS...
  local name=$1 wait=$2 expect=$3; shift 3
  local sargs=(); while [ "$1" != "--" ]; do sargs+=("$1"); shift; done; shift
  local try server wport=${wait#*:}
  for try in 1 2 3 4 5; do
    in_ns_bg "$srv_ns" "$srv_if" "${sargs[@]}" >"$dir/server.log" 2>&1 &
    server=$!
    case $wait in tcp:*) wait_listen "$srv_ns" "$wport" "$server" ;; udp:*) wait_udp "$srv_ns" "$wport" ;; esac
    in_ns "$cli_ns" "$cli_if" "$@" >"$dir/client.log" 2>&1 && break
    if [ "${sargs[0]}" != "${sargs[0]#ib_}" ] && [ $try -lt 5 ] && perftest_race "$server"; then
      echo "retry $try: $name: perftest 4.5's race, not uroce: the client's data REQ was rejected" \
        "(\"$(grep -m1 -o 'RDMA_CM_EVENT_REJECTED; error: 8' "$dir/client.log")\": nobody listened yet)" \
        "while its server still ran between its two listens"
      stop_server "$server" "$srv_ns" "$wport"
      continue
    fi
    echo "FAIL: $name client (try $try)"; cat "$dir/client.log"; echo "-- server:"; cat "$dir/server.log"; exit 1
  done
  if ! wait "$server"; then echo "FAIL: $name server"; cat "$dir/server.log"; exit 1; fi
  grep -qE "$expect" "$dir/client.log" \
    || { echo "FAIL: $name: no '$expect' in the client's output"; cat "$dir/client.log"; exit 1; }
  echo "ok: $name: $(grep -E "$expect" "$dir/client.log" | tail -1 | tr -s ' \t' ' ')"
}

run_pair "rping IPv4" tcp:7174 "rdma-ping-9:" rping -s -a 10.97.0.2 -C 10 -- rping -c -v -V -a 10.97.0.2 -C 10
srv_ns=$nsA srv_if=${tag}va cli_ns=$nsB cli_if=${tag}vb
run_pair "rping IPv4, the other way" tcp:7174 "rdma-ping-9:" rping -s -a 10.97.0.1 -C 10 -- rping -c -v -V -a 10.97.0.1 -C 10
srv_ns=$nsB srv_if=${tag}vb cli_ns=$nsA cli_if=${tag}va
run_pair "rping IPv6" tcp:7174 "rdma-ping-9:" rping -s -a fd00:97::2 -C 10 -- rping -c -v -V -a fd00:97::2 -C 10
# Link-local IPv6 (fe80::, GID index 0): an address that names its interface (%IF).
# Both ends' addresses must have passed duplicate address detection: the client's own is
# its source (a tentative one cannot be bound: EADDRNOTAVAIL, seen once the port opened
# faster than DAD ends).
ll="" ll_a=""
for _ in $(seq 100); do
  ll=$(ip -n "$nsB" -6 addr show dev "${tag}vb" scope link | awk '/inet6/ && !/tentative/ { sub("/.*", "", $2); print $2 }')
  ll_a=$(ip -n "$nsA" -6 addr show dev "${tag}va" scope link | awk '/inet6/ && !/tentative/ { sub("/.*", "", $2); print $2 }')
  [ -n "$ll" ] && [ -n "$ll_a" ] && break; sleep 0.1
done
[ -n "$ll" ] && [ -n "$ll_a" ] || { echo "FAIL: no link-local address on ${tag}vb or ${tag}va"; exit 1; }
run_pair "rping link-local IPv6" tcp:7174 "rdma-ping-4:" rping -s -a "$ll%${tag}vb" -C 5 -- rping -c -v -V -a "$ll%${tag}va" -C 5
run_pair "rping, the server on every address" tcp:7174 "rdma-ping-4:" rping -s -C 5 -- rping -c -v -V -a 10.97.0.2 -C 5
# A client and a server on one host: two processes on one interface, as two programs on one
# RNIC. Each process's connection manager hears the MADs the other sends to their common
# address (it used to keep them to itself: the client was UNREACHABLE).
cli_ns=$nsB cli_if=${tag}vb
run_pair "rping, client and server on one host" tcp:7174 "rdma-ping-4:" rping -s -a 10.97.0.2 -C 5 -- rping -c -v -V -a 10.97.0.2 -C 5
cli_ns=$nsA cli_if=${tag}va
run_pair "ucmatose (RC, 1 connection)" tcp:7471 "test complete" ucmatose -- ucmatose -s 10.97.0.2
run_pair "ucmatose (RC, 4 connections, 20 messages)" tcp:7471 "test complete" ucmatose -c 4 -C 20 -- ucmatose -s 10.97.0.2 -c 4 -C 20
run_pair "udaddy (UD, SIDR)" udp:7174 "test complete" udaddy -- udaddy -s 10.97.0.2
# Multicast (rdma_join_multicast): mckey's receiver in B joins GROUP and posts its receives;
# once the group shows among B's interface memberships (uroce has the kernel join it, which
# sends the IGMP / MLD report), the sender in A joins and sends 10 datagrams to it. Both must
# finish, and the group's RoCEv2 datagrams must have crossed the link (tcpdump on B's end).
# The sender's port may send its datagrams as one UDP GSO super-frame, which crosses a veth
# whole (docs/af_packet.md): tcpdump would count it once. With UDP segmentation off on A's
# end, the kernel cuts it into the engine's packets, and B's capture shows each datagram as a
# physical link would carry it.
ip netns exec "$nsA" ethtool -K "${tag}va" tx-udp-segmentation off >/dev/null
mckey_case() {  # NAME GROUP RECEIVER-ADDR SENDER-ADDR
  local name=$1 group=$2 raddr=$3 saddr=$4 fam=-4
  case $group in *:*) fam=-6 ;; esac
  ip netns exec "$nsB" timeout 60 tcpdump -i "${tag}vb" -n -c 10 --immediate-mode \
    -w "$dir/mc.pcap" "udp dst port 4791 and dst host $group" >/dev/null 2>"$dir/tcpdump.log" &
  local dump=$!
  for _ in $(seq 100); do grep -q "listening on" "$dir/tcpdump.log" && break; sleep 0.1; done
  in_ns_bg "$nsB" "${tag}vb" mckey -m "$group" -b "$raddr" -C 10 >"$dir/server.log" 2>&1 &
  local server=$! joined=0
  for _ in $(seq 200); do
    ip netns exec "$nsB" ip "$fam" maddr show dev "${tag}vb" | grep -qw "$group" && { joined=1; break; }
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  [ $joined -eq 1 ] || { echo "FAIL: $name: the receiver never joined $group on its interface"; cat "$dir/server.log"; exit 1; }
  in_ns "$nsA" "${tag}va" mckey -m "$group" -b "$saddr" -s -C 10 >"$dir/client.log" 2>&1 \
    || { echo "FAIL: $name sender"; cat "$dir/client.log"; exit 1; }
  wait "$server" || { echo "FAIL: $name receiver"; cat "$dir/server.log"; exit 1; }
  local frames=0
  wait "$dump" && frames=$(tcpdump -r "$dir/mc.pcap" -n 2>/dev/null | wc -l)
  [ "$frames" -eq 10 ] && grep -q "test complete" "$dir/server.log" \
    || { echo "FAIL: $name: $frames datagrams to $group crossed the link"; cat "$dir/server.log" "$dir/tcpdump.log"; exit 1; }
  ip netns exec "$nsB" ip "$fam" maddr show dev "${tag}vb" | grep -qw "$group" \
    && { echo "FAIL: $name: $group still joined after the receiver left"; exit 1; }
  echo "ok: $name: 10 datagrams received, $frames RoCEv2 frames to $group on the link, the group left at exit"
}
mckey_case "mckey (multicast, IPv4)" 239.1.2.3 10.97.0.2 10.97.0.1
mckey_case "mckey (multicast, IPv6)" ff0e::97 fd00:97::2 fd00:97::1

# qperf's RC tests over rdma_cm (-cm1), each 1 s, one server for all (issue 22: the
# compare-and-swap test once hung). Its UD and UC tests exchange no GID and so cannot run on
# any RoCE device (README).
qperf_tests=(rc_lat rc_bw rc_rdma_write_lat rc_rdma_write_bw rc_rdma_read_lat rc_rdma_read_bw
             rc_compare_swap_mr rc_fetch_add_mr)
if command -v qperf >/dev/null; then
  in_ns_bg "$nsB" "${tag}vb" qperf >"$dir/server.log" 2>&1 &
  server=$!
  wait_listen "$nsB" 19765 "$server" || { cat "$dir/server.log"; exit 1; }
  in_ns "$nsA" "${tag}va" qperf -cm1 -t 1 10.97.0.2 "${qperf_tests[@]}" >"$dir/client.log" 2>&1 \
    || { echo "FAIL: qperf -cm1"; cat "$dir/client.log"; exit 1; }
  for t in "${qperf_tests[@]}"; do
    grep -A1 "^$t:" "$dir/client.log" | grep -qE "(latency|bw|msg_rate) +=  [0-9.]+ " \
      || { echo "FAIL: qperf -cm1 $t gave no figure"; cat "$dir/client.log"; exit 1; }
  done
  stop_server "$server" "$nsB" 19765
  echo "ok: qperf -cm1: ${qperf_tests[*]}: $(grep -A1 '^rc_compare_swap_mr:' "$dir/client.log" | tail -1 | tr -s ' ')"
else
  echo "skip: qperf -cm1: qperf is not installed (tools/install-deps.sh)"
fi

run_pair "rdma_server / rdma_client (rdma_getaddrinfo, rdma_create_ep)" tcp:7471 "end 0" rdma_server -- rdma_client -s 10.97.0.2
run_pair "ib_send_bw -R" tcp:18515 "^ [0-9]+ +[0-9]+" ib_send_bw -d uroce0 -R -n 200 -- ib_send_bw -d uroce0 -R -n 200 10.97.0.2
run_pair "ib_write_bw -R" tcp:18515 "^ [0-9]+ +[0-9]+" ib_write_bw -d uroce0 -R -n 200 -- ib_write_bw -d uroce0 -R -n 200 10.97.0.2
run_pair "ib_read_lat -R" tcp:18515 "^ [0-9]+ +[0-9]+" ib_read_lat -d uroce0 -R -n 200 -- ib_read_lat -d uroce0 -R -n 200 10.97.0.2

# A client whose server is absent: the peer's uroce (a process on that interface, here a
# server on another port) rejects the request ("invalid service ID"); the client hears
# RDMA_CM_EVENT_REJECTED at once, it does not hang.
in_ns_bg "$nsB" "${tag}vb" rping -s -a 10.97.0.2 -p 7999 -C 1 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 7999 "$server"
rc=0
in_ns "$nsA" "${tag}va" rping -c -a 10.97.0.2 -p 7000 -C 1 >"$dir/client.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && ended "$rc" && grep -q "RDMA_CM_EVENT_REJECTED" "$dir/client.log" && clean "$dir/client.log" \
  || { echo "FAIL: client with no server: exit $rc"; cat "$dir/client.log"; exit 1; }
echo "ok: client with no server: exit $rc, $(grep REJECTED "$dir/client.log" | head -1)"

# A port whose owner died is free at once, as with the kernel's rdma_cm (the file's close frees
# it): a SIGKILLed listener's port is bound again by the next server straight away, and that
# server answers. (The listener's reservation is a kernel socket: the kernel closes it.)
# The program is timeout's child (killing timeout itself would leave it running). procps'
# pkill is not used: under the ASan stage's LD_PRELOAD it has been seen to hang.
victim=$(cat "/proc/$server/task/$server/children" 2>/dev/null || true)
[ -n "$victim" ] || { echo "FAIL: no rping under $server"; exit 1; }
kill -KILL $victim
wait "$server" 2>/dev/null || true
in_ns_bg "$nsB" "${tag}vb" rping -s -a 10.97.0.2 -p 7999 -C 3 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 7999 "$server" || { cat "$dir/server.log"; exit 1; }
in_ns "$nsA" "${tag}va" rping -c -v -V -a 10.97.0.2 -p 7999 -C 3 >"$dir/client.log" 2>&1 \
  || { echo "FAIL: rping to a port whose SIGKILLed owner was replaced"; cat "$dir/client.log" "$dir/server.log"; exit 1; }
wait "$server" || { echo "FAIL: the replacing server"; cat "$dir/server.log"; exit 1; }
echo "ok: a SIGKILLed listener's port is bound again at once: $(grep -c rdma-ping "$dir/client.log") pings"

# A peer that goes away. uroce's library tells every rdma_cm peer on the way out (DREQ), as the
# kernel's rdma_cm does when a process's file is closed: a client that exit(1)s while
# connected, or whose main returns with its connection open, leaves an rping server that hears
# DISCONNECTED and ends at once (it would otherwise wait for the client's first message).
for how in exit return; do
  in_ns_bg "$nsB" "${tag}vb" rping -s -a 10.97.0.2 -p 7990 -C 3 >"$dir/server.log" 2>&1 &
  server=$!
  wait_listen "$nsB" 7990 "$server"
  rc=0
  in_ns "$nsA" "${tag}va" "$leaver" 10.97.0.2 7990 "$how" >"$dir/client.log" 2>&1 || rc=$?
  grep -q "connected, leaving" "$dir/client.log" \
    || { echo "FAIL: rdmacm_exit $how: exit $rc"; cat "$dir/client.log"; exit 1; }
  t0=$SECONDS; src=0
  wait "$server" || src=$?
  grep -q "DISCONNECT EVENT" "$dir/server.log" && ended "$src" && [ $((SECONDS - t0)) -lt 20 ] &&
    clean "$dir/server.log" "$dir/client.log" \
    || { echo "FAIL: a client that left by $how: the server (exit $src after $((SECONDS - t0)) s) heard no DISCONNECTED, or a sanitizer spoke"
         cat "$dir/server.log" "$dir/client.log"; exit 1; }
  echo "ok: a client that left by $how (exit $rc): the server heard DISCONNECTED, ended in $((SECONDS - t0)) s"
done
# A listener destroyed with a connection request it never read: the kernel's rdma_cm destroys
# the request's new id with it, and the client hears REJECTED (consumer reject, 28) at once.
# (uroce answered nothing: the client's REQ went on until it timed out, 17 s.)
in_ns_bg "$nsB" "${tag}vb" "$leaver" 10.97.0.2 7991 unread 20 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 7991 "$server" || { cat "$dir/server.log"; exit 1; }
t0=$SECONDS; rc=0
in_ns "$nsA" "${tag}va" "$leaver" 10.97.0.2 7991 connect >"$dir/client.log" 2>&1 || rc=$?
took=$((SECONDS - t0))
# "At once": well before the 17 s a REQ takes to time out (a bound for a loaded machine, not a
# speed target; the status tells the two apart).
grep -q "RDMA_CM_EVENT_REJECTED, status 28" "$dir/client.log" && [ "$rc" = 3 ] && [ "$took" -lt 15 ] &&
  grep -q "request unread" "$dir/server.log" && clean "$dir/server.log" "$dir/client.log" \
  || { echo "FAIL: a listener destroyed with an unread request: the client (exit $rc after $took s) was not rejected at once"
       cat "$dir/client.log" "$dir/server.log"; exit 1; }
stop_server "$server" "$nsB" 7991
echo "ok: a listener destroyed with a request unread: the client was rejected (28) in $took s"

# SIGKILL leaves nothing to tell the peer (no library code runs): the survivor learns from its
# own traffic, its RC QP failing after the retry budget. ib_write_bw's client, which keeps
# WRITEs outstanding all the time, fails with a work completion error and ends instead of
# hanging. (A survivor with nothing outstanding, such as an rping waiting for its peer's next
# message, learns nothing, with the kernel's CM as with uroce: README.)
in_ns_bg "$nsB" "${tag}vb" ib_write_bw -d uroce0 -x 1 -s 65536 -D 30 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB" 18515 "$server"
in_ns_bg "$nsA" "${tag}va" stdbuf -oL ib_write_bw -d uroce0 -x 1 -s 65536 -D 30 10.97.0.2 >"$dir/client.log" 2>&1 &
client=$!
# Kill the server once the data phase runs (the client prints its table header, line-buffered
# here, when the measurement starts), not after a guessed delay: a loaded machine may still be
# connecting after seconds.
for _ in $(seq 300); do
  grep -q '#bytes' "$dir/client.log" 2>/dev/null && break
  kill -0 "$client" 2>/dev/null || break
  sleep 0.1
done
grep -q '#bytes' "$dir/client.log" || { echo "FAIL: the ib_write_bw pair never started its transfer"; cat "$dir/client.log"; exit 1; }
victim=$(cat "/proc/$server/task/$server/children" 2>/dev/null || true)
[ -n "$victim" ] || { echo "FAIL: no ib_write_bw server under $server"; cat "$dir/server.log"; exit 1; }
kill -KILL $victim; wait "$server" 2>/dev/null || true
t0=$SECONDS; crc=0
wait "$client" || crc=$?
[ "$crc" -ne 0 ] && ended "$crc" && [ $((SECONDS - t0)) -lt 20 ] && clean "$dir/client.log" &&
  grep -qE "Completion with error|status 12" "$dir/client.log" \
  || { echo "FAIL: the client of a SIGKILLed server: exit $crc after $((SECONDS - t0)) s"
       cat "$dir/client.log"; exit 1; }
echo "ok: the client of a SIGKILLed server ended in $((SECONDS - t0)) s (exit $crc): $(grep -m1 -E 'status|Completion' "$dir/client.log" | tr -s ' \t' ' ')"
