#!/usr/bin/env bash
# The kernel's own sockets and uroce on the same link, in one run: two network namespaces
# joined by a veth pair (MTU 9000), iperf3 (TCP; UDP 64 B and 8000 B), qperf (tcp_lat,
# udp_lat) and a busy-polling UDP ping-pong (tools/bench/udp_pingpong.c) over the kernel, then
# unmodified perftest over uroce (uroce's own af_packet port,
# with UDP GSO super-frames, on the same veth; then DPDK's net_af_packet and the port without
# GSO or without doorbell batching for comparison), the latency tests again with the progress thread spinning (progress = poll),
# perftest again on uroce's own AF_XDP port (port = af_xdp) on the same veth,
# the CPU of an idle process and of one blocked in ibv_get_cq_event, and 10,000 RC QPs in one
# process (tools/bench/qp_scale.c). The middleware, both ways on the same link: UCX's
# ucx_perftest over its tcp transport and over rc_verbs on uroce, and Open MPI's ping-pong
# (tests/verbs/mpi_pingpong.c) over its TCP BTL and over UCX on uroce. Two uroce processes
# joined by shared memory (DPDK net_memif, and uroce's own shm port; no kernel interface),
# beside one core's memcpy and
# what two cores pass each other through shared memory. Prints each figure with its ratio to
# the kernel's, and the
# CPU of each side (share of one core, /usr/bin/time %P) and for bandwidth the CPU seconds
# of both sides per GB moved; saves docs/bench/side_by_side.csv
# and .png.
# uroce's UDP-socket port (port = udp) on the veth and, beside the kernel's figures on
# loopback, on lo. Medians of RUNS runs (default 3). ONLY=GROUP runs that group's rows (and the
# kernel's) into docs/bench/side_by_side_GROUP.csv. Needs root; run with nothing else busy.
# A figure with a ratio runs interleaved with the kernel's figure it is compared to (kernel,
# uroce, kernel, uroce, ...: RUNS of each), and its ratio is that of the two medians of this
# row alone, because a machine of this kind drifts by 15-40 % within minutes (INTERLEAVE=0:
# each figure's runs in a row, the ratio to the kernel's figure measured first).
# HOG=1: a memory-bandwidth hog (memcpy_bw hog) runs beside every figure, at the idle
# scheduling class (it takes the memory bandwidth of the CPU time the figures leave, not their
# CPUs): a memory-bound run. The CSV is then side_by_side[_GROUP]_hog.csv.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${RUNS:-3}
# Bandwidth runs last as long as iperf3's (-t 3): a fixed count of 64 KiB messages (-n 5000,
# as before 2026-11-27) is over in a tenth of a second, start-up included, and its figure
# swung by 10-15 % between runs.
bw_secs=3
for t in iperf3 qperf ib_write_bw; do
  command -v "$t" >/dev/null || { echo "side_by_side: $t is missing: run tools/install-deps.sh"; exit 1; }
done
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DUROCE_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j"${UROCE_JOBS:-2}" --target uroce_ibverbs uroce qp_scale cq_wait \
  memcpy_bw udp_pingpong >/dev/null
uroce=$PWD/build-release/tools/uroce/uroce
a=uroce-bench-a b=uroce-bench-b
tmp=$(mktemp -d)
. tools/lib/netns.sh  # two_hosts, drop_hosts, wait_listen NS [PORT]
trap 'drop_hosts "$a" "$b"; rm -rf "$tmp"' EXIT
drop_hosts "$a" "$b"
two_hosts "$a" "$b" ubn-a ubn-b 10.91.0
# Both ends get one name, ubn0, in their own namespaces: UCX's tcp transport is given one
# device name for both sides.
for ns in "$a" "$b"; do
  ip -n "$ns" link set "ubn-${ns##*-}" down; ip -n "$ns" link set "ubn-${ns##*-}" name ubn0
  ip -n "$ns" link set ubn0 mtu 9000 up
