#!/usr/bin/env bash
# uroce-conform against uroce: the agent under `uroce run` in namespace A (the port
# UROCE_PORT names, af_packet by default), the scripted side on the veth's other end in B.
# Every case in tools/conform/cases must pass (JSON checked, a capture and a ladder diagram
# each); then every case in tests/conform/wrong (deliberately wrong expectations) must fail,
# so that the tool is shown able to fail.
# Usage: conform.sh UROCE CONFORM AGENT CASES WRONG. Needs root (exit 77 otherwise).
set -euo pipefail
uroce=$1 conform=$2 agent=$3 cases=$4 wrong=$5
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
. "$(dirname "$0")/../../tools/lib/netns.sh"  # ns_test, wait_listen
tag=cf$$
ns_test "$tag" 10.94.0.1/24 10.94.0.2/24 fd00:94::1/64 fd00:94::2/64
port_args=()
[ -z "${UROCE_PORT:-}" ] || port_args=(--port "$UROCE_PORT")

# run_cases DIR OUT: the agent for one session, then uroce-conform over DIR; its exit status.
run_cases() {
  local cases=$1 out=$2 rc=0
  ip netns exec "$nsA" "$uroce" run --iface "${tag}va" "${port_args[@]}" -- timeout 300 \
    "$agent" -p 18600 >"$out.agent" 2>&1 &
  local a=$!
  wait_listen "$nsA" 18600 "$a"
  ip netns exec "$nsB" timeout 300 "$conform" --iface "${tag}vb" --agent 10.94.0.1:18600 \
    --out "$out.pcaps" --json "$out.json" "$cases" >"$out" 2>&1 || rc=$?
  wait "$a" || { echo "FAIL: the agent exited with $?"; cat "$out.agent"; exit 1; }
  cat "$out"
  return $rc
}

run_cases "$cases" "$dir/good" || { echo "FAIL: cases failed against uroce"; exit 1; }
want=$(ls "$cases"/*.case | wc -l)
/usr/bin/python3 - "$dir/good.json" "$want" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cases = r["cases"]
assert len(cases) == int(sys.argv[2]), f"{len(cases)} results for {sys.argv[2]} cases"
bad = [c["name"] for c in cases if c["verdict"] != "PASS"]
assert not bad, f"not passed: {bad}"
assert all(c["frames_sent"] + c["frames_received"] > 0 for c in cases), "a case moved no frame"
assert all(c["ladder"].endswith(".html") for c in cases), "a case without its ladder diagram"
print(f"json: {len(cases)} cases, all PASS, dut {r['dut']}")
PY
[ "$(ls "$dir/good.pcaps"/*.pcap | wc -l)" -eq "$want" ] || { echo "FAIL: not a capture per case"; exit 1; }
grep -q "PSN-seq-error\|PSN sequence" "$dir/good.pcaps/rc.req.nak_seq.html" || { echo "FAIL: the ladder shows no NAK"; exit 1; }

rc=0
run_cases "$wrong" "$dir/wrong" || rc=$?
n=$(ls "$wrong"/*.case | wc -l)
failed=$(grep -c '^FAIL' "$dir/wrong" || true)
[ "$rc" -eq 1 ] && [ "$failed" -eq "$n" ] ||
  { echo "FAIL: $failed of $n wrong cases failed (exit $rc); each must"; exit 1; }
echo "PASS: $want cases pass against uroce; $n wrong ones fail"
