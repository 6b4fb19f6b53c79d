#!/usr/bin/env bash
# Starts N CPU replicas of ./train with mpirun, one process each; the options after N go to
# every replica. The trainer prints the batch arithmetic with R = N filled in.
#   scripts/run_cpu.sh N [train options...]
#   scripts/run_cpu.sh 4 -b 8 -d 16384 -n 20 -o out/r4
#
# Open MPI in containers, made explicit rather than hidden:
#   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  let it run as root;
#   --oversubscribe  allows more processes than cores;
#   --bind-to none   leaves thread placement to OpenMP; the replicas on a host see the same
#                    cores and each takes its share (host/cpus.h); THREADS=k sets --threads k.
set -eu
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 N [train options...]" >&2; exit 2
fi
n=$1; shift
command -v mpirun >/dev/null || { echo "error: mpirun not found (apt-get install openmpi-bin libopenmpi-dev, then make train)" >&2; exit 1; }
ldd ./train 2>/dev/null | grep -q libmpi || { echo "error: ./train was built without MPI: install libopenmpi-dev and run make train" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    echo "note: running as root, so OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set"
fi
set -x
exec mpirun -np "$n" --oversubscribe --bind-to none ./train ${THREADS:+--threads "$THREADS"} "$@"