done
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# The CPU share /usr/bin/time wrote to FILE (its last line: a failed command's note comes
# first), 0 if none.
cpu_of() { local v; v=$(tail -n 1 "$1" 2>/dev/null | tr -d '%'); [[ $v =~ ^[0-9]+$ ]] && echo "$v" || echo 0; }

# Each run prints "value server_cpu% client_cpu%".
# perftest over uroce: COLUMN of the result line (4: MB/s average, 5: Mpps / usec typical).
# Server in B and client in A over the veth, unless a runner (lo, udplo) set srv_ns, cli_ns,
# dst and the devices' options srv_dev / cli_dev (dynamic scope).
srv_dev=(--iface ubn0) cli_dev=(--iface ubn0)
perftest() {
  local col=$1; shift
  ip netns exec "${srv_ns:-$b}" /usr/bin/time -f "%P" -o "$tmp/s.cpu" "$uroce" run "${srv_dev[@]}" -- "$@" \
    >"$tmp/s.out" 2>&1 &
  local server=$!
  wait_listen "${srv_ns:-$b}"
  ip netns exec "${cli_ns:-$a}" /usr/bin/time -f "%P" -o "$tmp/c.cpu" "$uroce" run "${cli_dev[@]}" -- "$@" \
    "${dst:-10.91.0.2}" >"$tmp/c.out" 2>&1
  wait "$server"
  local v
  v=$(grep -E '^ [0-9]+ +[0-9]+' "$tmp/c.out" | tail -1 | awk -v c="$col" '{print $c}')
  echo "${v:-0} $(cpu_of "$tmp/s.cpu") $(cpu_of "$tmp/c.cpu")"
}
# iperf3 (one test per server): WHAT = tcp_MBps | udp_pps | udp_MBps; ARGS for the client.
iperf() {
  local what=$1; shift
  ip netns exec "${srv_ns:-$b}" /usr/bin/time -f "%P" -o "$tmp/s.cpu" iperf3 -s -1 >/dev/null 2>&1 &
  local server=$!
  wait_listen "${srv_ns:-$b}" 5201
  ip netns exec "${cli_ns:-$a}" /usr/bin/time -f "%P" -o "$tmp/c.cpu" iperf3 -c "${dst:-10.91.0.2}" -t 3 -J "$@" \
    >"$tmp/c.json" 2>/dev/null
  wait "$server" || true
  local v
  v=$(/usr/bin/python3 - "$tmp/c.json" "$what" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["end"]
if sys.argv[2] == "tcp_MBps":
    print(round(e["sum_received"]["bits_per_second"] / 8e6, 1))
else:
    s = e["sum"]  # UDP: what arrived (sent minus lost) per second
    got = s["packets"] - s["lost_packets"]
    print(round(got / s["seconds"]) if sys.argv[2] == "udp_pps"
          else round(got * s["bytes"] / max(s["packets"], 1) / s["seconds"] / 1e6, 1))
PY
)
  echo "$v $(cpu_of "$tmp/s.cpu") $(cpu_of "$tmp/c.cpu")"
}
# qperf: TEST (tcp_lat / udp_lat), one-way latency of 8-byte messages in us.
# A busy-polling UDP ping-pong of 8-byte messages (tools/bench/udp_pingpong.c: both sides spin,
# as perftest does): the floor under any RoCE stack on the kernel's UDP sockets. One-way us.
busy_pp() {
  local ns=${srv_ns:-$b} server
  ip netns exec "$ns" /usr/bin/time -f "%P" -o "$tmp/s.cpu" \
    "$PWD/build-release/tools/bench/udp_pingpong" -s "${dst:-10.91.0.2}" -n 200000 >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 200); do  # bound (a datagram sent before that is lost)
    [ -n "$(ip netns exec "$ns" ss -Hlun "sport = :18900" 2>/dev/null)" ] && break
    sleep 0.05
  done
  ip netns exec "${cli_ns:-$a}" /usr/bin/time -f "%P" -o "$tmp/c.cpu" \
    "$PWD/build-release/tools/bench/udp_pingpong" "${dst:-10.91.0.2}" -n 200000 >"$tmp/c.out" 2>&1 || true
  wait "$server" || true
  echo "$(awk 'NR == 1 {print $1}' "$tmp/c.out") $(cpu_of "$tmp/s.cpu") $(cpu_of "$tmp/c.cpu")"
}
qperf_lat() {
  ip netns exec "${srv_ns:-$b}" /usr/bin/time -f "%P" -o "$tmp/s.cpu" qperf >/dev/null 2>&1 &
  local server=$!
  wait_listen "${srv_ns:-$b}" 19765
  ip netns exec "${cli_ns:-$a}" /usr/bin/time -f "%P" -o "$tmp/c.cpu" qperf -t 3 -m 8 "${dst:-10.91.0.2}" "$1" \
    >"$tmp/c.out" 2>&1
  # The server runs until stopped: stop qperf alone, so that time reports what it used.
  local p
  for p in $(ip netns pids "${srv_ns:-$b}"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = qperf ] && kill "$p" 2>/dev/null
  done
  wait "$server" 2>/dev/null || true
  local v
  v=$(awk '/latency/ {x = $3; if ($4 == "ms") x *= 1000; if ($4 == "ns") x /= 1000; print x}' "$tmp/c.out")
  echo "${v:-0} $(cpu_of "$tmp/s.cpu") $(cpu_of "$tmp/c.cpu")"
}

