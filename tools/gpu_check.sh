#!/usr/bin/env bash
# gpu_check.sh: the GPU check of issue 15, as one script for a machine with a real GPU (the
# project's device machine is lent rarely and briefly: everything it needs is prepared here).
#
#   tools/gpu_check.sh prepare          # on this machine: build what the GPU machine may lack
#                                       # into .deps/gpu (carry it: run's carry list, < 64 MiB)
#   tools/gpu_check.sh run [OUT]        # on the GPU machine: tests + benchmarks, report in
#                                       # OUT/gpu_report.md (OUT defaults to $OUT, then /tmp/gpu_check)
#   QUICK=1 tools/gpu_check.sh run OUT  # small sizes: a smoke test of the script on lavapipe
#
# run: shardlm's Vulkan build (built there when cmake, g++, glslc and the Vulkan headers are
# present, else the binaries from prepare), `shardlm devices`, the GPU tests (ctest -L gpu, or
# the test binaries), then on random-weight files of SmolLM2's shape and the 8B shape (Q4_0,
# written by `shardlm make-model`): prefill pp512 and pp2048 with flash attention on and off,
# and decode tg128, `shardlm bench --device vulkan` beside llama.cpp's llama-bench (its
# Vulkan backend; its CUDA backend when the machine has no Vulkan driver, said so in the
# report), and with CPU_TOO=1 beside shardlm on the CPU. Medians of REPS (3) repetitions.
# prepare needs Debian's spirv-headers, glslc and libvulkan-dev (llama.cpp's Vulkan build);
# CUDA=1 also builds llama.cpp's CUDA backend for CUDA_ARCH (90: H100/H200; slow).
# Deliberately not here: installing packages (the device machine reaches no registry).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GPU_DEPS=$ROOT/.deps/gpu
LLAMA_SDIST=$ROOT/.deps/sdist/llama_cpp_python-0.3.36.tar.gz
JOBS=${JOBS:-$(nproc)}
REPS=${REPS:-3}

log() { printf '%s\n' "$*" >&2; }

# llama.cpp's sources without their model files (the sdist's vendor/llama.cpp), into $1.
llama_sources() {
  local dst=$1
  [ -f "$dst/CMakeLists.txt" ] && return 0
  mkdir -p "$dst"
  if [ -f "$LLAMA_SDIST" ]; then
    tar -xzf "$LLAMA_SDIST" -C "$dst" --strip-components=3 --wildcards '*/vendor/llama.cpp/*' \
      --exclude='*/models/*' --exclude='*/docs/*' --exclude='*/examples/*' --exclude='*/tests/*' \
      --exclude='*/media/*' --exclude='*/app/*'
  else
    log "no llama.cpp sources: run 'make vocab' (fetches the sdist), or prepare llama-bench here"
    return 1
  fi
  # Debian 12's Vulkan headers (1.3.239) lack VK_EXT_layer_settings, which llama.cpp uses only
  # to configure the validation layer: without the headers' support, create the instance
  # without it (the validation layer is not used here).
  if ! grep -qs VK_EXT_layer_settings /usr/include/vulkan/vulkan_core.h; then
    python3 - "$dst/ggml/src/ggml-vulkan/ggml-vulkan.cpp" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r"    VkBool32 enable_best_practice = layer_settings;\n.*?(vk::InstanceCreateInfo instance_create_info\(vk::InstanceCreateFlags\{\}, &app_info, layers, extensions), &layer_setting_info\);",
           r"    \1);", s, count=1, flags=re.S)
open(p, "w").write(s)
PY
  fi
}

# llama-bench with one ggml GPU backend ($1: vulkan or cuda) into $2/llama-bench.
build_llama_bench() {
  local backend=$1 out=$2 src=$3 flag
  [ "$backend" = vulkan ] && flag="-DGGML_VULKAN=ON" || flag="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-native}"
  cmake -S "$src" -B "$src/build-$backend" -DCMAKE_BUILD_TYPE=Release $flag -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null &&
    cmake --build "$src/build-$backend" --target llama-bench -j "$JOBS" >/dev/null &&
    mkdir -p "$out" && strip -o "$out/llama-bench" "$src/build-$backend/bin/llama-bench"
}

