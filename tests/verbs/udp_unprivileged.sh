#!/usr/bin/env bash
# Unmodified verbs programs as an ordinary user (uid 65534, no capabilities) over uroce's UDP
# port on loopback: no root, no network namespace, no kernel module, no setup. Each process
# takes its own loopback address (127.81.N.2 server, .3 client); the programs' own TCP
# exchange goes to 127.0.0.1. Then the same with nothing configured at all (`uroce run` picks
# the port and a free 127.0.0.x per process; rdma_cm clients reach 127.0.0.1). As root the script drops to uid 65534 with setpriv (and checks
# that no capability is left); as anyone else it runs as that user.
# Usage: udp_unprivileged.sh LIBDIR UROCE
set -euo pipefail
lib=$1 uroce=$2
for p in ibv_rc_pingpong ib_write_bw rping; do
  command -v $p >/dev/null || { echo "SKIP: $p not installed (ibverbs-utils, perftest, rdmacm-utils)"; exit 77; }
done
# In the sanitizer stage the ASan/UBSan runtimes are preloaded for the programs only.
preload=${LD_PRELOAD:-}
unset LD_PRELOAD
# A copy of the libraries and `uroce` that uid 65534 can read, wherever the build tree is.
work=$(mktemp -d /tmp/uroce-udp.XXXXXX)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT
cp -a "$lib"/lib*.so* "$work/"
cp "$uroce" "$work/uroce"
chmod -R a+rX "$work"
as_user=()
if [ "$(id -u)" -eq 0 ]; then
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all)
fi
who=$("${as_user[@]}" sh -c 'echo "uid $(id -u), CapEff $(sed -n "s/^CapEff:\t//p" /proc/self/status)"')
case $who in
  "uid 0,"*) echo "FAIL: the programs would run as root: $who"; exit 1 ;;
  *"CapEff 0000000000000000") ;;
  *) echo "FAIL: the programs would keep capabilities: $who"; exit 1 ;;
esac
echo "as $who"

net=127.81.$(( $$ % 250 ))
srv=$net.2 cli=$net.3
tcp=$(( 20000 + $$ % 20000 ))  # the programs' exchange port, one per run
log=$work/log
mkdir "$log"

# on ADDR PROG ARGS...: PROG under `uroce run` on the UDP port bound to ADDR, as the user.
on() {
  local addr=$1; shift
  (cd / && "${as_user[@]}" env LD_PRELOAD="$preload" UROCE_PORT=udp UROCE_LIB_DIR="$work" \
     "$work/uroce" run --ipv4 "$addr" -- timeout 60 "$@")
}
wait_tcp() {  # PORT PID: until something listens on TCP PORT (20 s), or PID ends
  for _ in $(seq 200); do
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "server never listened on TCP $1"; return 1
}

run_pair() {  # NAME PORT EXPECT SERVER-ARGS... -- CLIENT-ARGS...
  local name=$1 port=$2 expect=$3; shift 3
  local sargs=(); while [ "$1" != "--" ]; do sargs+=("$1"); shift; done; shift
  on "$srv" "${sargs[@]}" >"$log/server" 2>&1 &
  local server=$!
  wait_tcp "$port" "$server" || { cat "$log/server"; exit 1; }
  if ! on "$cli" "$@" >"$log/client" 2>&1; then
    echo "FAIL: $name client"; cat "$log/client"; echo "-- server:"; cat "$log/server"; exit 1
  fi
  wait "$server" || { echo "FAIL: $name server"; cat "$log/server"; exit 1; }
  grep -qE "$expect" "$log/client" \
    || { echo "FAIL: $name: no '$expect' in the client's output"; cat "$log/client"; exit 1; }
  echo "ok: $name: $(grep -E "$expect" "$log/client" | tail -1 | tr -s ' \t' ' ')"
  tcp=$((tcp + 1))
}