# An idle uroce process: perftest's server with its device open and its QP created, waiting
# for a client that does not come. CPU (share of one core) of everything in the namespace over
# 5 s, from /proc (utime + stime).
ns_ticks() { ip netns pids "$b" | while read -r p; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null; done | awk '{s += $1} END {print s + 0}'; }
idle_cpu() {
  ip netns exec "$b" "$uroce" run --iface ubn0 -- ib_write_bw -d uroce0 -x 1 >/dev/null 2>&1 &
  wait_listen "$b"
  local t0 t1
  t0=$(ns_ticks); sleep 5; t1=$(ns_ticks)
  ip netns pids "$b" | xargs -r kill 2>/dev/null || true
  while [ -n "$(ip netns pids "$b")" ]; do sleep 0.05; done
  echo "$(awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", 100 * d / hz / 5}') 0 0"
}

# A process blocked in ibv_get_cq_event (tools/bench/cq_wait.c): its CPU over 5 s.
blocked_cpu() {
  echo "$(ip netns exec "$b" "$uroce" run --iface ubn0 -- "$PWD/build-release/tools/bench/cq_wait" 5 |
    awk '/blocked_cpu_pct/ {print $2}') 0 0"
}
# 10,000 RC QPs in one process (tools/bench/qp_scale.c): FIGURE is one of its output keys.
qp_scale() {
  ip netns exec "$b" "$uroce" run --iface ubn0 -- "$PWD/build-release/tools/bench/qp_scale" 10000 \
    >"$tmp/qp.out"
  echo "$(awk -v k="$1" '$1 == k {print $2}' "$tmp/qp.out") 0 0"
}
# The same perftest with the progress thread spinning (progress = poll).
polled() { export UROCE_PROGRESS=poll; "$@"; unset UROCE_PROGRESS; }
xdp() { export UROCE_PORT=af_xdp; "$@"; unset UROCE_PORT; }  # uroce's own AF_XDP port
udp() { export UROCE_PORT=udp; "$@"; unset UROCE_PORT; }  # uroce's UDP-socket port (veth)
# Both ends in namespace A over loopback: the kernel's sockets to 127.0.0.1, and uroce's UDP
# port with each process on its own address (server 127.0.0.2, client .3), as a CI job runs.
lo() { local srv_ns=$a cli_ns=$a dst=127.0.0.1; "$@"; }
udplo() {
  local srv_dev=(--ipv4 127.0.0.2) cli_dev=(--ipv4 127.0.0.3)
  udp lo "$@"
}

