// quants_k.cc: scalar quantize/dequantize of the 256-element K-quant super-blocks
// (Q4_K, Q5_K, Q6_K, and Q8_K, the activation type their dot products use). The
// quantizers follow ggml's quantize_row_q{4,5,6,8}_K_ref operation for operation
// (make_qkx2_quants / make_qx_quants searches, nearest_int rounding, the same float
// expression order), so our bytes equal ggml's reference bytes; the dequantizers follow
// dequantize_row_*. Deliberately not here: imatrix-weighted quantization
// (quantize_row_*_impl with quant_weights), Q2_K / Q3_K (quants_k23.cc), SIMD, dot products.
// Like quants.cc, this file forbids FMA contraction (bit-exactness with ggml and numpy).
//
// Super-block layouts (256 elements):
//   Q4_K: 8 sub-blocks of 32; 6-bit scale sc[j] and min m[j] packed in scales[12]
//         (get_scale_min); x = d*sc[j]*q - dmin*m[j]; qs[32*c + l] holds element
//         64*c + l (low nibble) and 64*c + 32 + l (high nibble), c = 0..3.
//   Q5_K: as Q4_K with 5-bit q; bit 4 of element 64*c + l is bit 2c of qh[l], of
//         element 64*c + 32 + l bit 2c+1.
//   Q6_K: 16 sub-blocks of 16, int8 scales; x = d*sc[j]*(q - 32); for each half h (128
//         elements), ql[64h + l] = q[l] | q[l+64] << 4, ql[64h + 32 + l] = q[l+32] |
//         q[l+96] << 4 (low 4 bits), qh[32h + l] holds bits 4-5 of q[l], q[l+32], q[l+64],
//         q[l+96] at bit pairs 0, 2, 4, 6 (q indexed within the half).
//   Q8_K: float d, int8 qs[256], bsums[16] = sums of qs over each 16 elements.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quants_impl.h"
#include "util/fp16.h"

#include "tensor/exact_fp.h"  // last: no FMA contraction below

namespace tensor::detail {

// Fits x[0..n) ~ scale * L - the_min with L in [0, nmax] (ggml's make_qkx2_quants):
// starts from the min/max fit, then tries nstep+1 stretched grids and keeps the
// weighted least-squares solution with the smallest error. Returns the scale.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

namespace {

// Fits x[0..n) ~ scale * (L - nmax) with L in [0, 2*nmax), weights x^2 (ggml's
// make_qx_quants with rmse_type 1 and no quant weights, the only case Q6_K uses).
float make_qx_quants_rmse1(int n, int nmax, const float* x, int8_t* L) {
  const auto [amax, max] = abs_max(x, n);
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of Q4_K / Q5_K.
inline void get_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Shared front half of the Q4_K / Q5_K quantizers: per-sub-block (scale, min) fits,
// their 6-bit quantization into scales[12], d and dmin, then the final q in [0, nmax]
// of each element in L[256] (sub-blocks whose quantized scale is 0 keep the fit's L).
void quantize_k_scales(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out,
                       uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float max_scale = 0;  // as we are deducting the min, scales are always positive
  float max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                 rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales_out[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = f32_to_fp16(max_scale / 63.f);
  *dmin_out = f32_to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min(j, scales_out, &sc, &m);
    const float d = fp16_to_f32(*d_out) * sc;
    if (!d) continue;
    const float dm = fp16_to_f32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

// ---- Q4_K ----

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_scales(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = fp16_to_f32(x[i].d);
    const float min = fp16_to_f32(x[i].dmin);
    uint8_t sc, m;
    for (int is = 0; is < 8; is += 2, q += 32) {
      get_scale_min(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

// ---- Q5_K ----

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int c = 0; c < kQK_K; c += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[c + j];
        if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
        int l2 = L[c + j + 32];
        if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = fp16_to_f32(x[i].d);
    const float min = fp16_to_f32(x[i].dmin);
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      get_scale_min(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

// ---- Q6_K ----

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    for (int ib = 0; ib < kQK_K / 16; ++ib) scales[ib] = make_qx_quants_rmse1(16, 32, x + 16 * ib, L + 16 * ib);
    const auto [max_abs_scale, max_scale] = abs_max(scales, kQK_K / 16);
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < kQK_K; h += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// ---- Q8_K: x = d * q, d = max / -127 (f32), bsums over groups of 16 ----

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    const auto [amax, max] = abs_max(x, kQK_K);
    if (!amax) {
      // ggml leaves bsums unwritten here; we zero them (their true value).
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i)
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * x[i].qs[j];
}

}  // namespace tensor::detail
