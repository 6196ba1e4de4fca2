#!/bin/sh
# tests/hosts/mpi_run.sh MPI_FOUND ARGS... - runs `mpirun ARGS` with the options a test run on one
# machine needs (more processes than cores, as root in CI, a dead rank not ending the others), or
# exits 77 (Skipped) without MPI.
found=$1
shift
case "$found" in
  1|ON|TRUE|true|YES) ;;
  *) echo "SKIPPED: this build has no MPI (apt-get install libopenmpi-dev openmpi-bin)"; exit 77 ;;
esac
command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: mpirun is not installed (apt-get install openmpi-bin)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI refuses even a local launch when its remote shell is missing (containers without ssh).
command -v ssh >/dev/null 2>&1 || command -v rsh >/dev/null 2>&1 || export OMPI_MCA_plm_rsh_agent=false
exec timeout 100 mpirun --oversubscribe --bind-to none --enable-recovery --mca orte_abort_on_non_zero_status 0 "$@"
