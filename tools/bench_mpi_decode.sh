#!/bin/bash
# bench_mpi_decode.sh: decode tokens/s of one model on 1 node, then on N = 2 and 4 ranks
# over our TCP mesh (loopback workers) and under mpirun (--transport mpi), for
# docs/BENCHMARKS.md. Usage: tools/bench_mpi_decode.sh MODEL [SYNC] [THREADS]
set -euo pipefail
M=$1
SYNC=${2:-exact}
T=${3:-1}
B=${B:-build/release/shardlm}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ARGS=(-m "$M" -t "$T" -p 0 -n 32 -r 5)
echo "1 node: $("$B" bench "${ARGS[@]}" 2>&1 | grep '^tg[0-9]')"
for n in 2 4; do
  workers=""
  for i in $(seq 1 $((n - 1))); do
    "$B" worker --port $((9700 + i)) --host 127.0.0.1 -t "$T" --sessions 1 >/dev/null 2>&1 &
    workers="$workers,127.0.0.1:$((9700 + i))"
  done
  sleep 0.5
  echo "TCP $n, $SYNC: $("$B" bench "${ARGS[@]}" --sync-type "$SYNC" --workers "${workers#,}" 2>&1 | grep '^tg[0-9]')"
  wait
  echo "MPI $n, $SYNC: $(mpirun --oversubscribe --bind-to none -np $n "$B" bench "${ARGS[@]}" --sync-type "$SYNC" \
    --transport mpi 2>&1 | grep '^tg[0-9]')"
done
