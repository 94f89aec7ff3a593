#!/bin/bash
# Unmodified verbs programs over uroce's UDP port inside podman containers made the way
# container engines make them: the host's root file system as the container's (--rootfs /:O,
# an overlay on it, dropped afterwards), podman's default capabilities and seccomp profile, no
# --privileged, no network but the container's own loopback (--network none). As uid 65534 and
# as the container's root (which has no CAP_SYS_ADMIN: uroce run shows it the device the way
# it shows an ordinary user), and with a Docker-like seccomp profile (unshare refused without
# CAP_SYS_ADMIN: no device view, the verbs programs still run). docs/udp.md "In a container".
#
# Usage: podman.sh LIBDIR UROCE (as root: rootful podman)
#   PODMAN_TRY_USER=name   also rootless podman as that user (needs /etc/subuid and
#                          /etc/subgid entries; uidmap and fuse-overlayfs installed)
#   PODMAN_RUNTIME=crun|runc  the OCI runtime (default: the first that starts a container here)
# Exit 0: every case verified; 1: a case failed; 77: podman cannot run a container here.
set -u
LIBDIR=$1 UROCE=$2
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "run as root (rootful podman; rootless runs through PODMAN_TRY_USER)"
command -v podman >/dev/null || skip "podman is not installed (tools/install-deps.sh installs it)"
for p in ibv_rc_pingpong ibv_ud_pingpong ib_write_bw ib_send_lat rping; do
  command -v $p >/dev/null || skip "$p is not installed (ibverbs-utils, perftest, rdmacm-utils)"
done

T=$(mktemp -d /tmp/uroce-podman.XXXXXX)
chmod 755 "$T"
cleanup() {
  [ -n "${PAUSE_PID:-}" ] && kill "$PAUSE_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
mkdir "$T/lib" && cp -a "$LIBDIR"/lib*.so* "$T/lib/" && cp "$UROCE" "$T/uroce" && chmod -R a+rX "$T"

# ---- what runs inside the container -------------------------------------------------------
cat >"$T/inner.sh" <<'EOF'
#!/bin/sh
# $1: yes = the device view must work (UCX lists uroce0), no = it must not, any = either
D=$(dirname "$0"); U=$D/uroce; VIEW=${1:-any}
L=$(mktemp -d); pass=0; fail=0
ok() { echo "  PASS $1"; pass=$((pass + 1)); }
ko() { echo "  FAIL $1"; fail=$((fail + 1)); }
listening() { # PORT PID: until the server listens on TCP PORT (20 s), or PID ends
  for _ in $(seq 200); do
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
pair() { # name, TCP port, server command, client command, patterns the client's and server's output must hold
  name=$1 port=$2; shift 2
  timeout 60 $U run -- $1 >$L/s 2>&1 & sp=$!
  listening "$port" "$sp"
  timeout 60 $U run -- $2 >$L/c 2>&1; crc=$?
  wait $sp; src=$?
  if [ $crc = 0 ] && [ $src = 0 ] && grep -Eq "$3" $L/c && grep -Eq "$4" $L/s; then
    ok "$name: $(grep -E "$3" $L/c | head -1 | tr -s ' \t' ' ')"
  else
    ko "$name (server rc=$src, client rc=$crc)"; tail -5 $L/s | sed 's/^/    server: /'; tail -5 $L/c | sed 's/^/    client: /'
  fi
}
echo "  in the container: $(id), $(grep -E '^CapEff' /proc/self/status | tr -s '\t' ' '), $(grep -E '^Seccomp:' /proc/self/status | tr -s '\t' ' ')"
$U run -- ibv_devinfo -v >$L/dev 2>&1
if grep -q 'hca_id:.*uroce0' $L/dev && grep -q 'GID\[ *1\]:.*::ffff:127\.0\.' $L/dev; then ok "ibv_devinfo: uroce0, GID 1 $(grep 'GID\[ *1\]' $L/dev | sed 's/^.*GID\[ *1\]:[[:space:]]*//')"
else ko "ibv_devinfo"; cat $L/dev; fi
pair rc_pingpong 18515 "ibv_rc_pingpong -d uroce0 -g 1 -n 100" "ibv_rc_pingpong -d uroce0 -g 1 -n 100 127.0.0.1" "100 iters in" "100 iters in"
pair ud_pingpong 18515 "ibv_ud_pingpong -d uroce0 -g 1 -n 100" "ibv_ud_pingpong -d uroce0 -g 1 -n 100 127.0.0.1" "100 iters in" "100 iters in"
pair ib_write_bw 18515 "ib_write_bw -d uroce0 -x 1 -n 1000" "ib_write_bw -d uroce0 -x 1 -n 1000 127.0.0.1" "^ *65536 +1000 " "^ *65536 +1000 "
pair "ib_send_lat -R" 18515 "ib_send_lat -d uroce0 -R -n 100" "ib_send_lat -d uroce0 -R -n 100 127.0.0.1" "^ *2 +100 " "^ *2 +100 |RDMA_Send Latency Test"
# rping -V verifies every ping's data and exits non-zero on a mismatch; -v prints the 10th
pair "rping -V -C 10" 7174 "rping -s -a 127.0.0.1 -V -C 10" "rping -c -a 127.0.0.1 -V -C 10 -v" "^ping data: rdma-ping-9: " "."
# the device view: /dev/infiniband and /sys/class/infiniband, UCX lists the device
$U run -- sh -c 'ls /dev/infiniband/uverbs-uroce0 /sys/class/infiniband/uroce0/device/net/lo && ucx_info -d' >$L/view 2>&1
if grep -q '^# Memory domain: uroce0' $L/view; then seen=yes; else seen=no; fi
why=$(grep -m1 '^uroce: no /dev/infiniband' $L/view)
case "$VIEW:$seen" in
  yes:yes|any:yes) ok "device view: /dev/infiniband/uverbs-uroce0, ucx_info -d lists uroce0" ;;
  no:no|any:no) ok "no device view, as expected; uroce said: ${why:-nothing}" ;;
  *) ko "device view: expected $VIEW, got $seen ${why}"; tail -5 $L/view ;;
