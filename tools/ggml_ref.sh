#!/usr/bin/env bash
# ggml_ref.sh: builds the two pieces of llama.cpp's ggml that our cross-checks call, from the
# llama-cpp-python sdist that `make vocab` already downloads (the same llama.cpp as our
# goldens), into .deps/ggml/:
#   libggml-base.so  ggml's reference quantizers (ggml_quantize_chunk): tests/py/test_quants.py
#                    compares our quantized bytes with them for the types the gguf package
#                    cannot quantize (K-quants, IQ4_NL, IQ4_XS).
#   libggml-cpu.a    (x86-64 only) ggml's AVX2 vec_dot kernels, the build our goldens come from:
#                    tools/vec_dot_vs_ggml.cc compares our matrix x vector with them, bit for
#                    bit, per type (ctest VecDotVsGgml).
# Compiled directly (the sdist's ggml lacks files its CMake project needs); about 1 CPU-minute
# for the base library and 2 for the CPU one, once. Usage: tools/ggml_ref.sh SDIST_TARBALL.
# Without a compiler or the tarball it says why and exits 0: the tests then say "skipped".
set -euo pipefail
tarball=${1:?usage: tools/ggml_ref.sh llama_cpp_python-X.tar.gz}
out=.deps/ggml
[ -f "$out/libggml-base.so" ] && { [ "$(uname -m)" != x86_64 ] || [ -f "$out/libggml-cpu.a" ]; } && exit 0
[ -f "$tarball" ] || { echo "ggml_ref: $tarball not found: ggml cross-checks will be skipped"; exit 0; }
rm -rf "$out" && mkdir -p "$out/src" "$out/obj"
tar -xzf "$tarball" -C "$out/src" --strip-components=3 --wildcards '*/vendor/llama.cpp/ggml/include' \
  '*/vendor/llama.cpp/ggml/src/*.c' '*/vendor/llama.cpp/ggml/src/*.cpp' '*/vendor/llama.cpp/ggml/src/*.h' \
  '*/vendor/llama.cpp/ggml/src/ggml-cpu'
S=$out/src/ggml/src
printf '#pragma once\n#define GGML_VERSION "sdist"\n#define GGML_COMMIT "sdist"\n' > "$out/src/ggml-version.h"
inc=(-I "$out/src/ggml/include" -I "$S" -I "$out/src")
jobs=$(nproc)
compile() {  # compile SRC OBJ FLAGS...: C or C++ by extension
  local src=$1 obj=$2; shift 2
  case $src in
    *.c) gcc -O2 -fPIC -std=gnu11 -D_GNU_SOURCE "${inc[@]}" "$@" -c "$src" -o "$obj" ;;
    *) g++ -O2 -fPIC -std=gnu++17 -D_GNU_SOURCE "${inc[@]}" "$@" -c "$src" -o "$obj" ;;
  esac
}
run_all() {  # run_all PREFIX FLAGS -- SRC...: compiles in parallel, $jobs at a time
  local prefix=$1; shift; local flags=(); while [ "$1" != -- ]; do flags+=("$1"); shift; done; shift
  local pids=() n=0
  for src in "$@"; do
    compile "$S/$src" "$out/obj/$prefix-$(echo "$src" | tr / _).o" "${flags[@]}" & pids+=($!)
    n=$((n + 1)); if [ $((n % jobs)) = 0 ]; then for p in "${pids[@]}"; do wait "$p"; done; pids=(); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
}
run_all base -- ggml.c ggml.cpp ggml-alloc.c ggml-backend.cpp ggml-backend-meta.cpp ggml-opt.cpp \
  ggml-threading.cpp ggml-quants.c gguf.cpp
g++ -shared -o "$out/libggml-base.so" "$out"/obj/base-*.o -lpthread -lm
if [ "$(uname -m)" = x86_64 ]; then
  # llama.cpp's AVX2 variant (GGML_NATIVE=OFF, AVX2/FMA/F16C/BMI2 on: /work/llama.cpp/build).
  run_all cpu -msse4.2 -mavx -mavx2 -mfma -mf16c -mbmi2 -DGGML_SSE42 -DGGML_AVX -DGGML_AVX2 -DGGML_FMA \
    -DGGML_F16C -DGGML_BMI2 -D__BMI2__ -DGGML_USE_CPU_REPACK -I "$S/ggml-cpu" -- \
    ggml-cpu/ggml-cpu.c ggml-cpu/ggml-cpu.cpp ggml-cpu/repack.cpp ggml-cpu/hbm.cpp ggml-cpu/quants.c \
    ggml-cpu/traits.cpp ggml-cpu/amx/amx.cpp ggml-cpu/amx/mmq.cpp ggml-cpu/tiled/tiled.cpp \
    ggml-cpu/tiled/tiled-kernel.cpp ggml-cpu/binary-ops.cpp ggml-cpu/unary-ops.cpp ggml-cpu/vec.cpp \
    ggml-cpu/ops.cpp ggml-cpu/arch/x86/quants.c ggml-cpu/arch/x86/repack.cpp
  ar rcs "$out/libggml-cpu.a" "$out"/obj/cpu-*.o
fi
rm -rf "$out/obj"
echo "ggml_ref: built $(ls "$out"/*.so "$out"/*.a | tr '\n' ' ')"
