# test/mpi_lib.sh: what the suites that start MPI jobs share (sourced at their top, after
# `cd` to the checkout): Open MPI allowed to run as root (containers and CI run as root),
# $MPIRUN (more processes than cores allowed, none bound to a core, so that replicas on one
# host share its processors), and mpi_ok PROGRAM, true when PROGRAM was built with MPI and
# mpirun is on PATH.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # containers run as root
MPIRUN="mpirun --oversubscribe --bind-to none"
# mpi_ok PROGRAM: PROGRAM is linked with MPI, and mpirun is there to start it
mpi_ok() { command -v mpirun >/dev/null && ldd "$1" 2>/dev/null | grep -q libmpi; }
