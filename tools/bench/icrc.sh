#!/usr/bin/env bash
# ICRC benchmark: builds (Release), runs icrc_bench, prints its table and saves a plot
# (docs/bench/icrc.png via gnuplot when installed, plus the CSV). Run with nothing else busy.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DUROCE_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j"${UROCE_JOBS:-2}" --target icrc_bench >/dev/null
mkdir -p docs/bench
./build-release/tools/bench/icrc_bench --runs "${RUNS:-7}" --csv docs/bench/icrc.csv
if command -v gnuplot >/dev/null; then
  gnuplot <<'GP'
set terminal pngcairo size 800,450
set output 'docs/bench/icrc.png'
set datafile separator ','
set title 'ICRC throughput per RoCEv2 packet (higher is better)'
set xlabel 'payload bytes'
set ylabel 'GB/s'
set logscale y
set style data histograms
set style fill solid 0.8
set key top left
plot '< grep isa-l docs/bench/icrc.csv' using 4:xtic(1) title 'ISA-L', \
     '< grep reference docs/bench/icrc.csv' using 4 title 'bitwise reference'
GP
  echo "plot: docs/bench/icrc.png"
else
  echo "plot skipped: gnuplot not installed (apt-get install gnuplot-nox)"
fi