esac
if [ "$seen" = yes ] && command -v ucx_perftest >/dev/null; then
  pair "ucx_perftest rc_verbs put_lat" 13337 "ucx_perftest -d uroce0:1 -x rc_verbs -t put_lat -n 1000" \
       "ucx_perftest -d uroce0:1 -x rc_verbs -t put_lat -n 1000 127.0.0.1" "^Final: +1000 " "."
fi
rm -rf $L
echo "  $pass passed, $fail failed"
[ $fail = 0 ]
EOF
chmod 755 "$T/inner.sh"

# The sandbox this was written on runs without CAP_SYS_RESOURCE, so the OCI runtime cannot
# raise RLIMIT_NOFILE/NPROC to podman's defaults: ask for limits at or below the current ones.
ULIM="--ulimit nofile=4096:4096 --ulimit nproc=4096:4096"
ENVS="-e UROCE_CONFIG=/dev/null -e UROCE_LIB_DIR=$T/lib"
err=$T/err

# ---- which runtime can start a container here ---------------------------------------------
RT=""
echo "no OCI runtime (${PODMAN_RUNTIME:-crun, runc}) installed" >"$err"
for r in ${PODMAN_RUNTIME:-crun runc}; do
  command -v $r >/dev/null || continue
  if podman run --rm --runtime $r --network none $ULIM --rootfs /:O true 2>"$err"; then RT=$r; break; fi
  echo "note: podman --runtime $r cannot start a container here: $(tail -1 "$err")"
done
[ -n "$RT" ] || skip "podman cannot start a container here: $(tail -1 "$err")"
echo "runtime: $RT ($($RT --version | head -1))"

