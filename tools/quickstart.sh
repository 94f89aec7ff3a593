#!/usr/bin/env bash
# Quickstart: install dependencies, build uroce, and dissect a kernel Soft-RoCE capture
# (an RDMA READ bandwidth test) in teaching mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"${UROCE_JOBS:-2}" --target uroce-dissect
capture=${1:-pcaps/kernel-rxe-read_bw_4096-head.pcap}
echo
echo "=== uroce-dissect $capture (one line per packet) ==="
./build/tools/dissect/uroce-dissect "$capture"
lesson=build/quickstart-explain.txt
./build/tools/dissect/uroce-dissect --explain "$capture" > "$lesson"
echo
echo "=== uroce-dissect --explain $capture (first 150 of $(wc -l < "$lesson") lines; all in $lesson) ==="
head -n 150 "$lesson"
echo
echo "=== per-QP summary ==="
tail -n 25 "$lesson"
