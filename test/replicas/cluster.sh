# A small cluster of "hosts" on one machine, for tests and measurements; sourced by bash.
#
# Each host hN is a network namespace with one veth link to a bridge in the machine's own
# namespace, an address 10.213.X.(10+N) in a private /24 (X picked per cluster so that two
# clusters on one machine do not collide), its own host name (a UTS namespace: the trainer's
# start-up lines and the watchdog's report name h1, h2, ...) and its own disk: the directory
# $CLUSTER_DIR/disk is, seen from host hN, $CLUSTER_DIR/hN/disk (a mount namespace), so a
# file written "on a host" lands in that host's directory only. The bridge gets no address:
# the machine's own routes are untouched, and hosts reach each other only over the bridge.
#
# Open MPI starts its daemons on the hosts through a launcher agent written into the
# cluster's directory ($CLUSTER_DIR/agent HOST COMMAND..., the ssh-like interface of
# --mca plm_rsh_agent), and cluster_mpirun (run on h1, as one starts a job from the first
# node) forces TCP over the veth links: btl tcp,self (no shared memory, so the bytes of two
# ranks on different hosts cross the link), and both the MPI traffic and Open MPI's own
# (oob) on the cluster's /24 only.
#
#   cluster_can_run           prints why not and fails when namespaces cannot be made here
#   cluster_up N              creates h1..hN (and a trap that removes them on exit, INT, TERM)
#   cluster_exec H CMD...     runs CMD on host H (CLUSTER_SAME_NAME=1: under the machine's host name)
#   cluster_mpirun ARGS...    ($CLUSTER_DIR/mpirun, for timeout) mpirun on h1 with the options above (ARGS: --host h1:2,h2:2 ...)
#   cluster_link H up|down    the host's link
#   cluster_limit RATE        every host's outgoing traffic limited to RATE (tc tbf, e.g. 1gbit)
#   cluster_unlimit           and back
#   cluster_pids H            the processes running on host H (in its network namespace)
#   cluster_down              kills what still runs on the hosts and removes everything

cluster_can_run() {
    if [ "$(id -u)" != 0 ]; then echo "network namespaces need root"; return 1; fi
    local tool
    for tool in ip unshare mount mpirun; do
        command -v $tool >/dev/null || { echo "$tool not found"; return 1; }
    done
    local probe="mhprobe$$"
    if ! ip netns add "$probe" 2>/dev/null; then echo "ip netns add failed (no CAP_SYS_ADMIN?)"; return 1; fi
    ip netns del "$probe"
}

# A free third byte for 10.213.X.0/24: one no bridge of another cluster on this machine uses.
cluster_pick_subnet() {
    local x
    for x in $(seq $(($$ % 200 + 20)) 250) $(seq 20 250); do
        ip link show "mh${x}br" >/dev/null 2>&1 || { echo "$x"; return; }
    done
    return 1
}

