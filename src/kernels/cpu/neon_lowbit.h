// neon_lowbit.h: private to kernels/cpu, included by neon_table.h: the NEON decoders of the
// low-bit and codebook types (issue 28's five), plugged into the loops that already exist,
// as avx2_lowbit.h does on x86:
//   IQ4_NL, MXFP4 (32 elements, x Q8_0): 32-element decoders for neon_tiles.h's tile_q: the
//     4-bit indices through a byte table lookup (vqtbl1q) give signed int8 weights; MXFP4's
//     scale is its E8M0 exponent (block_d). kPairAcc: ggml's two accumulators (even and
//     odd blocks, added before the horizontal sum, an odd last block after it), as x86.
//   Q2_K, Q3_K, IQ4_XS (256 elements, x Q8_K): super-block integer sums for
//     neon_kquants.h's row_k (KQ2, KQ3, KIQ4XS).
// One arithmetic with x86: the int32 lanes are avx2_lowbit.h's (lane l of a chunk = its
// elements 4l..4l+3 times the scale of their 16- or 32-element sub-block, Q3_K's weights
// signed -4..3; Q2_K's mins in 8 lanes, lane l from bsums 2l and 2l + 1), the float steps
// are its DecQ2_K / DecQ3_K / DecIQ4_XS::dot in the same order (Q2_K first v = fma(-dmin *
// da, float(mins), v); then v = fma(d * da, float(sumi), v)), then avx2's horizontal sum.
// Batches of kLaneMinBatch or more of Q2_K, Q3_K, IQ4_XS sum in lane order, as x86's
// avx2_lowbit_lanes.h (kLanes: add_lane, one float per output, acc = fma(float(sumi), d * da,
// acc), Q2_K then acc = fma(float(summ), -(dmin * da), acc), with the same exact integers)
// through row_k at every level; IQ4_NL and MXFP4 in lane order as on x86 too (neon_tiles.h's
// kLanes tiles, neon_gemm.h's GEMMs).
#pragma once
#include <cstring>
#include <utility>

#include "kernels/cpu/neon_common.h"
#include "kernels/cpu/neon_kquants.h"
#include "tensor/codebook.h"

namespace kernels::cpu::neon {
namespace {

// ---- 32-element codebook types -----------------------------------------------------------

template <class Block, const int8_t* kValues>
struct DecCodebook32 {
  using W = Block; using A = BlockQ8_0;
  static constexpr bool kHasMin = false, kPairAcc = true;
  static void quants(const W& b, int8x16_t& lo, int8x16_t& hi) {
    const int8x16_t values = vld1q_s8(kValues);
    const uint8x16_t q = vld1q_u8(b.qs);
    lo = vqtbl1q_s8(values, vandq_u8(q, vdupq_n_u8(0x0F)));
    hi = vqtbl1q_s8(values, vshrq_n_u8(q, 4));
  }
  static float m(const W&) { return 0.0f; }
};
using DecIQ4_NL = DecCodebook32<BlockIQ4_NL, kIQ4NLValues>;
using DecMXFP4 = DecCodebook32<BlockMXFP4, kMXFP4Values>;

// ---- 256-element types --------------------------------------------------------------------

// Lanes 0..3 / 4..7 of 16 int16 scales times the 16 bsums, pairwise: lane l = s_2l bsums_2l
// + s_2l+1 bsums_2l+1 (avx2's madd of the scales by the bsums).
inline void scaled_bsums(int16x8_t s_lo, int16x8_t s_hi, const BlockQ8_K& a, int32x4_t& lo, int32x4_t& hi) {
  const int16x8_t b_lo = vld1q_s16(a.bsums), b_hi = vld1q_s16(a.bsums + 8);
  lo = vpaddq_s32(vmull_s16(vget_low_s16(s_lo), vget_low_s16(b_lo)), vmull_high_s16(s_lo, b_lo));
  hi = vpaddq_s32(vmull_s16(vget_low_s16(s_hi), vget_low_s16(b_hi)), vmull_high_s16(s_hi, b_hi));
}

// Chunk c (elements 32c..32c+31 at qa: w_lo 0..15, w_hi 16..31) times its sub-block scales,
// int32 lanes kLo of sc[kLo / 4] and kHi of sc[kHi / 4] (multiply by element: the scales stay
// in vectors, no scalar unpacking or moves into SIMD registers; the same int32 products).
template <class Dot, int kLo, int kHi>
inline __attribute__((always_inline)) void chunk16(int8x16_t w_lo, int8x16_t w_hi, const int8_t* qa, const int32x4_t* sc,
                                                   int32x4_t& s_lo, int32x4_t& s_hi) {
  s_lo = vmlaq_laneq_s32(s_lo, Dot::dot(w_lo, vld1q_s8(qa)), sc[kLo / 4], kLo % 4);
  s_hi = vmlaq_laneq_s32(s_hi, Dot::dot(w_hi, vld1q_s8(qa + 16)), sc[kHi / 4], kHi % 4);
}

// 16 int8 scales as 4 int32x4 (lanes 4k..4k+3 in out[k]).
inline void widen_scales(int8x16_t s, int32x4_t* out) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(s)), hi = vmovl_high_s8(s);
  out[0] = vmovl_s16(vget_low_s16(lo));
  out[1] = vmovl_high_s16(lo);
  out[2] = vmovl_s16(vget_low_s16(hi));
  out[3] = vmovl_high_s16(hi);
}

