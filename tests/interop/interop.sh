#!/usr/bin/env bash
# Live interoperability with the Linux kernel's Soft-RoCE (rdma_rxe): unmodified verbs programs,
# one side on uroce (host, in a network namespace), the other on rdma_rxe inside a qemu VM booted
# with ../shared/rxe-vm. Both directions, MTU 1024 and 4096, clean links and lossy/reordering
# ones (tc netem in the guest, uroce's own fault injector on the host).
#
#   interop.sh start            build the VM image if needed, create the link, boot the VM agent
#   interop.sh case NAME        run one case (see `interop.sh list`)
#   interop.sh stop             power the VM off, remove the link
#   interop.sh list             the cases, one per line
#   interop.sh conform          uroce-conform's cases against rdma_rxe (docs/conformance.md)
#   interop.sh all              start + every case + stop (by hand; ctest runs them one by one)
#
# Topology (all created here, nothing else is touched):
#
#   netns urix: urix0 10.78.0.1/24 (uroce via af_packet) ──── veth ── urix-br ─┐
#   VM (rdma_rxe on eth0) 10.78.0.11/24 ── virtio-net ── tap urtap0 ────────── bridge urbr0
#
# MTU 9000 everywhere, so both RoCE MTUs (1024, 4096) fit: each case passes -m to both sides.
# The guest runs guest-agent.sh: one boot serves every case (booting under TCG is the slow
# part); the host hands it job files through the VM's 9p share.
#
# Environment: UROCE_PORT=af_xdp runs uroce's side on its AF_XDP port instead of the packet socket,
# UROCE_PORT=udp on its UDP-socket port (bound to 10.78.0.1:4791; a case then also checks that
# the namespace's kernel delivered datagrams to a UDP socket, /proc/net/snmp Udp InDatagrams).
# UROCE_LIB (dir holding our libibverbs.so.1), UROCE_BIN (the uroce command),
# VERIFY_BIN (rdma_verify, built from rdma_verify.c: data-checking RC traffic of every kind),
# SOAK_BIN (rdma_soak, from rdma_soak.c: RC, UC and UD both ways for a time, every byte checked),
# DISSECT_BIN (uroce-dissect, reads uroce's capture of each damaged case),
# RXEVM (the rxe-vm scripts, default ../shared/rxe-vm next to the repo), INTEROP_DIR (state,
# default /var/tmp/uroce-interop). Exit 77 = skipped (not root, or no qemu).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
RXEVM=${RXEVM:-$(cd "$repo/.." && pwd)/shared/rxe-vm}
STATE=${INTEROP_DIR:-/var/tmp/uroce-interop}
LIB=${UROCE_LIB:-$repo/build/lib}
UROCE=${UROCE_BIN:-$repo/build/tools/uroce/uroce}
VERIFY=${VERIFY_BIN:-$repo/build/tests/interop/rdma_verify}
SOAK=${SOAK_BIN:-$repo/build/tests/interop/rdma_soak}
DISSECT=${DISSECT_BIN:-$repo/build/tools/dissect/uroce-dissect}
CONFORM=${CONFORM_BIN:-$repo/build/tools/conform/uroce-conform}
CONFORM_AGENT=${CONFORM_AGENT_BIN:-$repo/build/tools/conform/uroce-conform-agent}
NS=urix BR=urbr0 TAP=urtap0 VETH=urix0 VETHBR=urix-br
HOST_IP=10.78.0.1 VM_IP=10.78.0.11 VM_MAC=52:54:00:78:00:11 LINK_MTU=9000
VMDIR=$STATE/vm
CASE_TIMEOUT=${INTEROP_CASE_TIMEOUT:-120}  # per program; a case gives up after this

. "$repo/tools/lib/netns.sh"  # wait_listen NS PORT PID

say() { echo "interop: $*"; }
die() { echo "interop: $*" >&2; exit 1; }

preflight() {
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: interop needs root (network namespace, tap, bridge)"; exit 77; }
  command -v qemu-system-x86_64 >/dev/null \
    || { echo "SKIP: qemu-system-x86_64 is not installed (tools/install-deps.sh installs it)"; exit 77; }
  [ -x "$RXEVM/run.sh" ] || die "rxe-vm scripts not found at $RXEVM (set RXEVM=/path/to/shared/rxe-vm)"
}

agent_running() { [ -f "$STATE/vm.pid" ] && kill -0 "$(cat "$STATE/vm.pid")" 2>/dev/null; }

