// quants.cc: scalar quantize/dequantize of rows for the float types and the 32-element
// block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1), plus the dispatch for every type.
// Each function follows ggml's quantize_row_*_ref / dequantize_row_* step by step
// (same float operations in the same order, same rounding: roundf for Q8_0/Q8_1,
// truncating casts after +0.5 / +8.5 / +16.5 for Q4/Q5), so the bytes we write equal
// ggml's reference quantizer's bytes. The K-quants live in quants_k.cc, the codebook
// types (IQ4_NL, IQ4_XS, MXFP4) in quants_iq4.cc.
// Deliberately not here: SIMD, threading, importance-weighted (imatrix) quantization,
// dot products (kernels/).
//
// Bit-exactness needs a*b+c rounded twice (no FMA contraction), as ggml's reference and
// numpy compute it: the pragma below forbids contraction in this file.
// Block layouts (32 elements j = 0..31 per block):
//   Q4_0/Q4_1: qs[j] = q[j] | q[j+16] << 4                      (j < 16)
//   Q5_0/Q5_1: as Q4, plus bit 4 of q[j] in bit j of the 32-bit little-endian qh
//   Q8_0/Q8_1: qs[j] = q[j] (int8)
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "tensor/quants.h"
#include "tensor/quants_impl.h"
#include "util/check.h"
#include "util/fp16.h"

#include "tensor/exact_fp.h"  // last: no FMA contraction below

namespace tensor {

namespace {

using util::f32_to_fp16;
using util::fp16_to_f32;

// ---- float types ----

void quantize_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}
void dequantize_f16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}
void quantize_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = util::f32_to_bf16(x[i]);
}
void dequantize_bf16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = util::bf16_to_f32(x[i]);
}

// ---- helpers shared by the symmetric types ----

// Largest |x| of a block and the signed value that has it (the first one on ties).
struct MinMax { float min, max; };
MinMax min_max(const float* x, int n) {
  MinMax r{FLT_MAX, -FLT_MAX};
  for (int j = 0; j < n; ++j) {
    if (x[j] < r.min) r.min = x[j];
    if (x[j] > r.max) r.max = x[j];
  }
  return r;
}

// Q4_0 and Q5_0's block of kBits: d = max / -2^(kBits-1) (max: the signed value of largest
// magnitude), q = min(2^kBits - 1, trunc(x / d + 2^(kBits-1) + 0.5)); returns d in fp16.
template <int kBits>
uint16_t symmetric_block(const float* x, uint8_t* q) {
  constexpr int kHalf = 1 << (kBits - 1);
  const detail::AbsMax a = detail::abs_max(x, kQK);
  const float d = a.max / -kHalf;
  const float id = d ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) q[j] = std::min<int>(2 * kHalf - 1, static_cast<int8_t>(x[j] * id + (kHalf + 0.5f)));
  return f32_to_fp16(d);
}

// ---- Q4_0: x = d * (q - 8), q in [0, 15], d = max / -8 ----

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    uint8_t q[kQK];
    y[i].d = symmetric_block<4>(x, q);
    detail::pack_nibbles(q, y[i].qs, kQK);
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// ---- Q4_1: x = d * q + m, q in [0, 15], d = (max - min) / 15, m = min ----

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const MinMax mm = min_max(x, kQK);
    const float d = (mm.max - mm.min) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mm.min);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = std::min<int>(15, static_cast<int8_t>((x[j] - mm.min) * id + 0.5f));
    detail::pack_nibbles(q, y[i].qs, kQK);
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    const float m = fp16_to_f32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      const float p0 = (x[i].qs[j] & 0x0F) * d;  // separate statements: never fused
      const float p1 = (x[i].qs[j] >> 4) * d;
      y[j] = p0 + m;
      y[j + kQK / 2] = p1 + m;
    }
  }
}

// ---- Q5_0 and Q5_1's 5-bit layout: q[j]'s low nibble as Q4's, bit 4 in bit j of qh ----

void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  detail::pack_nibbles(q, qs, kQK);
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qh |= ((q[j] & 0x10u) >> 4) << j;
    qh |= ((q[j + kQK / 2] & 0x10u) >> 4) << (j + kQK / 2);
  }
  std::memcpy(qh_bytes, &qh, sizeof(qh));
}

void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
    q[j + kQK / 2] = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
  }
}

// ---- Q5_0: x = d * (q - 16), q in [0, 31], d = max / -16 ----

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    uint8_t q[kQK];
    y[i].d = symmetric_block<5>(x, q);
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    int q[kQK];
    unpack_q5(x[i].qs, x[i].qh, q);
    for (int j = 0; j < kQK; ++j) y[j] = (q[j] - 16) * d;
  }
}

