// neon_tiles.h: private to kernels/cpu: the NEON matrix x vector tiles of the 32-element
// types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; IQ4_NL and MXFP4 with neon_lowbit.h's decoders and
// ggml's two accumulators, see pair_acc) and of the float types (F32, F16, BF16),
// parametrized on the integer dot (MullDot or SdotDot, neon_common.h). A tile is RM weight
// rows x RN activation rows: each weight block is decoded once per tile and each
// activation block loaded once per tile, rows outer so the weights stream once; the next
// tile's rows are prefetched.
//
// One arithmetic with x86: per (row, column) the float operations are avx2_tiles.h's
// tile_q / avx2.cc's tile_f exactly: 8 float lanes, lane k += fma(dw * da, float(int lane
// k of block b)) for b ascending (float types: lane k += w * x of elements 8i + k), then
// avx2's horizontal sum; the offset types add their min lane (fma(m, s) per block) after
// it. So a NEON node's matmul equals an AVX2 node's bit for bit; Q4_0 / Q4_1 batches of 4+ take
// x86's lane order (kernels.h) from the same tiles, so prompt batches are equal too (the
// plain table's; dotprod and i8mm run those batches through neon_gemm.h's packed GEMMs).
// vec_dot is the 1 x 1 tile.
#pragma once
#include <cmath>
#include <type_traits>

#include "kernels/cpu/neon_common.h"
#include "kernels/kernels.h"