# ucx_perftest, server in B and client in A, both under `uroce run` (the tcp transport does
# not use uroce): DEVICE TRANSPORT COLUMN ARGS... (COLUMN of its "Final:" line: 3 typical
# latency in us, 6 bandwidth in MB/s).
ucx() {
  local dev=$1 tl=$2 col=$3; shift 3
  ip netns exec "$b" /usr/bin/time -f "%P" -o "$tmp/s.cpu" "$uroce" run --iface ubn0 -- \
    timeout 120 ucx_perftest -d "$dev" -x "$tl" >"$tmp/s.out" 2>&1 &
  local server=$!
  wait_listen "$b" 13337 "$server"
  ip netns exec "$a" /usr/bin/time -f "%P" -o "$tmp/c.cpu" "$uroce" run --iface ubn0 -- \
    timeout 120 ucx_perftest 10.91.0.2 -d "$dev" -x "$tl" "$@" >"$tmp/c.out" 2>&1 || true
  wait "$server" || true
  local v
  v=$(awk -v c="$col" '/^Final:/ {print $c}' "$tmp/c.out")
  echo "${v:-0} $(cpu_of "$tmp/s.cpu") $(cpu_of "$tmp/c.cpu")"
}
# Open MPI's ping-pong, one rank per namespace (mpirun in A, its PMIx server on A's end of the
# link): SIZE (a line of mpi_pingpong's output) COLUMN (3: us, 5: MB/s) MCA-ARGS... CPU: the
# two ranks and mpirun together, half of it in each column.
mpi_pp=$tmp/mpi_pingpong
command -v mpicc.openmpi >/dev/null && mpicc.openmpi -O2 -o "$mpi_pp" tests/verbs/mpi_pingpong.c
mpi() {
  local size=$1 col=$2; shift 2
  local rank=(); [ "$1" = uroce ] && { rank=("$uroce" run --iface ubn0 --); shift; }
  ip netns exec "$a" env PMIX_MCA_ptl_tcp_if_include=ubn0 PMIX_MCA_ptl_tcp_remote_connections=1 \
    OMPI_MCA_oob_tcp_if_include=ubn0 /usr/bin/time -f "%P" -o "$tmp/c.cpu" timeout 120 \
    mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none "$@" \
    -np 1 ip netns exec "$a" "${rank[@]}" "$mpi_pp" 2000 : \
    -np 1 ip netns exec "$b" "${rank[@]}" "$mpi_pp" 2000 >"$tmp/c.out" 2>&1 || true
  local v cpu
  v=$(awk -v s="$size" -v c="$col" '$1 == s && $2 == "bytes:" {gsub(",", "", $c); print $c}' "$tmp/c.out")
  grep -q "^verified" "$tmp/c.out" || v=0
  cpu=$(cpu_of "$tmp/c.cpu")
  echo "${v:-0} $((cpu / 2)) $((cpu / 2))"
}
mpi_tcp=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.91.0.0/24)
mpi_ucx=(uroce --mca pml ucx --mca btl self --mca osc ^ucx -x UCX_NET_DEVICES=uroce0:1
         -x UCX_TLS=rc_verbs,ud_verbs,self)
