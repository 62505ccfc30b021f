#!/bin/bash
# bench_allreduce.sh: all-reduce latency and bandwidth on loopback for docs/BENCHMARKS.md:
# our TCP mesh, MPI over shared memory (OpenMPI's vader) and MPI over TCP (btl tcp), on
# N ranks (default 2), with build/release/allreduce_bench. Usage: tools/bench_allreduce.sh [N] [SYNC]
set -euo pipefail
N=${1:-2}
SYNC=${2:-f32}
B=${B:-build/release/allreduce_bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe --bind-to none -np "$N")
echo "### TCP mesh, $N ranks"
workers=""
for i in $(seq 1 $((N - 1))); do
  "$B" --listen $((9600 + i)) &
  workers="$workers,127.0.0.1:$((9600 + i))"
done
sleep 0.3
"$B" --workers "${workers#,}" --sync "$SYNC"
wait
echo "### MPI, shared memory, $N ranks"
"${MPIRUN[@]}" "$B" --mpi --sync "$SYNC"
echo "### MPI, btl tcp (loopback), $N ranks"
"${MPIRUN[@]}" --mca btl tcp,self "$B" --mpi --sync "$SYNC"