pp() {  # NAME PROG ARGS...: a pingpong pair
  local name=$1; shift
  run_pair "$name" "$tcp" 'iters in|^success$' "$@" -g 1 -p "$tcp" -- "$@" -g 1 -p "$tcp" 127.0.0.1
}
pf() {  # NAME PROG ARGS...: a perftest pair
  local name=$1; shift
  run_pair "$name" "$tcp" '^ [0-9]+ +[0-9]+' "$@" -x 1 -p "$tcp" -- "$@" -x 1 -p "$tcp" 127.0.0.1
}

pp ibv_rc_pingpong ibv_rc_pingpong -n 500
pp "ibv_rc_pingpong -e" ibv_rc_pingpong -n 200 -e
pp ibv_uc_pingpong ibv_uc_pingpong -n 200
pp ibv_ud_pingpong ibv_ud_pingpong -n 200
pp ibv_srq_pingpong ibv_srq_pingpong -n 200
pp ibv_xsrq_pingpong ibv_xsrq_pingpong -n 100
pf "ib_write_bw 64 KiB" ib_write_bw -s 65536 -n 500
pf "ib_read_bw 64 KiB" ib_read_bw -s 65536 -n 500
pf "ib_send_bw 64 KiB" ib_send_bw -s 65536 -n 500
pf ib_atomic_bw ib_atomic_bw -n 500
pf ib_write_lat ib_write_lat -n 500
pf ib_send_lat ib_send_lat -n 500
pf ib_read_lat ib_read_lat -n 500
pf ib_atomic_lat ib_atomic_lat -n 500
# librdmacm: rping verifies every byte (-V); ucmatose connects, sends, disconnects.
run_pair "rping -V" 7174 "rdma-ping-9:" rping -s -a "$srv" -C 10 -V -- rping -c -v -V -a "$srv" -C 10
run_pair ucmatose 7471 "return status 0" ucmatose -b "$srv" -- ucmatose -s "$srv"

# Two programs on one address (SO_REUSEPORT; a classic-BPF program steers each datagram to the
# process of its QP, QP1's reach every process: docs/udp.md): two servers bound to $srv at once,
# each with a client of its own, PORT in the arguments standing for each one's port (the
# pingpongs wait for completion events: four programs spinning on two cores would crawl).
shared_pairs() {  # NAME EXPECT PORT1 PORT2 SERVER-ARGS... -- CLIENT-ARGS...
  local name=$1 expect=$2 ports=("$3" "$4"); shift 4
  local sargs=(); while [ "$1" != "--" ]; do sargs+=("$1"); shift; done; shift
  local pids=() p k
  for p in "${ports[@]}"; do
    on "$srv" "${sargs[@]/PORT/$p}" >"$log/server$p" 2>&1 &
    pids+=($!)
    wait_tcp "$p" "${pids[-1]}" || { cat "$log/server$p"; exit 1; }
  done
  for k in 0 1; do
    p=${ports[$k]}
    on "$net.$((4 + k))" "${@/PORT/$p}" >"$log/client$p" 2>&1 &
    pids+=($!)
  done
  local bad=""
  for k in 0 1 2 3; do wait "${pids[$k]}" || bad="$bad ${pids[$k]}"; done
  for p in "${ports[@]}"; do grep -qE "$expect" "$log/client$p" || bad="$bad client$p"; done
  if [ -n "$bad" ]; then
    echo "FAIL: $name:$bad"
    for p in "${ports[@]}"; do tail -n 20 "$log/server$p" "$log/client$p"; done
    exit 1
  fi
  local said=()
  for p in "${ports[@]}"; do said+=("$(grep -E "$expect" "$log/client$p" | tail -1 | tr -s ' \t' ' ')"); done
  echo "ok: $name: ${said[0]} | ${said[1]}"
}
shared_pairs "two ibv_rc_pingpong servers on one address" 'iters in' "$tcp" "$((tcp + 1))" \
  ibv_rc_pingpong -e -g 1 -n 300 -p PORT -- ibv_rc_pingpong -e -g 1 -n 300 -p PORT 127.0.0.1