net_up() {
  [ -d /sys/class/net/$BR ] || ip link add name $BR type bridge stp_state 0 forward_delay 0
  echo 1 > /proc/sys/net/ipv6/conf/$BR/disable_ipv6
  ip link set $BR mtu $LINK_MTU up
  ip netns list | grep -qw $NS || ip netns add $NS
  if [ ! -d /sys/class/net/$VETHBR ]; then
    ip link add $VETHBR mtu $LINK_MTU type veth peer name $VETH mtu $LINK_MTU
    ip link set $VETH netns $NS
  fi
  echo 1 > /proc/sys/net/ipv6/conf/$VETHBR/disable_ipv6
  ip link set $VETHBR master $BR up
  ip netns exec $NS sh -c "echo 1 > /proc/sys/net/ipv6/conf/$VETH/disable_ipv6" 2>/dev/null || true
  ip -n $NS link set lo up
  ip -n $NS link set $VETH up
  ip -n $NS addr replace $HOST_IP/24 dev $VETH
}

net_down() {
  ip netns pids $NS 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del $NS 2>/dev/null || true
  ip link del $VETHBR 2>/dev/null || true
  ip link del $TAP 2>/dev/null || true
  ip link del $BR 2>/dev/null || true
}

cmd_start() {
  preflight
  mkdir -p "$STATE"
  if agent_running; then say "VM agent already running (pid $(cat "$STATE/vm.pid"))"; return 0; fi
  local t0=$SECONDS
  # The image is built once per machine and cached in /var/tmp/rxe-vm; build.sh is idempotent.
  if [ ! -f "${RXEVM_DIR:-/var/tmp/rxe-vm}/rootfs.ext4" ]; then
    say "building the rxe-vm image (once per machine, ~2 min)"
    bash "$RXEVM/build.sh" > "$STATE/build.log" 2>&1 || { tail -20 "$STATE/build.log"; die "rxe-vm build.sh failed (log: $STATE/build.log)"; }
  fi
  net_up
  rm -rf "$VMDIR"; mkdir -p "$VMDIR" "$STATE/pcaps"
  echo 0 > "$STATE/next"
  # Detached, with every descriptor redirected: ctest must not wait for the VM's output.
  setsid bash "$RXEVM/run.sh" --name uroce-ix --rundir "$VMDIR" --ip $VM_IP/24 --mac $VM_MAC \
    --tap $TAP --bridge $BR --mtu $LINK_MTU --no-ipv6 --timeout 3000 --quiet \
    --cmd-file "$here/guest-agent.sh" > "$STATE/vm.log" 2>&1 < /dev/null &
  echo $! > "$STATE/vm.pid"
  for _ in $(seq 1200); do
    [ -e "$VMDIR/agent-ready" ] && break
    kill -0 "$(cat "$STATE/vm.pid")" 2>/dev/null || { cat "$STATE/vm.log"; die "the VM exited during boot"; }
    sleep 0.1
  done
  [ -e "$VMDIR/agent-ready" ] || { cat "$STATE/vm.log"; die "the VM agent did not come up in 120 s"; }
  say "VM agent ready after $((SECONDS - t0)) s: rdma_rxe at $VM_IP, uroce in netns $NS at $HOST_IP"
}

cmd_stop() {
  if agent_running; then
    local n; n=$(cat "$STATE/next")
    echo exit > "$VMDIR/job.$n.sh"
    for _ in $(seq 300); do agent_running || break; sleep 0.1; done
    agent_running && kill -- -"$(cat "$STATE/vm.pid")" 2>/dev/null || true
  fi
  rm -f "$STATE/vm.pid"
  net_down
  say "stopped"
}

# guest_job N SCRIPT: hands job N to the agent, which starts it as soon as the file appears.
guest_job() {
  local n=$1
  echo $((n + 1)) > "$STATE/next"
  printf '%s\n' "$2" > "$VMDIR/job.$n.tmp"
  mv "$VMDIR/job.$n.tmp" "$VMDIR/job.$n.sh"
}

guest_wait() {  # N -> the job's exit status; a job still running after the timeout is cancelled
  local n=$1
  for _ in $(seq $((CASE_TIMEOUT * 10 + 200))); do
    [ -e "$VMDIR/job.$n.rc" ] && { return "$(cat "$VMDIR/job.$n.rc")"; }
    agent_running || { echo "the VM died (log: $STATE/vm.log)"; return 98; }
    sleep 0.1
  done
  guest_cancel "$n"
  echo "guest job $n did not finish in time: cancelled"; return 97
}

# guest_cancel N: asks job N to stop its program (its watcher kills it) and waits for the end.
guest_cancel() {
  local n=$1
  touch "$VMDIR/job.$n.cancel"
  for _ in $(seq 100); do [ -e "$VMDIR/job.$n.rc" ] && return 0; sleep 0.1; done
  return 1
}

