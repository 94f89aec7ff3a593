#!/usr/bin/env bash
# perftest over uroce between two network namespaces (veth + DPDK net_af_packet): bandwidth of
# ib_write_bw at 4 KiB and 64 KiB, latency of ib_send_lat and ib_write_lat at 8 B. Median of
# RUNS runs, with the CPU use of each side; saves docs/bench/verbs.csv and verbs.png. Needs
# root; run with nothing else busy.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${RUNS:-5}
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DUROCE_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j"${UROCE_JOBS:-2}" --target uroce_ibverbs uroce >/dev/null
uroce=$PWD/build-release/tools/uroce/uroce
a=uroce-bench-a b=uroce-bench-b
tmp=$(mktemp -d)
drop_hosts() {
  ip netns pids "$b" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true
}
trap 'drop_hosts; rm -rf "$tmp"' EXIT
drop_hosts
ip netns add "$a"; ip netns add "$b"
ip link add ubn-a type veth peer name ubn-b
ip link set ubn-a netns "$a"; ip link set ubn-b netns "$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set ubn-a up mtu 9000; ip -n "$b" link set ubn-b up mtu 9000
ip -n "$a" addr add 10.91.0.1/24 dev ubn-a; ip -n "$b" addr add 10.91.0.2/24 dev ubn-b

# one TEST ARGS: prints "value server_cpu% client_cpu%" (value: MB/s average or usec typical)
. tools/lib/netns.sh  # wait_listen NS: the server in NS is listening

one() {
  local col=$1; shift
  # shellcheck disable=SC2086
  ip netns exec "$b" env $benv /usr/bin/time -f "%P" -o "$tmp/s.cpu" "$uroce" run --iface ubn-b -- "$@" \
    >"$tmp/s.out" 2>&1 &
  local server=$!
  wait_listen "$b"
  # shellcheck disable=SC2086
  ip netns exec "$a" env $benv /usr/bin/time -f "%P" -o "$tmp/c.cpu" "$uroce" run --iface ubn-a -- "$@" \
    10.91.0.2 >"$tmp/c.out" 2>&1
  wait "$server"
  local v
  v=$(grep -E '^ [0-9]+ +[0-9]+' "$tmp/c.out" | tail -1 | awk -v c="$col" '{print $c}')
  echo "$v $(tr -d '%' < "$tmp/s.cpu") $(tr -d '%' < "$tmp/c.cpu")"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

mkdir -p docs/bench
echo "test,size,value,unit,server_cpu_pct,client_cpu_pct" > docs/bench/verbs.csv
printf '%-18s %8s %12s %8s %10s %10s   (median of %d runs)\n' test size value unit "srv CPU%" "cli CPU%" "$runs"
bench() {  # NAME SIZE UNIT COLUMN CMD...
  local name=$1 size=$2 unit=$3 col=$4; shift 4
  : > "$tmp/r"
  for _ in $(seq "$runs"); do one "$col" "$@" -s "$size" >> "$tmp/r"; done
  local v s c
  v=$(awk '{print $1}' "$tmp/r" | median); s=$(awk '{print $2}' "$tmp/r" | median)
  c=$(awk '{print $3}' "$tmp/r" | median)
  printf '%-18s %8s %12s %8s %10s %10s\n' "$name" "$size" "$v" "$unit" "$s" "$c"
  echo "$name,$size,$v,$unit,$s,$c" >> docs/bench/verbs.csv
}
benv="UROCE_EXCLUSIVE=no"  # the default: the interface may be shared with other processes
bench ib_write_bw 4096 MB/s 4 ib_write_bw -d uroce0 -x 1 -n 20000
bench ib_write_bw 65536 MB/s 4 ib_write_bw -d uroce0 -x 1 -n 5000
benv="UROCE_EXCLUSIVE=yes"  # af_packet transmit bypassing the qdisc (and the other sockets)
bench ib_write_bw/excl 4096 MB/s 4 ib_write_bw -d uroce0 -x 1 -n 20000
bench ib_write_bw/excl 65536 MB/s 4 ib_write_bw -d uroce0 -x 1 -n 5000
benv="UROCE_EXCLUSIVE=no"
bench ib_send_lat 8 usec 5 ib_send_lat -d uroce0 -x 1 -n 2000
bench ib_write_lat 8 usec 5 ib_write_lat -d uroce0 -x 1 -n 2000

if command -v gnuplot >/dev/null; then
  gnuplot <<'GP'
set terminal pngcairo size 900,400
set output 'docs/bench/verbs.png'
set datafile separator ','
set multiplot layout 1,2 title 'perftest over uroce, two namespaces, veth + net\_af\_packet'
set style data histograms
set style fill solid 0.8
set key off
set title 'ib\_write\_bw (MB/s, higher is better)'
plot '< grep ib_write_bw docs/bench/verbs.csv' using 3:xtic(stringcolumn(1).' '.stringcolumn(2))
set title 'latency, 8 B (usec typical, lower is better)'
plot '< grep _lat docs/bench/verbs.csv' using 3:xtic(1)
unset multiplot
GP
  echo "plot: docs/bench/verbs.png"
fi
