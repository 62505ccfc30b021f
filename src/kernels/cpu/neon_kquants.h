// neon_kquants.h: private to kernels/cpu: the NEON K-quant (Q4_K, Q5_K, Q6_K) x Q8_K
// matrix x vector kernels, parametrized on the integer dot as neon_tiles.h. Each weight
// super-block is unpacked on the fly (no DecodedK) and dotted with the activation blocks
// of up to kTileCols columns; rows one after another (one memory stream).
//
// One arithmetic with x86 (avx2_kquants.h): the int32 lanes are the AVX2 ones, lane k of
// a super-block's sum = sum over the eight 32-element chunks j of scale(j, k) * (products
// of the chunk's elements 4k..4k+3) (Q4_K / Q5_K: scale(j, k) = sc_j; Q6_K: sc_2j for
// k < 4, sc_2j+1 otherwise, minus 32 * (sc_2k bsums_2k + sc_2k+1 bsums_2k+1) for the +32
// bias); Q4_K / Q5_K's mins are 4 lanes, lane p = m_2p cs_2p + m_2p+1 cs_2p+1 (cs_j the sum
// of chunk j's activations). Then the float operations of dot_k / FusedQ4K / FusedQ6K in
// the same order: v = fma(d * da, float(sumi), v); Q4_K: m = fma(-dmin * da, float(mins), m)
// in its own 4 lanes, Q5_K: one float s = fma(-dmin * da, float(sum of its 4 min lanes), s)
// (ggml's summs); and finish_k's sums. So a row's result equals the AVX2 kernel's bit for bit.
// With sdot, Q4_K / Q5_K take those lanes by parts (sums_q45_k_chained: one sdot chain per
// lane half, 8 multiply-adds by scale differences; the same int32 values, fewer instructions).
// Q4_K, Q5_K and Q6_K batches of kLaneMinBatch or more sum in lane order when it is allowed, as
// x86's gemm_lanes (same integers, one float per output), so prompt batches equal x86's too.
#pragma once
#include <cmath>
#include <utility>

#include "kernels/cpu/neon_common.h"
#include "kernels/kernels.h"
#include "kernels/cpu/neon_tiles.h"

namespace kernels::cpu::neon {
namespace {

// One super-block's integer sums (8 lanes, Q4_K / Q5_K's 4 min lanes) and float scales.
struct KInts {
  int32x4_t lo, hi, mins;
  float d, dmin;  // d * da, -dmin * da
  int32x4_t mins_hi = vdupq_n_s32(0);  // Q2_K: mins lanes 4..7 (its 16 sub-blocks' mins)
};

// The float accumulators of one output: x86's 8 + 4 lanes, or lane order's one float.
struct AccK {
  float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f), m = vdupq_n_f32(0.0f);
  float lane = 0.0f;
};

// The 6-bit scales and mins of a Q4_K / Q5_K block (ggml's kmask unpacking).
inline void scales_mins_k4(const uint8_t* scales, uint8_t* sc, uint8_t* mn) {
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  const uint32_t s[2] = {u[0] & 0x3f3f3f3f, (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4)};
  const uint32_t m[2] = {u[1] & 0x3f3f3f3f, ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4)};
  std::memcpy(sc, s, 8);
  std::memcpy(mn, m, 8);
}

// Lane p = m_2p cs_2p + m_2p+1 cs_2p+1 (cs_j = bsums_2j + bsums_2j+1): avx2's madd of the
// mins by bsum_pairs.
inline int32x4_t mins_dot(uint8x8_t mn, const BlockQ8_K& a) {
  const int16x8_t cs = vpaddq_s16(vld1q_s16(a.bsums), vld1q_s16(a.bsums + 8));
  const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(mn));
  return vpaddq_s32(vmull_s16(vget_low_s16(m), vget_low_s16(cs)), vmull_high_s16(m, cs));
}

