// quants_k23.cc: scalar quantize/dequantize of the 2- and 3-bit K-quants, Q2_K and Q3_K
// (256-element super-blocks of 16 sub-blocks of 16). The quantizers follow ggml's
// quantize_row_q2_K_ref / quantize_row_q3_K_ref operation for operation (make_qkx2_quants
// with mean-absolute-deviation weights for Q2_K, make_q3_quants for Q3_K, nearest_int,
// the same float expression order), so our bytes equal ggml's reference bytes, which is
// what llama-quantize writes without an importance matrix; the dequantizers follow
// dequantize_row_q2_K / q3_K. Deliberately not here: imatrix-weighted quantization, SIMD,
// dot products. Like quants.cc, this file forbids FMA contraction (bit-exactness).
//
// Super-block layouts (256 elements; sub-block s = elements 16s..16s+15):
//   Q2_K: scales[s] = sc | m << 4 (4 bits each); x = d*sc*q - dmin*m, q in 0..3; element
//         128h + 32k + l (h = 0..1, k = 0..3, l = 0..31) is bits 2k, 2k+1 of qs[32h + l].
//   Q3_K: 6-bit scales sc_s (stored +32): low 4 bits in scales[s] (s < 8) or the high
//         nibble of scales[s - 8], bits 4-5 at bit pair s / 4 of scales[8 + s % 4];
//         x = d*(sc_s - 32)*(q - 4*!hbit), q in 0..3 as Q2_K's, the high bit of element e
//         is bit e / 32 of hmask[e % 32].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quants_impl.h"
#include "util/fp16.h"

#include "tensor/exact_fp.h"  // last: no FMA contraction below

namespace tensor::detail {

namespace {

// Packs 256 2-bit values: element 128h + 32k + l at bits 2k of qs[32h + l].
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                            (L[j + l + 96] << 6));
}

// ggml's make_q3_quants with do_rmse: fits x[0..n) ~ scale * L, L in [-nmax, nmax), by
// x^2-weighted least squares and up to 5 passes of single-element improvements; L is
// returned + nmax.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  const auto [amax, max] = abs_max(x, n);
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// The 16 6-bit Q3_K scales (still +32) from their 12 packed bytes.
inline int q3_k_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

}  // namespace

// ---- Q2_K ----

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n) {
  uint8_t L[kQK_K];
  uint8_t Laux[16];
  float weights[16];
  float mins[kQK_K / 16];
  float scales[kQK_K / 16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0;  // as we are deducting the min, scales are always positive
    float max_min = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = f32_to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = f32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j)
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (nearest_int(iscale * mins[j]) << 4));
      y[i].dmin = f32_to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = f32_to_fp16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = fp16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float min = fp16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int h = 0; h < kQK_K; h += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * ((q[16 * half + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// ---- Q3_K ----

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    for (int j = 0; j < kQK_K / 16; ++j) scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    const float max_scale = abs_max(scales, kQK_K / 16).max;
    std::memset(y[i].scales, 0, kKScaleSize);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        if (j < 8) y[i].scales[j] = l & 0xF;
        else y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        l = static_cast<int8_t>(l >> 4);
        y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y[i].d = f32_to_fp16(1 / iscale);
    } else {
      y[i].d = f32_to_fp16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const int sc = q3_k_scale(y[i].scales, j) - 32;
      const float d = fp16_to_f32(y[i].d) * sc;
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    std::memset(y[i].hmask, 0, kQK_K / 8);
    uint8_t L2[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {  // high bit of element j: bit j / 32 of hmask[j % 32]
      if (L[j] > 3) {
        y[i].hmask[j % 32] = static_cast<uint8_t>(y[i].hmask[j % 32] | (1 << (j / 32)));
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
      L2[j] = static_cast<uint8_t>(L[j]);
    }
    pack_2bit(L2, y[i].qs);
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = fp16_to_f32(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int h = 0; h < kQK_K; h += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * (q3_k_scale(x[i].scales, is++) - 32);
          for (int l = 16 * half; l < 16 * half + 16; ++l)
            *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        }
      }
    }
  }
}

}  // namespace tensor::detail
