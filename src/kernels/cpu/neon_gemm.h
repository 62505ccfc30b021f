// neon_gemm.h: private to kernels/cpu: the NEON prompt GEMMs of Q4_0, Q4_1, Q8_0, IQ4_NL, MXFP4, Q4_K, Q5_K and Q6_K in lane
// order (kernels.h: batches of kLaneMinBatch or more; x86's gemm_lanes / llama.cpp's repacked
// GEMMs), with the dot-product extension (by-element sdot, neon_dotprod.cc) or the int8
// matrix multiply (smmla, neon_i8mm.cc).
//
// Lane order needs per output only each block's (the 32-element types) or sub-block's (K-quants) exact int32
// dot, then the float steps of kernels_test's lane_order_q4_0 / _q8_0 / _q4_k / _q6_k / lane_ref::codebook32: the 32-element types acc =
// fma(float(isum_b), dw * da, acc) (Q4_1: then acc = fma(m, s, acc), its mins in GemmRows::dmin);
// Q4_K (and Q5_K, its 5-bit quants in place of the nibbles) acc = fma(float(sumi), d * da, acc), then
// fma(float(summ), -(dmin * da), acc), sumi = sum_j sc_j isum_j, summ = sum_j m_j (bsums_2j +
// bsums_2j+1); Q6_K acc = fma(float(sumi), d * da, acc), sumi = sum_s sc_s isum_s over the
// 16-element sub-blocks (quants - 32 fit int8, so no bias term). Integer sums are exact in any
// order, so these equal x86's bits.
//
// Weights are decoded and packed once per 8-row tile and column chunk (GemmRows): per block,
// 16-element vectors e (elements 16e..16e+15) of each row, interleaved, each half of the
// tile (rows 4h..4h+3) contiguous (kNV * 4 vectors per block and half, loaded 4 at a time):
//   sdot:  q[h][G], G = 4e + i: int32 lane k = elements 4G..4G+3 of row 4h + k, so one
//          vdotq_laneq_s32 by lane i of a column's vector e gives 4 rows' partial sums;
//   smmla: q[h][2K + i], K = 2e + u: the 8 elements 8K..8K+7 of rows 2p, 2p+1 (p = 2h + i),
//          so one vmmlaq_s32 by two columns' chunk K (zipped on the fly) gives a 2 x 2
//          block (lanes: row 2p col A, row 2p col B, row 2p+1 col A, row 2p+1 col B).
// Per-row scalars (d, dmin, scales, mins) are stored by row, [block][sub-block][row].
// Activations are read in place (Q8_0 / Q8_K rows with their stride).
#pragma once
#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/neon_kquants.h"
#include "kernels/cpu/tu_vector.h"
#include "kernels/kernels.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_gemm.h needs the dot-product extension"
#endif