// The scales and mins of a Q4_K / Q5_K block as two byte vectors (no trip through memory).
inline void scales_mins_k4(const uint8_t* scales, uint8x8_t& sc, uint8x8_t& mn) {
  uint64_t u01;
  uint32_t u2;
  std::memcpy(&u01, scales, 8);
  std::memcpy(&u2, scales + 8, 4);
  const uint32_t u0 = uint32_t(u01), u1 = uint32_t(u01 >> 32);
  const uint64_t s = uint64_t(u0 & 0x3f3f3f3f) | uint64_t((u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4)) << 32;
  const uint64_t m = uint64_t(u1 & 0x3f3f3f3f) | uint64_t(((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4)) << 32;
  sc = vcreate_u8(s);
  mn = vcreate_u8(m);
}

// Chunk j's 32 weights of a Q4_K (kFive false) or Q5_K block as int8 (elements 0..15, 16..31).
template <int j, bool kFive>
[[gnu::always_inline]] inline void chunk_q45_k(const uint8_t* qs, uint8x16_t h0, uint8x16_t h1, int8x16_t& w0, int8x16_t& w1) {
  const uint8x16_t b0 = vld1q_u8(qs + 32 * (j / 2)), b1 = vld1q_u8(qs + 32 * (j / 2) + 16);
  uint8x16_t u0 = j % 2 ? vshrq_n_u8(b0, 4) : vandq_u8(b0, vdupq_n_u8(0x0F));
  uint8x16_t u1 = j % 2 ? vshrq_n_u8(b1, 4) : vandq_u8(b1, vdupq_n_u8(0x0F));
  if constexpr (kFive) {  // chunk j takes bit j of qh[l] as its fifth bit: (qh << (4 - j)) & 0x10
    const uint8x16_t bit = vdupq_n_u8(0x10);
    u0 = vorrq_u8(u0, vandq_u8(vshlq_u8(h0, vdupq_n_s8(int8_t(4 - j))), bit));
    u1 = vorrq_u8(u1, vandq_u8(vshlq_u8(h1, vdupq_n_s8(int8_t(4 - j))), bit));
  }
  w0 = vreinterpretq_s8_u8(u0);
  w1 = vreinterpretq_s8_u8(u1);
}

// With an accumulating dot (sdot): per lane half, the chunks' dots are chained as they come
// (D_j = dot_0 + .. + dot_j: one sdot each, no zeroed accumulator) and the scaled sum is
// taken by parts, s = sum_j (sc_j - sc_j+1) D_j with sc_8 = 0, which in int32 (wrapping: a
// ring) is sum_j sc_j dot_j exactly, the same lanes as the plain form below.
template <class Dot, bool kFive, int... J>
[[gnu::always_inline]] inline void sums_q45_k_chained(const uint8_t* qs, const uint8_t* qh, const int8_t* qa, uint8x8_t sc,
                               int32x4_t& s_lo, int32x4_t& s_hi, std::integer_sequence<int, J...>) {
  const int16x8_t sc16 = vreinterpretq_s16_u16(vmovl_u8(sc));
  const int16x8_t e16 = vsubq_s16(sc16, vextq_s16(sc16, vdupq_n_s16(0), 1));
  const int32x4_t e[2] = {vmovl_s16(vget_low_s16(e16)), vmovl_high_s16(e16)};
  uint8x16_t h0 = vdupq_n_u8(0), h1 = h0;
  if constexpr (kFive) {
    h0 = vld1q_u8(qh);
    h1 = vld1q_u8(qh + 16);
  }
  int32x4_t d_lo = vdupq_n_s32(0), d_hi = vdupq_n_s32(0);
  auto step = [&]<int j>() __attribute__((always_inline)) {
    int8x16_t w0, w1;
    chunk_q45_k<j, kFive>(qs, h0, h1, w0, w1);
    d_lo = Dot::acc(d_lo, w0, vld1q_s8(qa + 32 * j));
    d_hi = Dot::acc(d_hi, w1, vld1q_s8(qa + 32 * j + 16));
    if constexpr (j == 0) {
      s_lo = vmulq_laneq_s32(d_lo, e[0], 0);
      s_hi = vmulq_laneq_s32(d_hi, e[0], 0);
    } else {
      s_lo = vmlaq_laneq_s32(s_lo, d_lo, e[j / 4], j % 4);
      s_hi = vmlaq_laneq_s32(s_hi, d_hi, e[j / 4], j % 4);
    }
    // In this order (GCC reassociates the sums and schedules D_j+1 before D_j's multiply,
    // which keeps D_j live: a register copy per chunk).
    asm("" : "+w"(s_lo), "+w"(s_hi), "+w"(d_lo), "+w"(d_hi));
  };
  (step.template operator()<J>(), ...);
}

// Q4_K (kFive false) or Q5_K (qh: its fifth bits): acc += block . activation block.
template <class Dot, bool kFive, class Block>
inline KInts ints_q45_k(const Block& b, const uint8_t* qh, const BlockQ8_K& a) {
  uint8x8_t sc, mn;
  scales_mins_k4(b.scales, sc, mn);
  int32x4_t s_lo = vdupq_n_s32(0), s_hi = vdupq_n_s32(0);
  if constexpr (Dot::kAccumulates) {
    sums_q45_k_chained<Dot, kFive>(b.qs, qh, a.qs, sc, s_lo, s_hi, std::make_integer_sequence<int, 8>());
  } else {
    uint8_t scs[8];
    vst1_u8(scs, sc);
    uint8x16_t h0 = vdupq_n_u8(0), h1 = h0;
    if constexpr (kFive) {
      h0 = vld1q_u8(qh);
      h1 = vld1q_u8(qh + 16);
    }
    auto step = [&]<int j>() __attribute__((always_inline)) {
      int8x16_t w0, w1;
      chunk_q45_k<j, kFive>(b.qs, h0, h1, w0, w1);
      s_lo = vmlaq_n_s32(s_lo, Dot::dot(w0, vld1q_s8(a.qs + 32 * j)), scs[j]);
      s_hi = vmlaq_n_s32(s_hi, Dot::dot(w1, vld1q_s8(a.qs + 32 * j + 16)), scs[j]);
    };
    [&]<int... J>(std::integer_sequence<int, J...>) { (step.template operator()<J>(), ...); }(
        std::make_integer_sequence<int, 8>());
  }
  return {s_lo, s_hi, mins_dot(mn, a), fp16(b.d) * a.d, -fp16(b.dmin) * a.d};
}

// Lane order (kernels.h; Q4_K, Q5_K and Q6_K batches of 4+ as x86's gemm_lanes): acc = fma(
// float(sumi), d * da, acc), then Q4_K's / Q5_K's acc = fma(float(summ), -(dmin * da), acc).
inline void add_lane(const KInts& k, bool mins, AccK& acc) {
  acc.lane = std::fma(float(vaddvq_s32(vaddq_s32(k.lo, k.hi))), k.d, acc.lane);
  if (mins) acc.lane = std::fma(float(vaddvq_s32(k.mins)), k.dmin, acc.lane);
}

// x86's order: v = fma(d * da, float(sumi), v) in 8 lanes, then the mins (Q4_K in its own
// 4 lanes; Q5_K into one float, kept in AccK::lane, added after the horizontal sum).
struct KQ4 {
  using W = BlockQ4_K;
  static constexpr bool kLanes = true;
  template <class Dot>
  static KInts ints(const W& b, const BlockQ8_K& a) { return ints_q45_k<Dot, false>(b, nullptr, a); }
  static void add(const KInts& k, AccK& acc) {
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(k.lo), k.d);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(k.hi), k.d);
    acc.m = vfmaq_n_f32(acc.m, vcvtq_f32_s32(k.mins), k.dmin);
  }
  static void add_lane(const KInts& k, AccK& acc) { neon::add_lane(k, true, acc); }
  static float finish(const AccK& acc) { return hsum8(acc.lo, acc.hi) + hsum4(acc.m); }
};
struct KQ5 {
  using W = BlockQ5_K;
  static constexpr bool kLanes = true;
  template <class Dot>
  static KInts ints(const W& b, const BlockQ8_K& a) { return ints_q45_k<Dot, true>(b, b.qh, a); }
  static void add(const KInts& k, AccK& acc) {
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(k.lo), k.d);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(k.hi), k.d);
    acc.lane = std::fma(k.dmin, float(vaddvq_s32(k.mins)), acc.lane);
  }
  static void add_lane(const KInts& k, AccK& acc) { neon::add_lane(k, true, acc); }
  static float finish(const AccK& acc) { return hsum8(acc.lo, acc.hi) + acc.lane; }
};

