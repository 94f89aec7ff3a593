#!/usr/bin/env bash
# DCQCN on a live incast (issue 23). N sender namespaces (uroce-ic-s1 ..) and a receiver
# (uroce-ic-r), each joined by a veth pair to a "switch" namespace (uroce-ic-sw); the switch's
# port to the receiver (p0) is the bottleneck, RATE Mb/s, marking ECN-capable packets CE by
# RED (Not-ECT ones it drops early instead). The switch is the kernel when it has sch_red: a
# bridge, htb shaping p0 with a child `red ... ecn` (SWITCH=kernel); else (many small
# kernels, these CI machines' among them, ship no red, codel or pie qdisc) it is
# tools/bench/ecn_switch, a user-space switch between the same veths with the same RED
# (SWITCH=user, marking as packets leave the queue). Every sender runs unmodified
# ib_write_bw (64 KiB WRITEs) under `uroce run` into its own server on the receiver, all at
# once, then again with one sender joining late; DCQCN on (UROCE_ECN=1) and off (UROCE_ECN=0,
# ECN-blind as uroce was before).
#
# Prints per run, over the steady state (everybody sending: from 1 s after the traffic, or
# the late joiner, began to 1 s before the first sender ends): goodput (what left the
# bottleneck) as a share of RATE, Jain's fairness index over the senders' rates into the
# switch; what the bottleneck marked and dropped over the whole run, its longest queue over
# the run and its longest and median queue in the steady state (tc's statistics or the
# switch's, sampled every 50 ms); for
# the late joiner the time it took to reach 80 % of its fair share; and the sum of perftest's
# own averages. Writes docs/bench/incast.csv, and a plot per run
# (rate of each sender and the queue over time) to docs/bench/incast-*.png.
#
#   SENDERS="2 4"  RATE=1000 (Mb/s)  SECS=8  LATE=3 (s)  SWITCH=auto|kernel|user
#   ECNS="1 0" (DCQCN on, off)  STARTS="0 $LATE" (together, one late)  SENDER_ENV="UROCE_X=.."
#   PERFTEST_ARGS="-t 16" (more arguments for every ib_write_bw)
#   KMIN=16384 KMAX=196608 PMAX=0.2 LIMIT=262144 (bytes: RED's thresholds, the queue's limit)
#   TICK_US=100 (the user-space switch's wake-up period)
#   OUT=docs/bench
# Needs root and nothing else busy (2 cores run every process and the kernel's bridge).
set -euo pipefail
cd "$(dirname "$0")/../.."
senders_list=${SENDERS:-"2 4"}
rate=${RATE:-1000}
secs=${SECS:-8}
late=${LATE:-3}
kmin=${KMIN:-16384} kmax=${KMAX:-196608} pmax=${PMAX:-0.2} limit=${LIMIT:-262144}
# The user-space switch wakes every TICK_US at most (0: at every arrival and departure). Its
# wake-ups were half of its CPU, a core's worth taken from the ten processes of the feedback
# loop; a frame now leaves up to 100 us late, with the others due by then (three at 1 Gb/s).
tick=${TICK_US:-100}
out=${OUT:-docs/bench}
switch=${SWITCH:-auto}
# Every port of the switch runs at one speed, as in a fabric: each uroce is paced at most at
# the bottleneck's rate, as behind a NIC of that speed (a veth itself is as fast as memory),
# so N senders overload the port N times, no more. DCQCN's clock is stretched ten times for
# 1 Gb/s links (its defaults suit 10-100 Gb/s; tests/engine/congestion_test.cc shows both).
export UROCE_LINE_RATE=${UROCE_LINE_RATE:-$rate}
export UROCE_MIN_TIME_BETWEEN_CNPS=${UROCE_MIN_TIME_BETWEEN_CNPS:-500}
export UROCE_DCQCN=${UROCE_DCQCN:-rpg_time_reset=3000,dce_tcp_rtt=550,rate_reduce_monitor_period=40,rpg_ai_rate=0.5,rpg_hai_rate=5}
for t in ib_write_bw tc gnuplot; do
  command -v "$t" >/dev/null || { echo "incast: $t is missing: run tools/install-deps.sh"; exit 1; }