namespace kernels::cpu::neon {
namespace {

constexpr int kGemmRows = 8;
constexpr size_t kGemmChunkBytes = 128 << 10;  // activation bytes per column chunk (L2)
constexpr int64_t kGemmMinChunkCols = 16;

template <int N, class F>
inline void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

struct GemmRows {
  TuVector<int8x16_t> q;
  TuVector<float> d, dmin;  // [b * 8 + r]
  TuVector<int32_t> sc;     // [(b * kSub + j) * 8 + r]
  TuVector<int16_t> mn;     // Q4_K: [(b * 8 + j) * 8 + r]; Q2_K: [(b * 16 + s) * 8 + r]
};

// ---- the weight types: a block as kNV vectors of 16 elements, and its per-row scalars ----
template <class D>  // Q4_0, Q4_1, Q8_0, IQ4_NL, MXFP4: one scale per 32-element block
struct GQ32 {
  using W = typename D::W;
  using A = typename D::A;               // BlockQ8_0; Q4_1's BlockQ8_1
  static constexpr bool kMin = D::kHasMin;  // Q4_1: its min in GemmRows::dmin, acc = fma(m, s, acc)
  static constexpr int kNV = 2, kSub = 0, kElems = kQK;
  static void decode(const W& b, int8x16_t* v) { D::quants(b, v[0], v[1]); }  // Q4_1: nibbles 0..15
  static void scalars(const W* b, int64_t i, int r, GemmRows& p) {
    p.d[size_t(i * 8 + r)] = b ? block_d(*b) : 0.0f;
    if constexpr (kMin) p.dmin[size_t(i * 8 + r)] = b ? D::m(*b) : 0.0f;
  }
};
using GQ4_0 = GQ32<DecQ4_0>;
using GQ4_1 = GQ32<DecQ4_1>;
using GQ8_0 = GQ32<DecQ8_0>;
// The Q4_K min sums of column a for rows 4h..4h+3: lane k = sum_j m_j(row 4h + k) cs_j.
inline int32x4_t mins_half(const int16_t* mn, int h, const BlockQ8_K& a) {
  const int16x8_t cs = vpaddq_s16(vld1q_s16(a.bsums), vld1q_s16(a.bsums + 8));  // lane j: bsums_2j + bsums_2j+1
  int32x4_t summ = vdupq_n_s32(0);
  unroll<8>([&](auto jc) {
    constexpr int j = decltype(jc)::value;
    summ = vmlal_laneq_s16(summ, vld1_s16(mn + 8 * j + 4 * h), cs, j);
  });
  return summ;
}

// Q4_K or Q5_K (Block): sub-block j = vectors 2j, 2j + 1 (sub-block 2c: low nibbles of
// qs[32c..], 2c + 1: high; Q5_K with bit j of qh[l] as the fifth bit, chunk_q45_k).
template <class Block>
struct GQ45_K {
  using W = Block;
  using A = BlockQ8_K;
  static constexpr int kNV = 16, kSub = 8, kElems = kQK_K;
  static constexpr bool kMins = true, kFive = std::is_same_v<Block, BlockQ5_K>;
  static int32x4_t mins(const GemmRows& w, int64_t b, int h, const A& a) { return mins_half(&w.mn[size_t(b) * 64], h, a); }
  static void decode(const W& b, int8x16_t* v) {
    uint8x16_t h0 = vdupq_n_u8(0), h1 = h0;
    if constexpr (kFive) {
      h0 = vld1q_u8(b.qh);
      h1 = vld1q_u8(b.qh + 16);
    }
    unroll<8>([&](auto jc) {
      constexpr int j = decltype(jc)::value;
      chunk_q45_k<j, kFive>(b.qs, h0, h1, v[2 * j], v[2 * j + 1]);
    });
  }
  static void scalars(const W* b, int64_t i, int r, GemmRows& p) {
    uint8_t sc[8] = {}, mn[8] = {};
    if (b) scales_mins_k4(b->scales, sc, mn);
    p.d[size_t(i * 8 + r)] = b ? fp16(b->d) : 0.0f;
    p.dmin[size_t(i * 8 + r)] = b ? fp16(b->dmin) : 0.0f;
    for (int j = 0; j < 8; ++j) {
      p.sc[size_t((i * 8 + j) * 8 + r)] = sc[j];
      p.mn[size_t((i * 8 + j) * 8 + r)] = mn[j];
    }
  }
};
using GQ4_K = GQ45_K<BlockQ4_K>;
using GQ5_K = GQ45_K<BlockQ5_K>;
struct GQ6_K {
  using W = BlockQ6_K;
  using A = BlockQ8_K;
  static constexpr int kNV = 16, kSub = 16, kElems = kQK_K;
  static constexpr bool kMins = false;
  static void decode(const W& b, int8x16_t* out) {  // vector e = 8h + 2k + v (KQ6::ints' q[k]), minus 32
    const uint8x16_t m15 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);
    const int8x16_t bias = vdupq_n_s8(32);
    for (int h = 0; h < 2; ++h)
      for (int v = 0; v < 2; ++v) {
        const uint8x16_t b1 = vld1q_u8(b.ql + 64 * h + 16 * v), b2 = vld1q_u8(b.ql + 64 * h + 32 + 16 * v);
        const uint8x16_t bh = vld1q_u8(b.qh + 32 * h + 16 * v);
        const uint8x16_t q[4] = {vorrq_u8(vandq_u8(b1, m15), vshlq_n_u8(vandq_u8(bh, m3), 4)),
                                 vorrq_u8(vandq_u8(b2, m15), vshlq_n_u8(vandq_u8(bh, vdupq_n_u8(12)), 2)),
                                 vorrq_u8(vshrq_n_u8(b1, 4), vandq_u8(bh, vdupq_n_u8(48))),
                                 vorrq_u8(vshrq_n_u8(b2, 4), vshrq_n_u8(vandq_u8(bh, vdupq_n_u8(0xC0)), 2))};
        for (int k = 0; k < 4; ++k) out[8 * h + 2 * k + v] = vsubq_s8(vreinterpretq_s8_u8(q[k]), bias);
      }
  }
  static void scalars(const W* b, int64_t i, int r, GemmRows& p) {
    p.d[size_t(i * 8 + r)] = b ? fp16(b->d) : 0.0f;
    for (int s = 0; s < 16; ++s) p.sc[size_t((i * 16 + s) * 8 + r)] = b ? b->scales[s] : 0;
  }
};

// 4 x 4 transpose of int32 lanes: o[i] lane k = v[k] lane i.
inline void transpose4(const int8x16_t* v, int8x16_t* o) {
  const int32x4_t t0 = vtrn1q_s32(vreinterpretq_s32_s8(v[0]), vreinterpretq_s32_s8(v[1]));
  const int32x4_t t1 = vtrn2q_s32(vreinterpretq_s32_s8(v[0]), vreinterpretq_s32_s8(v[1]));
  const int32x4_t t2 = vtrn1q_s32(vreinterpretq_s32_s8(v[2]), vreinterpretq_s32_s8(v[3]));
  const int32x4_t t3 = vtrn2q_s32(vreinterpretq_s32_s8(v[2]), vreinterpretq_s32_s8(v[3]));
  auto s64 = [](int32x4_t x) { return vreinterpretq_s64_s32(x); };
  o[0] = vreinterpretq_s8_s64(vtrn1q_s64(s64(t0), s64(t2)));
  o[1] = vreinterpretq_s8_s64(vtrn1q_s64(s64(t1), s64(t3)));
  o[2] = vreinterpretq_s8_s64(vtrn2q_s64(s64(t0), s64(t2)));
  o[3] = vreinterpretq_s8_s64(vtrn2q_s64(s64(t1), s64(t3)));
}

// Rows [0, rm) of a tile (rows past rm: zeros) packed for sdot (kMmla false) or smmla.
template <class G, bool kMmla>
void pack_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, GemmRows& p) {
  constexpr int kNV = G::kNV;
  const size_t nq = size_t(nb) * kNV * 8;
  if (p.q.size() < nq) {
    p.q.resize(nq);
    p.d.resize(size_t(nb) * 8);
    p.dmin.resize(size_t(nb) * 8);
    p.sc.resize(size_t(nb) * std::max(G::kSub, 1) * 8);
    p.mn.resize(size_t(nb) * 128);
  }
  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t v[8][kNV];  // [row][vector]
    for (int r = 0; r < 8; ++r) {
      const typename G::W* blk = r < rm ? &reinterpret_cast<const typename G::W*>(w + r * ws)[b] : nullptr;
      if (blk) G::decode(*blk, v[r]);
      else
        for (int e = 0; e < kNV; ++e) v[r][e] = vdupq_n_s8(0);
      G::scalars(blk, b, r, p);
    }
    int8x16_t* q = &p.q[size_t(b) * kNV * 8];
    for (int e = 0; e < kNV; ++e) {
      if constexpr (kMmla) {
        for (int pr = 0; pr < 4; ++pr) {
          const int64x2_t a = vreinterpretq_s64_s8(v[2 * pr][e]), c = vreinterpretq_s64_s8(v[2 * pr + 1][e]);
          int8x16_t* qh = q + (pr / 2) * kNV * 4;  // half h = pr / 2, pair i = pr % 2
          qh[2 * (2 * e) + pr % 2] = vreinterpretq_s8_s64(vzip1q_s64(a, c));
          qh[2 * (2 * e + 1) + pr % 2] = vreinterpretq_s8_s64(vzip2q_s64(a, c));
        }
      } else {
        for (int h = 0; h < 2; ++h) {
          const int8x16_t in[4] = {v[4 * h][e], v[4 * h + 1][e], v[4 * h + 2][e], v[4 * h + 3][e]};
          int8x16_t o[4];
          transpose4(in, o);
          for (int i = 0; i < 4; ++i) q[h * kNV * 4 + 4 * e + i] = o[i];
        }
      }
    }
  }
}