struct KQ6 {
  using W = BlockQ6_K;
  static constexpr bool kLanes = true;
  template <class Dot>
  static KInts ints(const W& b, const BlockQ8_K& a) {
    const uint8x16_t m15 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);
    int32x4_t s_lo = vdupq_n_s32(0), s_hi = vdupq_n_s32(0);
    for (int h = 0; h < 2; ++h) {
      for (int v = 0; v < 2; ++v) {  // bytes 16v..16v+15 of each 32-byte row of the half
        const uint8x16_t b1 = vld1q_u8(b.ql + 64 * h + 16 * v), b2 = vld1q_u8(b.ql + 64 * h + 32 + 16 * v);
        const uint8x16_t bh = vld1q_u8(b.qh + 32 * h + 16 * v);
        const uint8x16_t q[4] = {
            vorrq_u8(vandq_u8(b1, m15), vshlq_n_u8(vandq_u8(bh, m3), 4)),
            vorrq_u8(vandq_u8(b2, m15), vshlq_n_u8(vandq_u8(bh, vdupq_n_u8(12)), 2)),
            vorrq_u8(vshrq_n_u8(b1, 4), vandq_u8(bh, vdupq_n_u8(48))),
            vorrq_u8(vshrq_n_u8(b2, 4), vshrq_n_u8(vandq_u8(bh, vdupq_n_u8(0xC0)), 2))};
        for (int k = 0; k < 4; ++k) {
          const int j = 4 * h + k;  // chunk j; this half-chunk takes scale 2j + v
          const int32x4_t p = Dot::dot(vreinterpretq_s8_u8(q[k]), vld1q_s8(a.qs + 32 * j + 16 * v));
          if (v == 0) s_lo = vmlaq_n_s32(s_lo, p, b.scales[2 * j]);
          else s_hi = vmlaq_n_s32(s_hi, p, b.scales[2 * j + 1]);
        }
      }
    }
    // The +32 bias: lane k -= 32 (sc_2k bsums_2k + sc_2k+1 bsums_2k+1), as avx2's madd.
    const int8x16_t sc8 = vld1q_s8(b.scales);
    const int16x8_t sc_lo = vmovl_s8(vget_low_s8(sc8)), sc_hi = vmovl_high_s8(sc8);
    const int16x8_t bs_lo = vld1q_s16(a.bsums), bs_hi = vld1q_s16(a.bsums + 8);
    const int32x4_t bias_lo = vpaddq_s32(vmull_s16(vget_low_s16(sc_lo), vget_low_s16(bs_lo)), vmull_high_s16(sc_lo, bs_lo));
    const int32x4_t bias_hi = vpaddq_s32(vmull_s16(vget_low_s16(sc_hi), vget_low_s16(bs_hi)), vmull_high_s16(sc_hi, bs_hi));
    s_lo = vsubq_s32(s_lo, vshlq_n_s32(bias_lo, 5));
    s_hi = vsubq_s32(s_hi, vshlq_n_s32(bias_hi, 5));
    return {s_lo, s_hi, vdupq_n_s32(0), fp16(b.d) * a.d, 0.0f};
  }
  static void add(const KInts& k, AccK& acc) {
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(k.lo), k.d);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(k.hi), k.d);
  }
  static void add_lane(const KInts& k, AccK& acc) { neon::add_lane(k, false, acc); }
  static float finish(const AccK& acc) { return hsum8(acc.lo, acc.hi); }
};

