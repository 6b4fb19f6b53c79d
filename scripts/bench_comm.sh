#!/usr/bin/env bash
# The planner's gradient-sync time against a measured one (make bench_comm; needs root, ip
# and Open MPI; not part of make test). Hosts are network namespaces on this machine
# (test/replicas/cluster.sh) whose links are limited by tc's tbf to each RATE; ./train runs
# a model whose gradient all-reduce dominates the step (C=256: 12.6 MiB of gradients, and a
# micro-batch of 16 tokens) for STEPS steps on R hosts × 1 rank, and the median of the log's
# sync_ms over steps 2.. (the first connects) is set beside `./train --dry-run --link-gbps G`.
#
#   scripts/bench_comm.sh [RATES [HOSTS [STEPS]]]   default: "none 1 0.2" (Gbit/s; none: no limit), "2 4", 8
# Prints a Markdown table (docs/replicas.md quotes it).
set -u
cd "$(dirname "$0")/.."
# the arguments, before any namespace is made: one line and exit 2 for a bad one
usage() { echo "bench_comm: $1 (usage: scripts/bench_comm.sh [RATES [HOSTS [STEPS]]])" >&2; exit 2; }
case "${1:-}" in -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -le 3 ] || usage "at most 3 arguments, got $#"
for gbps in ${1:-none}; do
    [ "$gbps" = none ] || { [[ $gbps =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && python3 -c "import sys; sys.exit(not 0 < float('$gbps') <= 1000)"; } ||
        usage "a rate is 'none' or Gbit/s above 0 and at most 1000, got '$gbps'"
done
for R in ${2:-2}; do
    [[ $R =~ ^[0-9]+$ ]] && [ "$R" -ge 2 ] && [ "$R" -le 16 ] || usage "a host count is 2 to 16 (namespaces on this machine), got '$R'"
done
[[ ${3:-8} =~ ^[0-9]+$ ]] && [ "${3:-8}" -ge 2 ] && [ "${3:-8}" -le 1000 ] ||
    usage "STEPS is 2 to 1000 (the first step connects and is not counted), got '${3:-8}'"
source test/replicas/cluster.sh
why=$(cluster_can_run) || { echo "bench_comm: cannot make network namespaces here: $why" >&2; exit 1; }
ldd ./train | grep -q libmpi || { echo "bench_comm: ./train was built without MPI (make train with mpicxx)" >&2; exit 1; }
RATES=${1:-"none 1 0.2"} HOSTS=${2:-"2 4"} STEPS=${3:-8}
SHAPE="--channels 256 --heads 4 -b 1 -t 2 --threads 1 --val-every 0 --sample-every 0 --ckpt-minutes 0 -n $STEPS"
max_hosts=$(tr ' ' '\n' <<<"$HOSTS" | sort -n | tail -1)
cluster_up "$max_hosts" || exit 1

# the planner's sync time for R replicas on a link of G Gbit/s, in ms
predicted_ms() {
    ./train $SHAPE --dry-run --replicas "$1" --link-gbps "$2" --device-tflops 1 2>&1 | python3 -c "
import re, sys
m = re.search(r'gradient sync ([0-9.]+) (ms|s|us|µs)', sys.stdin.read())
print(float(m.group(1)) * {'s': 1e3, 'ms': 1, 'us': 1e-3, 'µs': 1e-3}[m.group(2)] if m else 'nan')"
}
# the median and the least of rank 0's sync_ms over steps 2..
measured_ms() {
    python3 -c "
import json, statistics, sys
s = [r['sync_ms'] for r in map(json.loads, open(sys.argv[1])) if r['type'] == 'train' and r['step'] >= 2]
print('%.1f %.1f' % (statistics.median(s), min(s)))" "$1"
}

# one TCP stream of the gradient buffer's 13,162,496 bytes from h1 to h2, in ms: what the link
# itself gives (python sockets; no MPI, no sum)
tcp_stream_ms() {
    cat >"$CLUSTER_DIR/stream.py" <<'EOF'
import socket, sys, time
n = 13162496
if sys.argv[1] == "receive":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 5001)); s.listen(1)
    c, _ = s.accept(); got = 0
    while got < n: got += len(c.recv(1 << 20))
    c.sendall(b"k")
else:
    for _ in range(50):
        try: s = socket.create_connection((sys.argv[2], 5001)); break
        except OSError: time.sleep(0.1)
    t = time.time(); s.sendall(b"x" * n); s.recv(1)
    print("%.1f" % ((time.time() - t) * 1e3))
EOF
    cluster_exec h2 python3 "$CLUSTER_DIR/stream.py" receive &
    cluster_exec h1 python3 "$CLUSTER_DIR/stream.py" send "10.213.$CLUSTER_ID.12"
    wait
}

echo "| link | hosts R | bytes each way per replica | planner (--dry-run --link-gbps) | measured sync_ms, median (least) | measured / planner |"
echo "|---|---|---|---|---|---|"
for gbps in $RATES; do
    if [ "$gbps" = none ]; then cluster_unlimit  # what the machine itself moves: a veth link has no rate
    else cluster_limit "$(python3 -c "print(int($gbps * 1000))")mbit"; fi
    for R in $HOSTS; do
        hostlist=$(seq -s, -f 'h%g' 1 "$R")
        out=$CLUSTER_DIR/disk/g${gbps}r$R
        if ! timeout 300 "$CLUSTER_DIR/mpirun" --host "$hostlist" -np "$R" ./train $SHAPE -o "$out" \
            >"$CLUSTER_DIR/g${gbps}r$R.out" 2>&1; then
            tail -5 "$CLUSTER_DIR/g${gbps}r$R.out" >&2
            echo "| $gbps Gbit/s | $R | | | failed | |"
            continue
        fi
        bytes=$(sed -n 's/.*each replica sends and receives \([^ ]* [A-Za-z]*\) .*/\1/p' "$CLUSTER_DIR/g${gbps}r$R.out")
        pred=nan
        [ "$gbps" != none ] && pred=$(predicted_ms "$R" "$gbps")
        read -r median least < <(measured_ms "$CLUSTER_DIR/h1/disk/g${gbps}r$R/log.jsonl")
        [ "$R" = 2 ] && echo "| $gbps Gbit/s | TCP stream h1 to h2 | 12.6 MiB | | $(tcp_stream_ms) ms | |" |
            sed 's/| none Gbit\/s |/| no limit |/'
        echo "| $gbps Gbit/s | $R | $bytes | $pred ms | $median ms ($least) | $(python3 -c "print('%.2f' % ($median / float('$pred')))") |" |
            sed 's/| none Gbit\/s |/| no limit |/; s/| nan ms |/| (no rate) |/; s/| nan |$/| |/'

    done
done
