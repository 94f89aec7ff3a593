#!/usr/bin/env bash
# A data-verifying soak: two uroce processes in two network namespaces, every byte they move
# checked, on a damaged link, round after round until the time is up. Each round runs, with a
# fault seed of its own on both sides (loss, duplication, corruption, reordering, as
# UROCE_FAULT):
#   - rdma_soak (tests/interop/rdma_soak.c) for ROUND seconds: QPS queue pairs each of RC, UC
#     and UD on both sides, one operation always in flight on each, both ways: RC WRITEs of
#     random sizes read back, READs of a fixed pattern, FETCH_ADD / CMP_SWAP with their
#     results checked, SENDs checked in order; UC and UD SENDs checked when they arrive (they
#     may be lost, never wrong, duplicated or reordered); at the end each side checks that
#     every RC message came and its counters hold what the peer's atomics left; its own memory
#     and descriptors are sampled after warm-up and at the end;
#   - rdma_verify (tests/interop/rdma_verify.c): the fixed RC sequence of the interop tests;
#   - rstream -T v over rsockets (the received stream checked byte by byte).
# (Not the pingpongs: on a lossy link they end with a race no transport can win, the last
# ACK lost and its receiver gone; docs/interop.md, "Left out on purpose".)
# A failed round keeps its logs (and, for the short programs, both sides' captures) in the
# work directory and the soak goes on. The summary adds up what moved, what the fault
# injectors did (each uroce process prints its UROCE_FAULT account as it closes the device),
# how memory and descriptors moved within each rdma_soak round, and the failures; the exit
# code is 1 if any round failed.
#
# Usage (root, a built tree): tools/soak.sh [SECONDS] [FAULT]
#   SECONDS  how long to run (default 600)
#   FAULT    the UROCE_FAULT damage without seed (default loss=0.02,duplicate=0.01,corrupt=0.005,reorder=0.02)
# Exit code: 0, 1 (a round failed), 2 (not built), 77 (not root: skipped).
# Environment: BUILD (default build), WORK (default a new directory under /var/tmp, removed at
# the end unless a round failed), ROUND
# (rdma_soak's seconds per round, default 60), QPS (default 4), MAXSIZE (default 65536).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$repo/tools/lib/netns.sh"  # ns_test, wait_listen
seconds=${1:-600}
fault=${2:-loss=0.02,duplicate=0.01,corrupt=0.005,reorder=0.02}
build=${BUILD:-$repo/build}
round_s=${ROUND:-60}
qps=${QPS:-4}
maxsize=${MAXSIZE:-65536}
uroce=$build/tools/uroce/uroce
verify=$build/tests/interop/rdma_verify
soak=$build/tests/interop/rdma_soak
[ "$(id -u)" -eq 0 ] || { echo "soak: needs root (network namespaces)"; exit 77; }
for f in "$uroce" "$verify" "$soak"; do
  [ -x "$f" ] || { echo "soak: $f is not built (cmake --build $build)"; exit 2; }
done
command -v rstream >/dev/null \
  || { echo "soak: rdmacm-utils not installed (tools/install-deps.sh)"; exit 2; }
own_work=0; [ -n "${WORK:-}" ] || own_work=1
work=${WORK:-$(mktemp -d /var/tmp/uroce-soak.XXXXXX)}
mkdir -p "$work"
tag=k$$
ns_test "$tag" 10.89.0.1/24 10.89.0.2/24 fd00:89::1/64 fd00:89::2/64
srv=10.89.0.2