# Two uroce processes joined by shared memory in namespace A (perftest's exchange on
# loopback): pair_shared SERVER_PORT CLIENT_PORT COL ARGS..., each PORT a VAR=value naming the
# port (DPDK's net_memif, or uroce's own shm port).
pair_shared() {
  local sport=$1 cport=$2 col=$3; shift 3
  local side=(env LD_LIBRARY_PATH="$PWD/build-release/lib" UROCE_MTU=4096)
  ip netns exec "$a" /usr/bin/time -f "%P" -o "$tmp/s.cpu" "${side[@]}" UROCE_IPV4=10.90.0.2 \
    "$sport" timeout 120 "$@" >"$tmp/s.out" 2>&1 &
  local server=$!
  wait_listen "$a" 18515 "$server"
  ip netns exec "$a" /usr/bin/time -f "%P" -o "$tmp/c.cpu" "${side[@]}" UROCE_IPV4=10.90.0.1 \
    "$cport" timeout 120 "$@" 127.0.0.1 >"$tmp/c.out" 2>&1 || true
  wait "$server" || true
  local v
  v=$(grep -E '^ [0-9]+ +[0-9]+' "$tmp/c.out" | tail -1 | awk -v c="$col" '{print $c}')
  echo "${v:-0} $(cpu_of "$tmp/s.cpu") $(cpu_of "$tmp/c.cpu")"
}
memif() {
  pair_shared "UROCE_DEVARGS=net_memif0,role=server,id=0,socket=/uroce-bench-memif,mac=02:00:00:00:90:02" \
    "UROCE_DEVARGS=net_memif0,role=client,id=0,socket=/uroce-bench-memif,mac=02:00:00:00:90:01" "$@"
}
shm() { pair_shared "UROCE_SHM=$tmp/shm-link" "UROCE_SHM=$tmp/shm-link" "$@"; }
memcpy_bw() { echo "$("$PWD/build-release/tools/bench/memcpy_bw" "$@" | awk '{print $2}') 100 0"; }

mkdir -p docs/bench
csv=docs/bench/side_by_side
[ -z "${ONLY:-}" ] || csv=${csv}_$ONLY  # a subset: its own file, no plot
[ "${HOG:-0}" != 1 ] || csv=${csv}_hog
csv=$csv.csv
if [ "${HOG:-0}" = 1 ]; then
  chrt --idle 0 "$PWD/build-release/tools/bench/memcpy_bw" hog &
  hog_pid=$!
  trap 'kill "$hog_pid" 2>/dev/null; drop_hosts "$a" "$b"; rm -rf "$tmp"' EXIT
  echo "memory hog beside every figure: memcpy_bw hog (pid $hog_pid, idle class)"