inline float act_d(const BlockQ8_0& a) { return fp16(a.d); }
inline float act_d(const BlockQ8_1& a) { return fp16(a.d); }
inline float act_d(const BlockQ8_K& a) { return a.d; }

// Columns [0, RN) of a tile: their block-b pointers.
template <class A, int RN>
struct Cols {
  const A* x[RN];
  Cols(const uint8_t* p, size_t xs) {
    for (int c = 0; c < RN; ++c) x[c] = reinterpret_cast<const A*>(p + c * xs);
  }
};

// ---- sdot tiles: rows 4h..4h+3 of the 8-row tile (h = 0, then 1 if the tile has more than
// 4 rows) x RN columns: one int32x4 per column holds the 4 rows (few live registers: no
// spills at RN = 4).
inline void store_rows(float32x4_t acc, int n, float* y) {  // rows 0..n-1 of 4
  float out[4];
  vst1q_f32(out, acc);
  for (int r = 0; r < n; ++r) y[r] = out[r];
}

// sum[c] += the dots of vector e of the packed block half q with column c's vector a[c].
template <int RN>
inline void sdot_vector(const int8x16_t* q, int e, const int8x16_t* a, int32x4_t* sum) {
  const int8x16x4_t w = vld1q_s8_x4(reinterpret_cast<const int8_t*>(q + 4 * e));
  unroll<4>([&](auto ic) {
    constexpr int i = decltype(ic)::value;
    for (int c = 0; c < RN; ++c) sum[c] = vdotq_laneq_s32(sum[c], w.val[i], a[c], i);
  });
}

