# Shell helpers shared by the scripts that run verbs programs in network namespaces
# (tools/quickstart.sh, tools/bench/side_by_side.sh, tests/verbs/verbs_programs.sh,
# tests/verbs/runtime.sh, tests/verbs/pyverbs_suite.sh, tests/interop/interop.sh,
# tests/install/). Source it; it defines functions only.

# wait_up NS IFACE...: until the kernel has marked each IFACE in namespace NS operationally up.
# A veth's carrier comes on with `ip link set up`, but its operational state (IFF_RUNNING, what
# a device's port state follows) is set by the kernel's link watch, a work item that may run up
# to a second later when it ran recently (as it does on a machine making and deleting many
# namespaces): a program started at once would find its port down. 10 s at most.
wait_up() {
  local ns=$1 ifc; shift
  for ifc in "$@"; do
    for _ in $(seq 200); do
      case "$(ip -n "$ns" -o link show dev "$ifc" 2>/dev/null)" in *" state UP "*) continue 2 ;; esac
      sleep 0.05
    done
    echo "$ifc in $ns never came up"; return 1
  done
}

# veth_ns NS ADDR_A [ADDR_B]: makes namespace NS holding both ends of a veth pair, NSa (with
# ADDR_A, e.g. 10.99.0.1/24) and NSb (with ADDR_B if given), all up.
veth_ns() {
  local ns=$1
  ip netns add "$ns"
  ip -n "$ns" link add "${ns}a" type veth peer name "${ns}b"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "${ns}a" up
  ip -n "$ns" link set "${ns}b" up
  ip -n "$ns" addr add "$2" dev "${ns}a"
  [ -z "${3:-}" ] || ip -n "$ns" addr add "$3" dev "${ns}b"
  wait_up "$ns" "${ns}a" "${ns}b"
}

# ns_pair TAG ADDR4_A ADDR4_B ADDR6_A ADDR6_B: namespaces TAGa and TAGb joined by a veth pair
# (TAGva in TAGa, TAGvb in TAGb), all up, each end with its IPv4 address (e.g. 10.95.0.1/24)
# and a global IPv6 address (nodad: usable at once).
ns_pair() {
  local tag=$1
  ip netns add "${tag}a"; ip netns add "${tag}b"
  ip link add "${tag}va" type veth peer name "${tag}vb"
  ip link set "${tag}va" netns "${tag}a"; ip link set "${tag}vb" netns "${tag}b"
  for s in a b; do
    ip -n "${tag}$s" link set lo up
    ip -n "${tag}$s" link set "${tag}v$s" up
  done
  ip -n "${tag}a" addr add "$2" dev "${tag}va"; ip -n "${tag}b" addr add "$3" dev "${tag}vb"
  ip -n "${tag}a" addr add "$4" dev "${tag}va" nodad
  ip -n "${tag}b" addr add "$5" dev "${tag}vb" nodad
  wait_up "${tag}a" "${tag}va" && wait_up "${tag}b" "${tag}vb"
}

# ns_test TAG ADDR4_A ADDR4_B ADDR6_A ADDR6_B: how a test between two namespaces starts:
# ns_pair, a scratch directory, and an EXIT trap that ends what still runs in either namespace
# and deletes both and the directory. Sets nsA and nsB (TAGa, TAGb) and dir.
ns_test() {
  nsA=${1}a nsB=${1}b
  dir=$(mktemp -d)
  trap 'drop_hosts "$nsA" "$nsB"; rm -rf "$dir"' EXIT
  ns_pair "$@"
}

# wait_listen NS [PORT] [PID]: waits up to 20 s until something in namespace NS listens on TCP
# PORT (default 18515, perftest's and the pingpongs' exchange port), so a slow start (DPDK init
# on a busy machine) cannot make the client give up. Stops early if process PID ends. Returns 1
# (with a message) if nothing listens.
wait_listen() {
  local ns=$1 port=${2:-18515} pid=${3:-}
  for _ in $(seq 200); do
    [ -n "$(ip netns exec "$ns" ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "server never started listening on TCP $port"; return 1
}

# two_hosts NS_A NS_B IF_A IF_B NET: two "hosts", namespaces NS_A and NS_B joined by a veth
# pair, IF_A (NET.1/24) in NS_A and IF_B (NET.2/24) in NS_B, all links up. Returns 1 if any
# step fails. NET is three octets, e.g. 10.97.0.
two_hosts() {
  local a=$1 b=$2 ia=$3 ib=$4 net=$5
  ip netns add "$a" && ip netns add "$b" && ip link add "$ia" type veth peer name "$ib" &&
    ip link set "$ia" netns "$a" && ip link set "$ib" netns "$b" &&
    ip -n "$a" link set lo up && ip -n "$b" link set lo up &&
    ip -n "$a" link set "$ia" up && ip -n "$b" link set "$ib" up &&
    ip -n "$a" addr add "$net.1/24" dev "$ia" && ip -n "$b" addr add "$net.2/24" dev "$ib" &&
    wait_up "$a" "$ia" && wait_up "$b" "$ib"
}

# drop_hosts NS...: kills what still runs in each namespace and deletes it (and so its veth).
drop_hosts() {
  local ns
  for ns in "$@"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}
