// quants_iq4.cc: scalar quantize/dequantize of the 4-bit codebook types, whose elements
// are d * value[q] with value one of 16 int8 entries (tensor/codebook.h):
//   IQ4_NL (32 elements): fp16 d; qs[j] = q[j] | q[j+16] << 4 (j < 16), values kIQ4NLValues.
//   IQ4_XS (256 elements): fp16 d and 8 sub-blocks of 32, each with a 6-bit scale ls
//          (low 4 bits in scales_l[ib/2] at nibble ib%2, high 2 bits in scales_h at bits
//          2ib..2ib+1); element = d * (ls - 32) * value[q]; qs as IQ4_NL per sub-block.
//   MXFP4  (32 elements): E8M0 exponent e, element = 2^(e-128) * kMXFP4Values[q] (the
//          doubled E2M1 values), qs as IQ4_NL.
// The quantizers follow ggml operation for operation, so our bytes equal llama-quantize's
// without an importance matrix: IQ4_NL and IQ4_XS as quantize_iq4_nl / quantize_iq4_xs
// with quant_weights NULL (quantize_row_iq4_nl_impl, weights x^2, a search over 15
// stretched grids; note ggml's quantize_row_iq4_nl_ref skips that search, llama-quantize
// does not), MXFP4 as quantize_row_mxfp4_ref (e from floor(log2(amax)), the nearest of
// the 16 values, first on ties). Dequantizers as dequantize_row_*. Deliberately not here:
// imatrix-weighted quantization, SIMD, dot products (kernels/).
// Like quants.cc, this file forbids FMA contraction (bit-exactness with ggml and numpy).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/codebook.h"
#include "tensor/quants_impl.h"
#include "util/fp16.h"

#include "tensor/exact_fp.h"  // last: no FMA contraction below

namespace tensor::detail {

namespace {

constexpr int kNTry = 7;                // ggml's ntry for IQ4_NL / IQ4_XS

// Index of the table value nearest x (values ascending; ggml's best_index_int8).
int best_index(const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) mu = mav; else ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// Best scale for one block of 32 (x ~ d * value[L], weights x^2), L left in Lb: ggml's
// first loop of quantize_row_iq4_nl_impl for one block.
float fit_block(const float* xb, uint8_t* Lb) {
  const int8_t* values = kIQ4NLValues;
  float weight[32];
  for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
  const auto [amax, max] = abs_max(xb, 32);
  if (amax < kGroupMaxEps) return 0;
  float d = -max / values[0];
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float al = id * xb[j];
    const int l = best_index(values, al);
    Lb[j] = static_cast<uint8_t>(l);
    const float q = values[l];
    const float w = weight[j];
    sumqx += w * q * xb[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int itry = -kNTry; itry <= kNTry; ++itry) {
    id = (itry + values[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float al = id * xb[j];
      const int l = best_index(values, al);
      const float q = values[l];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

}  // namespace

// ---- IQ4_NL ----

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  uint8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float scale = fit_block(x, L);
    y[i].d = f32_to_fp16(scale);
    const float id = scale ? 1 / scale : 0;
    for (int j = 0; j < kQK; ++j) L[j] = static_cast<uint8_t>(best_index(kIQ4NLValues, id * x[j]));
    pack_nibbles(L, y[i].qs, kQK);
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * kIQ4NLValues[x[i].qs[j] & 0xf];
      y[j + kQK / 2] = d * kIQ4NLValues[x[i].qs[j] >> 4];
    }
  }
}

// ---- IQ4_XS ----

void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
  constexpr int kSub = kQK_K / 32;
  uint8_t L[kQK_K];
  float scales[kSub];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < kSub; ++ib) {
      scales[ib] = fit_block(x + 32 * ib, L + 32 * ib);
      const float abs_d = std::fabs(scales[ib]);
      if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = scales[ib]; }
    }
    y[i].scales_h = 0;
    const float d = -max_scale / 32;
    y[i].d = f32_to_fp16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < kSub; ++ib) {
      int l = nearest_int(id * scales[ib]);
      l = std::max(-32, std::min(31, l));
      const float dl = d * l;
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j)
        L[32 * ib + j] = static_cast<uint8_t>(best_index(kIQ4NLValues, idl * x[32 * ib + j]));
      l += 32;
      const uint8_t l_l = l & 0xf, l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) y[i].scales_l[ib / 2] = l_l;
      else y[i].scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      y[i].scales_h |= static_cast<uint16_t>(l_h << 2 * ib);
    }
    pack_nibbles(L, y[i].qs, kQK_K);
  }
}

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* qs = x[i].qs;
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, y += 32, qs += 16) {
      const float dl = d * float(iq4_xs_scale(x[i], ib));
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIQ4NLValues[qs[j] & 0xf];
        y[j + 16] = dl * kIQ4NLValues[qs[j] >> 4];
      }
    }
  }
}

// ---- MXFP4 ----

namespace {
// Nearest of the 16 doubled E2M1 values times e, the first on ties (ggml's best_index_mxfp4).
int best_index_mxfp4(float x, float e) {
  int best_index = 0;
  float best_err = std::fabs(kMXFP4Values[0] * e - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kMXFP4Values[i] * e - x);
    if (err < best_err) { best_index = i; best_err = err; }
  }
  return best_index;
}
}  // namespace

void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float amax = abs_max(x, kQK).amax;
    // ggml casts the float straight to uint8_t; through int as x86 does (a block below
    // 2^-125 wraps as llama-quantize's does), an infinite block gets the NaN code 255.
    uint8_t e = 0;
    if (std::isinf(amax)) e = 255;
    else if (amax > 0.0f) e = static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax)) - 2 + 127));
    y[i].e = e;
    const float d = e8m0_to_fp32_half(e);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(best_index_mxfp4(x[j], d));
    pack_nibbles(q, y[i].qs, kQK);
  }
}

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = kMXFP4Values[x[i].qs[j] & 0x0F] * d;
      y[j + kQK / 2] = kMXFP4Values[x[i].qs[j] >> 4] * d;
    }
  }
}

}  // namespace tensor::detail