// Q2_K: element 128n + 32j + l = (qs[32n + l] >> 2j) & 3 (chunk 4n + j); sub-block s of 16
// has scale scales[s] & 15 and min scales[s] >> 4.
struct KQ2 {
  using W = BlockQ2_K;
  static constexpr bool kLanes = true;
  template <class Dot, int c>  // chunk c = 4n + j
  static inline __attribute__((always_inline)) void chunk(const W& b, const BlockQ8_K& a, const int32x4_t* sc,
                                                          int32x4_t& s_lo, int32x4_t& s_hi) {
    constexpr int n = c / 4, j = c % 4;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8x16_t b0 = vld1q_u8(b.qs + 32 * n), b1 = vld1q_u8(b.qs + 32 * n + 16);
    const int8x16_t shift = vdupq_n_s8(int8_t(-2 * j));
    const int8x16_t w_lo = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b0, shift), m3));
    const int8x16_t w_hi = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b1, shift), m3));
    chunk16<Dot, 2 * c, 2 * c + 1>(w_lo, w_hi, a.qs + 32 * c, sc, s_lo, s_hi);
  }
  template <class Dot>
  static inline __attribute__((always_inline)) KInts ints(const W& b, const BlockQ8_K& a) {
    const uint8x16_t sc = vld1q_u8(b.scales);
    int32x4_t sc32[4];
    widen_scales(vreinterpretq_s8_u8(vandq_u8(sc, vdupq_n_u8(15))), sc32);
    int32x4_t s_lo = vdupq_n_s32(0), s_hi = vdupq_n_s32(0);
    [&]<int... I>(std::integer_sequence<int, I...>) __attribute__((always_inline)) {
      (chunk<Dot, I>(b, a, sc32, s_lo, s_hi), ...);
    }(std::make_integer_sequence<int, 8>{});
    const uint8x16_t mn = vshrq_n_u8(sc, 4);
    KInts k{s_lo, s_hi, vdupq_n_s32(0), fp16(b.d) * a.d, -fp16(b.dmin) * a.d};
    scaled_bsums(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn))), vreinterpretq_s16_u16(vmovl_high_u8(mn)), a,
                 k.mins, k.mins_hi);
    return k;
  }
  static void add(const KInts& k, AccK& acc) {  // the mins first, as ggml's AVX2 kernel
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(k.mins), k.dmin);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(k.mins_hi), k.dmin);
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(k.lo), k.d);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(k.hi), k.d);
  }
  static void add_lane(const KInts& k, AccK& acc) {  // lane order: sumi, then summ (16 mins)
    acc.lane = std::fma(float(vaddvq_s32(vaddq_s32(k.lo, k.hi))), k.d, acc.lane);
    acc.lane = std::fma(float(vaddvq_s32(vaddq_s32(k.mins, k.mins_hi))), k.dmin, acc.lane);
  }
  static float finish(const AccK& acc) { return hsum8(acc.lo, acc.hi); }
};

// Q3_K's 16 sub-block scales (ggml's 6-bit unpacking, minus 32), as avx2's q3_k_scales.
inline int8x16_t q3_k_scales(const uint8_t* scales) {
  uint32_t aux[4];
  std::memcpy(aux, scales, 12);
  const uint32_t tmp = aux[2], km1 = 0x03030303, km2 = 0x0f0f0f0f;
  aux[2] = ((aux[0] >> 4) & km2) | (((tmp >> 4) & km1) << 4);
  aux[3] = ((aux[1] >> 4) & km2) | (((tmp >> 6) & km1) << 4);
  aux[0] = (aux[0] & km2) | (((tmp >> 0) & km1) << 4);
  aux[1] = (aux[1] & km2) | (((tmp >> 2) & km1) << 4);
  return vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(aux)), vdupq_n_s8(32));
}

