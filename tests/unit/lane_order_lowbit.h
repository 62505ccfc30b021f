// lane_order_lowbit.h: the lane-order contract of the low-bit types' prompt batches (x86,
// kernels.h; kernels/cpu/avx2_lowbit_lanes.h), written from ggml's block layouts, not from the
// kernels, for kernels_test.cc: one float per output, blocks ascending,
//   IQ4_NL, MXFP4: acc = fma(float(int dot of block b), dw * da, acc);
//   Q2_K, Q3_K, IQ4_XS: acc = fma(float(sumi), d * da, acc), sumi = sum of scale * q * a over
//     the super-block's elements; Q2_K then acc = fma(float(summ), -(dmin * da), acc), summ =
//     sum_s min_s * bsums_s.
#pragma once
#include <cmath>
#include <cstdint>

#include "tensor/codebook.h"
#include "tensor/types.h"
#include "util/fp16.h"

namespace kernels::lane_ref {

// Codebook index of element e (0..31) of a 16-byte nibble array: low nibbles first.
inline int nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

template <class W>
float codebook32(int64_t n, const uint8_t* w, const uint8_t* x, const int8_t* values) {
  const auto* wb = reinterpret_cast<const W*>(w);
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_0*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    int isum = 0;
    for (int e = 0; e < 32; ++e) isum += values[nibble(wb[b].qs, e)] * xb[b].qs[e];
    float dw;
    if constexpr (requires { wb[b].e; }) dw = tensor::e8m0_to_fp32_half(wb[b].e);
    else dw = util::fp16_to_f32(wb[b].d);
    acc = std::fma(float(isum), dw * util::fp16_to_f32(xb[b].d), acc);
  }
  return acc;
}

// Q3_K's 6-bit scale of sub-block s (ggml's packing, minus 32).
inline int q3_k_scale(const uint8_t* scales, int s) {
  const int low = s < 8 ? scales[s] & 15 : scales[s - 8] >> 4;
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Q2_K / Q3_K / IQ4_XS. Element 128n + 32j + l of Q2_K / Q3_K: low bits (qs[32n + l] >> 2j) & 3;
// Q3_K subtracts 4 unless bit 4n + j of hmask[l] is set. IQ4_XS: element 32ib + l is the
// codebook value of nibble l of qs[16ib..], scale ls - 32.
inline float low_k(tensor::Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_K*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 256; ++b) {
    const tensor::BlockQ8_K& a = xb[b];
    int sumi = 0, summ = 0;
    float d = 0.0f, dmin = 0.0f;
    for (int e = 0; e < 256; ++e) {
      const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
      int q = 0, sc = 0;
      if (t == tensor::Type::Q2_K) {
        const auto& k = reinterpret_cast<const tensor::BlockQ2_K*>(w)[b];
        q = (k.qs[32 * nn + l] >> (2 * j)) & 3;
        sc = k.scales[e / 16] & 15;
        d = util::fp16_to_f32(k.d), dmin = util::fp16_to_f32(k.dmin);
      } else if (t == tensor::Type::Q3_K) {
        const auto& k = reinterpret_cast<const tensor::BlockQ3_K*>(w)[b];
        q = ((k.qs[32 * nn + l] >> (2 * j)) & 3) - ((k.hmask[l] >> (4 * nn + j)) & 1 ? 0 : 4);
        sc = q3_k_scale(k.scales, e / 16);
        d = util::fp16_to_f32(k.d);
      } else {
        const auto& k = reinterpret_cast<const tensor::BlockIQ4_XS*>(w)[b];
        const int ib = e / 32;
        q = tensor::kIQ4NLValues[nibble(k.qs + 16 * ib, e % 32)];
        sc = (((k.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((k.scales_h >> 2 * ib) & 3) << 4)) - 32;
        d = util::fp16_to_f32(k.d);
      }
      sumi += sc * q * a.qs[e];
    }
    acc = std::fma(float(sumi), d * a.d, acc);
    if (t == tensor::Type::Q2_K) {
      const auto& k = reinterpret_cast<const tensor::BlockQ2_K*>(w)[b];
      for (int s = 0; s < 16; ++s) summ += (k.scales[s] >> 4) * a.bsums[s];
      acc = std::fma(float(summ), -(dmin * a.d), acc);
    }
  }
  return acc;
}

// The lane-order value of one output for a low-bit type.
inline float low_bit(tensor::Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  if (t == tensor::Type::IQ4_NL) return codebook32<tensor::BlockIQ4_NL>(n, w, x, tensor::kIQ4NLValues);
  if (t == tensor::Type::MXFP4) return codebook32<tensor::BlockMXFP4>(n, w, x, tensor::kMXFP4Values);
  return low_k(t, n, w, x);
}

inline bool is_low_bit(tensor::Type t) {
  return t == tensor::Type::Q2_K || t == tensor::Type::Q3_K || t == tensor::Type::IQ4_XS ||
         t == tensor::Type::IQ4_NL || t == tensor::Type::MXFP4;
}

}  // namespace kernels::lane_ref
