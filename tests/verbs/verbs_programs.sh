#!/usr/bin/env bash
# Unmodified Debian verbs programs over uroce between two network namespaces joined by a veth
# pair: server in one, client in the other, both on uroce's libibverbs.so.1 (af_packet port).
# Checks that both sides exit 0 and report their figures.
# Usage: verbs_programs.sh LIBDIR UROCE DISSECT. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1 uroce=$2 dissect=$3
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v ibv_rc_pingpong >/dev/null && command -v ib_write_bw >/dev/null \
  || { echo "SKIP: ibverbs-utils / perftest not installed"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test, wait_listen
tag=p$$
# Both ends have an IPv4 address and a global IPv6 one (GID index 2), in these namespaces only.
ns_test "$tag" 10.95.0.1/24 10.95.0.2/24 fd00:95::1/64 fd00:95::2/64

run_pair() {  # NAME SERVER-ARGS... -- CLIENT-EXTRA-ARGS...
  local name=$1; shift
  local args=() ; while [ "$1" != "--" ]; do args+=("$1"); shift; done; shift
  ip netns exec "$nsB" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}vb" \
    timeout 60 "${args[@]}" >"$dir/server.log" 2>&1 &
  local server=$!
  wait_listen "$nsB"
  if ! ip netns exec "$nsA" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}va" \
      timeout 60 "${args[@]}" "$@" 10.95.0.2 >"$dir/client.log" 2>&1; then
    echo "FAIL: $name client"; cat "$dir/client.log"; cat "$dir/server.log"; exit 1
  fi
  if ! wait "$server"; then echo "FAIL: $name server"; cat "$dir/server.log"; exit 1; fi
  local result
  result=$(grep -E 'iters in|^ [0-9]+ +[0-9]+|^success$' "$dir/client.log" | tail -1 | tr -s ' \t' ' ')
  [ -n "$result" ] || { echo "FAIL: $name printed no result"; cat "$dir/client.log"; exit 1; }
  echo "ok: $name: $result"
}

# `uroce run` with a traffic capture that uroce-dissect reads cleanly.
ip netns exec "$nsB" "$uroce" run --iface "${tag}vb" -- timeout 60 ib_write_bw -d uroce0 -x 1 \
  -s 4096 -n 100 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB"
ip netns exec "$nsA" "$uroce" run --iface "${tag}va" --pcap "$dir/trace.pcap" -- timeout 60 \
  ib_write_bw -d uroce0 -x 1 -s 4096 -n 100 10.95.0.2 >"$dir/client.log" 2>&1 \
  || { echo "FAIL: uroce run client"; cat "$dir/client.log"; exit 1; }
wait "$server" || { echo "FAIL: uroce run server"; cat "$dir/server.log"; exit 1; }
summary=$("$dissect" "$dir/trace.pcap" | tail -1)
echo "$summary" | grep -qE 'bad ICRC 0\), other [0-9]+, malformed 0; .*RC_RDMA_WRITE_FIRST [0-9]+' \
  || { echo "FAIL: the capture of uroce run --pcap: $summary"; exit 1; }
echo "ok: uroce run --pcap: $summary"
# The verbs side beside it (trace.pcap.verbs): ib_write_bw posted its 100 WRITEs (perftest
# posts one WR per message) and saw completions, and --ladder draws them.
posts=$(awk -F'\t' '$2 == "post_send" && $5 == "RDMA_WRITE"' "$dir/trace.pcap.verbs" | wc -l)
comps=$(awk -F'\t' '$2 == "completion" && $7 == "success"' "$dir/trace.pcap.verbs" | wc -l)
[ "$posts" -ge 100 ] && [ "$comps" -ge 1 ] \
  || { echo "FAIL: trace.pcap.verbs: $posts RDMA_WRITE posts, $comps completions"; head "$dir/trace.pcap.verbs"; exit 1; }
"$dissect" --ladder "$dir/trace.html" "$dir/trace.pcap" >/dev/null
grep -q "\"verbs\":$(grep -c '^[0-9]' "$dir/trace.pcap.verbs")," "$dir/trace.html" \
  || { echo "FAIL: the ladder of the capture did not take the .verbs file's events"; exit 1; }
