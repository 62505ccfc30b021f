#!/usr/bin/env bash
# demo.sh MODEL PROMPT N: the README's demo. Generates on one node, then on a local
# 3-node cluster (the root plus two `shardlm worker` processes on loopback, SmolLM2's 9
# query heads cut 3 ways), printing both outputs and the per-token statistics.
set -euo pipefail
bin="$(cd "$(dirname "$0")/.." && pwd)/build/release/shardlm"
model="$1"; prompt="$2"; n="${3:-64}"
echo "== one node =="
"$bin" generate -m "$model" -p "$prompt" -n "$n" --temp 0 -t 2
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
workers=""
for i in 1 2; do
  log="$(mktemp)"
  "$bin" worker --port 0 --host 127.0.0.1 -t 1 >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
  addr="$(grep -o 'listening on [^ ]*' "$log" | awk '{print $3}')"
  [ -n "$addr" ] || { echo "worker $i did not start:"; cat "$log"; exit 1; }
  workers="${workers:+$workers,}$addr"
done
echo "== three nodes: root + workers $workers =="
"$bin" generate -m "$model" -p "$prompt" -n "$n" --temp 0 -t 1 --workers "$workers" --stats