passed=0; failed=0
run_case() { # name, then the podman command and its arguments
  local name=$1; shift
  echo "== $name"
  echo "   $*"
  if timeout 300 "$@"; then passed=$((passed + 1)); else echo "FAILED: $name"; failed=$((failed + 1)); fi
}
P="podman run --rm --runtime $RT --network none $ULIM $ENVS"
run_case "rootful, --user 65534" $P --user 65534:65534 --rootfs /:O "$T/inner.sh" yes
# Root in the container has no CAP_SYS_ADMIN (nor CAP_MKNOD): uroce run gives it the device
# view an ordinary user gets (a user namespace of its own).
run_case "rootful, container root" $P --rootfs /:O "$T/inner.sh" yes
# Docker's default seccomp refuses unshare() without CAP_SYS_ADMIN: the same in podman
python3 - /usr/share/containers/seccomp.json "$T/seccomp-docker-like.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
for r in s['syscalls']:
    if 'unshare' in r.get('names', []) and r['action'] == 'SCMP_ACT_ALLOW' and not r.get('includes'):
        r['names'].remove('unshare')
s['syscalls'] += [{'names': ['unshare'], 'action': 'SCMP_ACT_ALLOW', 'includes': {'caps': ['CAP_SYS_ADMIN']}},
                  {'names': ['unshare'], 'action': 'SCMP_ACT_ERRNO', 'excludes': {'caps': ['CAP_SYS_ADMIN']}, 'errnoRet': 1}]
json.dump(s, open(sys.argv[2], 'w'))
EOF
chmod a+r "$T/seccomp-docker-like.json"
run_case "rootful, --user 65534, Docker-like seccomp (unshare refused)" \
  $P --security-opt seccomp="$T/seccomp-docker-like.json" --user 65534:65534 --rootfs /:O "$T/inner.sh" no

# ---- rootless ------------------------------------------------------------------------------
if [ -n "${PODMAN_TRY_USER:-}" ]; then
  U=$PODMAN_TRY_USER
  if ! grep -q "^$U:" /etc/subuid || ! grep -q "^$U:" /etc/subgid; then
    echo "== rootless: FAILED: $U has no /etc/subuid or /etc/subgid range (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $U)"
    failed=$((failed + 1))
  else
    R=$T/rootless; install -d -o "$U" -m 700 "$R" "$R/run"
    # native overlay over / is refused in a user namespace ("overlayfs: failed to clone
    # lowerpath"): fuse-overlayfs makes the /:O rootfs instead
    cat >"$R/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$R/storage"
runroot = "$R/run/containers"
[storage.options.overlay]
mount_program = "/usr/bin/fuse-overlayfs"
EOF
    chmod 644 "$R/storage.conf"
    RL="runuser -u $U -- env HOME=$R XDG_RUNTIME_DIR=$R/run CONTAINERS_STORAGE_CONF=$R/storage.conf"
    RRT=""
    for r in ${PODMAN_RUNTIME:-crun runc}; do
      command -v $r >/dev/null || continue
      if $RL podman run --rm --runtime $r --network none --rootfs /:O true 2>"$err"; then RRT=$r; break; fi
      echo "note: rootless podman --runtime $r cannot start a container here: $(grep -v 'not a shared mount' "$err" | tail -1)"
    done
    PAUSE_PID=$(cat "$R/run/libpod/tmp/pause.pid" 2>/dev/null)
    if [ -z "$RRT" ]; then
      echo "== rootless: FAILED: $(grep -v 'not a shared mount' "$err" | tail -1)"; failed=$((failed + 1))
    else
      RP="$RL podman run --rm --runtime $RRT $ENVS"
      run_case "rootless ($U), --user 65534" $RP --network none --user 65534:65534 --rootfs /:O "$T/inner.sh" yes
      run_case "rootless ($U), container root, slirp4netns network" $RP --rootfs /:O "$T/inner.sh" yes
    fi
    PAUSE_PID=$(cat "$R/run/libpod/tmp/pause.pid" 2>/dev/null)
  fi
fi

echo "podman: $passed passed, $failed failed"
[ $failed = 0 ]