// Q3_K: element 128n + 32j + l has low bits (qs[32n + l] >> 2j) & 3 and, unless bit 4n + j
// of hmask[l] is set, -4: the signed weight (low | hbit << 2) - 4 (-4..3) in its own lane,
// as ggml's AVX2 kernel (no bias through the bsums).
struct KQ3 {
  using W = BlockQ3_K;
  static constexpr bool kLanes = true;
  template <class Dot, int c>  // chunk c = 4n + j
  static inline __attribute__((always_inline)) void chunk(const W& b, const BlockQ8_K& a, const int32x4_t* sc,
                                                          int32x4_t& s_lo, int32x4_t& s_hi) {
    constexpr int n = c / 4, j = c % 4;
    const uint8x16_t m3 = vdupq_n_u8(3), m4 = vdupq_n_u8(4);
    const int8x16_t four = vdupq_n_s8(4);
    const uint8x16_t b0 = vld1q_u8(b.qs + 32 * n), b1 = vld1q_u8(b.qs + 32 * n + 16);
    const uint8x16_t h0 = vld1q_u8(b.hmask), h1 = vld1q_u8(b.hmask + 16);
    const int8x16_t shift = vdupq_n_s8(int8_t(-2 * j)), hshift = vdupq_n_s8(int8_t(2 - c));
    const int8x16_t w_lo = vsubq_s8(
        vreinterpretq_s8_u8(vorrq_u8(vandq_u8(vshlq_u8(b0, shift), m3), vandq_u8(vshlq_u8(h0, hshift), m4))), four);
    const int8x16_t w_hi = vsubq_s8(
        vreinterpretq_s8_u8(vorrq_u8(vandq_u8(vshlq_u8(b1, shift), m3), vandq_u8(vshlq_u8(h1, hshift), m4))), four);
    chunk16<Dot, 2 * c, 2 * c + 1>(w_lo, w_hi, a.qs + 32 * c, sc, s_lo, s_hi);
  }
  template <class Dot>
  static inline __attribute__((always_inline)) KInts ints(const W& b, const BlockQ8_K& a) {
    int32x4_t sc[4];
    widen_scales(q3_k_scales(b.scales), sc);
    int32x4_t s_lo = vdupq_n_s32(0), s_hi = vdupq_n_s32(0);
    [&]<int... I>(std::integer_sequence<int, I...>) __attribute__((always_inline)) {
      (chunk<Dot, I>(b, a, sc, s_lo, s_hi), ...);
    }(std::make_integer_sequence<int, 8>{});
    return {s_lo, s_hi, vdupq_n_s32(0), fp16(b.d) * a.d, 0.0f};
  }
  static void add(const KInts& k, AccK& acc) {
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(k.lo), k.d);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(k.hi), k.d);
  }
  static void add_lane(const KInts& k, AccK& acc) { neon::add_lane(k, false, acc); }
  static float finish(const AccK& acc) { return hsum8(acc.lo, acc.hi); }
};

// IQ4_XS: sub-block ib of 32 holds codebook indices in qs[16 ib..] (as IQ4_NL) and the
// 6-bit scale ls (tensor::iq4_xs_scale gives ls - 32): weight d * (ls - 32) * value.
struct KIQ4XS {
  using W = BlockIQ4_XS;
  static constexpr bool kLanes = true;
  template <class Dot>
  static KInts ints(const W& b, const BlockQ8_K& a) {
    // The scales unpacked as scalars (vmlaq_n_s32): Q2_K / Q3_K's vector lanes (chunk16) measured
    // slower here on LLVM 19's Neoverse V1 model (26.1 -> 29.6 cycles / 256), faster on the A76 one.
    const int8x16_t values = vld1q_s8(kIQ4NLValues);
    int32x4_t s_lo = vdupq_n_s32(0), s_hi = vdupq_n_s32(0);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8x16_t q = vld1q_u8(b.qs + 16 * ib);
      const int ls = iq4_xs_scale(b, ib);
      s_lo = vmlaq_n_s32(s_lo, Dot::dot(vqtbl1q_s8(values, vandq_u8(q, vdupq_n_u8(0x0F))), vld1q_s8(a.qs + 32 * ib)), ls);
      s_hi = vmlaq_n_s32(s_hi, Dot::dot(vqtbl1q_s8(values, vshrq_n_u8(q, 4)), vld1q_s8(a.qs + 32 * ib + 16)), ls);
    }
    return {s_lo, s_hi, vdupq_n_s32(0), fp16(b.d) * a.d, 0.0f};
  }
  static void add(const KInts& k, AccK& acc) { KQ3::add(k, acc); }
  static void add_lane(const KInts& k, AccK& acc) { neon::add_lane(k, false, acc); }
  static float finish(const AccK& acc) { return hsum8(acc.lo, acc.hi); }
};

}  // namespace
}  // namespace kernels::cpu::neon
