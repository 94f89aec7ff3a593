#!/usr/bin/env bash
# Builds tools/lab/frames.cc and the engine it runs (stack/wire, stack/memory, stack/engine,
# the in-memory link) for WebAssembly with emscripten: OUT/lab-frames.js, one file with the
# module inside (SINGLE_FILE: no fetch of a .wasm, so it also works from a file:// page).
# Usage: build_wasm.sh OUT. Exit 77 when em++ is not installed (tools/install-deps.sh does).
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
command -v em++ >/dev/null || { echo "SKIP: em++ not installed (apt-get install emscripten)"; exit 77; }
mkdir -p "$out/inc" "$out/obj"
# rdma-core's verbs headers (the engine speaks ibv_* types), beside a stand-in for the kernel's
# linux/types.h, which emscripten's C library does not have.
ln -sfn /usr/include/infiniband "$out/inc/infiniband"
ln -sfn /usr/include/rdma "$out/inc/rdma"
# Debian's em++ runs its optimizer on Debian's node modules.
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
flags=(-std=c++20 -O2 -Wno-deprecated-anon-enum-enum-conversion -I"$repo/stack" -I"$repo/include"
       -I"$repo/drivers" -I"$here/compat" -I"$out/inc")
srcs=("$repo"/stack/wire/*.cc "$repo"/stack/memory/*.cc "$repo"/stack/engine/*.cc
      "$repo/drivers/memlink/memlink.cc")
objs=() todo=()
for s in "${srcs[@]}"; do
  o="$out/obj/$(basename "$(dirname "$s")")_$(basename "$s" .cc).o"
  objs+=("$o")
  [ "$o" -nt "$s" ] || todo+=("$s" "$o")
done
# Two at a time (SRC OBJ pairs); the flags travel in the environment.
export UROCE_EMFLAGS="${flags[*]}"
[ ${#todo[@]} -eq 0 ] ||
  printf '%s\0' "${todo[@]}" | xargs -0 -n 2 -P "${UROCE_JOBS:-2}" sh -c 'em++ $UROCE_EMFLAGS -c "$1" -o "$2"' em
em++ "${flags[@]}" -sSINGLE_FILE=1 -sALLOW_MEMORY_GROWTH=1 "$here/frames.cc" "${objs[@]}" -o "$out/lab-frames.js"
echo "$out/lab-frames.js"
