// quants_impl.h: internal to tensor/: the per-type row functions that quants.cc
// dispatches to, and the small helpers shared by quants.cc and quants_k.cc. Not a public
// API: everything outside tensor/ goes through tensor/quants.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/types.h"
#include "util/fp16.h"

namespace tensor::detail {

using util::f32_to_fp16;
using util::fp16_to_f32;

// The largest magnitude of x[0..n) and the element that has it (the first on ties; 0, 0
// when all are zero or NaN), as every ggml quantizer finds its scale's sign and size.
struct AbsMax { float amax, max; };
inline AbsMax abs_max(const float* x, int n) {
  AbsMax r{0.0f, 0.0f};
  for (int j = 0; j < n; ++j)
    if (r.amax < std::fabs(x[j])) { r.amax = std::fabs(x[j]); r.max = x[j]; }
  return r;
}

// The 4-bit layout of every 32-element block (Q4_0, Q4_1, Q5_*'s low bits, IQ4_NL, IQ4_XS,
// MXFP4): qs[16 i + j] = low nibble of L[32 i + j] | low nibble of L[32 i + 16 + j] << 4,
// for n / 32 sub-blocks.
inline void pack_nibbles(const uint8_t* L, uint8_t* qs, int n) {
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j)
      qs[16 * i + j] = static_cast<uint8_t>((L[32 * i + j] & 0x0F) | ((L[32 * i + 16 + j] & 0x0F) << 4));
}

// ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it quantizes to zeros.
inline constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, exactly as ggml's nearest_int (valid for |f| <= 2^22).
inline int nearest_int(float f) {
  const float val = f + 12582912.f;  // 1.5 * 2^23: pushes the integer into the mantissa
  int32_t i;
  std::memcpy(&i, &val, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// ggml's make_qkx2_quants (quants_k.cc): fits x[0..n) ~ scale * L - the_min, L in [0, nmax],
// weighted least squares over nstep+1 stretched grids; returns the scale. Q2_K..Q5_K use it.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad);

// K-quants (quants_k.cc, Q2_K / Q3_K in quants_k23.cc). n is a multiple of kQK_K; x has n floats.
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n);
void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t n);

// Codebook types (quants_iq4.cc). n is a multiple of the type's block size.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n);
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t n);
void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t n);

}  // namespace tensor::detail
