#!/usr/bin/env bash
# fuzz_gguf.sh SECONDS|build: builds the libFuzzer target fuzz_gguf (clang, ASan+UBSan) in
# build/fuzz, writes a seed corpus of small valid GGUF files into build/fuzz/corpus, then
# fuzzes gguf::File::parse for SECONDS seconds (default 60) with the dictionary
# fuzz/gguf.dict. Exits non-zero if the build fails or the fuzzer finds a crash, leak or
# timeout (the input lands in build/fuzz/crashes/).
# Needs clang-14 (or CLANG_VERSION=N) with its libFuzzer runtime; seeds come from the
# Python gguf package when installed, else from a hand-made minimal file.
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/fuzz"
ver="${CLANG_VERSION:-14}"
cc="$(command -v clang-"$ver" || command -v clang)"
cxx="$(command -v clang++-"$ver" || command -v clang++)"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDLM_FUZZ=ON -DSHARDLM_TESTS=OFF \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
# FUZZ_TARGETS: more fuzz targets to build in the same call (make fuzz builds them all here).
# shellcheck disable=SC2086
cmake --build "$build" --target fuzz_gguf ${FUZZ_TARGETS:-} -j"${JOBS:-2}"
[ "$seconds" = build ] && exit 0

corpus="$build/corpus"
mkdir -p "$corpus" "$build/crashes"
if python3 -c 'import gguf, numpy' 2>/dev/null; then
  python3 - "$corpus" <<'PY'
import sys, numpy as np, gguf
out = sys.argv[1]

def write(name, arch, tensors, extra=None, alignment=None):
    w = gguf.GGUFWriter(f"{out}/{name}.gguf", arch)
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200); w.add_int8("t.i8", -5); w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300); w.add_uint32("t.u32", 7); w.add_int32("t.i32", -7)
    w.add_float32("t.f32", 1e-5); w.add_bool("t.bool", True); w.add_string("t.str", "h\u00e9llo")
    w.add_uint64("t.u64", 2**63); w.add_int64("t.i64", -2**40); w.add_float64("t.f64", 0.1)
    w.add_array("t.tokens", ["<s>", "</s>", "a", "b"])
    w.add_array("t.scores", [0.0, -1.5, 2.0])
    w.add_array("t.types", [1, 2, 3, 6])
    if extra: extra(w)
    for tname, arr, qtype in tensors:
        w.add_tensor(tname, arr, raw_dtype=qtype)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

Q = gguf.GGMLQuantizationType
rng = np.random.default_rng(0)
small = [("a.weight", rng.standard_normal((2, 4)).astype(np.float32), None),
         ("b.weight", rng.standard_normal(8).astype(np.float16), None),
         ("c.weight", rng.integers(0, 255, 34, dtype=np.uint8), Q.Q8_0),
         ("d.weight", rng.integers(0, 255, 144, dtype=np.uint8), Q.Q4_K)]
lowbit = [("q2.weight", rng.integers(0, 255, 84, dtype=np.uint8), Q.Q2_K),
          ("q3.weight", rng.integers(0, 255, 110, dtype=np.uint8), Q.Q3_K),
          ("nl.weight", rng.integers(0, 255, 36, dtype=np.uint8), Q.IQ4_NL),
          ("xs.weight", rng.integers(0, 255, 136, dtype=np.uint8), Q.IQ4_XS),
          ("mx.weight", rng.integers(0, 255, 34, dtype=np.uint8), Q.MXFP4)]
write("tensors", "llama", small)
write("lowbit", "llama", lowbit)
write("vocab_only", "llama", [])
write("align64", "qwen2", small[:2], alignment=64)
data = bytearray(open(f"{out}/tensors.gguf", "rb").read())
data[4] = 2
open(f"{out}/tensors_v2.gguf", "wb").write(bytes(data))
PY
else
  # Minimal v3 file: one UINT32 key and one F32 tensor of 4 elements.
  printf 'GGUF\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00' >"$corpus/min.gguf"
  printf '\x01\x00\x00\x00\x00\x00\x00\x00k\x04\x00\x00\x00\x07\x00\x00\x00' >>"$corpus/min.gguf"
  printf '\x01\x00\x00\x00\x00\x00\x00\x00t\x01\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00' >>"$corpus/min.gguf"
  head -c 12 /dev/zero >>"$corpus/min.gguf"  # type F32, offset 0 (ends at byte 74)
  head -c 38 /dev/zero >>"$corpus/min.gguf"  # padding to 96, then 16 bytes of data
fi

echo "fuzzing gguf::File::parse for ${seconds}s (corpus: $corpus)"
"$build/fuzz_gguf" "$corpus" -dict="$root/fuzz/gguf.dict" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$build/crashes/" -print_final_stats=1
