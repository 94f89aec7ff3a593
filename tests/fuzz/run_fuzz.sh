#!/usr/bin/env bash
# ctest wrapper: seeds a corpus from pcaps/ and runs the fuzz target for a fixed time.
# Usage: run_fuzz.sh FUZZER PCAP_TO_CORPUS PCAP_DIR WORK_DIR SECONDS [LIBFUZZER-FLAGS...]
# (PCAP_TO_CORPUS "-": no seeds, the corpus starts empty)
set -euo pipefail
fuzzer=$1 to_corpus=$2 pcaps=$3 work=$4 seconds=$5
shift 5
rm -rf "$work" && mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
if [ "$to_corpus" != - ]; then
  "$to_corpus" "$work/seeds" "$pcaps"/*.pcap
  # Keep only the seeds that add coverage, then fuzz; any crash writes an artifact and fails.
  "$fuzzer" -merge=1 "$work/corpus" "$work/seeds" >"$work/merge.log" 2>&1
fi
exec "$fuzzer" -max_total_time="$seconds" -max_len=9100 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$@" "$work/corpus"
