#!/usr/bin/env bash
# The ladder gallery in docs/ladder/: uroce-dissect --ladder on the repository's captures of the
# kernel's Soft-RoCE, each page opened in headless Chromium at the interesting moment with one
# packet hovered (its --explain text in the right-hand panel), saved as a PNG.
# Usage: tools/dissect/ladder_gallery.sh [UROCE_DISSECT]  (default: build/tools/dissect/uroce-dissect)
set -euo pipefail
cd "$(dirname "$0")/../.."
dissect=${1:-build/tools/dissect/uroce-dissect}
chromium=$(command -v chromium || command -v chromium-browser) \
  || { echo "ladder_gallery: chromium is missing (tools/install-deps.sh)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shot NAME PCAP FROM_FRAME HOVER_FRAME [MORE]: the view from FROM_FRAME on, HOVER_FRAME
# hovered; MORE is added to the URL fragment (e.g. "&collapse=0").
shot() {
  local name=$1 pcap=pcaps/$2 from=$3 hover=$4 more=${5:-} us
  us=""  # FROM_FRAME "-": from the start (verbs events may come before the first frame)
  [ "$from" = - ] || us=$("$dissect" "$pcap" | awk -v f="$from" '$1 == f && !done { printf "%.3f", $2 * 1e6 - 0.5; done = 1 }')
  "$dissect" --ladder "$tmp/$name.html" "$pcap" >/dev/null
  "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
    --window-size=1500,900 --screenshot="docs/ladder/$name.png" \
    "file://$tmp/$name.html#from=$us&hover=$hover$more" >/dev/null 2>&1
  echo "docs/ladder/$name.png"
}
shot write_clean kernel-rxe-write_bw_4096-head.pcap 22 22 "&collapse=0"
shot send_lossy_go_back_n kernel-rxe-lossy_send_bw_4096-head.pcap 108 117
shot rnr_nak kernel-rxe-rnr_send_bw_64-head.pcap 58 63
shot read kernel-rxe-read_bw_4096-head.pcap 24 26
shot atomic_fetch_add kernel-rxe-atomic_bw_fadd.pcap 24 24
shot ud_send kernel-rxe-ud_pingpong-head.pcap 15 15
shot cm_connect kernel-rxe-rping_cm.pcap 1 3
shot verbs_rc_pingpong uroce-rc_pingpong-verbs.pcap - 19
shot read_lost_response uroce-read_lost_response.pcap 86 96 "&collapse=0"
shot dcqcn_cnp uroce-dcqcn_cnp.pcap - 12 "&collapse=0"
