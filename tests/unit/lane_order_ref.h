// lane_order_ref.h: the lane-order contract (kernels.h) of the 32-element and K-quant types'
// prompt batches, written from ggml's block layouts, not from the kernels, for kernels_test.cc
// (the low-bit types' references are in lane_order_lowbit.h): one float per output, blocks
// ascending, every integer sum exact. lane_order(t, ...) is the value of one output of type t.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "lane_order_lowbit.h"
#include "tensor/types.h"
#include "util/fp16.h"

namespace kernels::lane_ref {

// Lane order, the contract of Q4_0, Q4_1 and Q8_0 batches of 4 or more on SIMD (x86, NEON;
// kernels.h): one float per output, acc = fma(float(int dot of block b), dw * da, acc),
// blocks ascending. Written from the block layouts, not from the kernels.
inline float lane_order_q4_0(int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* wb = reinterpret_cast<const tensor::BlockQ4_0*>(w);
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_0*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j)
      isum += ((wb[b].qs[j] & 15) - 8) * xb[b].qs[j] + ((wb[b].qs[j] >> 4) - 8) * xb[b].qs[j + 16];
    acc = std::fma(float(isum), util::fp16_to_f32(wb[b].d) * util::fp16_to_f32(xb[b].d), acc);
  }
  return acc;
}

// Q4_1 x Q8_1: per block, acc = fma(float(isum), dw * da, acc) with isum the exact int dot
// of the unsigned nibbles (0..15) and the quants, then acc = fma(m, s, acc) (Q8_1's fp16 s =
// da * sum of its quants, as stored).
inline float lane_order_q4_1(int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* wb = reinterpret_cast<const tensor::BlockQ4_1*>(w);
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_1*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) isum += (wb[b].qs[j] & 15) * xb[b].qs[j] + (wb[b].qs[j] >> 4) * xb[b].qs[j + 16];
    acc = std::fma(float(isum), util::fp16_to_f32(wb[b].d) * util::fp16_to_f32(xb[b].d), acc);
    acc = std::fma(util::fp16_to_f32(wb[b].m), util::fp16_to_f32(xb[b].s), acc);
  }
  return acc;
}

inline float lane_order_q8_0(int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* wb = reinterpret_cast<const tensor::BlockQ8_0*>(w);
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_0*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += wb[b].qs[j] * xb[b].qs[j];
    acc = std::fma(float(isum), util::fp16_to_f32(wb[b].d) * util::fp16_to_f32(xb[b].d), acc);
  }
  return acc;
}

// Lane order for Q4_K: per super-block, acc = fma(float(sumi), d * da, acc), then
// acc = fma(float(summ), -(dmin * da), acc); sumi = sum over sub-blocks j of sc_j * (int dot
// of the 32 quants), summ = sum of m_j * (bsums[2j] + bsums[2j+1]). From ggml's layout:
// 6-bit scales and mins (get_scale_min_k4), quants of sub-blocks 2c / 2c+1 in the low /
// high nibbles of qs[32c..32c+31]. Q5_K (Block = BlockQ5_K): the same order, each quant
// with bit j of qh[l] (element l of sub-block j) as its fifth bit, 0..31.
template <class Block>
float lane_order_k45(int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* wb = reinterpret_cast<const Block*>(w);
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_K*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* q = wb[b].scales;
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
      int dot = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = wb[b].qs[32 * (j / 2) + l];
        int q = (j % 2) ? byte >> 4 : byte & 15;
        if constexpr (std::is_same_v<Block, tensor::BlockQ5_K>) q |= ((wb[b].qh[l] >> j) & 1) << 4;
        dot += q * xb[b].qs[32 * j + l];
      }
      sumi += sc * dot;
      summ += m * (xb[b].bsums[2 * j] + xb[b].bsums[2 * j + 1]);
    }
    const float d = util::fp16_to_f32(wb[b].d), dmin = util::fp16_to_f32(wb[b].dmin);
    acc = std::fma(float(sumi), d * xb[b].d, acc);
    acc = std::fma(float(summ), -(dmin * xb[b].d), acc);
  }
  return acc;
}

// Lane order for Q6_K: per super-block, acc = fma(float(sumi), d * da, acc), sumi = sum of
// sc[e / 16] * (q_e - 32) * a_e over the 256 elements. ggml's layout: per 128-element half
// h, element 128h + 32i + l takes 4 bits of ql[64h + l + 32 (i % 2)] (low for i < 2, high
// otherwise) and bits 2i, 2i+1 of qh[32h + l].
inline float lane_order_q6_k(int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* wb = reinterpret_cast<const tensor::BlockQ6_K*>(w);
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_K*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 256; ++b) {
    int sumi = 0;
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, i = (e % 128) / 32, l = e % 32;
      const uint8_t lo = wb[b].ql[64 * h + l + 32 * (i % 2)];
      const int q = ((i < 2 ? lo & 15 : lo >> 4) | (((wb[b].qh[32 * h + l] >> (2 * i)) & 3) << 4)) - 32;
      sumi += wb[b].scales[e / 16] * q * xb[b].qs[e];
    }
    acc = std::fma(float(sumi), util::fp16_to_f32(wb[b].d) * xb[b].d, acc);
  }
  return acc;
}

// The types whose batches sum in lane order on every SIMD table (x86 and NEON).
inline bool simd_lanes(tensor::Type wt) {
  using tensor::Type;
  return wt == Type::Q4_0 || wt == Type::Q4_1 || wt == Type::Q8_0 || wt == Type::Q4_K || wt == Type::Q5_K ||
         wt == Type::Q6_K || wt == Type::IQ4_NL || wt == Type::MXFP4 || is_low_bit(wt);
}

// The lane-order value of one output of type wt.
inline float lane_order(tensor::Type wt, int64_t n, const uint8_t* w, const uint8_t* x) {
  using tensor::Type;
  switch (wt) {
    case Type::Q4_0: return lane_order_q4_0(n, w, x);
    case Type::Q4_1: return lane_order_q4_1(n, w, x);
    case Type::Q8_0: return lane_order_q8_0(n, w, x);
    case Type::Q4_K: return lane_order_k45<tensor::BlockQ4_K>(n, w, x);
    case Type::Q5_K: return lane_order_k45<tensor::BlockQ5_K>(n, w, x);
    case Type::Q6_K: return lane_order_q6_k(n, w, x);
    default: return low_bit(wt, n, w, x);
  }
}

}  // namespace kernels::lane_ref