template <class G_>
struct SdotQ32 {
  using G = G_;
  static constexpr int kCols = 4;
  template <int RN>
  static void run(int64_t nb, const GemmRows& w, const int8x16_t* ap, size_t as, const uint8_t* x, size_t xs,
                  const float* da, int64_t da_stride, float* y, int64_t ys, int rm) {
    if (nb < 1) return;
    const Cols<typename G::A, RN> xc(x, xs);  // Q4_1: the columns' s, read in place
    for (int h = 0; 4 * h < rm; ++h) {
      float32x4_t acc[RN];
      for (int c = 0; c < RN; ++c) acc[c] = vdupq_n_f32(0.0f);
      const int8x16_t* q = &w.q[8 * h];
      const int8x16_t* a = ap;
      const float* d = &w.d[4 * h];
      const float* mn = &w.dmin[4 * h];
      const float* dap = da;
      int64_t b = 0;
      do {
        int8x16_t a0[RN], a1[RN];
        int32x4_t s[RN];
        for (int c = 0; c < RN; ++c) {
          a0[c] = a[2 * c];
          a1[c] = a[2 * c + 1];
          s[c] = vdupq_n_s32(0);
        }
        sdot_vector<RN>(q, 0, a0, s);
        sdot_vector<RN>(q, 1, a1, s);
        const float32x4_t dv = vld1q_f32(d);
        if constexpr (RN == 4) {
          const float32x4_t x4 = vld1q_f32(dap);
          acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(s[0]), vmulq_laneq_f32(dv, x4, 0));
          acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(s[1]), vmulq_laneq_f32(dv, x4, 1));
          acc[2] = vfmaq_f32(acc[2], vcvtq_f32_s32(s[2]), vmulq_laneq_f32(dv, x4, 2));
          acc[3] = vfmaq_f32(acc[3], vcvtq_f32_s32(s[3]), vmulq_laneq_f32(dv, x4, 3));
        } else {
          for (int c = 0; c < RN; ++c) acc[c] = vfmaq_f32(acc[c], vcvtq_f32_s32(s[c]), vmulq_n_f32(dv, dap[c]));
        }
        if constexpr (G::kMin) {  // acc = fma(m, s, acc)
          const float32x4_t mv = vld1q_f32(mn);
          for (int c = 0; c < RN; ++c) acc[c] = vfmaq_n_f32(acc[c], mv, act_s(xc.x[c][b]));
          mn += 8;
        }
        q += 16;
        a += as;
        d += 8;
        dap += da_stride;
      } while (++b < nb);
      for (int c = 0; c < RN; ++c) store_rows(acc[c], std::min(4, rm - 4 * h), y + c * ys + 4 * h);
    }
  }
};
using SdotQ4_0 = SdotQ32<GQ4_0>;
using SdotQ4_1 = SdotQ32<GQ4_1>;
using SdotQ8_0 = SdotQ32<GQ8_0>;

// The K-quant sdot tile (Q4_K, Q6_K; Q2_K, Q3_K, IQ4_XS in neon_lowbit_lanes.h): per
// super-block, sumi = sum over the kSub sub-blocks s (kV vectors each) of sc_s * (their exact
// int dot), then acc = fma(float(sumi), d * da, acc) and, for a type with mins (G::kMins:
// Q4_K, Q2_K), acc = fma(float(summ), -(dmin * da), acc), summ = G::mins (the min sums).
template <class G_>
struct SdotK {
  using G = G_;
  static constexpr int kCols = 4, kV = G::kNV / G::kSub;
  template <int RN>
  static void run(int64_t nb, const GemmRows& w, const int8x16_t* ap, size_t as, const uint8_t* x, size_t xs,
                  const float*, int64_t, float* y, int64_t ys, int rm) {
    const Cols<BlockQ8_K, RN> xc(x, xs);
    for (int h = 0; 4 * h < rm; ++h) {
      float32x4_t acc[RN];
      for (int c = 0; c < RN; ++c) acc[c] = vdupq_n_f32(0.0f);
      for (int64_t b = 0; b < nb; ++b) {
        const int8x16_t* q = &w.q[size_t(b) * 128 + 64 * h];
        int32x4_t sumi[RN];
        for (int c = 0; c < RN; ++c) sumi[c] = vdupq_n_s32(0);
        #pragma GCC unroll 16  // one loop per super-block (also what llvm-mca sees, tools/mca_neon.sh)
        for (int s = 0; s < G::kSub; ++s) {
          int32x4_t t[RN];
          for (int c = 0; c < RN; ++c) t[c] = vdupq_n_s32(0);
          #pragma GCC unroll 2
          for (int v = 0; v < kV; ++v) {
            int8x16_t a[RN];
            for (int c = 0; c < RN; ++c) a[c] = ap[b * as + 16 * c + kV * s + v];
            sdot_vector<RN>(q, kV * s + v, a, t);
          }
          const int32x4_t sc = vld1q_s32(&w.sc[size_t(b * G::kSub + s) * 8 + 4 * h]);
          for (int c = 0; c < RN; ++c) sumi[c] = vmlaq_s32(sumi[c], t[c], sc);
        }
        const float32x4_t d = vld1q_f32(&w.d[size_t(b) * 8 + 4 * h]);
        for (int c = 0; c < RN; ++c) {
          const float da = xc.x[c][b].d;
          acc[c] = vfmaq_f32(acc[c], vcvtq_f32_s32(sumi[c]), vmulq_n_f32(d, da));
          if constexpr (G::kMins) {
            const float32x4_t dm = vld1q_f32(&w.dmin[size_t(b) * 8 + 4 * h]);
            const int32x4_t summ = G::mins(w, b, h, xc.x[c][b]);
            acc[c] = vfmaq_f32(acc[c], vcvtq_f32_s32(summ), vnegq_f32(vmulq_n_f32(dm, da)));
          }
        }
      }
      for (int c = 0; c < RN; ++c) store_rows(acc[c], std::min(4, rm - 4 * h), y + c * ys + 4 * h);
    }
  }
};
using SdotQ4_K = SdotK<GQ4_K>;
using SdotQ5_K = SdotK<GQ5_K>;
using SdotQ6_K = SdotK<GQ6_K>;

#if defined(__ARM_FEATURE_MATMUL_INT8)
// ---- smmla tiles: rows 4h..4h+3 (row pairs p = 2h + i, i = 0, 1) x RN columns (column
// pairs; an odd last column is paired with itself and stored once). Result lanes of (i, t):
// (row 2p, col A), (2p, B), (2p+1, A), (2p+1, B) for columns A = 2t, B = 2t + 1.
template <class A, int RN>
struct ColPairs {
  static constexpr int kPairs = (RN + 1) / 2;
  const A* x[2 * kPairs];
  ColPairs(const uint8_t* p, size_t xs) {
    for (int c = 0; c < 2 * kPairs; ++c) x[c] = reinterpret_cast<const A*>(p + std::min(c, RN - 1) * xs);
  }
  float32x4_t da(int64_t b, int t) const {  // (dA, dB, dA, dB)
    const float32x2_t v = {act_d(x[2 * t][b]), act_d(x[2 * t + 1][b])};
    return vcombine_f32(v, v);
  }
};

// Row-pair vectors (r0, r0, r1, r1) of rows 4h..4h+3's values: out[0] rows 4h, 4h+1; out[1] 4h+2, 4h+3.
inline void row_pairs(const float* v, float32x4_t* out) {
  const float32x4_t x = vld1q_f32(v);
  out[0] = vzip1q_f32(x, x);
  out[1] = vzip2q_f32(x, x);
}
inline void row_pairs(const int32_t* v, int32x4_t* out) {
  const int32x4_t x = vld1q_s32(v);
  out[0] = vzip1q_s32(x, x);
  out[1] = vzip2q_s32(x, x);
}

template <int RN>
inline void store_pairs(const float32x4_t (*acc)[(RN + 1) / 2], int h, int rm, float* y, int64_t ys) {
  for (int i = 0; i < 2; ++i)
    for (int t = 0; t < (RN + 1) / 2; ++t) {
      float o[4];
      vst1q_f32(o, acc[i][t]);
      for (int l = 0; l < 4; ++l) {
        const int r = 4 * h + 2 * i + l / 2, c = 2 * t + l % 2;
        if (r < rm && c < RN) y[c * ys + r] = o[l];
      }
    }
}

// s[i][t] += the products of the packed chunks K = 2e, 2e+1 (row pairs 2h, 2h+1) with the
// column pairs' chunks.
template <int NP, int kNV>
inline void mmla_vector(const int8x16_t* q, const int8x16_t* a, int e, int32x4_t (*s)[NP]) {
  int8x16_t k[NP][2];  // pair t's chunks 2e, 2e + 1 (zipped by gemm_lanes' pack)
  for (int t = 0; t < NP; ++t) {
    k[t][0] = a[2 * kNV * t + 2 * e];
    k[t][1] = a[2 * kNV * t + 2 * e + 1];
  }
  const int8x16x4_t wv = vld1q_s8_x4(reinterpret_cast<const int8_t*>(q + 4 * e));  // [2u + i]
  for (int u = 0; u < 2; ++u)
    for (int i = 0; i < 2; ++i)
      for (int t = 0; t < NP; ++t) s[i][t] = vmmlaq_s32(s[i][t], wv.val[2 * u + i], k[t][u]);
}

template <class G_>
struct MmlaQ32 {
  using G = G_;
  static constexpr int kCols = 4;
  template <int RN>
  static void run(int64_t nb, const GemmRows& w, const int8x16_t* ap, size_t as, const uint8_t* x, size_t xs,
                  const float* da, int64_t da_stride, float* y, int64_t ys, int rm) {
    constexpr int NP = (RN + 1) / 2;
    if (nb < 1) return;
    const ColPairs<typename G::A, RN> xc(x, xs);  // Q4_1: the columns' s, read in place
    for (int h = 0; 4 * h < rm; ++h) {
      float32x4_t acc[2][NP];
      for (int i = 0; i < 2; ++i)
        for (int t = 0; t < NP; ++t) acc[i][t] = vdupq_n_f32(0.0f);
      int64_t b = 0;
      do {
        const int8x16_t* q = &w.q[size_t(b) * 16 + 8 * h];
        int32x4_t s[2][NP];
        for (int i = 0; i < 2; ++i)
          for (int t = 0; t < NP; ++t) s[i][t] = vdupq_n_s32(0);
        mmla_vector<NP, 2>(q, ap + b * as, 0, s);
        mmla_vector<NP, 2>(q, ap + b * as, 1, s);
        float32x4_t d[2];
        row_pairs(&w.d[size_t(b) * 8 + 4 * h], d);
        const float* dab = da + b * da_stride;
        for (int t = 0; t < NP; ++t) {
          float32x2_t ab;
          if (2 * t + 1 < RN) ab = vld1_f32(dab + 2 * t);
          else ab = vdup_n_f32(dab[2 * t]);  // an odd last column, paired with itself
          const float32x4_t dav = vcombine_f32(ab, ab);
          for (int i = 0; i < 2; ++i) acc[i][t] = vfmaq_f32(acc[i][t], vcvtq_f32_s32(s[i][t]), vmulq_f32(d[i], dav));
        }
        if constexpr (G::kMin) {  // acc = fma(m, s, acc): lanes (m_2p, m_2p, m_2p+1, m_2p+1) x (sA, sB, sA, sB)
          float32x4_t m[2];
          row_pairs(&w.dmin[size_t(b) * 8 + 4 * h], m);
          for (int t = 0; t < NP; ++t) {
            const float32x2_t sab = {act_s(xc.x[2 * t][b]), act_s(xc.x[2 * t + 1][b])};
            const float32x4_t sv = vcombine_f32(sab, sab);
            for (int i = 0; i < 2; ++i) acc[i][t] = vfmaq_f32(acc[i][t], m[i], sv);
          }
        }
      } while (++b < nb);
      store_pairs<RN>(acc, h, rm, y, ys);
    }
  }
};
using MmlaQ4_0 = MmlaQ32<GQ4_0>;
using MmlaQ4_1 = MmlaQ32<GQ4_1>;
using MmlaQ8_0 = MmlaQ32<GQ8_0>;