namespace kernels::cpu::neon {
namespace {

constexpr int kTileRows = 4;
constexpr int kTileCols = 2;
constexpr int kPrefetchBytes = 256;

// Tile<RM, RN>(r, c) over rows [r0, r1) x n_batch columns: kRows-row tiles then single
// rows, kTileCols-column tiles then single columns.
template <int kRows = kTileRows, class Tile>
inline void for_each_tile(int64_t r0, int64_t r1, int64_t n_batch, Tile&& tile) {
  auto cols = [&]<int RM>(int64_t r) {
    int64_t c = 0;
    for (; c + kTileCols <= n_batch; c += kTileCols) tile.template operator()<RM, kTileCols>(r, c);
    for (; c < n_batch; ++c) tile.template operator()<RM, 1>(r, c);
  };
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) cols.template operator()<kRows>(r);
  for (; r < r1; ++r) cols.template operator()<1>(r);
}

// ggml's vec_dot of the 32-element codebook types (IQ4_NL, MXFP4) sums the even blocks into
// one accumulator and the odd ones into another, adds the two before the horizontal sum, and
// an odd last block after it as one fused multiply-add (avx2_tiles.h's pair_acc, the x86
// kernels' order): D::kPairAcc. Those tiles hold twice the accumulators, so they take 2 rows.
template <class D>
constexpr bool pair_acc() {
  if constexpr (requires { D::kPairAcc; }) return D::kPairAcc;
  else return false;
}

// The 32-element types whose batches of kLaneMinBatch or more sum in lane order (kernels.h),
// as on x86: Q4_0, Q4_1, Q8_0 and the codebook types (IQ4_NL, MXFP4: the pair_acc types).
template <class D>
constexpr bool lane_type() {
  return std::is_same_v<D, DecQ4_0> || std::is_same_v<D, DecQ4_1> || std::is_same_v<D, DecQ8_0> || pair_acc<D>();
}

// y[c * ys + r] = dot(W row r, X row c) for r < RM, c < RN; nb blocks per row. kLanes
// (lane_type batches of kLaneMinBatch or more, as x86's gemm_lanes): lane order instead,
// acc = fma(float(int dot of block b), dw * da, acc), one float per output (Q4_1: then acc =
// fma(m, s, acc)). kPairAcc types
// in vec_dot order: the odd blocks in their own 8 lanes (pair_acc).
template <class D, class Dot, int RM, int RN, bool kLanes = false>
inline void tile_q(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ys) {
  using W = typename D::W;
  using A = typename D::A;
  constexpr bool kPair = pair_acc<D>() && !kLanes;
  constexpr int kSets = kPair ? 2 : 1;  // accumulator sets: [0] even (or all) blocks, [1] odd
  float32x4_t lo[kSets][RM][RN], hi[kSets][RM][RN];
  float acc_m[RM][RN];  // the min terms (lane order: the one float)
  for (int s = 0; s < kSets; ++s)
    for (int r = 0; r < RM; ++r)
      for (int c = 0; c < RN; ++c) lo[s][r][c] = hi[s][r][c] = vdupq_n_f32(0.0f);
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc_m[r][c] = 0.0f;
  const W* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  const A* xr[RN];
  for (int c = 0; c < RN; ++c) xr[c] = reinterpret_cast<const A*>(x + c * xs);
  const int64_t nb_main = kPair ? nb / 2 * 2 : nb;  // a pair type's odd last block: after the sum
  for (int64_t b = 0; b < nb_main; ++b) {
    const int set = kPair ? int(b & 1) : 0;
    int8x16_t qa_lo[RN], qa_hi[RN];
    float da[RN], sa[RN];
    for (int c = 0; c < RN; ++c) {
      qa_lo[c] = vld1q_s8(xr[c][b].qs);
      qa_hi[c] = vld1q_s8(xr[c][b].qs + 16);
      da[c] = fp16(xr[c][b].d);
      sa[c] = act_s(xr[c][b]);
    }
    for (int r = 0; r < RM; ++r) {
      __builtin_prefetch(reinterpret_cast<const char*>(wr[r] + b) + kPrefetchBytes);
      int8x16_t q_lo, q_hi;
      D::quants(wr[r][b], q_lo, q_hi);
      const float dw = block_d(wr[r][b]);
      const float mw = D::m(wr[r][b]);
      for (int c = 0; c < RN; ++c) {
        const float p = dw * da[c];
        const int32x4_t i_lo = Dot::dot(q_lo, qa_lo[c]), i_hi = Dot::dot(q_hi, qa_hi[c]);
        if constexpr (kLanes) {
          acc_m[r][c] = std::fma(float(vaddvq_s32(vaddq_s32(i_lo, i_hi))), p, acc_m[r][c]);
          if constexpr (D::kHasMin) acc_m[r][c] = std::fma(mw, sa[c], acc_m[r][c]);
          continue;
        }
        lo[set][r][c] = vfmaq_n_f32(lo[set][r][c], vcvtq_f32_s32(i_lo), p);
        hi[set][r][c] = vfmaq_n_f32(hi[set][r][c], vcvtq_f32_s32(i_hi), p);
        if constexpr (D::kHasMin) acc_m[r][c] = std::fma(mw, sa[c], acc_m[r][c]);
      }
    }
  }
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) {
      if constexpr (kPair) {
        float s = hsum8(vaddq_f32(lo[0][r][c], lo[1][r][c]), vaddq_f32(hi[0][r][c], hi[1][r][c]));
        if (nb_main < nb) {  // ggml's scalar tail: the odd last block's exact sum, one fma
          const int64_t b = nb_main;
          int8x16_t q_lo, q_hi;
          D::quants(wr[r][b], q_lo, q_hi);
          const int32x4_t i = vaddq_s32(Dot::dot(q_lo, vld1q_s8(xr[c][b].qs)), Dot::dot(q_hi, vld1q_s8(xr[c][b].qs + 16)));
          s = std::fma(block_d(wr[r][b]) * fp16(xr[c][b].d), float(vaddvq_s32(i)), s);
        }
        y[c * ys + r] = s;
        continue;
      }
      y[c * ys + r] = kLanes ? acc_m[r][c]  // the lane-order sum
                      : D::kHasMin ? hsum8(lo[0][r][c], hi[0][r][c]) + acc_m[r][c] : hsum8(lo[0][r][c], hi[0][r][c]);
    }
}