tcp=$((tcp + 2))
shared_pairs "two rping -V servers on one address" 'rdma-ping-9:' 7174 7175 \
  rping -s -a "$srv" -p PORT -C 10 -V -- rping -c -v -V -a "$srv" -p PORT -C 10

# Nothing configured at all (no file, no UROCE_* device setting): `uroce run` picks the UDP
# port on loopback, each process takes a free 127.0.0.x, and a client reaches the server at
# 127.0.0.1, as the programs' man pages say, rdma_cm included (the rendezvous, docs/udp.md).
on() {
  local addr=$1; shift
  (cd / && "${as_user[@]}" env LD_PRELOAD="$preload" UROCE_CONFIG=/dev/null UROCE_LIB_DIR="$work" \
     "$work/uroce" run -- timeout 60 "$@")
}
zero_pair() {  # like run_pair; each side said which device it took, and got one of its own
  run_pair "$@"
  local said="uroce: no device configured: uroce0 is the udp port on loopback"
  grep -q "$said" "$log/server" && grep -q "$said" "$log/client" \
    || { echo "FAIL: $1: no line saying what was picked"; cat "$log/server" "$log/client"; exit 1; }
}
zero_pair "ibv_rc_pingpong, nothing configured" "$tcp" '^ *[0-9]+ bytes in' \
  ibv_rc_pingpong -g 1 -n 200 -p "$tcp" -- ibv_rc_pingpong -g 1 -n 200 -p "$tcp" 127.0.0.1
zero_pair "ib_write_bw -R (rdma_cm), nothing configured" "$tcp" '^ [0-9]+ +[0-9]+' \
  ib_write_bw -R -s 65536 -n 200 -p "$tcp" -- ib_write_bw -R -s 65536 -n 200 -p "$tcp" 127.0.0.1
zero_pair "rping -V, nothing configured" 7174 "rdma-ping-9:" \
  rping -s -C 10 -V -- rping -c -v -V -a 127.0.0.1 -C 10
zero_pair "ucmatose, nothing configured" 7471 "return status 0" \
  ucmatose -- ucmatose -s 127.0.0.1

