#!/bin/bash
# cpu_tokens.sh: tokens per CPU-second of one prompt (pp512) or decode (tg32) measurement, for
# comparisons on a shared, noisy machine (docs/BENCHMARKS.md): the user + sys time of `-r 3`
# minus that of `-r 1` (two runs, model loading cancelled out), for shardlm's `bench` or
# llama.cpp's `llama-bench` (same flags). Threads default to 1: at more, spinning threads
# count as work.
# usage: tools/cpu_tokens.sh BIN MODEL pp|tg [THREADS]    (BIN: build/release/shardlm or llama-bench)
set -euo pipefail
B=$1; M=$2; mode=$3; t=${4:-1}
if [ "$mode" = pp ]; then a=(-p 512 -n 0); n=512; else a=(-p 0 -n 32); n=32; fi
cmd=("$B"); [[ $B == *llama-bench ]] || cmd+=(bench)
cpu() { /usr/bin/time -f "%U %S" "${cmd[@]}" -m "$M" -t "$t" "${a[@]}" -r "$1" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'; }
r1=$(cpu 1); r3=$(cpu 3)
python3 -c "print('%.2f' % (2 * $n / ($r3 - $r1)))"
