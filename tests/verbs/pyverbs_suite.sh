#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs ships it in
# /usr/share/doc/rdma-core/tests), unmodified, against uroce's libibverbs.so.1 in a network
# namespace with one end of a veth pair, all in one process as run_tests.py runs it.
# Writes every test's outcome to OUT (tab-separated: id, outcome, the suite's reason) and
# passes when the generic tests (not the vendor modules: mlx5, efa, cuda) have at least
# MIN_PASS passes, no failure and no error.
# With UROCE (the uroce tool), the suite runs under `uroce run`, as a user runs a verbs
# program: the device then shows in /sys/class/infiniband with its network interface, which
# the suite's connection manager tests look for (they run the two sides as two processes on
# the one interface).
# With UNPRIVILEGED=1 (and UROCE), the suite runs as uid 65534 with no capability and nothing
# configured: `uroce run` picks the UDP port on loopback and gives the device view through a
# user namespace (docs/udp.md); no namespace made by root, no huge pages.
# Usage: pyverbs_suite.sh LIBDIR OUT [MIN_PASS [UROCE]]. Needs root (exit 77 = skipped otherwise).
set -euo pipefail
lib=$1 out=$2 min_pass=${3:-86} uroce=${4:-}
run=(); [ -z "$uroce" ] || run=("$uroce" run --)
suite=/usr/share/doc/rdma-core/tests
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
[ -f "$suite/run_tests.py" ] || { echo "SKIP: python3-pyverbs (its test suite) not installed"; exit 77; }
ns=upv$$
dir=$(mktemp -d)
if [ "${UNPRIVILEGED:-0}" = 1 ]; then
  [ -n "$uroce" ] || { echo "FAIL: UNPRIVILEGED=1 needs UROCE"; exit 1; }
  trap 'rm -rf "$dir"' EXIT
  # Copies uid 65534 can read (and the suite's own scratch files can be written beside).
  mkdir "$dir/lib" "$dir/home"
  cp -a "$lib"/lib*.so* "$dir/lib/" && cp "$uroce" "$dir/uroce"
  cp -r "$suite" "$dir/tests"
  find "$dir/tests" -name '*.gz' -exec gunzip {} +
  chmod -R a+rwX "$dir"
  preload=${LD_PRELOAD:-}
  unset LD_PRELOAD
  rc=0
  (cd "$dir" && setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
     --bounding-set=-all env LD_PRELOAD="$preload" HOME="$dir/home" UROCE_CONFIG=/dev/null \
     UROCE_LIB_DIR="$dir/lib" timeout 900 "$dir/uroce" run -- \
     /usr/bin/python3 tests/run_tests.py --dev uroce0 --port 1 --gid 1 -v) >"$dir/log" 2>&1 || rc=$?
  grep -q "^uroce: no device configured" "$dir/log" \
    || { echo "FAIL: the suite did not run with nothing configured"; head -5 "$dir/log"; exit 1; }
fi
if [ "${UNPRIVILEGED:-0}" != 1 ]; then
# The suite's huge-page tests (on-demand MRs and parent domains on 2 MiB pages) want some
# reserved: 32 for the run, given back after it (a machine that has its own keeps them).
huge=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
huge_before=$(cat "$huge" 2>/dev/null || echo "")
cleanup() {
  ip netns del "$ns" 2>/dev/null || true; rm -rf "$dir"
  [ -z "$huge_before" ] || echo "$huge_before" > "$huge" 2>/dev/null || true
}
trap cleanup EXIT
if [ -n "$huge_before" ] && [ "$(cat ${huge%nr_hugepages}free_hugepages)" -lt 32 ]; then
  echo $((huge_before + 32)) > "$huge" 2>/dev/null || true
fi
. "$(dirname "$0")/../../tools/lib/netns.sh"
veth_ns "$ns" 10.94.0.1/24
# The suite as Debian ships it, some files gzipped: a copy to run (nothing in it is changed).
cp -r "$suite" "$dir/tests"
find "$dir/tests" -name '*.gz' -exec gunzip {} +
rc=0
(cd "$dir" && ip netns exec "$ns" env LD_LIBRARY_PATH="$lib" UROCE_LIB_DIR="$lib" UROCE_IFACE="${ns}a" \
   timeout 900 "${run[@]}" /usr/bin/python3 tests/run_tests.py --dev uroce0 --port 1 --gid 1 -v) \
   >"$dir/log" 2>&1 || rc=$?
fi
tail -n 4 "$dir/log"
/usr/bin/python3 - "$dir/log" "$out" "$min_pass" "$rc" <<'PY'
import re, sys
log, out, min_pass, rc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
results, current = [], None
idline = re.compile(r"^(\w+) \(([\w.]+)\)")
outcome = re.compile(r" \.\.\. (ok|skipped (?:'(.*)'|\"(.*)\")|FAIL|ERROR|expected failure|"
                     r"unexpected success)$")
for line in open(log, errors="replace"):
    line = line.rstrip("\n")
    m = idline.match(line)
    if m:
        current = m.group(2)
    # (a test that prints leaves its outcome alone on the next line)
    r = outcome.search(line) or (current and outcome.search(" ... " + line))
    if r and current:
        word = r.group(1).split(" ")[0]
        results.append((current, word, r.group(2) or r.group(3) or ""))
        current = None
vendor = re.compile(r"^tests\.test_(mlx5|efa|efadv|cuda)")
generic = [x for x in results if not vendor.match(x[0])]
count = lambda what: sum(1 for x in generic if x[1] == what)
with open(out, "w") as f:
    f.write("# test\toutcome\treason (the suite's own)\n")
    for t, o, why in results:
        f.write(f"{t}\t{o}{'' if not vendor.match(t) else ' (vendor)'}\t{why}\n")
p, s, fl, e = count("ok"), count("skipped"), count("FAIL"), count("ERROR")
print(f"pyverbs suite: {len(results)} tests, {len(generic)} generic: {p} passed, {s} skipped, "
      f"{fl} failed, {e} errors (outcomes in {out})")
for t, o, _ in generic:
    if o in ("FAIL", "ERROR"):
        print(f"  {o}: {t}")
ok = len(results) > 0 and p >= min_pass and fl == 0 and e == 0
if not ok:
    print(f"FAIL: want at least {min_pass} generic passes and no failure or error")
    print(open(log, errors="replace").read()[-6000:])
sys.exit(0 if ok else 1)
PY
