#!/usr/bin/env bash
# Transport benchmark: two engines over the in-memory link in one process. Builds (Release),
# prints the table (median of RUNS runs) and saves docs/bench/engine.csv and engine.png.
# Run with nothing else busy on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DUROCE_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j"${UROCE_JOBS:-2}" --target engine_bench >/dev/null
mkdir -p docs/bench
./build-release/tools/bench/engine_bench --runs "${RUNS:-5}" --seconds "${SECONDS_PER_RUN:-0.5}" \
  --csv docs/bench/engine.csv
if command -v gnuplot >/dev/null; then
  gnuplot <<'GP'
set terminal pngcairo size 800,450
set output 'docs/bench/engine.png'
set datafile separator ','
set title 'uroce engine to engine, in-memory link (higher is better)'
set xlabel 'message size (bytes)'
set ylabel 'GB/s'
set style data histograms
set style fill solid 0.8
set key top left
plot '< grep WRITE docs/bench/engine.csv' using 4:xtic(2) title 'RDMA WRITE', \
     '< grep SEND docs/bench/engine.csv' using 4 title 'SEND'
GP
  echo "plot: docs/bench/engine.png"
else
  echo "plot skipped: gnuplot not installed (apt-get install gnuplot-nox)"
fi