prepare() {
  cmake --preset release >/dev/null && cmake --build --preset release -j "$JOBS" --target shardlm vulkan_test vulkan_attention_test vulkan_model_test || exit 1
  mkdir -p "$GPU_DEPS/bin" "$GPU_DEPS/lib"
  local b
  for b in build/release/shardlm build/release/tests/vulkan_test build/release/tests/vulkan_attention_test \
           build/release/tests/vulkan_model_test; do
    [ -f "$b" ] && strip -o "$GPU_DEPS/bin/$(basename "$b")" "$b"
  done
  cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 "$GPU_DEPS/lib/"  # the loader, in case the machine lacks it
  local src=/tmp/gpu_check_llama
  llama_sources "$src" || exit 1
  build_llama_bench vulkan "$GPU_DEPS/llama-vulkan" "$src" || log "llama.cpp's Vulkan build failed"
  if [ "${CUDA:-0}" = 1 ]; then  # slow (every CUDA kernel for CUDA_ARCH, default 90: H100/H200)
    CUDA_ARCH=${CUDA_ARCH:-90} build_llama_bench cuda "$GPU_DEPS/llama-cuda" "$src" || log "llama.cpp's CUDA build failed"
  fi
  du -sh "$GPU_DEPS"  # about 45 MiB with the Vulkan llama-bench (38 MiB); CUDA's may not fit 64 MiB beside it
  log "carry .deps/gpu to the GPU machine, then: tools/gpu_check.sh run"
}

# The median of the numbers on stdin.
median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# shardlm bench --json once: prints "pp tg" tokens/s. $1 model, $2 device, $3 flash, $4 n_prompt, $5 n_gen
shardlm_once() {
  "$SHARDLM" bench -m "$1" --device "$2" -t "$THREADS" --flash-attn "$3" -p "$4" -n "$5" -b "$(( $4 > 0 ? $4 : 1 ))" \
    -c "$(( $4 + $5 + 16 ))" -r 1 --json 2>>"$OUT/errors.log" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["pp_tps"], d["tg_tps"])' 2>>"$OUT/errors.log"
}

# llama-bench once: prints tokens/s of its one test. $1 model, $2 flash 0/1, $3 n_prompt, $4 n_gen
llama_once() {
  "$LLAMA_BENCH" -m "$1" -ngl 99 -fa "$2" -p "$3" -n "$4" -r 1 -o json 2>>"$OUT/errors.log" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[0]["avg_ts"])' 2>>"$OUT/errors.log"
}

# One table row: median of REPS runs of each engine. $1 model, $2 test name, $3 flash on/off, $4 p, $5 n
bench_row() {
  local m=$1 name=$2 fa=$3 p=$4 n=$5 col gpu cpu llama
  [ "$p" -gt 0 ] && col=1 || col=2
  gpu="n/a (flash only)"  # the Vulkan backend runs flash attention only
  [ "$fa" = on ] && gpu=$(for _ in $(seq "$REPS"); do shardlm_once "$m" "$VK_DEVICE" "$fa" "$p" "$n" | cut -d' ' -f$col; done | median)
  cpu="-"
  [ "${CPU_TOO:-0}" = 1 ] && cpu=$(for _ in $(seq "$REPS"); do shardlm_once "$m" cpu "$fa" "$p" "$n" | cut -d' ' -f$col; done | median)
  llama="-"
  if [ -n "$LLAMA_BENCH" ]; then
    llama=$(for _ in $(seq "$REPS"); do llama_once "$m" "$([ "$fa" = on ] && echo 1 || echo 0)" "$p" "$n"; done | median)
  fi
  printf '| %s | %s | %s | %s | %s | %s |\n' "$(basename "$m")" "$name" "$fa" "$gpu" "$llama" "$cpu" >>"$REPORT"
}