cluster_up() {
    local n=$1 i
    CLUSTER_ID=$(cluster_pick_subnet) || { echo "no free 10.213.X.0/24 for a cluster"; return 1; }
    CLUSTER_N=$n
    CLUSTER_NET="10.213.$CLUSTER_ID.0/24"
    CLUSTER_DIR=$(mktemp -d /tmp/multihost.XXXXXX)
    trap cluster_down EXIT
    trap 'cluster_down; exit 130' INT
    trap 'cluster_down; exit 143' TERM
    ip link add "mh${CLUSTER_ID}br" type bridge || return 1
    ip link set "mh${CLUSTER_ID}br" up
    mkdir -p "$CLUSTER_DIR/disk"
    for i in $(seq "$n"); do
        local ns="mh${CLUSTER_ID}h$i" veth="mh${CLUSTER_ID}h$i"
        ip netns add "$ns" || return 1
        ip link add "$veth" type veth peer name "${veth}p" || return 1
        ip link set "$veth" master "mh${CLUSTER_ID}br" up
        ip link set "${veth}p" netns "$ns"
        ip -n "$ns" link set "${veth}p" name eth0
        ip -n "$ns" addr add "10.213.$CLUSTER_ID.$((10 + i))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        # a node's setting for links that die: a connection whose data stays unacknowledged
        # gives up after ~3 s of retransmissions (3 retries) instead of Linux's ~15 minutes
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=3
        mkdir -p "$CLUSTER_DIR/h$i/disk"
        echo "10.213.$CLUSTER_ID.$((10 + i)) h$i" >>"$CLUSTER_DIR/hosts"
    done
    # Open MPI's daemons find their way back to mpirun by address; the names are for us
    cat >"$CLUSTER_DIR/agent" <<EOF
#!/usr/bin/env bash
# Open MPI's launcher agent for this cluster: agent HOST COMMAND... runs COMMAND on HOST
# (like ssh HOST COMMAND: the words joined into one shell command line).
host=\$1; shift
exec bash "$CLUSTER_DIR/on" "\$host" sh -c "\$*"
EOF
    cat >"$CLUSTER_DIR/on" <<EOF
#!/usr/bin/env bash
# on HOST CMD...: CMD in HOST's network namespace, with its host name (the machine's with
# CLUSTER_SAME_NAME=1) and its disk
host=\$1; shift
case "\$host" in h[0-9]*) ;; *) echo "no host \$host in this cluster" >&2; exit 255;; esac
exec ip netns exec "mh${CLUSTER_ID}\$host" unshare --uts --mount --propagation private \\
    sh -c '{ [ -n "\$CLUSTER_SAME_NAME" ] || hostname "\$0"; } && mount --bind "$CLUSTER_DIR/\$0/disk" "$CLUSTER_DIR/disk" && exec "\$@"' "\$host" "\$@"
EOF
    cat >"$CLUSTER_DIR/mpirun" <<EOF
#!/usr/bin/env bash
# mpirun on h1, with TCP over the cluster's links only (a file, so that timeout can run it)
exec bash "$CLUSTER_DIR/on" h1 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
    mpirun --mca plm_rsh_agent "$CLUSTER_DIR/agent" \\
    --mca btl tcp,self --mca btl_tcp_if_include "$CLUSTER_NET" --mca oob_tcp_if_include "$CLUSTER_NET" \\
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \\
    --bind-to none --oversubscribe "\$@"
EOF
    chmod +x "$CLUSTER_DIR/agent" "$CLUSTER_DIR/on" "$CLUSTER_DIR/mpirun"
}

cluster_exec() { bash "$CLUSTER_DIR/on" "$@"; }

cluster_mpirun() { "$CLUSTER_DIR/mpirun" "$@"; }

cluster_link() { ip -n "mh${CLUSTER_ID}$1" link set eth0 "$2"; }

cluster_limit() {
    local i
    for i in $(seq "$CLUSTER_N"); do
        ip netns exec "mh${CLUSTER_ID}h$i" tc qdisc replace dev eth0 root tbf rate "$1" burst 256kb latency 100ms
    done
}

cluster_unlimit() {
    local i
    for i in $(seq "$CLUSTER_N"); do ip netns exec "mh${CLUSTER_ID}h$i" tc qdisc del dev eth0 root 2>/dev/null; done
}

cluster_pids() { ip netns pids "mh${CLUSTER_ID}$1" 2>/dev/null; }

cluster_down() {
    [ -n "${CLUSTER_ID:-}" ] || return 0
    local i pid
    for i in $(seq "$CLUSTER_N"); do
        for pid in $(cluster_pids "h$i"); do kill -KILL "$pid" 2>/dev/null; done
    done
    for i in $(seq "$CLUSTER_N"); do
        ip netns del "mh${CLUSTER_ID}h$i" 2>/dev/null
        ip link del "mh${CLUSTER_ID}h$i" 2>/dev/null
    done
    ip link del "mh${CLUSTER_ID}br" 2>/dev/null
    rm -rf "$CLUSTER_DIR"
    CLUSTER_ID=
}
