#!/usr/bin/env bash
# Link faults under load (issue 22): rdma_verify (tests/interop/rdma_verify.c: WRITE, READ
# back, atomics, SEND with immediate, every byte checked) between two uroce processes in two
# namespaces while the veth link between them goes down and comes back, or changes its MTU.
#   - down 2 s, with a retry budget longer than that (local ACK timeout 2^18 * 4.096 us =
#     1.07 s, 7 retries): the transfer finishes and every byte is right;
#   - down for good, with a budget of 8 x 2^16 * 4.096 us = 2.15 s: the QP with a request
#     outstanding (the client's, or the server's answer) fails with IBV_WC_RETRY_EXC_ERR
#     (status 12) in about that time after the link went down;
#   - the MTU lowered from 9000 to 1500 while QPs run with path MTU 1024: nothing changes;
#   - the MTU lowered to 1500 under QPs with path MTU 4096: their packets no longer fit, so
#     they are lost as on a wire, and the client fails with status 12 as above, not a hang.
# The transfers that must finish run 2000 rounds, enough to span the fault on a fast machine
# (it comes within ~50 ms of round 100). How long they then take is no test's business: in
# the sanitizer stage, beside a CPU hog and other tests' busy-polling programs on 2 cores, a
# round took 20 ms (issue 40: 5000 rounds were not done 90 s after the fault, though every
# 50 rounds still came). A pair fails when it stops moving: no new round for 60 s after the
# fault ended is shown (uroce stats: counters and each QP's PSNs, timer and waits) and ended.
# Usage: link_faults.sh LIBDIR RDMA_VERIFY UROCE. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1 verify=$2 uroce=$3
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test
tag=lf$$
ns_test "$tag" 10.98.0.1/24 10.98.0.2/24 fd00:98::1/64 fd00:98::2/64

ms() { echo $(( $(date +%s%N) / 1000000 )); }
set_mtu() { ip -n "$nsA" link set "${tag}va" mtu "$1"; ip -n "$nsB" link set "${tag}vb" mtu "$1"; }