fi
if [ "${PLOT_ONLY:-0}" != 1 ]; then  # PLOT_ONLY=1: only the plot, from the CSV there is
echo "group,test,value,unit,server_cpu_pct,client_cpu_pct,ratio,ratio_to,cpu_s_per_GB,ratio_to_value" > "$csv"
declare -A fig run_of
row() {  # GROUP NAME UNIT REF(name of the kernel figure or -) RUNNER ARGS...
  local group=$1 name=$2 unit=$3 ref=$4; shift 4
  # ONLY=GROUP: that group's rows and the kernel's (their references) only.
  [ -z "${ONLY:-}" ] || [ "$group" = kernel ] || [ "$group" = "$ONLY" ] || return 0
  run_of[$name]=$(printf '%q ' "$@")
  : > "$tmp/r"
  : > "$tmp/ref"
  local interleave=0
  [ "$ref" = - ] || [ "${INTERLEAVE:-1}" = 0 ] || [ -z "${run_of[$ref]:-}" ] || interleave=1
  for _ in $(seq "$runs"); do
    [ "$interleave" = 0 ] || eval "${run_of[$ref]}" >> "$tmp/ref"
    "$@" >> "$tmp/r"
  done
  local v s c ratio="" refv=""
  v=$(awk '{print $1}' "$tmp/r" | median); s=$(awk '{print $2}' "$tmp/r" | median)
  c=$(awk '{print $3}' "$tmp/r" | median)
  fig[$name]=$v
  if [ "$ref" != - ]; then
    refv=${fig[$ref]}
    [ "$interleave" = 0 ] || refv=$(awk '{print $1}' "$tmp/ref" | median)
    ratio=$(awk -v x="$v" -v y="$refv" 'BEGIN {printf "%.2f", (y > 0 ? x / y : 0)}')
  fi
  # CPU seconds (both sides, user + system, spinning included) per GB moved.
  local cpg=""
  [ "$unit" != MB/s ] || cpg=$(awk -v v="$v" -v s="$s" -v c="$c" 'BEGIN {if (v > 0) printf "%.2f", 10 * (s + c) / v}')
  printf '%-7s %-24s %12s %-9s %6s %6s %7s   %s\n' "$group" "$name" "$v" "$unit" "$s" "$c" \
    "${cpg:--}" "${ratio:+${ratio}x $ref ($refv)}"
  echo "$group,$name,$v,$unit,$s,$c,$ratio,${ref/-/},$cpg,$refv" >> "$csv"
}
printf '%-7s %-24s %12s %-9s %6s %6s %7s   %s\n' "" test value unit "srvCPU" "cliCPU" "CPUs/GB" "uroce / kernel"
row kernel "iperf3 TCP" MB/s - iperf tcp_MBps
row kernel "iperf3 UDP 64 B" msg/s - iperf udp_pps -u -b 0 -l 64
row kernel "iperf3 UDP 8000 B" MB/s - iperf udp_MBps -u -b 0 -l 8000
row kernel "qperf tcp_lat 8 B" us - qperf_lat tcp_lat
row kernel "qperf udp_lat 8 B" us - qperf_lat udp_lat
row kernel "busy UDP ping-pong 8 B" us - busy_pp
mpps_to_msgs() { awk '{printf "%d %s %s\n", $1 * 1e6, $2, $3}'; }
bw64() { perftest 5 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 64 | mpps_to_msgs; }
row uroce "ib_write_bw 64 B" msg/s "iperf3 UDP 64 B" bw64
row uroce "ib_write_bw 4 KiB" MB/s "iperf3 TCP" perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 4096
row uroce "ib_write_bw 64 KiB" MB/s "iperf3 TCP" perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row uroce "ib_send_bw 64 KiB" MB/s "iperf3 TCP" perftest 4 ib_send_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row uroce "ib_read_bw 64 KiB" MB/s "iperf3 TCP" perftest 4 ib_read_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row uroce "ib_write_bw -q 1 4 KiB" MB/s - perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 4096 -q 1
row uroce "ib_write_bw -q 16 4 KiB" MB/s "ib_write_bw -q 1 4 KiB" perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 4096 -q 16
row uroce "ib_write_bw -q 256 4 KiB" MB/s "ib_write_bw -q 1 4 KiB" perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 4096 -q 256
row uroce "ib_send_lat 8 B" us "busy UDP ping-pong 8 B" perftest 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
row uroce "ib_write_lat 8 B" us "busy UDP ping-pong 8 B" perftest 5 ib_write_lat -d uroce0 -x 1 -n 2000 -s 8
row uroce "ib_read_lat 8 B" us "qperf udp_lat 8 B" perftest 5 ib_read_lat -d uroce0 -x 1 -n 2000 -s 8
row uroce "ib_atomic_lat 8 B" us "qperf udp_lat 8 B" perftest 5 ib_atomic_lat -d uroce0 -x 1 -n 2000
row poll "ib_send_lat 8 B (poll)" us "busy UDP ping-pong 8 B" polled perftest 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
row poll "ib_write_lat 8 B (poll)" us "busy UDP ping-pong 8 B" polled perftest 5 ib_write_lat -d uroce0 -x 1 -n 2000 -s 8
row poll "ib_read_lat 8 B (poll)" us "qperf udp_lat 8 B" polled perftest 5 ib_read_lat -d uroce0 -x 1 -n 2000 -s 8
# The choice for the default port: DPDK's net_af_packet (port = dpdk), and uroce's own
# packet socket without UDP GSO (gso = no), one packet per write.
dpdk() { export UROCE_PORT=dpdk; "$@"; unset UROCE_PORT; }
nogso() { export UROCE_GSO=no; "$@"; unset UROCE_GSO; }
nobatch() { export UROCE_BATCH=no; "$@"; unset UROCE_BATCH; }  # a pass per post
nbbw64() { nobatch perftest 5 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 64 | mpps_to_msgs; }
row dpdk "no-batch ib_write_bw 64 B" msg/s "iperf3 UDP 64 B" nbbw64
dbw64() { dpdk perftest 5 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 64 | mpps_to_msgs; }
row dpdk "dpdk ib_write_bw 64 B" msg/s "iperf3 UDP 64 B" dbw64
row dpdk "dpdk ib_write_bw 64 KiB" MB/s "iperf3 TCP" dpdk perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row dpdk "no-GSO ib_write_bw 64 KiB" MB/s "iperf3 TCP" nogso perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row dpdk "dpdk ib_send_lat 8 B" us "busy UDP ping-pong 8 B" dpdk perftest 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
row dpdk "dpdk ib_write_lat 8 B" us "busy UDP ping-pong 8 B" dpdk perftest 5 ib_write_lat -d uroce0 -x 1 -n 2000 -s 8
# The same veth through uroce's AF_XDP port (port = af_xdp) instead of the packet socket.
xbw64() { xdp perftest 5 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 64 | mpps_to_msgs; }
row af_xdp "xdp ib_write_bw 64 B" msg/s "iperf3 UDP 64 B" xbw64
row af_xdp "xdp ib_write_bw 64 KiB" MB/s "iperf3 TCP" xdp perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row af_xdp "xdp ib_send_bw 64 KiB" MB/s "iperf3 TCP" xdp perftest 4 ib_send_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row af_xdp "xdp ib_read_bw 64 KiB" MB/s "iperf3 TCP" xdp perftest 4 ib_read_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row af_xdp "xdp ib_send_lat 8 B" us "busy UDP ping-pong 8 B" xdp perftest 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
row af_xdp "xdp ib_write_lat 8 B" us "busy UDP ping-pong 8 B" xdp perftest 5 ib_write_lat -d uroce0 -x 1 -n 2000 -s 8
# uroce's UDP-socket port (port = udp: no privileges), on the veth and on loopback, beside
# the kernel's sockets on each (issue 41).
row udp "udp ib_write_bw 64 KiB" MB/s "iperf3 TCP" udp perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row udp "udp ib_send_lat 8 B" us "busy UDP ping-pong 8 B" udp perftest 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
row kernel "iperf3 TCP lo" MB/s - lo iperf tcp_MBps
row kernel "qperf udp_lat 8 B lo" us - lo qperf_lat udp_lat
row kernel "busy UDP ping-pong 8 B lo" us - lo busy_pp
row udp "udp lo ib_write_bw 64 KiB" MB/s "iperf3 TCP lo" udplo perftest 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row udp "udp lo ib_send_lat 8 B" us "busy UDP ping-pong 8 B lo" udplo perftest 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
# The middleware over the kernel's TCP and over uroce, on the same link.
row kernel "UCX tcp am_lat 8 B" us - ucx ubn0 tcp 3 -t am_lat -n 10000 -s 8
row uroce "UCX rc_verbs am_lat 8 B" us "UCX tcp am_lat 8 B" ucx uroce0:1 rc_verbs 3 -t am_lat -n 10000 -s 8
# put_bw with 64 puts in flight (-O 64, as perftest keeps 128 WRITEs): ucx_perftest's default
# (-O 0) waits for each put's completion before the next, which over rc_verbs is the peer's
# ACK (one 64 KiB round trip at a time) and over tcp the socket taking the bytes.
row kernel "UCX tcp put_bw 64 KiB" MB/s - ucx ubn0 tcp 6 -t put_bw -n 50000 -s 65536 -D zcopy -O 64
row uroce "UCX rc_verbs put_bw 64 KiB" MB/s "UCX tcp put_bw 64 KiB" ucx uroce0:1 rc_verbs 6 -t put_bw -n 50000 -s 65536 -D zcopy -O 64
if [ -x "$mpi_pp" ] && command -v mpirun.openmpi >/dev/null; then
  row kernel "Open MPI TCP 64 B" us - mpi 64 3 "${mpi_tcp[@]}"
  row uroce "Open MPI UCX 64 B" us "Open MPI TCP 64 B" mpi 64 3 "${mpi_ucx[@]}"
  row kernel "Open MPI TCP 4 MiB" MB/s - mpi 4194304 5 "${mpi_tcp[@]}"
  row uroce "Open MPI UCX 4 MiB" MB/s "Open MPI TCP 4 MiB" mpi 4194304 5 "${mpi_ucx[@]}"