run() {
  OUT=${1:-${OUT:-/tmp/gpu_check}}
  mkdir -p "$OUT"
  REPORT=$OUT/gpu_report.md
  : >"$OUT/errors.log"
  local bin=${BUILD_DIR:-$ROOT/build/gpu}  # BUILD_DIR=build/release: reuse a Vulkan build
  # shardlm: built here when the tools are, else the prepared binaries.
  if command -v cmake >/dev/null && command -v g++ >/dev/null && command -v glslc >/dev/null &&
     [ -f /usr/include/vulkan/vulkan.h ]; then
    cmake -S . -B "$bin" -DCMAKE_BUILD_TYPE=Release -DSHARDLM_VULKAN=ON >"$OUT/build.log" 2>&1 &&
      cmake --build "$bin" -j "$JOBS" --target shardlm vulkan_test vulkan_attention_test >>"$OUT/build.log" 2>&1 ||
      { log "build failed: $OUT/build.log"; exit 1; }
    SHARDLM=$bin/shardlm
    TESTS="$bin/tests/vulkan_test $bin/tests/vulkan_attention_test"
    cmake --build "$bin" -j "$JOBS" --target vulkan_model_test >>"$OUT/build.log" 2>&1 && TESTS="$TESTS $bin/tests/vulkan_model_test"
    BUILT="built on this machine"
  elif [ -x "$GPU_DEPS/bin/shardlm" ]; then
    SHARDLM=$GPU_DEPS/bin/shardlm
    TESTS=$(ls "$GPU_DEPS"/bin/vulkan_*test 2>/dev/null | tr '\n' ' ')
    BUILT="prepared binaries (.deps/gpu: no cmake, g++, glslc or Vulkan headers here)"
  else
    log "no compiler here and no .deps/gpu: run 'tools/gpu_check.sh prepare' on a build machine and carry .deps/gpu"
    exit 1
  fi
  # The Vulkan loader: the system's, else the carried one.
  ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 ' || export LD_LIBRARY_PATH=$GPU_DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  THREADS=${THREADS:-$(nproc)}
  VK_DEVICE=${VK_DEVICE:-vulkan}

  {
    echo "# GPU check ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "shardlm: $BUILT, $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')."
    echo
    echo '```'
    "$SHARDLM" devices 2>&1
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    echo '```'
  } >"$REPORT"

  # llama.cpp: its Vulkan backend where a Vulkan device is seen, else its CUDA backend.
  LLAMA_BENCH=""
  local llama_kind="" src=/tmp/gpu_check_llama
  if "$SHARDLM" devices 2>/dev/null | grep -q '^vulkan:'; then
    llama_kind=vulkan
  elif command -v nvidia-smi >/dev/null; then
    llama_kind=cuda
    echo >>"$REPORT"; echo "No Vulkan device is seen here (no Vulkan driver/ICD): llama.cpp runs its CUDA backend instead, shardlm's Vulkan rows are empty." >>"$REPORT"
  fi
  if [ -n "$llama_kind" ]; then
    if [ -x "$GPU_DEPS/llama-$llama_kind/llama-bench" ]; then
      LLAMA_BENCH=$GPU_DEPS/llama-$llama_kind/llama-bench
    elif command -v cmake >/dev/null && llama_sources "$src" && build_llama_bench "$llama_kind" "$OUT/llama-$llama_kind" "$src" >>"$OUT/build.log" 2>&1; then
      LLAMA_BENCH=$OUT/llama-$llama_kind/llama-bench
    fi
  fi
  [ -n "$LLAMA_BENCH" ] && echo "llama.cpp: llama-bench, its $llama_kind backend (-ngl 99)." >>"$REPORT" ||
    echo "llama.cpp: not available here (no llama-bench prepared and no build tools)." >>"$REPORT"

  # Tests.
  { echo; echo "## GPU tests"; echo; echo '```'; } >>"$REPORT"
  local t
  for t in $TESTS; do
    "$t" --gtest_brief=1 >"$OUT/$(basename "$t").log" 2>&1
    echo "$(basename "$t"): exit $? ($(grep -E 'PASSED|FAILED|SKIPPED' "$OUT/$(basename "$t").log" | tr '\n' ' '))" >>"$REPORT"
  done
  echo '```' >>"$REPORT"

  # Models and benchmarks.
  local models=() p_list n_gen
  mkdir -p "$OUT/models"
  if [ "${QUICK:-0}" = 1 ]; then
    "$SHARDLM" make-model --shape smollm2-135m --type Q4_0 --layers 2 "$OUT/models/smollm2-shape-l2-q4_0.gguf" >/dev/null
    models=("$OUT/models/smollm2-shape-l2-q4_0.gguf"); p_list="32"; n_gen=8
  else
    "$SHARDLM" make-model --shape smollm2-135m --type Q4_0 "$OUT/models/smollm2-shape-q4_0.gguf" >/dev/null
    "$SHARDLM" make-model --shape llama3-8b --type Q4_0 "$OUT/models/llama3-8b-shape-q4_0.gguf" >/dev/null
    models=("$OUT/models/smollm2-shape-q4_0.gguf" "$OUT/models/llama3-8b-shape-q4_0.gguf"); p_list="512 2048"; n_gen=128
  fi
  {
    echo
    echo "## Speed (tokens/s, medians of $REPS; random-weight files of the named shapes, Q4_0)"
    echo
    echo "| model | test | flash attention | shardlm $VK_DEVICE | llama.cpp ($llama_kind) | shardlm cpu ($THREADS threads) |"
    echo "|---|---|---|---|---|---|"
  } >>"$REPORT"
  local m p fa
  for m in "${models[@]}"; do
    for p in $p_list; do
      for fa in on off; do bench_row "$m" "pp$p" "$fa" "$p" 0; done
    done
    bench_row "$m" "tg$n_gen" on 0 "$n_gen"
  done
  rm -rf "$OUT/models"
  if [ -s "$OUT/errors.log" ]; then
    { echo; echo "## Errors"; echo; echo '```'; tail -n 40 "$OUT/errors.log"; echo '```'; } >>"$REPORT"
  fi
  cat "$REPORT"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#'; exit 2 ;;
esac
