// neon_lowbit_lanes.h: private to kernels/cpu, included by neon_dotprod.cc and neon_i8mm.cc:
// the weight types of the NEON prompt GEMMs of Q2_K, Q3_K and IQ4_XS in x86's lane order
// (avx2_lowbit_lanes.h, kernels.h; issue 29), for neon_gemm.h's packing (GemmRows, pack_rows,
// gemm_lanes) and K-quant tiles (SdotK, MmlaK, as Q4_K and Q6_K): per
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

// Q2_K: element 128n + 32j + l = (qs[32n + l] >> 2j) & 3; scale scales[s] & 15, min >> 4.
struct GQ2_K {
  using W = BlockQ2_K;
  using A = BlockQ8_K;
  static constexpr int kNV = 16, kSub = 16, kElems = kQK_K;
  static constexpr bool kMins = true;
  static int32x4_t mins(const GemmRows& w, int64_t b, int h, const A& a) { return mins16_half(&w.mn[size_t(b) * 128], h, a); }
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
      p.sc[size_t((i * 8 + ib) * 8 + r)] = b ? iq4_xs_scale(*b, ib) : 0;
  }
};

}  // namespace
}  // namespace kernels::cpu::neon
