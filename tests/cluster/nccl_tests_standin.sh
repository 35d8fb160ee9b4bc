#!/bin/sh
# A stand-in for nccl-tests' all_reduce_perf on the container test nodes, which have no GPU. Tests only: no role
# installs it, and it measures nothing. tests/cluster/test_up.py puts it at <hvd_nccl_tests_prefix>/bin/all_reduce_perf
# with, in <prefix>/standin/, the outputs we wrote in nccl-tests' documented format (tests/unit/plugins/
# fixtures/gpu/all_reduce_perf_<n>node-1gpu_*_to-64M.txt, named <kind>-<ranks>.txt) and a file `scenario` that says which to print:
#   healthy | socket     that output, for the run's rank count
#   slow NODE            the slow output when NODE is in the run's mpirun -H list, the healthy one otherwise
# Rank 0 prints it (mpirun merges every rank's output: the files hold every rank's NCCL lines); the others print
# nothing. The -H list is read from rank 0's ancestors (mpirun starts the ranks of its own node itself).
set -eu
[ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || exit 0
dir=$(dirname "$0")/../standin
read -r kind node < "$dir/scenario" || true
pid=$PPID hosts=""
for _ in 1 2 3 4 5 6; do
    [ -r "/proc/$pid/cmdline" ] || break
    hosts=$(tr '\0' '\n' < "/proc/$pid/cmdline" | sed -n '/^-H$/{n;p;q;}')
    [ -n "$hosts" ] && break
    pid=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status")
done
if [ "$kind" = slow ]; then
    case ",$hosts," in *",$node:"*) kind=slow ;; *) kind=healthy ;; esac
fi
exec cat "$dir/$kind-${OMPI_COMM_WORLD_SIZE:-1}.txt"
