#!/usr/bin/env bash
# How uroce-dissect --ladder copes with a large capture: records ib_write_bw 64 B (52,000
# messages) between two uroce processes in two namespaces (UROCE_PCAP on the client: every
# frame in and out), makes the page, and opens it in headless Chromium (collapsed view, the
# default) RUNS times: prints the frames, the page's size, the time uroce-dissect takes, and
# Chromium's time from start to the DOM dumped, with the page's own figure for parsing the
# data and drawing (data-render-ms). Issue 24's target: under 5 s for 100,000 packets.
# Needs root. Medians of RUNS (default 3).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${RUNS:-3}
cmake --build build -j"${UROCE_JOBS:-2}" --target uroce uroce-dissect uroce_ibverbs >/dev/null
uroce=$PWD/build/tools/uroce/uroce dissect=$PWD/build/tools/dissect/uroce-dissect
chromium=$(command -v chromium) || { echo "ladder bench: chromium is missing"; exit 1; }
. tools/lib/netns.sh
ns_test lb 10.96.0.1/24 10.96.0.2/24 fd96::1/64 fd96::2/64
cap=$dir/big.pcap
ip netns exec "$nsB" "$uroce" run --iface lbvb -- ib_write_bw -d uroce0 -x 1 -s 64 -n 52000 >/dev/null 2>&1 &
server=$!
wait_listen "$nsB" 18515 "$server"
ip netns exec "$nsA" env UROCE_PCAP="$cap" "$uroce" run --iface lbva -- \
  ib_write_bw -d uroce0 -x 1 -s 64 -n 52000 10.96.0.2 >/dev/null 2>&1
wait "$server"
frames=$("$dissect" "$cap" | tail -1)
t0=$(date +%s.%N)
"$dissect" --ladder "$dir/big.html" "$cap" >/dev/null
t1=$(date +%s.%N)
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
: > "$dir/load" ; : > "$dir/render"
for _ in $(seq "$runs"); do
  s=$(date +%s.%N)
  "$chromium" --headless --no-sandbox --disable-gpu --user-data-dir="$dir/profile" \
    --dump-dom "file://$dir/big.html" > "$dir/dom" 2>/dev/null
  e=$(date +%s.%N)
  awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f\n", e - s }' >> "$dir/load"
  grep -o 'data-render-ms="[0-9]*"' "$dir/dom" | grep -o '[0-9]*' >> "$dir/render"
done
rows=$(grep -o 'data-rows="[0-9]*"' "$dir/dom" | grep -o '[0-9]*')
echo "capture: $frames"
echo "page: $(du -m "$dir/big.html" | cut -f1) MiB, written by uroce-dissect in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
echo "Chromium, start to DOM dumped (collapsed view, first page of $rows rows): $(median < "$dir/load") s (median of $runs); the page's script: $(median < "$dir/render") ms"