fi
# Shared memory between two processes (no kernel interface), against one core's memcpy.
row memif "memcpy 1 core 64 KiB" MB/s - memcpy_bw
# The ceiling of any port that copies through shared memory: 4 KiB frames from one core to another.
row memif "2 cores pass 4 KiB frames" MB/s - memcpy_bw cross
row memif "memif ib_write_bw 64 KiB" MB/s "iperf3 TCP" memif 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row memif "memif ib_send_lat 8 B" us "qperf udp_lat 8 B" memif 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
# uroce's own shared-memory port: the frames are built and parsed in the shared slots.
row memif "shm ib_write_bw 64 KiB" MB/s "2 cores pass 4 KiB frames" shm 4 ib_write_bw -d uroce0 -x 1 -D "$bw_secs" -s 65536
row memif "shm ib_send_lat 8 B" us "qperf udp_lat 8 B" shm 5 ib_send_lat -d uroce0 -x 1 -n 2000 -s 8
row uroce "idle with device open" "% of a core" - idle_cpu
row uroce "blocked in get_cq_event" "% of a core" - blocked_cpu
row qps "10000 QPs: create" us/QP - qp_scale create_us_per_qp
row qps "10000 QPs: memory" B/QP - qp_scale memory_per_qp_beyond_wqs_bytes
row qps "10000 QPs: WRITE each" ms - qp_scale write_each_ms
echo "CSV: $csv"
fi