# The device view without root: a user and mount namespace in which the program keeps its uid
# and has no capability sees /dev/infiniband/uverbs-uroce0 and /sys/class/infiniband/uroce0
# (how UCX, MPI and rdma-core's tests find a device); the host's own view does not change.
view=$(on - sh -c 'echo "uid $(id -u) CapEff $(sed -n "s/^CapEff:\t//p" /proc/self/status)"
  [ -c /dev/infiniband/uverbs-uroce0 ] && echo node
  ls /sys/class/infiniband/uroce0/device/net/; echo x >/dev/null && echo null' 2>&1)
[ "$(echo "$view" | grep -v '^uroce:' | tr '\n' ' ')" = "uid 65534 CapEff 0000000000000000 node lo null " ] \
  || { echo "FAIL: the device view without root:"; echo "$view"; exit 1; }
[ ! -e /dev/infiniband/uverbs-uroce0 ] && [ ! -e /sys/class/infiniband/uroce0 ] \
  || { echo "FAIL: the device showed in the host's own /dev or /sys/class"; exit 1; }
echo "ok: uroce run without root: /dev/infiniband/uverbs-uroce0 and /sys/class/infiniband/uroce0/device/net/lo, as uid 65534 with no capability"

# `uroce doctor` tells the user what works here, and for what does not, why and the fix.
doc=$( (cd / && "${as_user[@]}" env UROCE_CONFIG=/dev/null "$work/uroce" doctor 2>&1)) \
  || { echo "FAIL: uroce doctor as the user exited non-zero:"; echo "$doc"; exit 1; }
for want in '^udp +yes ' '^af_packet +no .*CAP_NET_RAW.*udp port' '^af_xdp +no ' \
            '^device view +yes ' '^rdma_cm on lo +yes ' '^configuration: none'; do
  echo "$doc" | grep -qE "$want" || { echo "FAIL: uroce doctor as the user: no '$want'"; echo "$doc"; exit 1; }
done
if [ "$(id -u)" -eq 0 ]; then
  root_doc=$(UROCE_CONFIG=/dev/null "$work/uroce" doctor 2>&1)
  echo "$root_doc" | grep -qE '^af_packet +yes ' \
    || { echo "FAIL: uroce doctor as root: af_packet not usable?"; echo "$root_doc"; exit 1; }
fi
echo "ok: uroce doctor as the user: $(echo "$doc" | grep -cE '^.{19}yes ') rows yes, $(echo "$doc" | grep -cE '^.{19}no ') no, each with its fix"

# UCX (UCT and UCP, held to the verbs transports) and the MPIs over UCX, nothing configured.
if command -v ucx_perftest >/dev/null; then
  export UCX_NET_DEVICES=uroce0:1 UCX_TLS=rc_verbs,ud_verbs,self
  zero_pair "ucx_perftest rc_verbs put_bw, nothing configured" 13337 "^Final:" \
    ucx_perftest -d uroce0:1 -x rc_verbs -- \
    ucx_perftest 127.0.0.1 -d uroce0:1 -x rc_verbs -t put_bw -n 200 -s 65536 -D zcopy
  zero_pair "ucx_perftest UCP tag_bw 1 MiB, nothing configured" 13337 "^Final:" \
    ucx_perftest -- ucx_perftest 127.0.0.1 -t tag_bw -n 50 -s 1048576
  # Two ranks on this host, each its own 127.0.0.x; the ping-pong checks every byte, and lo
  # carried at least that much.
  mpi() {  # NAME MPICC LAUNCHER...
    local name=$1 cc=$2; shift 2
    command -v "$cc" >/dev/null || { echo "SKIP: $name: no $cc"; return 0; }
    "$cc" -O2 -o "$work/mpi_pp_$name" "$(dirname "$0")/mpi_pingpong.c"
    chmod a+rx "$work/mpi_pp_$name"
    local tx0 tx1 verified
    tx0=$(cat /sys/class/net/lo/statistics/tx_bytes)
    HOME=$work/home on - timeout 120 "$@" "$work/mpi_pp_$name" >"$log/$name" 2>&1 \
      || { echo "FAIL: $name"; cat "$log/$name"; exit 1; }
    tx1=$(cat /sys/class/net/lo/statistics/tx_bytes)
    verified=$(sed -n 's/^verified \([0-9]*\) bytes each way$/\1/p' "$log/$name")
    [ -n "$verified" ] && [ $((tx1 - tx0)) -ge $((2 * verified)) ] \
      || { echo "FAIL: $name: verified '$verified', lo carried $((tx1 - tx0))"; cat "$log/$name"; exit 1; }
    echo "ok: $name over UCX, two ranks, nothing configured: $verified bytes verified each way"
  }
  # libfabric's verbs provider (msg, and rdm over ofi_rxm's rdma_cm connections): it binds
  # the interface's 127.0.0.1, which is the device on loopback here.
  if command -v fi_pingpong >/dev/null; then
    zero_pair "fi_pingpong verbs msg, nothing configured" 47592 "^1k " \
      fi_pingpong -p verbs -e msg -I 100 -- fi_pingpong -p verbs -e msg -I 100 127.0.0.1
    zero_pair "fi_pingpong verbs;ofi_rxm rdm, nothing configured" 47592 "^1k " \
      fi_pingpong -p "verbs;ofi_rxm" -e rdm -I 100 -- \
      fi_pingpong -p "verbs;ofi_rxm" -e rdm -I 100 127.0.0.1
  fi
  mkdir -m 0777 "$work/home"  # the MPIs' own files, as the user
  mpi openmpi mpicc.openmpi mpirun.openmpi --oversubscribe --bind-to none -np 2 \
    --mca pml ucx --mca btl self --mca osc ^ucx -x UCX_NET_DEVICES -x UCX_TLS
  mpi mpich mpicc.mpich mpiexec.mpich -n 2
fi
echo "all as $who over the UDP port on loopback"