// y[c * ys] for c < RN: one weight row times RN activation rows (kLanes: lane order).
template <class K, class Dot, int RN, bool kLanes>
inline void row_k(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y, int64_t ys) {
  const auto* wb = reinterpret_cast<const typename K::W*>(w);
  AccK acc[RN];
  for (int64_t b = 0; b < nb; ++b) {
    __builtin_prefetch(reinterpret_cast<const char*>(wb + b) + kPrefetchBytes);
    // The columns unrolled, so GCC unpacks the weight block once for all of them (the
    // unpacking is the same pure function of wb[b] per column; rolled, it ran per column):
    // same operations per output; on llvm-mca's A76 model 10-29% fewer cycles per 2-column
    // super-block with sdot, 0-21% plain (BENCHMARKS.md).
    #pragma GCC unroll 4
    for (int c = 0; c < RN; ++c) {
      const KInts k = K::template ints<Dot>(wb[b], reinterpret_cast<const BlockQ8_K*>(x + c * xs)[b]);
      if constexpr (kLanes) K::add_lane(k, acc[c]);
      else K::add(k, acc[c]);
    }
  }
  for (int c = 0; c < RN; ++c) y[c * ys] = kLanes ? acc[c].lane : K::finish(acc[c]);
}

template <class K, class Dot, bool kLanes>
void rows_k(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x, size_t xs,
            int64_t n_batch, float* y, int64_t ys) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t c = 0;
    for (; c + kTileCols <= n_batch; c += kTileCols)
      row_k<K, Dot, kTileCols, kLanes>(nb, w + r * ws, x + c * xs, xs, y + c * ys + r, ys);
    for (; c < n_batch; ++c) row_k<K, Dot, 1, kLanes>(nb, w + r * ws, x + c * xs, xs, y + c * ys + r, ys);
  }
}

template <class K, class Dot>
void matmul_k(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
              size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  if (K::kLanes && n_batch >= ::kernels::kLaneMinBatch && ::kernels::lane_order())
    return rows_k<K, Dot, true>(n / kQK_K, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride);
  rows_k<K, Dot, false>(n / kQK_K, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride);
}

template <class K, class Dot>
float vec_dot_k(int64_t n, const void* w, const void* x) {
  float y;
  row_k<K, Dot, 1, false>(n / kQK_K, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(x), 0, &y, 0);
  return y;
}

}  // namespace
}  // namespace kernels::cpu::neon
