#!/usr/bin/env bash
# The lab's engine in WebAssembly sends what the native engine sends: lab-frames natively and
# built by build_wasm.sh, run under node, must print the same lines (every frame with its CRC,
# every completion) and both must succeed. Usage: wasm_frames.sh NATIVE_LAB_FRAMES OUTDIR.
set -euo pipefail
native=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null || { echo "SKIP: node not installed"; exit 77; }
rc=0
bash "$here/build_wasm.sh" "$out" >/dev/null || rc=$?
[ $rc -ne 77 ] || { echo "SKIP: em++ not installed"; exit 77; }
[ $rc -eq 0 ] || { echo "FAIL: the WebAssembly build failed"; exit 1; }
"$native" > "$out/native.txt" || { echo "FAIL: the native run failed"; cat "$out/native.txt"; exit 1; }
node "$out/lab-frames.js" > "$out/wasm.txt" || { echo "FAIL: the WebAssembly run failed"; cat "$out/wasm.txt"; exit 1; }
if ! diff "$out/native.txt" "$out/wasm.txt"; then
  echo "FAIL: the WebAssembly engine sent other frames than the native one (< native, > wasm)"
  exit 1
fi
grep -q "lost on the link" "$out/native.txt" || { echo "FAIL: the script lost no packet"; exit 1; }
echo "PASS: $(grep -c ' crc ' "$out/native.txt") frames and $(grep -c 'completion wr' "$out/native.txt") completions, the same natively and in WebAssembly"