// ---- Q5_1: x = d * q + m, q in [0, 31], d = (max - min) / 31, m = min ----

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const MinMax mm = min_max(x, kQK);
    const float d = (mm.max - mm.min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mm.min);
    uint8_t q[kQK];
    // ggml clamps nothing here: (x - min) / d <= 31 up to rounding.
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>((x[j] - mm.min) * id + 0.5f);
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    const float m = fp16_to_f32(x[i].m);
    int q[kQK];
    unpack_q5(x[i].qs, x[i].qh, q);
    for (int j = 0; j < kQK; ++j) {
      const float p = q[j] * d;  // separate statements: never fused
      y[j] = p + m;
    }
  }
}

// ---- Q8_0: x = d * q, q in [-127, 127], d = amax / 127 ----

// std::round (halves away from zero) for |v| < 2^23, without the library call, so the
// loop vectorizes: v - trunc(v) is exact there. (The all-reduce encodes its activations
// with this on every sync.)
inline int32_t round_half_away(float v) {
  const int32_t i = static_cast<int32_t>(v);
  const float frac = v - static_cast<float>(i);
  return i + (frac >= 0.5f) - (frac <= -0.5f);
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(round_half_away(x[j] * id));
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = x[i].qs[j] * d;
  }
}

// ---- Q8_1: as Q8_0, plus s = fp16(d * sum(q)) with d the unrounded f32 scale ----

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(round_half_away(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = f32_to_fp16(static_cast<float>(sum) * d);
  }
}

void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = x[i].qs[j] * d;
  }
}

}  // namespace

void dequantize_row(Type t, const void* src, float* dst, int64_t n) {
  CHECK_MSG(n >= 0 && n % traits(t).block_size == 0, "row length not a multiple of the block size");
  switch (t) {
    case Type::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case Type::F16: dequantize_f16(static_cast<const uint16_t*>(src), dst, n); return;
    case Type::BF16: dequantize_bf16(static_cast<const uint16_t*>(src), dst, n); return;
    case Type::Q4_0: dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); return;
    case Type::Q4_1: dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); return;
    case Type::Q5_0: dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); return;
    case Type::Q5_1: dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); return;
    case Type::Q8_0: dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); return;
    case Type::Q8_1: dequantize_q8_1(static_cast<const BlockQ8_1*>(src), dst, n); return;
    case Type::Q2_K: detail::dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, n); return;
    case Type::Q3_K: detail::dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, n); return;
    case Type::Q4_K: detail::dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n); return;
    case Type::Q5_K: detail::dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, n); return;
    case Type::Q6_K: detail::dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n); return;
    case Type::Q8_K: detail::dequantize_q8_k(static_cast<const BlockQ8_K*>(src), dst, n); return;
    case Type::IQ4_NL: detail::dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n); return;
    case Type::IQ4_XS: detail::dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n); return;
    case Type::MXFP4: detail::dequantize_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n); return;
    default: break;
  }
  CHECK_MSG(false, "dequantize_row: unsupported type");
}

void quantize_row(Type t, const float* src, void* dst, int64_t n) {
  CHECK_MSG(n >= 0 && n % traits(t).block_size == 0, "row length not a multiple of the block size");
  switch (t) {
    case Type::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case Type::F16: quantize_f16(src, static_cast<uint16_t*>(dst), n); return;
    case Type::BF16: quantize_bf16(src, static_cast<uint16_t*>(dst), n); return;
    case Type::Q4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n); return;
    case Type::Q4_1: quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n); return;
    case Type::Q5_0: quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n); return;
    case Type::Q5_1: quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n); return;
    case Type::Q8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n); return;
    case Type::Q8_1: quantize_q8_1(src, static_cast<BlockQ8_1*>(dst), n); return;
    case Type::Q2_K: detail::quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), n); return;
    case Type::Q3_K: detail::quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), n); return;
    case Type::Q4_K: detail::quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n); return;
    case Type::Q5_K: detail::quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), n); return;
    case Type::Q6_K: detail::quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n); return;
    case Type::Q8_K: detail::quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), n); return;
    case Type::IQ4_NL: detail::quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n); return;
    case Type::IQ4_XS: detail::quantize_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n); return;
    case Type::MXFP4: detail::quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), n); return;
    default: break;
  }
  CHECK_MSG(false, "quantize_row: unsupported type");
}

}  // namespace tensor