# guest_evidence FILE: what the guest looks like right after a failed case, before the VM is
# restarted (docs/interop.md: first-try failures need the guest's side): its kernel log, rxe's
# counters, its QPs and processes. Written to FILE, its head shown. A guest that does not run
# the job within 15 s (its agent still waits for the failed program to end) is said so: that
# is evidence too.
guest_evidence() {
  local out=$1 n
  n=$(cat "$STATE/next")
  guest_job "$n" "$(cat <<'EOF'
echo "--- dmesg: warnings, bugs, watchdogs, hung tasks, rxe"; dmesg | grep -E "WARNING|BUG|watchdog|hung|timed out|rxe" | tail -n 30
echo "--- dmesg, the last 20 lines (virtio's 'speed is unknown' notices left out)"; dmesg | grep -v "speed is unknown" | tail -n 20
echo "--- eth0: packets and errors (a stalled transmit queue shows as TX not moving)"; ip -s link show dev eth0
echo "--- eth0's qdisc (netem: sent, dropped, backlog)"; tc -s qdisc show dev eth0
echo "--- rxe's counters"; for f in /sys/class/infiniband/*/ports/1/hw_counters/*; do echo "$(basename "$f") $(cat "$f")"; done
echo "--- rdma res show qp"; rdma res show qp 2>&1 | head -n 20
echo "--- processes not in the kernel"; ps -eo pid,stat,wchan:28,etime,args | grep -v ' \[' | tail -n 20
EOF
)"
  for _ in $(seq 150); do [ -e "$VMDIR/job.$n.rc" ] && break; sleep 0.1; done
  if [ -e "$VMDIR/job.$n.rc" ]; then
    cp "$VMDIR/job.$n.out" "$out"
    echo "--- the guest right after the failure ($out):"
    grep -v '^[a-z_]* 0$' "$out" | head -n 90  # counters that stayed 0 left out here
  else
    echo "the guest did not run the evidence job within 15 s (its previous job had not ended)" > "$out"
    echo "--- $(cat "$out")"
  fi
}

# The guest's netem, where a case asks for one. A lossy netem spares the CM's DREQ (a MAD to
# QP1, attribute 0x0015, matched at fixed offsets from the IPv4 header: BTH at 28, the MAD's
# attribute ID at 64): a prio qdisc's second band, where all traffic goes by default, holds
# the netem; a u32 filter sends DREQs to the first. A program that disconnects and destroys
# its id at once (rping, rstream) cancels the DREQ's retries, in the kernel's CM as in
# uroce's: lost once, it never arrives, and the peer waits for it until the case times out.
# That is not the recovery these cases test (uroce's own fault injector spares it as well).
guest_netem() {
  [ -n "$netem" ] || return 0
  case "$netem" in
    *loss*) cat <<EOF
tc qdisc add dev eth0 root handle 1: prio bands 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 || exit 90
tc qdisc add dev eth0 parent 1:2 handle 20: netem $netem || exit 90
tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff match u8 0x64 0xff at 28 match u32 0x00000001 0x00ffffff at 32 match u16 0x0015 0xffff at 64 flowid 1:1 || exit 90
EOF
      ;;
    *) echo "tc qdisc add dev eth0 root netem $netem || exit 90" ;;
  esac
}

# guest_script N CMD PORT: the job that runs CMD in the guest: netem set up first, the program
# bounded by CASE_TIMEOUT and stopped early when the host cancels the job; job.N.listening
# appears once something listens on PORT (servers): a TCP socket, or an rdma_cm id (the
# kernel's rdma_cm listens without a socket; `rdma res show cm_id` lists it).
guest_script() {
  local n=$1 cmd=$2 port=$3
  cat <<EOF
tc qdisc del dev eth0 root 2>/dev/null
$(guest_netem)
timeout $CASE_TIMEOUT $cmd &
p=\$!
( while kill -0 \$p 2>/dev/null; do [ -e /host/job.$n.cancel ] && kill \$p; sleep 0.2; done ) &
EOF
  # mckey's receiver listens on no port: it is ready once eth0 has joined its group.
  case $port in mc:*) cat <<EOF
for i in \$(seq 600); do ip maddr show dev eth0 | grep -qw '${port#mc:}' && break; kill -0 \$p 2>/dev/null || break; sleep 0.05; done
touch /host/job.$n.listening
EOF
    echo 'wait $p'; return ;;
  esac
  [ "$port" = 0 ] || cat <<EOF
for i in \$(seq 600); do ss -Hltn 'sport = :$port' | grep -q . && break; rdma res show cm_id 2>/dev/null | grep -Eq "LISTEN.*:$port( |\\\$)" && break; kill -0 \$p 2>/dev/null || break; sleep 0.05; done
touch /host/job.$n.listening
EOF
  echo 'wait $p'
}

# --- the cases -------------------------------------------------------------------------------
# perftest -R: its client connects twice (a control connection, then the data QPs), and
# perftest 4.5 (bookworm) sends the second REQ without waiting for the server to listen again.
# The emulated guest server re-listens slowly, so a uroce client's REQ may be rejected
# ("invalid service ID"), and perftest 4.5's retry path then crashes (fixed upstream, perftest
# 3d9d8d0, 2025): such a u2k run is repeated (at most RACE_TRIES times). Since uroce's own
# af_packet port opens a device in milliseconds (DPDK's EAL took ~0.3 s between the two
# connections), every perftest -R client of ours loses it nearly always (ib_send_bw: 16 tries
# of 16 in one CI run, 2026-11-26): the -R cases run k2u only, and rping covers uroce as the CM
# client (cm_rping, lossy5_cm_rping, reorder*_cm_rping).
RACE_TRIES=8
# rstream -T a (rpoll before each call) fails when the peer's DISCONNECT arrives before its
# last read: rdma-core's rpoll reports POLLHUP at once, with data still unread, and rstream
# counts POLLHUP as an error. uroce's rpoll reports the hang-up once the data was read (as
# TCP does), so the async case runs with uroce as the reading client (u2k) only.
# The ce_ cases mark CE on 30 % of what uroce sends and receives (its fault injector, as a
# congested switch would): uroce answers the kernel's marked packets with CNPs, which rxe
# ignores (it has no congestion control), and rxe ignores the marks on ours; the transfer
# must not notice (issue 23: uroce must not break a peer that does not react).
# NAME|DIRECTION|PROGRAM AND ARGS (both sides)|GUEST NETEM|UROCE FAULT
#   DIRECTION u2k: uroce is the client, the kernel the server; k2u: the other way round.
#   Both sides get the same arguments plus their device and GID index; perftest gets -F
#   (no CPU frequency check) and the client the server's address.
CASES=$(cat <<'EOF'
rc_pingpong_m1024|both|ibv_rc_pingpong -s 4096 -n 100 -m 1024 -c||
rc_pingpong_m4096|both|ibv_rc_pingpong -s 16384 -n 50 -m 4096 -c||
rc_pingpong_events|both|ibv_rc_pingpong -s 1024 -n 50 -m 1024 -c -e||
rc_pingpong_new_send|both|ibv_rc_pingpong -s 4096 -n 50 -m 1024 -c -N||
uc_pingpong|both|ibv_uc_pingpong -s 4096 -n 100 -m 1024 -c||
ud_pingpong|both|ibv_ud_pingpong -s 1024 -n 100 -c||
srq_pingpong|both|ibv_srq_pingpong -s 4096 -n 100 -m 1024 -c||
send_bw_64|both|ib_send_bw -s 64 -n 500 -m 1024||
send_bw_64k_m4096|both|ib_send_bw -s 65536 -n 100 -m 4096||
write_bw_4k|both|ib_write_bw -s 4096 -n 500 -m 1024||
write_bw_1m_m4096|both|ib_write_bw -s 1048576 -n 10 -m 4096||
read_bw_64k|both|ib_read_bw -s 65536 -n 100 -m 1024||
read_bw_4k_m4096|both|ib_read_bw -s 4096 -n 300 -m 4096||
atomic_bw_fadd|both|ib_atomic_bw -A FETCH_AND_ADD -n 300||
atomic_bw_cas|both|ib_atomic_bw -A CMP_AND_SWAP -n 300||
send_lat|both|ib_send_lat -s 64 -n 200 -m 1024||
write_lat|both|ib_write_lat -s 64 -n 200 -m 1024||
read_lat|both|ib_read_lat -s 4096 -n 200 -m 1024||
atomic_lat|both|ib_atomic_lat -n 200||
verify_m1024|both|rdma_verify -s 10000 -n 30 -m 1024||
verify_m4096|both|rdma_verify -s 70000 -n 10 -m 4096||
lossy5_verify|both|rdma_verify -s 10000 -n 30 -m 1024|loss 5%|loss=0.05,seed=21
damaged_verify|both|rdma_verify -s 10000 -n 30 -m 4096|loss 2% duplicate 2% corrupt 1%|loss=0.02,duplicate=0.02,corrupt=0.01,seed=23
lossy5_write_bw|both|ib_write_bw -s 65536 -n 100 -m 1024|loss 5%|loss=0.05,seed=13
lossy5_send_bw|both|ib_send_bw -s 16384 -n 200 -m 4096|loss 5%|loss=0.05,seed=14
lossy5_read_bw|both|ib_read_bw -s 65536 -n 100 -m 1024|loss 5%|loss=0.05,seed=15
lossy1_atomic_bw|both|ib_atomic_bw -n 300|loss 1%|loss=0.01,seed=16
lossy1_send_lat|both|ib_send_lat -s 64 -n 300 -m 1024|loss 1%|loss=0.01,seed=25
lossy1_write_lat|both|ib_write_lat -s 64 -n 300 -m 1024|loss 1%|loss=0.01,seed=26
lossy1_read_lat|both|ib_read_lat -s 4096 -n 300 -m 4096|loss 1%|loss=0.01,seed=27
reorder_srq_pingpong|both|ibv_srq_pingpong -s 4096 -n 100 -m 1024 -c|delay 1ms reorder 95%|reorder=0.05,window=4,seed=17
reorder_write_bw|both|ib_write_bw -s 65536 -n 100 -m 1024|delay 1ms reorder 95%|reorder=0.05,window=4,seed=18
reorder_verify|both|rdma_verify -s 10000 -n 30 -m 1024|delay 1ms reorder 95%|reorder=0.05,window=4,seed=22
reorder2_cm_rping|both|rping -C 50 -S 60000 -v -V|delay 1ms reorder 98%|reorder=0.02,seed=41
reorder5_cm_rping|both|rping -C 50 -S 60000 -v -V|delay 1ms reorder 95%|reorder=0.05,seed=42
reorder2_read_bw|both|ib_read_bw -s 65536 -n 20 -m 1024|delay 1ms reorder 98%|reorder=0.02,seed=43
reorder5_read_bw|both|ib_read_bw -s 65536 -n 20 -m 1024|delay 1ms reorder 95%|reorder=0.05,seed=44
reorder2_write_bw|both|ib_write_bw -s 65536 -n 20 -m 1024|delay 1ms reorder 98%|reorder=0.02,seed=45
cm_rping|both|rping -C 20 -S 1024 -v -V||
cm_send_bw|k2u|ib_send_bw -R -s 4096 -n 300||
cm_write_bw|k2u|ib_write_bw -R -s 65536 -n 100||
cm_read_lat|k2u|ib_read_lat -R -s 64 -n 200||
lossy5_cm_rping|both|rping -C 100 -S 4000 -v -V|loss 5%|loss=0.05,seed=31
lossy5_cm_send_bw|k2u|ib_send_bw -R -s 4096 -n 300|loss 5%|loss=0.05,seed=32
mc_mckey|both|mckey -C 20 -S 1000||
rs_rstream|both|rstream -T v -S 65536 -C 300||
rs_rstream_async|u2k|rstream -T v -T a -T n -S 4096 -C 2000||
rs_riostream|both|riostream -T v -S 65536 -C 10 -I 20||
lossy5_rs_rstream|both|rstream -T v -S 65536 -C 40|loss 5%|loss=0.05,seed=51
ce_verify|both|rdma_verify -s 10000 -n 30 -m 1024||ce=0.3,side=both,seed=61
ce_write_bw|both|ib_write_bw -s 65536 -n 100 -m 1024||ce=0.3,side=both,seed=62
EOF
)

cmd_list() {
  local name dir rest
  while IFS='|' read -r name dir rest; do
    if [ "$dir" = both ]; then echo "$name.u2k"; echo "$name.k2u"; else echo "$name.$dir"; fi
  done <<< "$CASES"
}

# uroce_side ROLE LOG ARGS...: runs a program on uroce in the namespace.
uroce_cmd() {
  local fault=$1 pcap=$2; shift 2
  # Loss and corruption spare the CM's DREQ, as the guest's netem does (guest_netem).
  case $fault in *loss=*|*corrupt=*) fault="$fault,spare=dreq" ;; esac
  ip netns exec $NS env UROCE_IFACE=$VETH ${fault:+UROCE_FAULT=$fault} \
    ${UROCE_PORT:+UROCE_PORT=$UROCE_PORT} \
    "$UROCE" run --pcap "$pcap" -- timeout "$CASE_TIMEOUT" "$@"
}

# Datagrams the namespace's kernel delivered to UDP sockets (none with a packet-socket port).
udp_in() {
  ip netns exec $NS awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ {print $2; exit}' /proc/net/snmp
}

result_line() {  # the figure a program prints (pingpong: "iters in"; perftest: the table row)
  local pings
  pings=$(grep -c '^ping data: rdma-ping-' "$1" || true)  # rping -c -v: one line per ping
  # (-V: rping compares what came back and fails on a difference)
  if [ "$pings" -gt 0 ]; then echo "$pings pings verified"; return; fi
  # mckey: its receiver finishes only once every datagram it posted for has arrived.
  if grep -q '^receiving data transfers' "$1" && grep -q '^data transfers complete' "$1"; then
    echo "mckey: every datagram received"; return; fi
  if grep -q '^initiating data transfers' "$1" && grep -q '^data transfers complete' "$1"; then
    echo "mckey: every datagram sent"; return; fi
  # A latency row of "inf": every iteration completed, but perftest could not calibrate the
  # guest's clock ("Correlation coefficient r^2 < 0.9" when the host is busy, and no "cpu MHz"
  # to fall back on): the exchange is what is checked here, not the figure.
  local lat='^ +[0-9]+ +[0-9]+ +[0-9.]+'
  if grep -q 'Correlation coefficient r^2' "$1"; then lat='^ +[0-9]+ +[0-9]+ +([0-9.]+|inf)'; fi
  grep -E "iters in|$lat|verified|^custom " "$1" | tail -1 | tr -s ' \t' ' ' || true
}

cmd_case() {
  preflight
  local want=$1 base=${1%.*} dir=${1##*.}
  local line name d prog netem fault found=0
  while IFS='|' read -r name d prog netem fault; do
    [ "$name" = "$base" ] && { found=1; break; }
  done <<< "$CASES"
  [ $found = 1 ] && { [ "$dir" = u2k ] || [ "$dir" = k2u ]; } || die "unknown case '$want' (see: interop.sh list)"
  agent_running || die "the VM agent is not running (interop.sh start; ctest runs it as the Interop.start fixture)"
  local n; n=$(cat "$STATE/next")
  local port=$((20000 + n))
  local ulog="$STATE/$want.uroce.log" pcap="$STATE/pcaps/$want.pcap"
  local perf="" tool=${prog%% *}
  case "$tool" in ib_*) perf=1 ;; esac
  local uargs gargs
  if [ -n "$perf" ]; then
    uargs="$prog -d uroce0 -x 1 -F -p $port"; gargs="$prog -d rxe0 -x \$RXE_GID -F -p $port"
  elif [ "$tool" = rdma_verify ] || [ "$tool" = rdma_soak ]; then
    local bin=$VERIFY; [ "$tool" = rdma_soak ] && bin=$SOAK
    [ -x "$bin" ] || die "$tool not built at $bin (set VERIFY_BIN / SOAK_BIN)"
    cp "$bin" "$VMDIR/$tool"
    local rest=${prog#"$tool"}
    uargs="$bin$rest -d uroce0 -g 1 -p $port"; gargs="/host/$tool$rest -d rxe0 -g \$RXE_GID -p $port"
  elif [ "$tool" = rping ]; then
    # rdma_cm: the address is an option, the device and GID come from the route.
    local srv=$VM_IP; [ "$dir" = k2u ] && srv=$HOST_IP
    if [ "$dir" = u2k ]; then
      uargs="$prog -c -a $srv -p $port"; gargs="$prog -s -a $srv -p $port"
    else
      uargs="$prog -s -a $srv -p $port"; gargs="$prog -c -a $srv -p $port"
    fi
  elif [ "$tool" = mckey ]; then
    # Multicast: the "server" receives, the "client" sends (-s); each binds its own address.
    local group=239.78.0.$((n % 250 + 1))
    if [ "$dir" = u2k ]; then
      uargs="$prog -s -m $group -b $HOST_IP"; gargs="$prog -m $group -b $VM_IP"
    else
      uargs="$prog -m $group -b $HOST_IP"; gargs="$prog -s -m $group -b $VM_IP"
    fi
    port=mc:$group
  elif [ "$tool" = rstream ] || [ "$tool" = riostream ]; then
    # rsockets: the server binds its address (-b), the client names the server's (-s).
    if [ "$dir" = u2k ]; then
      uargs="$prog -s $VM_IP -p $port"; gargs="$prog -b $VM_IP -p $port"
    else
      uargs="$prog -b $HOST_IP -p $port"; gargs="$prog -s $HOST_IP -p $port"
    fi
  else
    uargs="$prog -d uroce0 -g 1 -p $port"; gargs="$prog -d rxe0 -g \$RXE_GID -p $port"
  fi
  local client_addr=1  # rping, mckey and the rsockets programs name addresses with options
  case "$tool" in rping|mckey|rstream|riostream) client_addr="" ;; esac
  say "$want: uroce $([ "$dir" = u2k ] && echo client || echo server) ↔ rdma_rxe $([ "$dir" = u2k ] && echo server || echo client)${netem:+, guest netem $netem}${fault:+, uroce fault $fault}"
  local urc=0 grc=0 udp0; udp0=$(udp_in)
  if [ "$dir" = u2k ]; then
    # kernel server first; the uroce client once the server's TCP port listens. A perftest -R
    # client that lost perftest 4.5's race (see the cases) runs again, RACE_TRIES times at most.
    local try
    for try in $(seq "$RACE_TRIES"); do
      guest_job "$n" "$(guest_script "$n" "$gargs" "$port")"
      for _ in $(seq 900); do [ -e "$VMDIR/job.$n.listening" ] || [ -e "$VMDIR/job.$n.rc" ] && break; sleep 0.1; done
      urc=0
      # shellcheck disable=SC2086
      uroce_cmd "$fault" "$pcap" $uargs ${client_addr:+$VM_IP} > "$ulog" 2>&1 || urc=$?
      if [ $urc -ne 0 ] && [ -n "$perf" ] && [ "$try" -lt "$RACE_TRIES" ] &&
         grep -q "RDMA_CM_EVENT_REJECTED; error: 8" "$ulog"; then
        say "$want: the client's second REQ came before the server listened again (perftest 4.5's race): again"
        guest_cancel "$n" || true
        n=$(cat "$STATE/next")
        continue
      fi
      [ $urc -eq 0 ] || guest_cancel "$n" || true  # a failed client leaves the server waiting
      guest_wait "$n" || grc=$?
      break
    done
  else
    # uroce server first, then the kernel client once the server listens.
    # shellcheck disable=SC2086
    uroce_cmd "$fault" "$pcap" $uargs > "$ulog" 2>&1 &
    local up=$!
    if [ "$tool" = mckey ]; then  # ready once its interface joined the group
      for _ in $(seq 400); do
        ip netns exec $NS ip maddr show dev $VETH | grep -qw "${port#mc:}" && break
        kill -0 "$up" 2>/dev/null || break
        sleep 0.05
      done
    else
      wait_listen $NS "$port" "$up" || true  # if it died, the kernel client reports the failure
    fi
    guest_job "$n" "$(guest_script "$n" "$gargs${client_addr:+ $HOST_IP}" 0)"
    guest_wait "$n" || grc=$?
    [ $grc -eq 0 ] || kill "$up" 2>/dev/null || true  # a failed client leaves the server waiting
    wait $up || urc=$?
  fi
  local glog="$VMDIR/job.$n.out"
  local ures gres
  ures=$(result_line "$ulog"); gres=$(result_line "$glog")
  local bad=""
  [ $urc -eq 0 ] || bad="uroce side exit $urc"
  [ $grc -eq 0 ] || bad="${bad:+$bad, }kernel side exit $grc"
  grep -qi "invalid data" "$ulog" "$glog" && bad="${bad:+$bad, }received data did not validate"
  # Every client prints its figures (ib_read_lat's server prints none).
  if [ "$dir" = u2k ] && [ -z "$ures" ]; then bad="${bad:+$bad, }uroce client printed no result"; fi
  if [ "$dir" = k2u ] && [ -z "$gres" ]; then bad="${bad:+$bad, }kernel client printed no result"; fi
  local udp_note="" udp_got=$(( $(udp_in) - udp0 ))
  if [ "${UROCE_PORT:-}" = udp ]; then
    [ "$udp_got" -gt 0 ] || bad="${bad:+$bad, }no datagram reached a UDP socket: not the udp port"
    udp_note=" [udp port: $udp_got datagrams through the socket]"
  fi
  if [ -n "$bad" ]; then
    echo "FAIL: $want: $bad"
    echo "--- uroce side ($ulog):"; tail -30 "$ulog"
    echo "--- kernel side ($glog):"; tail -30 "$glog"
    # A retry that passes deletes $pcap: the failed run's capture is kept under its own name.
    local kept="${pcap%.pcap}.failed-$n.pcap"
    cp "$pcap" "$kept" 2>/dev/null || kept="(none written)"
    cp "$pcap.verbs" "$kept.verbs" 2>/dev/null || true  # uroce's verbs side, for --ladder
    echo "--- capture of uroce's side: $kept"
    guest_evidence "${pcap%.pcap}.failed-$n.guest.txt"
    # A failed case can leave the guest's rdma_rxe unusable: seen after lossy5_send_bw (about
    # 1 run in 10), guest programs then hung and every later case failed. The next case (or
    # this one's retry, tools/test.sh) gets a freshly booted guest.
    say "restarting the VM, so that the next case starts on a fresh guest"
    cmd_stop >/dev/null
    cmd_start >/dev/null || say "the VM did not come back"
    return 1
  fi
  # Damaged links: the capture of uroce's port must show recovery at work (retransmissions,
  # NAKs), otherwise the case did not test what it claims to.
  local recovery=""
  if [ -n "$netem$fault" ]; then
    recovery=$("$DISSECT" --explain "$pcap" | awk '
      /^    sequence/ { for (i = 1; i < NF; ++i) if ($(i+1) == "retransmitted;") r += $i }
      /^    responses/ { for (i = 1; i < NF; ++i) if ($(i+1) == "NAK" && $(i-1) != "RNR") k += $i }
      END { printf "%d retransmitted, %d NAK", r, k }')
    case "$base" in
      lossy5_*|damaged_*|reorder*)
        case "$recovery" in
          "0 retransmitted, 0 NAK") echo "FAIL: $want: no retransmission or NAK in $pcap: the damage did not happen"; return 1 ;;
        esac ;;
    esac
    recovery=" [$recovery]"
  fi
  echo "ok: $want: uroce: ${ures:-(no figures)} | kernel: ${gres:-(no figures)}$recovery$udp_note"
  rm -f "$pcap" "$pcap.verbs"
}

# uroce-conform's cases against rdma_rxe: uroce-conform-agent in the guest (an ordinary verbs
# program on rxe0), the scripted side in the uroce namespace on the same bridge. Each case's
# verdict must be the one tests/conform/rxe.expected records (docs/conformance.md explains
# every case rxe does not pass from its packets); the results stay in $STATE/conform.txt,
# conform.json and a capture per case in $STATE/conform/. Time bounds are stretched
# CONFORM_TIME_SCALE times (default 5: the guest is emulated).
cmd_conform() {
  preflight
  agent_running || die "the VM agent is not running (interop.sh start)"
  [ -x "$CONFORM" ] && [ -x "$CONFORM_AGENT" ] || die "uroce-conform not built (set CONFORM_BIN, CONFORM_AGENT_BIN)"
  local n netem="" port; n=$(cat "$STATE/next"); port=$((20000 + n))
  cp "$CONFORM_AGENT" "$VMDIR/uroce-conform-agent"
  CASE_TIMEOUT=600 guest_job "$n" "$(CASE_TIMEOUT=600 guest_script "$n" "/host/uroce-conform-agent -d rxe0 -g \$RXE_GID -p $port" "$port")"
  for _ in $(seq 900); do [ -e "$VMDIR/job.$n.listening" ] || [ -e "$VMDIR/job.$n.rc" ] && break; sleep 0.1; done
  rm -rf "$STATE/conform"
  local rc=0
  ip netns exec $NS "$CONFORM" --iface $VETH --agent $VM_IP:$port --time-scale "${CONFORM_TIME_SCALE:-5}" \
    --out "$STATE/conform" --json "$STATE/conform.json" "$repo/tools/conform/cases" > "$STATE/conform.txt" 2>&1 || rc=$?
  cat "$STATE/conform.txt"
  guest_wait "$n" || { echo "the agent in the guest:"; cat "$VMDIR/job.$n.out"; }
  [ $rc -le 1 ] || die "uroce-conform could not run against rxe (exit $rc)"
  local got want diff
  got=$(awk '/^(PASS|NOTE|FAIL|ERROR) /{print $2, $1}' "$STATE/conform.txt" | sort)
  want=$(grep -v '^#' "$repo/tests/conform/rxe.expected" | awk 'NF{print $1, $2}' | sort)
  if ! diff=$(diff <(echo "$want") <(echo "$got")); then
    echo "FAIL: rxe's verdicts differ from tests/conform/rxe.expected (< expected, > now):"
    echo "$diff"
    return 1
  fi
  echo "ok: conform: $(echo "$got" | wc -l) cases against rdma_rxe, every verdict as recorded"
}

case "${1:-}" in
  start) cmd_start ;;
  conform) cmd_conform ;;
  stop) cmd_stop ;;
  list) cmd_list ;;
  case) [ $# -eq 2 ] || die "usage: interop.sh case NAME"; cmd_case "$2" ;;
  all)
    cmd_start; trap cmd_stop EXIT; rc=0
    for c in $(cmd_list); do cmd_case "$c" || rc=1; done
    exit $rc ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac
