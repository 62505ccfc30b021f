// neon_lowbit_lanes.h: private to kernels/cpu, included by neon_dotprod.cc and neon_i8mm.cc:
// the NEON prompt GEMMs of Q2_K, Q3_K and IQ4_XS in x86's lane order (avx2_lowbit_lanes.h,
// kernels.h; issue 29), on neon_gemm.h's packing (GemmRows, pack_rows, gemm_lanes): per
// output one float, per super-block acc = fma(float(sumi), d * da, acc), sumi = sum over the
// sub-blocks s (16 elements: Q2_K, Q3_K; 32: IQ4_XS) of sc_s * (exact int dot of s); Q2_K then
// acc = fma(float(summ), -(dmin * da), acc), summ = sum_s min_s * bsums_s. Weights are decoded
// to signed int8 in element order (Q3_K's q - 4 within the byte, -4..3; IQ4_XS's codebook
// values), so one sdot / smmla takes them against the activations directly (no sign trick,
// no + 128 correction as x86 needs for its unsigned maddubs operand). Integer sums are exact
// in any order, so the outputs equal x86's and tests/unit/lane_order_lowbit.h's to the bit.
// The plain table (no sdot) sums in the same order through row_k (neon_lowbit.h's add_lane).
#pragma once
#include "kernels/cpu/neon_gemm.h"
#include "kernels/cpu/neon_lowbit.h"

namespace kernels::cpu::neon {
namespace {

// ---- the weight types: 16 vectors of 16 elements (vector e = elements 16e..16e+15) -------
// kSub sub-blocks of kNV / kSub vectors, their scales in GemmRows::sc; kMins: Q2_K's 16 mins
// in GemmRows::mn, [(b * 16 + s) * 8 + r].

// Q2_K: element 128n + 32j + l = (qs[32n + l] >> 2j) & 3; scale scales[s] & 15, min >> 4.
struct GQ2_K {
  using W = BlockQ2_K;
  using A = BlockQ8_K;
  static constexpr int kNV = 16, kSub = 16, kElems = kQK_K;
  static constexpr bool kMins = true;
  static void decode(const W& b, int8x16_t* v) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (int n = 0; n < 2; ++n) {
      const uint8x16_t b0 = vld1q_u8(b.qs + 32 * n), b1 = vld1q_u8(b.qs + 32 * n + 16);
      for (int j = 0; j < 4; ++j) {
        const int8x16_t shift = vdupq_n_s8(int8_t(-2 * j));
        v[8 * n + 2 * j] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b0, shift), m3));
        v[8 * n + 2 * j + 1] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b1, shift), m3));
      }
    }
  }
  static void scalars(const W* b, int64_t i, int r, GemmRows& p) {
    p.d[size_t(i * 8 + r)] = b ? fp16(b->d) : 0.0f;
    p.dmin[size_t(i * 8 + r)] = b ? fp16(b->dmin) : 0.0f;
    for (int s = 0; s < 16; ++s) {
      p.sc[size_t((i * 16 + s) * 8 + r)] = b ? b->scales[s] & 15 : 0;
      p.mn[size_t((i * 16 + s) * 8 + r)] = int16_t(b ? b->scales[s] >> 4 : 0);
    }
  }
};

// Q3_K: element 128n + 32j + l = ((qs[32n + l] >> 2j) & 3) | (bit 4n + j of hmask[l]) << 2,
// minus 4; scale q3_k_scales (signed).
struct GQ3_K {
  using W = BlockQ3_K;
  using A = BlockQ8_K;
  static constexpr int kNV = 16, kSub = 16, kElems = kQK_K;
  static constexpr bool kMins = false;
  static void decode(const W& b, int8x16_t* v) {
    const uint8x16_t m3 = vdupq_n_u8(3), m4 = vdupq_n_u8(4);
    const int8x16_t four = vdupq_n_s8(4);
    const uint8x16_t h[2] = {vld1q_u8(b.hmask), vld1q_u8(b.hmask + 16)};
    for (int n = 0; n < 2; ++n) {
      const uint8x16_t bits[2] = {vld1q_u8(b.qs + 32 * n), vld1q_u8(b.qs + 32 * n + 16)};
      for (int j = 0; j < 4; ++j) {
        const int c = 4 * n + j;
        const int8x16_t shift = vdupq_n_s8(int8_t(-2 * j)), hshift = vdupq_n_s8(int8_t(2 - c));
        for (int u = 0; u < 2; ++u)
          v[2 * c + u] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(vshlq_u8(bits[u], shift), m3),
                                                               vandq_u8(vshlq_u8(h[u], hshift), m4))),
                                  four);
      }
    }
  }
  static void scalars(const W* b, int64_t i, int r, GemmRows& p) {
    int8_t sc[16] = {};
    if (b) vst1q_s8(sc, q3_k_scales(b->scales));
    p.d[size_t(i * 8 + r)] = b ? fp16(b->d) : 0.0f;
    for (int s = 0; s < 16; ++s) p.sc[size_t((i * 16 + s) * 8 + r)] = sc[s];
  }
};

// IQ4_XS: element 32ib + l = the codebook value of nibble l of qs[16ib..] (low nibbles
// first); scale ls - 32 per 32 elements.
struct GIQ4_XS {
  using W = BlockIQ4_XS;
  using A = BlockQ8_K;
  static constexpr int kNV = 16, kSub = 8, kElems = kQK_K;
  static constexpr bool kMins = false;
  static void decode(const W& b, int8x16_t* v) {
    const int8x16_t values = vld1q_s8(kIQ4NLValues);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8x16_t q = vld1q_u8(b.qs + 16 * ib);
      v[2 * ib] = vqtbl1q_s8(values, vandq_u8(q, vdupq_n_u8(0x0F)));
      v[2 * ib + 1] = vqtbl1q_s8(values, vshrq_n_u8(q, 4));
    }
  }
  static void scalars(const W* b, int64_t i, int r, GemmRows& p) {
    p.d[size_t(i * 8 + r)] = b ? fp16(b->d) : 0.0f;
    for (int ib = 0; ib < 8; ++ib)
      p.sc[size_t((i * 8 + ib) * 8 + r)] =
          b ? (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b->scales_h >> 2 * ib) & 3) << 4)) - 32 : 0;
  }
};

// Q2_K's min sums of column a for rows 4h..4h+3: lane k = sum_s min_s(row 4h + k) bsums_s.
inline int32x4_t mins16_half(const int16_t* mn, int h, const BlockQ8_K& a) {
  const int16x8_t b0 = vld1q_s16(a.bsums), b1 = vld1q_s16(a.bsums + 8);
  int32x4_t summ = vdupq_n_s32(0);
  unroll<8>([&](auto sc) {
    constexpr int s = decltype(sc)::value;
    summ = vmlal_laneq_s16(summ, vld1_s16(mn + 8 * s + 4 * h), b0, s);
  });
  unroll<8>([&](auto sc) {
    constexpr int s = decltype(sc)::value;
    summ = vmlal_laneq_s16(summ, vld1_s16(mn + 8 * (s + 8) + 4 * h), b1, s);
  });
  return summ;
}

// ---- sdot tile: rows 4h..4h+3 x RN columns (neon_gemm.h's SdotQ6_K, sub-blocks of kV vectors)
template <class G_>
struct SdotLow {
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
        #pragma GCC unroll 16  // one loop per super-block (what llvm-mca sees)
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
            const int32x4_t summ = mins16_half(&w.mn[size_t(b) * 128], h, xc.x[c][b]);
            acc[c] = vfmaq_f32(acc[c], vcvtq_f32_s32(summ), vnegq_f32(vmulq_n_f32(dm, da)));
          }
        }
      }
      for (int c = 0; c < RN; ++c) store_rows(acc[c], std::min(4, rm - 4 * h), y + c * ys + 4 * h);
    }
  }
};

#if defined(__ARM_FEATURE_MATMUL_INT8)
// ---- smmla tile: rows 4h..4h+3 (row pairs) x RN columns (column pairs), as MmlaQ6_K ----
template <class G_>
struct MmlaLow {
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
            const int32x4_t ma = mins16_half(&w.mn[size_t(b) * 128], h, xc.x[2 * t][b]);
            const int32x4_t mb = mins16_half(&w.mn[size_t(b) * 128], h, xc.x[2 * t + 1][b]);
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
#endif  // __ARM_FEATURE_MATMUL_INT8

}  // namespace
}  // namespace kernels::cpu::neon