if [ -z "${ONLY:-}" ] && [ "${HOG:-0}" != 1 ] && command -v gnuplot >/dev/null; then
  gnuplot <<'GP'
set terminal pngcairo size 1700,740 noenhanced
set output 'docs/bench/side_by_side.png'
set datafile separator ','
set multiplot layout 1,2 title "One veth pair: the kernel's sockets (blue: iperf3, qperf, UCX tcp, Open MPI TCP) and uroce (red: perftest on the af_packet port, UCX rc_verbs, Open MPI UCX;\nyellow: progress = poll; grey: port = dpdk, i.e. DPDK's net_af_packet, gso = no or batch = no; purple: port = af_xdp; teal: port = udp, no privileges, on the veth and on loopback beside the kernel's lo figures).\nGreen: two uroce processes over shared memory (DPDK's memif, uroce's shm port), what one core's memcpy moves and what two cores pass through shared memory"
set style fill solid 0.8
set boxwidth 0.6
set key off
set xtics rotate by -45 font ",10"
set rmargin 12
color(g) = g eq 'kernel' ? 0x4477aa : g eq 'poll' ? 0xddaa33 : g eq 'memif' ? 0x228833 : g eq 'af_xdp' ? 0x882255 : g eq 'dpdk' ? 0x999999 : g eq 'udp' ? 0x44aa99 : 0xcc6677
set logscale y
set yrange [10:*]
set title 'bandwidth, MB/s (higher is better, log scale)'
plot '< grep -E "MB/s" docs/bench/side_by_side.csv | grep -v -- "-q"' \
  using 0:3:(color(stringcolumn(1))):xtic(2) with boxes lc rgb variable
set title 'one-way latency of small messages (8 B; Open MPI 64 B), us (lower is better, log scale)'
set logscale y
set yrange [0.1:*]
plot '< grep -E ",us," docs/bench/side_by_side.csv' \
  using 0:3:(color(stringcolumn(1))):xtic(2) with boxes lc rgb variable
unset multiplot
GP
  echo "plot: docs/bench/side_by_side.png"
fi