# start_pair ROUNDS ARGS...: the server in B, the client in A (printing every 50th round),
# both in the background; sets server and client.
start_pair() {
  local rounds=$1; shift
  ip netns exec "$nsB" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}vb" \
    timeout 600 "$verify" -d uroce0 -g 1 -n "$rounds" "$@" >"$dir/server.log" 2>&1 &
  server=$!
  wait_listen "$nsB" 18600 "$server"
  ip netns exec "$nsA" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}va" \
    timeout 600 stdbuf -oL "$verify" -d uroce0 -g 1 -n "$rounds" -P 50 "$@" 10.98.0.2 >"$dir/client.log" 2>&1 &
  client=$!
}
# wait_round K: until the client has printed round K (the transfer runs), or has ended.
wait_round() {
  for _ in $(seq 600); do
    grep -q "round $1\$" "$dir/client.log" 2>/dev/null && return 0
    kill -0 "$client" 2>/dev/null || break
    sleep 0.05
  done
  echo "FAIL: the client never reached round $1"; show_logs; exit 1
}
# alive WHAT: the client still runs now, so the fault happened under its traffic.
alive() {
  kill -0 "$client" 2>/dev/null \
    || { echo "FAIL: the client ended before $1: not a test of it"; show_logs; exit 1; }
}
# show_state WHO NS: where a stuck rdma_verify is: its log's end, its uroce counters and QP
# states, its threads.
show_state() {
  local p
  echo "-- the $1's state:"; tail -3 "$dir/$1.log"
  p=$(ip netns pids "$2" | while read -r q; do
        grep -q rdma_verify "/proc/$q/comm" 2>/dev/null && echo "$q"; done | head -1)
  [ -n "$p" ] || return 0
  "$uroce" stats "$p" 2>&1 | grep -vE ' 0  ' | head -80
  for t in /proc/"$p"/task/*; do
    echo "thread $(cat "$t/comm") state $(awk '{print $3}' "$t/stat") wchan $(cat "$t/wchan")"
  done
}
must_verify() {  # NAME: both ends exit 0, the server having checked every round
  # Whichever side ends first is waited for first: a server that failed leaves the client
  # waiting for an answer that never comes, and the server's log then says why.
  local rc=0 t0 who=client moved last="" now_at
  t0=$(ms) moved=$t0
  while kill -0 "$client" 2>/dev/null && kill -0 "$server" 2>/dev/null; do
    now_at=$(tail -1 "$dir/client.log" 2>/dev/null)
    [ "$now_at" = "$last" ] || { last=$now_at; moved=$(ms); }
    if [ $(( $(ms) - moved )) -gt 60000 ]; then  # a stall, not slowness: look before `timeout`
      echo "FAIL: $1: no round for 60 s ($(( $(ms) - t0 )) ms after the fault ended; last: $last)"
      show_state client "$nsA"; show_state server "$nsB"; show_logs; exit 1
    fi
    sleep 0.1
  done
  kill -0 "$client" 2>/dev/null && who=server
  if [ $who = server ]; then
    wait "$server" || rc=$?
    [ $rc -eq 0 ] || { echo "FAIL: $1: server exit $rc, $(( $(ms) - t0 )) ms after the fault ended"
                       show_logs; exit 1; }
  fi
  rc=0
  wait "$client" || rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: $1: client exit $rc, $(( $(ms) - t0 )) ms after the fault ended"
                     show_logs; exit 1; }
  wait "$server" || { echo "FAIL: $1: server"; show_logs; exit 1; }
  grep -q "verified" "$dir/server.log" || { echo "FAIL: $1: server did not verify"; show_logs; exit 1; }
}
# show_logs: the end of both logs (the client prints a line every 50 rounds: its tail says
# where it stopped).
show_logs() {
  echo "-- client (last lines of $(wc -l < "$dir/client.log")):"; tail -5 "$dir/client.log"
  echo "-- server:"; tail -20 "$dir/server.log"
}
# must_fail_in NAME SINCE-MS LOW-MS HIGH-MS: the side with a request outstanding when the
# fault came fails with status 12 between LOW and HIGH ms after SINCE. That is the client,
# unless the fault caught it waiting only for the server's answer SEND: then the server's
# answer is the request that runs out of retries, and the client, whose receive has no
# timeout in RC (as on any RNIC), waits until it is ended here.
must_fail_in() {
  local who="" took=0
  for _ in $(seq 200); do
    if ! kill -0 "$client" 2>/dev/null; then who=client; break; fi
    if ! kill -0 "$server" 2>/dev/null; then who=server; break; fi
    sleep 0.1
  done
  took=$(( $(ms) - $2 ))
  if [ -z "$who" ]; then
    # Neither ended 20 s after the fault (8 x 268 ms of retries): say where the client is.
    show_state client "$nsA"
    exit 1
  fi
  local rc=0 log=$dir/$who.log
  if [ $who = client ]; then wait "$client" || rc=$?; kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
  else wait "$server" || rc=$?; kill "$client" 2>/dev/null || true; wait "$client" 2>/dev/null || true; fi
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: $1: $who exit $rc"; show_logs; exit 1; }
  grep -q "(12)" "$log" || { echo "FAIL: $1: $who: not IBV_WC_RETRY_EXC_ERR"; show_logs; exit 1; }
  [ "$took" -ge "$3" ] && [ "$took" -le "$4" ] \
    || { echo "FAIL: $1: the $who failed ${took} ms after the fault, expected $3..$4 ms"; show_logs; exit 1; }
  echo "ok: $1: the $who got status 12 after ${took} ms ($(grep -o '[A-Z ]*: completion status.*' "$log" | head -1))"
}

# 1. Down for 2 s mid-transfer, a retry budget of 8.6 s: nothing is lost.
start_pair 2000 -s 20000 -m 1024 -t 18
wait_round 100
# uroce stats shows the running QP: its type, state and transport fields. The counters file
# is refreshed every 100 ms, and 100 rounds can take less: a look may find the QP as it was
# at connection time, so look again until the next refresh shows it in RTS (5 s at most).
qp_line='^  qp 0x[0-9a-f]{6} RC RTS: send [0-9]+ posted, next PSN 0x[0-9a-f]{6}, .*ePSN 0x[0-9a-f]{6}, MSN [0-9]+'
for _ in $(seq 50); do
  "$uroce" stats >"$dir/stats.log" 2>&1
  grep -qE "$qp_line" "$dir/stats.log" && break
  sleep 0.1
done
grep -qE "$qp_line" "$dir/stats.log" \
  || { echo "FAIL: uroce stats shows no RC QP in RTS"; cat "$dir/stats.log"; exit 1; }
ip -n "$nsA" link set "${tag}va" down
sleep 2
ip -n "$nsA" link set "${tag}va" up
alive "the link came back"
t=$(ms)
must_verify "link down 2 s"
echo "ok: link down for 2 s mid-transfer, done $(( $(ms) - t )) ms after: $(tail -1 "$dir/client.log")"

# 2. Down for good: retries run out 8 x 1.07 ms * 2^8 ~ 2.15 s after the first lost packet.
start_pair 100000 -s 20000 -m 1024 -t 16
wait_round 100
since=$(ms)  # before the fault: no packet can be lost earlier, however slow this machine
ip -n "$nsA" link set "${tag}va" down
must_fail_in "link down for good" "$since" 1900 10000
ip -n "$nsA" link set "${tag}va" up

# 3. The MTU shrinks under QPs that fit: nothing changes.
set_mtu 9000
start_pair 2000 -s 20000 -m 1024 -t 18
wait_round 100
set_mtu 1500
alive "the MTU changed"
t=$(ms)
must_verify "MTU 9000 -> 1500 under path MTU 1024"
echo "ok: MTU 9000 -> 1500 mid-transfer under path MTU 1024, done $(( $(ms) - t )) ms after: $(tail -1 "$dir/client.log")"

# 4. The MTU shrinks under QPs whose packets no longer fit: lost, then status 12.
set_mtu 9000
start_pair 100000 -s 20000 -m 4096 -t 16
wait_round 100
since=$(ms)
set_mtu 1500
must_fail_in "MTU 9000 -> 1500 under path MTU 4096" "$since" 1900 10000