echo "ok: uroce run --pcap also wrote trace.pcap.verbs: $posts RDMA_WRITE posts, $comps completions, drawn by --ladder"

run_pair ibv_rc_pingpong ibv_rc_pingpong -d uroce0 -g 1 -n 200 --
run_pair "ibv_rc_pingpong -e" ibv_rc_pingpong -d uroce0 -g 1 -n 100 -e --
run_pair "ibv_rc_pingpong -N (ibv_wr_* API)" ibv_rc_pingpong -d uroce0 -g 1 -n 100 -N -c --
run_pair ibv_uc_pingpong ibv_uc_pingpong -d uroce0 -g 1 -n 100 --
run_pair ibv_ud_pingpong ibv_ud_pingpong -d uroce0 -g 1 -n 100 --
run_pair ibv_srq_pingpong ibv_srq_pingpong -d uroce0 -g 1 -n 100 --
# XRC: an initiator QP sends into the XRC SRQ its peer's target QP names (4 KiB = 4 packets at
# MTU 1024; 20000 B with completion events). One client: with several, rdma-core's example
# has its clients share an XRC domain through a file across processes (README).
xrc_file_was_there=$([ -e /tmp/xrc_domain ] && echo 1 || true)
run_pair "ibv_xsrq_pingpong (XRC)" ibv_xsrq_pingpong -d uroce0 -g 1 -n 100 --
run_pair "ibv_xsrq_pingpong -e -s 20000 (XRC)" ibv_xsrq_pingpong -d uroce0 -g 1 -n 50 -e -s 20000 --
[ -n "$xrc_file_was_there" ] || rm -f /tmp/xrc_domain  # the example's domain file
# Every GID: index 0, the fe80:: link-local GID (neighbour discovery asks from the link-local
# address), and index 2, the interfaces' global IPv6 address (RoCEv2 over IPv6).
run_pair "ibv_rc_pingpong -g 0 (link-local)" ibv_rc_pingpong -d uroce0 -g 0 -n 100 --
run_pair "ibv_ud_pingpong -g 0 (link-local)" ibv_ud_pingpong -d uroce0 -g 0 -n 50 --
run_pair "ib_write_bw -x 0 (link-local)" ib_write_bw -d uroce0 -x 0 -s 65536 -n 200 --
run_pair "ibv_rc_pingpong -g 2 (global IPv6)" ibv_rc_pingpong -d uroce0 -g 2 -n 100 --
run_pair "ib_write_bw -x 2 (global IPv6)" ib_write_bw -d uroce0 -x 2 -s 65536 -n 200 --
run_pair "ib_write_bw 64 KiB" ib_write_bw -d uroce0 -x 1 -s 65536 -n 200 --
run_pair "ib_write_bw -a (2 B .. 8 MiB)" ib_write_bw -d uroce0 -x 1 -a -n 20 --
run_pair "ib_send_bw 4 KiB" ib_send_bw -d uroce0 -x 1 -s 4096 -n 200 --
run_pair "ib_send_bw 1 MiB" ib_send_bw -d uroce0 -x 1 -s 1048576 -n 20 --
run_pair "ib_read_bw 4 KiB" ib_read_bw -d uroce0 -x 1 -s 4096 -n 200 --
run_pair "ib_read_bw 1 MiB" ib_read_bw -d uroce0 -x 1 -s 1048576 -n 20 --
run_pair "ib_atomic_bw" ib_atomic_bw -d uroce0 -x 1 -n 200 --
run_pair "ib_send_lat 8 B" ib_send_lat -d uroce0 -x 1 -s 8 -n 100 --
run_pair "ib_write_lat 8 B" ib_write_lat -d uroce0 -x 1 -s 8 -n 100 --
run_pair "ib_read_lat 8 B" ib_read_lat -d uroce0 -x 1 -s 8 -n 100 --
run_pair "ib_atomic_lat" ib_atomic_lat -d uroce0 -x 1 -n 100 --
run_pair "ib_send_bw -c UD" ib_send_bw -d uroce0 -x 1 -c UD -s 1024 -n 200 --
run_pair "ib_send_lat -c UD" ib_send_lat -d uroce0 -x 1 -c UD -s 8 -n 100 --
run_pair "ib_send_bw -c UC" ib_send_bw -d uroce0 -x 1 -c UC -s 4096 -n 200 --
run_pair "ib_write_bw -c UC" ib_write_bw -d uroce0 -x 1 -c UC -s 4096 -n 200 --
run_pair "ib_send_bw --use-srq" ib_send_bw -d uroce0 -x 1 --use-srq -s 4096 -n 200 --
run_pair "ib_send_bw -e (completion events)" ib_send_bw -d uroce0 -x 1 -e -s 4096 -n 200 --