done
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DUROCE_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j"${UROCE_JOBS:-2}" --target uroce_ibverbs uroce ecn_switch >/dev/null
ecn_switch=$PWD/build-release/tools/bench/ecn_switch
uroce=$PWD/build-release/tools/uroce/uroce
. tools/lib/netns.sh
sw=uroce-ic-sw rx=uroce-ic-r
tmp=$(mktemp -d)
all_ns() { echo "$sw" "$rx"; for i in 1 2 3 4 5 6 7 8; do echo "uroce-ic-s$i"; done; }
cleanup() { drop_hosts $(all_ns); rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$out"
if [ "$switch" = auto ]; then
  switch=user
  ip netns add uroce-ic-probe
  ip -n uroce-ic-probe link add d0 type dummy 2>/dev/null || true
  tc -n uroce-ic-probe qdisc add dev d0 root red limit 400000 min 20000 max 60000 avpkt 4200 \
    burst 6 probability 1 bandwidth 1000mbit ecn 2>/dev/null && switch=kernel
  ip netns del uroce-ic-probe
fi
echo "incast: UROCE_LINE_RATE=$UROCE_LINE_RATE UROCE_MIN_TIME_BETWEEN_CNPS=$UROCE_MIN_TIME_BETWEEN_CNPS UROCE_DCQCN=$UROCE_DCQCN"
echo "incast: the switch is $([ "$switch" = kernel ] && echo "the kernel's bridge + htb + red ecn" || echo "tools/bench/ecn_switch (this kernel has no red qdisc)")"

# The testbed for N senders: the switch bridges ports p0 (receiver) and p1..pN (senders);
# p0's egress is the bottleneck.
setup() {
  local n=$1
  drop_hosts $(all_ns)
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  [ "$switch" = user ] || { ip -n "$sw" link add br0 type bridge; ip -n "$sw" link set br0 up; }
  for i in $(seq 0 "$n"); do
    local ns=$rx addr=10.93.0.100
    [ "$i" = 0 ] || { ns=uroce-ic-s$i; addr=10.93.0.$i; }
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "ic$i" type veth peer name "p$i"
    ip link set "ic$i" netns "$ns"
    ip link set "p$i" netns "$sw"
    ip -n "$ns" link set "ic$i" mtu 9000 up
    ip -n "$ns" addr add "$addr/24" dev "ic$i"
    ip -n "$sw" link set "p$i" mtu 9000 up
    [ "$switch" = user ] || ip -n "$sw" link set "p$i" master br0
    # No super-frames (UDP GSO, TSO) crossing a veth whole: the switch must see packets, as
    # on a wire; and checksums filled in by the sender, since a user-space switch passes
    # frames on as bytes (a veth's "checksum offload" leaves them to be done later).
    ip netns exec "$ns" ethtool -K "ic$i" tx off tso off gso off tx-udp-segmentation off \
      >/dev/null 2>&1 || true
  done
  if [ "$switch" = kernel ]; then
    local avg=$(( (kmin + kmax) / 2 ))
    tc -n "$sw" qdisc add dev p0 root handle 1: htb default 1
    tc -n "$sw" class add dev p0 parent 1: classid 1:1 htb rate "${rate}mbit" ceil "${rate}mbit"
    tc -n "$sw" qdisc add dev p0 parent 1:1 handle 10: red limit "$limit" min "$kmin" \
      max "$((kmax > kmin + 4200 ? kmax : kmin + 4200))" avpkt 4200 burst 2 probability "$pmax" \
      bandwidth "${rate}mbit" ecn
    : "$avg"
  fi
}

# switch_start N FILE: the user-space switch, or a sampler of the kernel's: every 50 ms a line
# "seconds rx_1 .. rx_N rx_0 tx_0 queue marked dropped" (bytes received from each sender and
# the receiver, bytes sent through the bottleneck, its queue in bytes, marks and drops so far).
switch_start() {
  local n=$1 file=$2 ports=()
  for i in $(seq 1 "$n"); do ports+=("p$i"); done
  if [ "$switch" = user ]; then
    ip netns exec "$sw" chrt -f 20 "$ecn_switch" --bottleneck p0 --rate "$rate" --limit "$limit" \
      --kmin "$kmin" --kmax "$kmax" --pmax "$pmax" --samples "$file" --tick-us "$tick" "${ports[@]}" p0 \
      >"$tmp/switch.out" 2>&1 &
  else
    ip netns exec "$sw" bash -c '
      n=$1; t0=$(date +%s.%N)
      while :; do
        line=$(echo "$(date +%s.%N) - $t0" | bc)
        for i in $(seq 1 "$n") 0; do line="$line $(cat /sys/class/net/p$i/statistics/rx_bytes)"; done
        st=$(tc -s qdisc show dev p0 parent 1:1)
        q=$(echo "$st" | sed -n "s/.*backlog \([0-9]*\)b.*/\1/p" | head -1)
        m=$(echo "$st" | sed -n "s/.*marked \([0-9]*\).*/\1/p" | head -1)
        d=$(echo "$st" | sed -n "s/.*dropped \([0-9]*\).*/\1/p" | head -1)
        echo "$line $(cat /sys/class/net/p0/statistics/tx_bytes) ${q:-0} ${m:-0} ${d:-0}"
        sleep 0.05
      done' _ "$n" >"$file" &
  fi
  switch_pid=$!
}

# run N ECN LATE: one incast; sender i > 1 starts LATE s after the others when LATE > 0.
# Leaves perftest's outputs in $tmp/c$i.out and the samples in $tmp/samples.
run() {
  local n=$1 ecn=$2 lt=$3
  setup "$n"
  for i in $(seq 1 "$n"); do
    UROCE_ECN=$ecn ip netns exec "$rx" "$uroce" run --iface ic0 -- \
      ib_write_bw -s 65536 -D "$secs" ${PERFTEST_ARGS:-} -p $((18600 + i)) >"$tmp/s$i.out" 2>&1 &
  done
  for i in $(seq 1 "$n"); do wait_listen "$rx" $((18600 + i)); done
  switch_start "$n" "$tmp/samples"
  local pids=()
  for i in $(seq 1 "$n"); do
    local delay=0 d=$secs
    if [ "$lt" != 0 ] && [ "$i" = "$n" ]; then delay=$lt; fi
    (sleep "$delay"
     UROCE_ECN=$ecn ip netns exec "uroce-ic-s$i" env ${SENDER_ENV:-} timeout $((secs + 30)) "$uroce" run --iface "ic$i" -- \
       ib_write_bw -s 65536 -D "$d" ${PERFTEST_ARGS:-} -p $((18600 + i)) 10.93.0.100 >"$tmp/c$i.out" 2>&1) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  kill "$switch_pid" 2>/dev/null || true
  wait || true
  [ ! -s "$tmp/switch.out" ] || sed 's/^/    /' "$tmp/switch.out"
  for i in $(seq 1 "$n"); do  # a sender whose perftest gave no result: say why
    grep -qE '^ 65536 ' "$tmp/c$i.out" ||
      echo "    sender $i: $(grep -iE 'error|fail|status|couldn' "$tmp/c$i.out" | head -2 | tr '\n' ' ')"
  done
}

# summary N ECN LATE: one CSV line, and the plot.
summary() {
  local n=$1 ecn=$2 lt=$3 tag=$4
  /usr/bin/python3 - "$tmp" "$n" "$ecn" "$lt" "$rate" "$out" "$tag" "$late" <<'PY'
import re, sys, os, subprocess
tmp, n, ecn, lt, rate, out, tag, late = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7], float(sys.argv[8])
link = float(rate)  # Mb/s
bw = []
for i in range(1, n + 1):
    v = 0.0
    for line in open(f"{tmp}/c{i}.out", errors="replace"):
        f = line.split()
        if len(f) >= 5 and f[0] == "65536" and re.match(r"^[0-9.]+$", f[3]):
            v = float(f[3]) * 8  # MB/s average -> Mb/s
    bw.append(v)
rows = [l.split() for l in open(f"{tmp}/samples") if len(l.split()) == n + 6]
marked = int(rows[-1][n + 4]) if rows else 0
dropped = int(rows[-1][n + 5]) if rows else 0
t0 = float(rows[0][0]) if rows else 0
series = []  # t, rate of sender i (Mb/s)..., rate through the bottleneck, queue (KB)
for a, b in zip(rows, rows[1:]):
    dt = float(b[0]) - float(a[0])
    if dt <= 0: continue
    rates = [(int(b[1 + i]) - int(a[1 + i])) * 8 / dt / 1e6 for i in range(n)]
    rates.append((int(b[n + 2]) - int(a[n + 2])) * 8 / dt / 1e6)
    series.append([float(b[0]) - t0] + rates + [int(b[n + 3]) / 1e3])
maxq = max((s[-1] for s in series), default=0)
# The steady state, everybody sending: from 1 s after the traffic began (after the late
# joiner's start in a late run) to 1 s before the first sender ends. Goodput is what left the
# bottleneck meanwhile (retransmissions included: drops are the next column), fairness the
# senders' rates into the switch meanwhile; perftest's own averages cover windows that do not
# line up when the senders start at different moments on a busy machine.
begin = next((s[0] for s in series if s[n + 1] > link / 10), 0)
lo = begin + (late if lt > 0 else 0) + 1.0
hi = begin + float(os.environ.get("SECS", "8")) - 1.0
steady = [s for s in series if lo <= s[0] <= hi]
goodput = sum(s[n + 1] for s in steady) / max(len(steady), 1)
share = [sum(s[1 + i] for s in steady) / max(len(steady), 1) for i in range(n)]
steady_q = max((s[-1] for s in steady), default=0)
qs = sorted(s[-1] for s in steady)
median_q = qs[len(qs) // 2] if qs else 0
sq = sum(x * x for x in share)
jain = sum(share) ** 2 / (n * sq) if sq > 0 else 0
conv = ""
if lt > 0:
    fair = link / n
    last = n  # the late joiner's column
    for k in range(len(series)):
        if series[k][0] < begin + late: continue
        win = series[k:k + 10]  # 0.5 s
        if len(win) == 10 and sum(s[last] for s in win) / 10 >= 0.8 * fair:
            conv = f"{series[k][0] - begin - late:.2f}"
            break
    else:
        conv = "never"
line = (f"{tag},{n},{'on' if ecn == '1' else 'off'},{'late' if lt > 0 else 'together'},"
        f"{goodput:.0f},{goodput / link:.3f},{jain:.3f},{marked},{dropped},{maxq:.0f},{steady_q:.0f},{median_q:.0f},{conv},"
        + " ".join(f"{x:.0f}" for x in share) + f",{sum(bw):.0f}")
print(line)
with open(f"{out}/incast.csv", "a") as f:
    f.write(line + "\n")
dat = f"{tmp}/{tag}.dat"
with open(dat, "w") as f:
    for s in series:
        f.write(" ".join(f"{x:.3f}" for x in s) + "\n")
plot = [f"set terminal pngcairo size 900,520 font 'sans,10' noenhanced",
        f"set output '{out}/incast-{tag}.png'",
        f"set title 'ib_write_bw 64 KiB, {n} uroce senders into one {rate} Mb/s port marking ECN by RED, DCQCN {'on' if ecn == '1' else 'off'}'",
        "set xlabel 'time (s)'", "set ylabel 'rate into the switch (Mb/s)'", "set y2label 'queue (KB)'",
        "set yrange [0:*]", "set y2range [0:*]", "set ytics nomirror", "set y2tics", "set key outside right",
        "set grid"]
cmds = [f"'{dat}' using 1:{i + 2} with lines lw 2 title 'sender {i + 1}'" for i in range(n)]
cmds.append(f"'{dat}' using 1:{n + 2} with lines lc rgb '#000000' lw 1 title 'through the bottleneck'")
cmds.append(f"'{dat}' using 1:{n + 3} axes x1y2 with lines lc rgb '#999999' dt 2 title 'queue (KB, right axis)'")
plot.append("plot " + ", ".join(cmds))
subprocess.run(["gnuplot"], input="\n".join(plot).encode(), check=True)
PY
}

echo "run,senders,dcqcn,start,goodput_mbps,of_link,jain,marked,dropped,max_queue_kb,steady_max_queue_kb,steady_median_queue_kb,late_converge_s,per_sender_mbps,perftest_sum_mbps" \
  >"$out/incast.csv"
printf "%-20s %-7s %-6s %-9s %7s %7s %6s %7s %7s %7s %7s %7s %7s %-20s %s\n" run senders dcqcn start \
  "Mb/s" "of_link" jain marked dropped "maxq_KB" "st_max" "st_med" "late_s" "per sender Mb/s" "perftest"
for n in $senders_list; do
  for ecn in ${ECNS:-1 0}; do
    for lt in ${STARTS:-0 $late}; do
      tag="${n}to1-$([ "$ecn" = 1 ] && echo on || echo off)-$([ "$lt" = 0 ] && echo together || echo late)"
      run "$n" "$ecn" "$lt"
      SECS=$secs summary "$n" "$ecn" "$lt" "$tag" | awk -F, '{printf "%-20s %-7s %-6s %-9s %7s %7s %6s %7s %7s %7s %7s %7s %7s %-20s %s\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15}'
    done
  done
done
echo "incast: $out/incast.csv and $out/incast-*.png"