// Q8_0 with sdot (Dot::kAccumulates), 4 rows x RN columns: tile_q's arithmetic for DecQ8_0
// (vec_dot order: per output 8 float lanes, lane k = fma(float(int lane k), dw * da, lane k)
// per block, then hsum8) with the 16 accumulators of a 4 x 2 tile kept in registers. GCC
// spilled them in tile_q's generic form (about 20 stack loads and stores per block: its
// first scheduling pass hoists all 16 sdots; tools/mca_neon.sh, llvm-mca 67.2 -> 47.1
// cycles per 256 multiply-adds on the Cortex-A76 model): here that pass is off, each row's
// values are used and dropped in stages (dots, conversions, fmas), the output loop unrolled.
template <class Dot, int RN>
#if !defined(__clang__)
__attribute__((optimize("no-schedule-insns")))  // GCC's first scheduling pass hoists all 16 sdots: spills
#endif
inline void tile_q8_0_4rows(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ys) {
  constexpr int RM = 4;
  float32x4_t lo[RM][RN], hi[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) lo[r][c] = hi[r][c] = vdupq_n_f32(0.0f);
  const BlockQ8_0* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const BlockQ8_0*>(w + r * ws);
  const BlockQ8_0* xr[RN];
  for (int c = 0; c < RN; ++c) xr[c] = reinterpret_cast<const BlockQ8_0*>(x + c * xs);
  for (int64_t b = 0; b < nb; ++b) {
    float da[RN];
    for (int c = 0; c < RN; ++c) da[c] = fp16(xr[c][b].d);
    auto row = [&]<int r>() __attribute__((always_inline)) {
      __builtin_prefetch(reinterpret_cast<const char*>(wr[r] + b) + kPrefetchBytes);
      const int8x16_t q_lo = vld1q_s8(wr[r][b].qs), q_hi = vld1q_s8(wr[r][b].qs + 16);
      int32x4_t i_lo[RN], i_hi[RN];  // in stages: distinct registers, which the second
      for (int c = 0; c < RN; ++c) {  // scheduling pass can interleave
        i_lo[c] = Dot::dot(q_lo, vld1q_s8(xr[c][b].qs));
        i_hi[c] = Dot::dot(q_hi, vld1q_s8(xr[c][b].qs + 16));
      }
      float32x4_t f_lo[RN], f_hi[RN];
      for (int c = 0; c < RN; ++c) {
        f_lo[c] = vcvtq_f32_s32(i_lo[c]);
        f_hi[c] = vcvtq_f32_s32(i_hi[c]);
      }
      const float dw = fp16(wr[r][b].d);
      for (int c = 0; c < RN; ++c) {
        const float p = dw * da[c];
        lo[r][c] = vfmaq_n_f32(lo[r][c], f_lo[c], p);
        hi[r][c] = vfmaq_n_f32(hi[r][c], f_hi[c], p);
      }
    };
    row.template operator()<0>();
    row.template operator()<1>();
    row.template operator()<2>();
    row.template operator()<3>();
  }
  auto out = [&]<int r>() __attribute__((always_inline)) {  // unrolled: a loop here kept lo / hi in memory
    for (int c = 0; c < RN; ++c) y[c * ys + r] = hsum8(lo[r][c], hi[r][c]);
  };
  out.template operator()<0>();
  out.template operator()<1>();
  out.template operator()<2>();
  out.template operator()<3>();
}