# Two processes on one device (both on uroce0 = the same interface in the same namespace),
# as with any RDMA device: each claims its own block of QPNs and sees the other's frames.
same_device() {  # NAME ARGS...
  local name=$1; shift
  ip netns exec "$nsB" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}vb" \
    timeout 60 "$@" >"$dir/server.log" 2>&1 &
  local server=$!
  wait_listen "$nsB"
  ip netns exec "$nsB" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}vb" \
    timeout 60 "$@" 10.95.0.2 >"$dir/client.log" 2>&1 \
    || { echo "FAIL: $name (same device) client"; cat "$dir/client.log" "$dir/server.log"; exit 1; }
  wait "$server" || { echo "FAIL: $name (same device) server"; cat "$dir/server.log"; exit 1; }
  echo "ok: $name, two processes on one device: $(grep -E 'iters in|^ [0-9]+ +[0-9]+' "$dir/client.log" | tail -1 | tr -s ' \t' ' ')"
}
same_device "ibv_rc_pingpong" ibv_rc_pingpong -d uroce0 -g 1 -n 100 -c
same_device "ib_write_bw 64 KiB" ib_write_bw -d uroce0 -x 1 -s 65536 -n 200

# Failure: a client with no server exits with an error at once, it does not hang.
rc=0
ip netns exec "$nsA" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}va" \
  timeout 30 ib_write_bw -d uroce0 -x 1 -s 4096 -n 10 10.95.0.2 >"$dir/client.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -qi "couldn't connect" "$dir/client.log" \
  || { echo "FAIL: client with no server: exit $rc"; cat "$dir/client.log"; exit 1; }
echo "ok: client with no server: exit $rc, $(grep -i "couldn't connect" "$dir/client.log" | head -1)"

# Failure: the server dies mid-transfer. The client must fail cleanly (completion error,
# non-zero exit) well within its timeout, not hang.
ip netns exec "$nsB" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}vb" \
  timeout 60 ib_write_bw -d uroce0 -x 1 -s 65536 -n 1000000 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$nsB"
ip netns exec "$nsA" env LD_LIBRARY_PATH="$lib" UROCE_IFACE="${tag}va" \
  timeout 60 stdbuf -oL ib_write_bw -d uroce0 -x 1 -s 65536 -n 1000000 10.95.0.2 \
  >"$dir/client.log" 2>&1 &
client=$!
# Kill it once the transfer runs (perftest prints its table header, line-buffered here, when
# the measurement starts), not after a guessed delay: a loaded machine may still be
# connecting after seconds.
for _ in $(seq 300); do
  grep -q '#bytes' "$dir/client.log" 2>/dev/null && break
  kill -0 "$client" 2>/dev/null || break
  sleep 0.1
done
grep -q '#bytes' "$dir/client.log" || { echo "FAIL: the transfer never started"; cat "$dir/client.log"; exit 1; }
ip netns pids "$nsB" | xargs -r kill -9
wait "$server" 2>/dev/null || true
start=$(date +%s)
rc=0
wait "$client" || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: client succeeded although the server died"; exit 1; }
took=$(( $(date +%s) - start ))
[ "$rc" -ne 124 ] || { echo "FAIL: client hung until timeout"; cat "$dir/client.log"; exit 1; }
grep -qiE "completion with error|failed status 12|RETRY_EXC" "$dir/client.log" \
  || { echo "FAIL: client did not report the failed completion"; cat "$dir/client.log"; exit 1; }
echo "ok: server killed mid-transfer: client failed cleanly after ${took}s (exit $rc): $(grep -iE 'completion with error|status' "$dir/client.log" | head -1)"