// The K-quant smmla tile (rows 4h..4h+3 as row pairs x RN columns as column pairs): SdotK's
// steps, per 2 x 2 block.
template <class G_>
struct MmlaK {
  using G = G_;
  static constexpr int kCols = 4, kV = G::kNV / G::kSub;
  template <int RN>
  static void run(int64_t nb, const GemmRows& w, const int8x16_t* ap, size_t as, const uint8_t* x, size_t xs,
                  const float*, int64_t, float* y, int64_t ys, int rm) {
    constexpr int NP = (RN + 1) / 2;
    const ColPairs<BlockQ8_K, RN> xc(x, xs);
    for (int h = 0; 4 * h < rm; ++h) {
      float32x4_t acc[2][NP];
      for (int i = 0; i < 2; ++i)
        for (int t = 0; t < NP; ++t) acc[i][t] = vdupq_n_f32(0.0f);
      for (int64_t b = 0; b < nb; ++b) {
        const int8x16_t* q = &w.q[size_t(b) * 128 + 64 * h];
        int32x4_t sumi[2][NP];
        for (int i = 0; i < 2; ++i)
          for (int t = 0; t < NP; ++t) sumi[i][t] = vdupq_n_s32(0);
        #pragma GCC unroll 16
        for (int s = 0; s < G::kSub; ++s) {
          int32x4_t p[2][NP];
          for (int i = 0; i < 2; ++i)
            for (int t = 0; t < NP; ++t) p[i][t] = vdupq_n_s32(0);
          #pragma GCC unroll 2
          for (int v = 0; v < kV; ++v) mmla_vector<NP, 16>(q, ap + b * as, kV * s + v, p);
          int32x4_t sc[2];
          row_pairs(&w.sc[size_t(b * G::kSub + s) * 8 + 4 * h], sc);
          for (int i = 0; i < 2; ++i)
            for (int t = 0; t < NP; ++t) sumi[i][t] = vmlaq_s32(sumi[i][t], p[i][t], sc[i]);
        }
        float32x4_t d[2], dm[2];
        row_pairs(&w.d[size_t(b) * 8 + 4 * h], d);
        if constexpr (G::kMins) row_pairs(&w.dmin[size_t(b) * 8 + 4 * h], dm);
        for (int t = 0; t < NP; ++t) {
          const float32x4_t da = xc.da(b, t);
          for (int i = 0; i < 2; ++i) acc[i][t] = vfmaq_f32(acc[i][t], vcvtq_f32_s32(sumi[i][t]), vmulq_f32(d[i], da));
          if constexpr (G::kMins) {
            const int32x4_t ma = G::mins(w, b, h, xc.x[2 * t][b]), mb = G::mins(w, b, h, xc.x[2 * t + 1][b]);
            const int32x4_t summ[2] = {vzip1q_s32(ma, mb), vzip2q_s32(ma, mb)};
            for (int i = 0; i < 2; ++i)
              acc[i][t] = vfmaq_f32(acc[i][t], vcvtq_f32_s32(summ[i]), vnegq_f32(vmulq_f32(dm[i], da)));
          }
        }
      }
      store_pairs<RN>(acc, h, rm, y, ys);
    }
  }
};
using MmlaQ4_K = MmlaK<GQ4_K>;
using MmlaQ5_K = MmlaK<GQ5_K>;
using MmlaQ6_K = MmlaK<GQ6_K>;
#endif  // __ARM_FEATURE_MATMUL_INT8