template <class D, class Dot>
void matmul_q(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
              size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  if (lane_type<D>() && n_batch >= ::kernels::kLaneMinBatch && ::kernels::lane_order())
    return for_each_tile(r0, r1, n_batch, [&]<int RM, int RN>(int64_t r, int64_t c) {
      tile_q<D, Dot, RM, RN, true>(n / kQK, w + r * row_stride, row_stride, x + c * xq_stride, xq_stride,
                                   y + c * y_stride + r, y_stride);
    });
  for_each_tile<pair_acc<D>() ? 2 : kTileRows>(r0, r1, n_batch, [&]<int RM, int RN>(int64_t r, int64_t c) {
    if constexpr (std::is_same_v<D, DecQ8_0> && Dot::kAccumulates && RM == 4)
      return tile_q8_0_4rows<Dot, RN>(n / kQK, w + r * row_stride, row_stride, x + c * xq_stride, xq_stride,
                                      y + c * y_stride + r, y_stride);
    tile_q<D, Dot, RM, RN>(n / kQK, w + r * row_stride, row_stride, x + c * xq_stride, xq_stride,
                           y + c * y_stride + r, y_stride);
  });
}

template <class D, class Dot>
float vec_dot_q(int64_t n, const void* w, const void* x) {
  float y;
  tile_q<D, Dot, 1, 1>(n / kQK, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(x), 0, &y, 0);
  return y;
}

// ---- float types: 8 elements at a time as two float32x4, plus a scalar tail -----------
struct DecF32 {
  using E = float;
  static void load8(const float* p, float32x4_t& lo, float32x4_t& hi) {
    lo = vld1q_f32(p);
    hi = vld1q_f32(p + 4);
  }
  static float one(const float* p) { return *p; }
};
struct DecF16 {
  using E = uint16_t;
  static void load8(const uint16_t* p, float32x4_t& lo, float32x4_t& hi) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    lo = vcvt_f32_f16(vget_low_f16(h));
    hi = vcvt_high_f32_f16(h);
  }
  static float one(const uint16_t* p) { return fp16(*p); }
};
struct DecBF16 {
  using E = uint16_t;
  static void load8(const uint16_t* p, float32x4_t& lo, float32x4_t& hi) {
    const uint16x8_t h = vld1q_u16(p);
    lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
  }
  static float one(const uint16_t* p) {
    const uint32_t u = uint32_t(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// avx2.cc's tile_f: per (row, column) 8 lanes of fma over the 8-element groups, its
// horizontal sum, then the tail element by element (fused multiply-adds, as avx2.cc's).
template <class D, int RM, int RN>
inline void tile_f(int64_t n, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ys) {
  using E = typename D::E;
  float32x4_t lo[RM][RN], hi[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) lo[r][c] = hi[r][c] = vdupq_n_f32(0.0f);
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) {
    float32x4_t wl[RM], wh[RM];
    for (int r = 0; r < RM; ++r) {
      const E* p = reinterpret_cast<const E*>(w + r * ws) + i;
      __builtin_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes);
      D::load8(p, wl[r], wh[r]);
    }
    for (int c = 0; c < RN; ++c) {
      float32x4_t xl, xh;
      D::load8(reinterpret_cast<const E*>(x + c * xs) + i, xl, xh);
      for (int r = 0; r < RM; ++r) {
        lo[r][c] = vfmaq_f32(lo[r][c], wl[r], xl);
        hi[r][c] = vfmaq_f32(hi[r][c], wh[r], xh);
      }
    }
  }
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) {
      float s = hsum8(lo[r][c], hi[r][c]);
      const E* pw = reinterpret_cast<const E*>(w + r * ws);
      const E* px = reinterpret_cast<const E*>(x + c * xs);
      for (int64_t i = n8; i < n; ++i) s = std::fma(D::one(pw + i), D::one(px + i), s);
      y[c * ys + r] = s;
    }
}

template <class D>
void matmul_f(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
              size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  for_each_tile(r0, r1, n_batch, [&]<int RM, int RN>(int64_t r, int64_t c) {
    tile_f<D, RM, RN>(n, w + r * row_stride, row_stride, x + c * xq_stride, xq_stride, y + c * y_stride + r,
                      y_stride);
  });
}

template <class D>
float vec_dot_f(int64_t n, const void* w, const void* x) {
  float y;
  tile_f<D, 1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(x), 0, &y, 0);
  return y;
}

}  // namespace
}  // namespace kernels::cpu::neon