declare -A rounds=() failed=()
# Totals over every round (the rdma_soak lines of both sides, and every UROCE_FAULT line).
tot_file=$work/totals
: >"$tot_file"
# one NAME PORT ROUND SERVER-ARGS... -- CLIENT-ARGS...: a pair under `uroce run`, each side
# damaging what it sends with its own seed; the client gets the server's address last.
# PCAP=no: no captures (rdma_soak moves too much to keep).
one() {
  local name=$1 port=$2 round=$3; shift 3
  local sargs=(); while [ "$1" != "--" ]; do sargs+=("$1"); shift; done; shift
  local d="$work/$name.$round" limit=$((round_s + 120))
  mkdir -p "$d"
  local spcap=() cpcap=()
  if [ "${PCAP:-yes}" = yes ]; then spcap=(--pcap "$d/server.pcap"); cpcap=(--pcap "$d/client.pcap"); fi
  ip netns exec "$nsB" env UROCE_FAULT="$fault,seed=$((round * 2 + 1))" "$uroce" run \
    --iface "${tag}vb" "${spcap[@]}" -- timeout "$limit" "${sargs[@]}" >"$d/server.log" 2>&1 &
  local s=$!
  local ok=1
  wait_listen "$nsB" "$port" "$s" >"$d/wait.log" 2>&1 || ok=0
  if [ $ok = 1 ]; then
    ip netns exec "$nsA" env UROCE_FAULT="$fault,seed=$((round * 2 + 2))" "$uroce" run \
      --iface "${tag}va" "${cpcap[@]}" -- timeout "$limit" "$@" >"$d/client.log" 2>&1 || ok=0
  fi
  [ $ok = 1 ] || kill "$s" 2>/dev/null
  wait "$s" || ok=0
  grep -qiE "invalid data|verify failed|mismatch|differ" "$d"/*.log 2>/dev/null && ok=0
  grep -qE "^rdma_soak: (ERROR|FAILED)" "$d"/*.log 2>/dev/null && ok=0
  grep -h "^rdma_soak: verified\|^rdma_soak: FAILED\|UROCE_FAULT:" "$d"/server.log "$d"/client.log \
    >>"$tot_file" 2>/dev/null
  rounds[$name]=$(( ${rounds[$name]:-0} + 1 ))
  if [ $ok = 1 ]; then
    rm -rf "$d"
  else
    failed[$name]=$(( ${failed[$name]:-0} + 1 ))
    echo "soak: round $round: $name FAILED (logs and captures in $d)"
  fi
}

start=$(date +%s)
round=0
echo "soak: $seconds s, damage $fault on both sides, rdma_soak rounds of $round_s s with $qps QPs" \
     "each of RC, UC, UD (messages up to $maxsize bytes), work directory $work"
while [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  round=$((round + 1))
  left=$(( seconds - ($(date +%s) - start) ))
  len=$(( left < round_s ? (left > 5 ? left : 5) : round_s ))
  PCAP=no one rdma_soak 18700 "$round" "$soak" -d uroce0 -g 1 -m 1024 -q "$qps" -s "$maxsize" \
    -D "$len" -S "$round" -P 0 -- \
    "$soak" -d uroce0 -g 1 -m 1024 -q "$qps" -s "$maxsize" -D "$len" -S "$round" -P 0 "$srv"
  [ $(( $(date +%s) - start )) -lt "$seconds" ] || break
  one rdma_verify 18600 "$round" "$verify" -d uroce0 -g 1 -s 20000 -n 20 -m 1024 -- \
    "$verify" -d uroce0 -g 1 -s 20000 -n 20 -m 1024 "$srv"
  one rstream 7471 "$round" rstream -T v -S 65536 -C 50 -- rstream -s "$srv" -T v -S 65536 -C 50
done
rc=0
for name in rdma_soak rdma_verify rstream; do
  echo "soak: $name: ${rounds[$name]:-0} rounds, ${failed[$name]:-0} failed"
  [ "${failed[$name]:-0}" -eq 0 ] || rc=1
done
# The totals: rdma_soak's lines name what each side sent and received; UROCE_FAULT's what the
# injectors did to the frames.
awk '
  /^rdma_soak: / {
    for (i = 1; i <= NF; ++i) {
      if ($(i+1) == "WRITE") w += $i; if ($(i+1) == "READ") r += $i; if ($(i+1) == "atomics") a += $i
      if ($(i+1) == "SEND" && $(i+2) == "out,") so += $i; if ($(i+1) == "SEND" && $(i+2) == "in;") si += $i
      if ($i == "UC" && $(i+2) == "out") { uo += $(i+1); ui += $(i+3) }
      if ($i == "UD" && $(i+2) == "out") { do_ += $(i+1); di += $(i+3) }
      if ($(i+1) ~ /^late/) dl += $i
      if ($(i+1) == "MB" && $(i+2) == "out;") mb += $i
      if ($i == "rss") { g = $(i+3) - $(i+1); if (g > growth) growth = g }
      if ($i == "fds") { f = $(i+3) + 0 - ($(i+1) + 0); if (f > fdg) fdg = f }
      if ($i == "errors") e += $(i+1)
    }
    n++
  }
  /UROCE_FAULT:/ {
    for (i = 1; i <= NF; ++i) {
      if ($(i+1) == "frames" && $(i+2) == "passed,") fp += $i; if ($(i+1) == "dropped,") fd += $i
      if ($(i+1) == "duplicated,") fu += $i; if ($(i+1) == "corrupted,") fc += $i
      if ($(i+1) == "reordered,") fr += $i
    }
  }
  END {
    printf "soak: rdma_soak, both sides of %d runs: RC %d WRITEs read back, %d READs, %d atomics, %d of %d SENDs arrived in order;", n / 2, w, r, a, si, so
    printf " UC %d of %d and UD %d of %d SENDs arrived (the rest lost), UD %d more late or twice; %.0f MB moved; errors %d\n", ui, uo, di, do_, dl, mb, e
    printf "soak: memory: the largest growth of a process between warm-up and its end %d kB, of its descriptors %d\n", growth, fdg
    printf "soak: the fault injectors (every program, both sides): %d frames passed, %d dropped, %d duplicated, %d corrupted, %d reordered\n", fp, fd, fu, fc, fr
  }' "$tot_file"
echo "soak: $round rounds in $(( $(date +%s) - start )) s"
# A work directory of our own goes unless a failed round left its logs in it.
if [ $own_work = 1 ] && [ $rc = 0 ]; then rm -rf "$work"; else echo "soak: logs in $work"; fi
exit $rc