// The chunk's activations for the tiles: sdot: a[(b * nc + c) * kNV + e] = column c's
// vector e of block b (so a tile's columns are contiguous); smmla: a[(b * np + t) * 2 kNV +
// K] = chunk K (elements 8K..8K+7) of columns 2t and 2t + 1 zipped (an odd last column
// with itself). da[b * nc + c]: the blocks' scales as floats.
template <class G, bool kMmla>
void pack_acts(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, TuVector<int8x16_t>& a,
               TuVector<float>& da) {
  constexpr int kNV = G::kNV;
  const int64_t np = (nc + 1) / 2;
  const size_t n = size_t(nb) * size_t(kMmla ? 2 * np : nc) * kNV;
  if (a.size() < n) a.resize(n);
  if (da.size() < size_t(nb * nc)) da.resize(size_t(nb * nc));
  using A = typename G::A;
  for (int64_t c = 0; c < nc; ++c) {
    const A* ac = reinterpret_cast<const A*>(x + c * xs);
    for (int64_t b = 0; b < nb; ++b) da[size_t(b * nc + c)] = act_d(ac[b]);
  }
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kMmla) {
      for (int64_t t = 0; t < np; ++t) {
        const int8_t* p0 = reinterpret_cast<const A*>(x + 2 * t * xs)[b].qs;
        const int8_t* p1 = reinterpret_cast<const A*>(x + std::min(2 * t + 1, nc - 1) * xs)[b].qs;
        int8x16_t* o = &a[size_t(b * np + t) * 2 * kNV];
        for (int e = 0; e < kNV; ++e) {
          const int64x2_t u = vreinterpretq_s64_s8(vld1q_s8(p0 + 16 * e)), v = vreinterpretq_s64_s8(vld1q_s8(p1 + 16 * e));
          o[2 * e] = vreinterpretq_s8_s64(vzip1q_s64(u, v));
          o[2 * e + 1] = vreinterpretq_s8_s64(vzip2q_s64(u, v));
        }
      }
    } else {
      for (int64_t c = 0; c < nc; ++c) {
        const int8_t* p = reinterpret_cast<const A*>(x + c * xs)[b].qs;
        int8x16_t* o = &a[size_t(b * nc + c) * kNV];
        for (int e = 0; e < kNV; ++e) o[e] = vld1q_s8(p + 16 * e);
      }
    }
  }
}

// Rows [r0, r1) x n_batch columns: per column chunk, pack the activations; per 8-row tile,
// pack the rows, then the tiles of Tile::kCols columns and one tail tile.
template <class Tile, bool kMmla>
void gemm_lanes(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x, size_t xs,
                int64_t n_batch, float* y, int64_t ys) {
  using G = typename Tile::G;
  constexpr int RN = Tile::kCols;
  thread_local GemmRows rows;
  thread_local TuVector<int8x16_t> acts;
  thread_local TuVector<float> da;
  const int64_t col_bytes = nb * int64_t(sizeof(typename G::A));
  const int64_t chunk = std::max<int64_t>(kGemmMinChunkCols, int64_t(kGemmChunkBytes) / col_bytes / RN * RN);
  for (int64_t c0 = 0; c0 < n_batch; c0 += chunk) {
    const int64_t nc = std::min(chunk, n_batch - c0);
    const uint8_t* xc = x + c0 * xs;
    pack_acts<G, kMmla>(nb, xc, xs, nc, acts, da);
    // vectors per block of the pack, and a column's (or pair's, c even) first vector
    const size_t as = size_t(kMmla ? (nc + 1) / 2 * 2 : nc) * G::kNV;
    auto col = [&](int64_t c) { return acts.data() + (kMmla ? c / 2 * 2 * G::kNV : c * G::kNV); };
    for (int64_t r = r0; r < r1; r += kGemmRows) {
      const int rm = int(std::min<int64_t>(kGemmRows, r1 - r));
      pack_rows<G, kMmla>(nb, w + r * ws, ws, rm, rows);
      float* yr = y + c0 * ys + r;
      auto run = [&]<int N>(int64_t c) {
        Tile::template run<N>(nb, rows, col(c), as, xc + c * xs, xs, &da[size_t(c)], nc, yr + c * ys, ys, rm);
      };
      int64_t c = 0;
      for (; c + RN <= nc; c += RN) run.template operator()<RN>(c);
      const int64_t left = nc - c;
      if (left == 1) run.template operator()<1>(c);
      if constexpr (RN > 2)
        if (left == 2) run.template operator()<2>(c);
      if constexpr (RN > 3)
        if (left == 3) run.template operator()<3>(c);
    }
  }
}

// The table entry: lane-order batches through the GEMM, everything else through Fallback
// (the decode tiles, vec_dot order).
template <class Tile, bool kMmla, MatmulFn Fallback>
void matmul_lanes(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                  size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch >= ::kernels::kLaneMinBatch && ::kernels::lane_order())
    return gemm_lanes<Tile, kMmla>(n / Tile::G::kElems, static_cast<const uint8_t*>(W), row_stride, r0, r1,
                                   static_cast<const uint8_t*>(xq), xq_stride, n_batch, y, y_stride);
  Fallback(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
}

}  // namespace
}  // namespace kernels::cpu::neon
