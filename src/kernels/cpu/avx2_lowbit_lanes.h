// avx2_lowbit_lanes.h: private to kernels/cpu, included by avx2.cc and avx512.cc: the
// lane-order prompt GEMMs of the low-bit types (issue 28), as gemm_lanes_q4_0 and the Q4_K /
// Q6_K lane GEMMs do for theirs (kernels.h "lane order"): one float per output, eight weight
// rows per register (int32 lane r = four quants of row r), an activation column as broadcasts
// of its own 4-byte groups. Per output, blocks ascending:
//   IQ4_NL, MXFP4 (32 elements x Q8_0): acc = fma(float(int dot of block b), dw * da, acc)
//     (dw: fp16 d, MXFP4's E8M0 half); signed codebook weights through the sign trick
//     (|w| x sign(a, w)), summed per block by Dot::u8_acc (madd + add, or one vpdpbusd).
//   Q2_K, Q3_K, IQ4_XS (256 elements x Q8_K): acc = fma(float(sumi), d * da, acc), sumi =
//     sum over the elements of scale(sub-block) * q * a, exact in int32:
//     Q2_K: q = 0..3, scales per 16, then acc = fma(float(summ), -(dmin * da), acc) with
//       summ = sum_s min_s * bsums_s (as Q4_K's lane order);
//     Q3_K: signed q (-4..3), scales per 16 (signed), times the activations + 128 as unsigned
//       bytes (maddubs), sumi starting from the row's -128 * sum_s sc_s * (sum of q in s);
//     IQ4_XS: signed codebook values (sign trick; with VNNI the activations + 128 by vpdpbusd
//       and sumi starting from the row's -128 * sum sc * v, as Q3_K), scale ls - 32 per 32.
//   ("Flipped", lane_flip: the + 128 correction is per row and super-block, packed once,
//   instead of bsums products per column and super-block.)
//   Q2_K / Q3_K sum a sub-block's four maddubs in int16 (<= 4 * 2 * 7 * 127 = 7112 / 4 * 2 *
//   4 * 255 = 8160), then Scale::acc (madd + add, or one vpdpwssd) by the sub-block scales.
// Integer sums are exact and the float steps per output depend on nothing else, so an output
// is the same in any row range or batch and both ISAs give the same bits; the scalar
// formulas in kernels_test.cc (lane_order_*) pin the orders.
#pragma once
#include <type_traits>

#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/avx2_kquants.h"
#include "kernels/cpu/avx2_lanes32.h"
#include "kernels/cpu/avx2_lowbit.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/tu_vector.h"

namespace kernels::cpu::avx2 {
// Internal linkage: these are compiled with different -m flags in different files, so
// they must never be merged across translation units by the linker (ODR / SIGILL).
namespace {

// ---- IQ4_NL, MXFP4 -------------------------------------------------------------------------

struct LaneRowsCB {           // a tile of 8 rows
  TuVector<Quants32> v;       // [b * 8 + k]: int32 lane r = signed weights 4k..4k+3 of row r
  TuVector<Quants32> va;      // |v|
  TuVector<float> d;          // [b * 8 + r]: scale of row r
};

template <class D>
inline void lane_pack_rows_cb(int64_t nb, const uint8_t* w, size_t ws, int rm, LaneRowsCB& p) {
  using W = typename D::W;
  if (p.v.size() < size_t(nb * 8)) {
    p.v.resize(size_t(nb * 8));
    p.va.resize(size_t(nb * 8));
    p.d.resize(size_t(nb * 8));
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i R[8];
    for (int r = 0; r < 8; ++r) {
      if (r < rm) {
        const W& blk = reinterpret_cast<const W*>(w + r * ws)[b];
        R[r] = D::quants(blk);
        p.d[size_t(b * 8 + r)] = block_d(blk);
      } else {
        R[r] = _mm256_setzero_si256();
        p.d[size_t(b * 8 + r)] = 0.0f;
      }
    }
    transpose_8x8_epi32(R, &p.v[size_t(b * 8)]);
    for (int k = 0; k < 8; ++k) {
      const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.v[size_t(b * 8 + k)].q));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.va[size_t(b * 8 + k)].q), _mm256_abs_epi8(v));
    }
  }
}

template <class Dot>
struct TileCB {
  template <int RN>
  struct T {
    static void run(int64_t nb, const LaneRowsCB& w, int rm, const LaneActs& a, int64_t nc, int64_t c0, float* y,
                    int64_t ys) {
      __m256 acc[RN];
      for (int c = 0; c < RN; ++c) acc[c] = _mm256_setzero_ps();
      const Quants32* __restrict v = w.v.data();
      const Quants32* __restrict va = w.va.data();
      const float* __restrict wd = w.d.data();
      const Quants32* __restrict aq = a.qs.data() + c0;
      const float* __restrict ad = a.d.data() + c0;
      for (int64_t b = 0; b < nb; ++b, v += 8, va += 8, wd += 8, aq += nc, ad += nc) {
        const __m256 dw = _mm256_loadu_ps(wd);
        __m256i VA[8];
        #pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) VA[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(va[k].q));
        #pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) {
          const int32_t* q4 = reinterpret_cast<const int32_t*>(aq[c].q);
          __m256i q = _mm256_setzero_si256();
          #pragma GCC unroll 8
          for (int k = 0; k < 8; ++k)
            q = Dot::u8_acc(q, VA[k], _mm256_sign_epi8(_mm256_set1_epi32(q4[k]),
                                                       _mm256_load_si256(reinterpret_cast<const __m256i*>(v[k].q))));
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_mul_ps(dw, _mm256_set1_ps(ad[c])), acc[c]);
        }
      }
      for (int c = 0; c < RN; ++c) store_lanes(y + c * ys, acc[c], rm);
    }
  };
};

// ---- Q2_K, Q3_K, IQ4_XS --------------------------------------------------------------------

struct LaneRowsLow {          // a tile of 8 rows, per super-block b:
  TuVector<Quants32> v;       // [b * 64 + 8 j + k]: int32 lane r = quants 32j+4k..+3 of row r
                              // (Q3_K: q + 4 for Q2_K's form, q itself when flipped)
  TuVector<Quants32> va;      // IQ4_XS without VNNI: |v| (its quants are signed)
  TuVector<Quants32> sc;      // [b * 16 + s]: int16 lanes 2r, 2r+1 = scale of sub-block s of row r
  TuVector<Quants32> bp;      // [b * 8 + t]: int16 lanes 2r, 2r+1 = Q2_K mins
  TuVector<Quants32>
      corr;  // [b], flipped forms: int32 lane r = -128 * sum_s sc_s * (sum of q in s)
  TuVector<float> d, dmin;  // [b * 8 + r]
};

// Whether a lane tile takes its activations + 128 (unsigned, lane_pack_acts_flip) against
// signed weights: Q3_K (q, not q + 4) and IQ4_XS with VNNI (Scale::xs_sub_flip). The 128 *
// sum of the weights then depends on the row alone (LaneRowsLow::corr, once per pack)
// instead of 8 bsums products per column and super-block.
template <class D, class Scale>
constexpr bool lane_flip() {
  if constexpr (std::is_same_v<D, DecQ3_K>) return true;
  else if constexpr (std::is_same_v<D, DecIQ4_XS>)
    return requires(const Quants32* p, const int32_t* q) { Scale::xs_sub_flip(p, q); };
  else return false;
}

// The activation blocks of a chunk with their quants + 128 (as unsigned bytes); d kept.
inline void lane_pack_acts_flip(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, LaneActsK& p) {
  const size_t n = size_t(nb * nc);
  if (p.q.size() < n) p.q.resize(n);
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  for (int64_t c = 0; c < nc; ++c) {
    const BlockQ8_K* ab = reinterpret_cast<const BlockQ8_K*>(x + c * xs);
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ8_K& q = p.q[size_t(b * nc + c)];
      q.d = ab[b].d;
      for (int j = 0; j < 8; ++j)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.qs + 32 * j),
                            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs + 32 * j)), flip));
    }
  }
}

// Row r's quants (q[j]: chunk j in element order) and its 16 sub-block scales (Q2_K also
// its 16 mins) as int8; d and dmin. (DecodedK's decoders also build its scale vectors: not
// needed here, and the packing is a fifth of a prompt's time if slow.)
inline void lane_row(const BlockQ2_K& b, __m256i* q, __m128i* sc, __m128i* mn, float* d, float* dmin) {
  for (int n = 0; n < 2; ++n) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * n));
    for (int j = 0; j < 4; ++j) q[4 * n + j] = q2_bits(bits, j);
  }
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  *sc = _mm_and_si128(s, _mm_set1_epi8(15));
  *mn = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(15));
  *d = fp16(b.d);
  *dmin = fp16(b.dmin);
}
inline void lane_row(const BlockQ3_K& b, __m256i* q, __m128i* sc, __m128i* mn, float* d, float* dmin) {
  const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
  const __m256i m4 = _mm256_set1_epi8(4);
  for (int n = 0; n < 2; ++n) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * n));
    for (int j = 0; j < 4; ++j) {
      const int c = 4 * n + j;  // bit c of hmask[l], moved to bit 2 (within each byte)
      const __m256i h = c < 2 ? _mm256_slli_epi16(hbits, 2 - c) : _mm256_srli_epi16(hbits, c - 2);
      q[c] = _mm256_or_si256(q2_bits(bits, j), _mm256_and_si256(h, m4));
    }
  }
  *sc = *mn = q3_k_scales(b.scales);
  *d = fp16(b.d);
  *dmin = 0.0f;
}
inline void lane_row(const BlockIQ4_XS& b, __m256i* q, __m128i* sc, __m128i* mn, float* d, float* dmin) {
  const __m256i values = table16(kIQ4NLValues);
  for (int ib = 0; ib < 8; ++ib) q[ib] = _mm256_shuffle_epi8(values, nibbles32(b.qs + 16 * ib));
  // ls of sub-block ib in byte ib: scales_l's nibble ib | scales_h's bit pair ib << 4.
#if defined(__AVX512F__)  // two pdeps instead of the loop (a third of the packing); not in
                          // the AVX2 build: pdep is microcoded and slow on Zen 1 / 2
  uint32_t lo;
  std::memcpy(&lo, b.scales_l, 4);
  const uint64_t ls = _pdep_u64(lo, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(b.scales_h, 0x3030303030303030ull);
  *sc = _mm_sub_epi8(_mm_cvtsi64_si128(int64_t(ls)), _mm_set1_epi8(32));  // bytes 8..15 unused
#else
  alignas(16) int8_t ls[16] = {};
  for (int ib = 0; ib < 8; ++ib)
    ls[ib] = int8_t(iq4_xs_scale(b, ib));
  *sc = _mm_load_si128(reinterpret_cast<const __m128i*>(ls));
#endif
  *mn = _mm_setzero_si128();
  *d = fp16(b.d);
  *dmin = 0.0f;
}

template <class D, class Scale>
inline void lane_pack_rows_low(int64_t nb, const uint8_t* w, size_t ws, int rm, LaneRowsLow& p) {
  using W = typename D::W;
  constexpr bool kXS = std::is_same_v<D, DecIQ4_XS>, kFlip = lane_flip<D, Scale>();
  if (p.v.size() < size_t(nb * 64)) {
    p.v.resize(size_t(nb * 64));
    p.va.resize(kXS && !kFlip ? size_t(nb * 64) : 0);
    p.sc.resize(size_t(nb * 16));
    p.bp.resize(size_t(nb * 8));
    p.corr.resize(kFlip ? size_t(nb) : 0);
    p.d.resize(size_t(nb * 8));
    p.dmin.resize(size_t(nb * 8));
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i q[8][8], s_lo[8], s_hi[8], m[8];  // [j][r]; rows' scale pairs 0..7, 8..15; min pairs
    for (int r = 0; r < 8; ++r) {
      float d = 0.0f, dmin = 0.0f;
      if (r < rm) {
        __m256i qr[8];
        __m128i sc, mn;
        lane_row(reinterpret_cast<const W*>(w + r * ws)[b], qr, &sc, &mn, &d, &dmin);
        for (int j = 0; j < 8; ++j) q[j][r] = qr[j];
        s_lo[r] = scale_pairs(sc, 0);
        s_hi[r] = scale_pairs(sc, 1);
        m[r] = _mm256_cvtepi8_epi16(mn);  // int32 lane t = the int16 pair (m_2t, m_2t+1)
      } else {
        for (int j = 0; j < 8; ++j) q[j][r] = _mm256_setzero_si256();
        s_lo[r] = s_hi[r] = m[r] = _mm256_setzero_si256();
      }
      p.d[size_t(b * 8 + r)] = d;
      p.dmin[size_t(b * 8 + r)] = dmin;
    }
    if constexpr (std::is_same_v<D, DecQ3_K> && kFlip)  // q + 4 -> q (-4..3)
      for (int j = 0; j < 8; ++j)
        for (int r = 0; r < 8; ++r) q[j][r] = _mm256_sub_epi8(q[j][r], _mm256_set1_epi8(4));
    for (int j = 0; j < 8; ++j) {
      transpose_8x8_epi32(q[j], &p.v[size_t(b * 64 + 8 * j)]);
      if constexpr (kXS && !kFlip)
        for (int k = 0; k < 8; ++k) {
          const size_t i = size_t(b * 64 + 8 * j + k);
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.v[i].q));
          _mm256_store_si256(reinterpret_cast<__m256i*>(p.va[i].q), _mm256_abs_epi8(v));
        }
    }
    transpose_8x8_epi32(s_lo, &p.sc[size_t(b * 16)]);
    if constexpr (!kXS) {
      transpose_8x8_epi32(s_hi, &p.sc[size_t(b * 16 + 8)]);
      transpose_8x8_epi32(m, &p.bp[size_t(b * 8)]);
    }
    if constexpr (kFlip) {  // -128 * sum over sub-blocks s of sc_s * (sum of row r's q in s), exact
      const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
      auto pairsum = [&](int k) {  // int16 pairs of row r's quants in v[k] (|sum| <= 2 * 128)
        return _mm256_maddubs_epi16(ones8, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.v[size_t(b * 64 + k)].q)));
      };
      auto groupsum = [&](int k0, int n) {  // int32 lane r: row r's quants in v[k0..k0+n), summed
        __m256i t = pairsum(k0);
        for (int k = 1; k < n; ++k) t = _mm256_add_epi16(t, pairsum(k0 + k));  // <= 8 * 256: int16
        return _mm256_madd_epi16(t, ones16);
      };
      auto scale = [&](int s) {  // int32 lane r: row r's scale of sub-block s (int16 pair form)
        return _mm256_srai_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.sc[size_t(b * 16 + s)].q)), 16);
      };
      __m256i corr = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        if constexpr (kXS) {  // sub-block j: groups 8j..8j+7
          corr = _mm256_add_epi32(corr, _mm256_mullo_epi32(groupsum(8 * j, 8), scale(j)));
        } else {  // sub-blocks 2j, 2j + 1: groups 8j..8j+3, 8j+4..8j+7
          for (int h = 0; h < 2; ++h)
            corr = _mm256_add_epi32(corr, _mm256_mullo_epi32(groupsum(8 * j + 4 * h, 4), scale(2 * j + h)));
        }
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.corr[size_t(b)].q),
                         _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 7)));
    }
  }
}

template <class D, class Scale>
struct TileLow {
  template <int RN>
  struct T {
    static void run(int64_t nb, const LaneRowsLow& w, int rm, const LaneActsK& a, int64_t nc, int64_t c0, float* y,
                    int64_t ys) {
      constexpr bool kXS = std::is_same_v<D, DecIQ4_XS>, kQ2 = std::is_same_v<D, DecQ2_K>;
      // Flipped (lane_flip): activations + 128 against signed weights, sumi starting from the
      // row's -128 * sum sc * q (w.corr). IQ4_XS with VNNI (Scale::xs_sub_flip): one vpdpbusd
      // per group and one vpmulld by the scale per sub-block, instead of the sign trick's
      // three ops per group.
      constexpr bool kFlip = lane_flip<D, Scale>();
      __m256 acc[RN];
      for (int c = 0; c < RN; ++c) acc[c] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const Quants32* v = &w.v[size_t(b * 64)];
        const BlockQ8_K* ab = &a.q[size_t(b * nc + c0)];
        __m256i sumi[RN];
        if constexpr (kFlip) {
          const __m256i corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.corr[size_t(b)].q));
          for (int c = 0; c < RN; ++c) sumi[c] = corr;
        } else {
          for (int c = 0; c < RN; ++c) sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; ++j) {
          if constexpr (kXS && kFlip) {  // sumi += sc * sum (a + 128) v
            const __m256i sc32 = _mm256_srai_epi32(
                _mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[size_t(b * 16 + j)].q)), 16);
            #pragma GCC unroll 8
            for (int c = 0; c < RN; ++c) {
              const int32_t* q4 = reinterpret_cast<const int32_t*>(ab[c].qs + 32 * j);  // 4-byte aligned
              sumi[c] = _mm256_add_epi32(sumi[c], _mm256_mullo_epi32(Scale::xs_sub_flip(v + 8 * j, q4), sc32));
            }
          } else if constexpr (kXS) {
            const Quants32* va = &w.va[size_t(b * 64 + 8 * j)];
            const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[size_t(b * 16 + j)].q));
            __m256i VA[8];
            #pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) VA[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(va[k].q));
            #pragma GCC unroll 8
            for (int c = 0; c < RN; ++c) {
              const int32_t* q4 = reinterpret_cast<const int32_t*>(ab[c].qs + 32 * j);  // 4-byte aligned
              #pragma GCC unroll 8
              for (int k = 0; k < 8; ++k) {
                const __m256i s = _mm256_sign_epi8(_mm256_set1_epi32(q4[k]),
                                                   _mm256_load_si256(reinterpret_cast<const __m256i*>(v[8 * j + k].q)));
                sumi[c] = Scale::acc(sumi[c], sc, _mm256_maddubs_epi16(VA[k], s));
              }
            }
          } else {
            __m256i V[8];
            #pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) V[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(v[8 * j + k].q));
            const __m256i s0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[size_t(b * 16 + 2 * j)].q));
            const __m256i s1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[size_t(b * 16 + 2 * j + 1)].q));
            #pragma GCC unroll 8
            for (int c = 0; c < RN; ++c) {
              const int32_t* q4 = reinterpret_cast<const int32_t*>(ab[c].qs + 32 * j);  // 4-byte aligned
              __m256i t[2];
              // (Flipped: unsigned a + 128 times signed q; 16 * 255 * 4 fits in int16.)
              auto mul = [&](int k) SHARDLM_INLINE {
                return kFlip ? _mm256_maddubs_epi16(_mm256_set1_epi32(q4[k]), V[k])
                             : _mm256_maddubs_epi16(V[k], _mm256_set1_epi32(q4[k]));
              };
              #pragma GCC unroll 2
              for (int h = 0; h < 2; ++h) {
                const __m256i x0 = _mm256_add_epi16(mul(4 * h), mul(4 * h + 1));
                const __m256i x1 = _mm256_add_epi16(mul(4 * h + 2), mul(4 * h + 3));
                t[h] = _mm256_add_epi16(x0, x1);
              }
              sumi[c] = Scale::acc(Scale::acc(sumi[c], s0, t[0]), s1, t[1]);
            }
          }
        }
        const __m256 d = _mm256_loadu_ps(&w.d[size_t(b * 8)]);
        #pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) {
          const __m256 da = _mm256_set1_ps(ab[c].d);
          int32_t bs[8];  // int16 pairs (bsums 2t, 2t + 1)
          std::memcpy(bs, ab[c].bsums, sizeof bs);
          if constexpr (kXS || kFlip) {  // sumi is the exact sum already
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_mul_ps(d, da), acc[c]);
            continue;
          }
          __m256i corr = _mm256_setzero_si256();
          for (int t = 0; t < 8; ++t)
            corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(
                                                                w.bp[size_t(b * 8 + t)].q)),
                                                            _mm256_set1_epi32(bs[t])));
          if constexpr (kQ2) {
            const __m256 dmin = _mm256_loadu_ps(&w.dmin[size_t(b * 8)]);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_mul_ps(d, da), acc[c]);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(dmin, da)),
                                     acc[c]);
          }
        }
      }
      for (int c = 0; c < RN; ++c) store_lanes(y + c * ys, acc[c], rm);
    }
  };
};

// Columns per register tile: 6 for IQ4_XS with VNNI (8 weight registers + 4 per column fit
// AVX-512VL's 32; measured 2-5% faster than 4 on a 1B-shape layer at batch 512, Zen 4; 8
// no better; Q3_K with 6 no better than 4).
template <class D, class Scale>
constexpr int kLowCols = std::is_same_v<D, DecIQ4_XS> && lane_flip<D, Scale>() ? 6 : 4;

// ---- entries: lane order for batches of kGemmMinBatch or more when allowed, else Fallback ----

template <class D, class Dot, MatmulFn Fallback>
void matmul_cb_lanes(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                     size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  matmul_lanes32<LaneRowsCB, lane_pack_rows_cb<D>, TileCB<Dot>::template T, Fallback>(n, W, row_stride, r0, r1, xq,
                                                                                      xq_stride, n_batch, y, y_stride);
}

template <class D, class Scale, MatmulFn Fallback>
void matmul_low_lanes(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                      size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch >= kGemmMinBatch && ::kernels::lane_order()) {
    const int64_t nb = n / kQK_K;
    return gemm_lanes<LaneActsK, lane_flip<D, Scale>() ? lane_pack_acts_flip : lane_pack_acts_k, LaneRowsLow,
                      lane_pack_rows_low<D, Scale>, TileLow<D, Scale>::template T, kLowCols<D, Scale>>(
        nb, static_cast<const uint8_t*>(W), row_stride, r0, r1, static_cast<const uint8_t*>(xq), xq_stride, n_batch, y,
        y_stride, super_col_bytes(nb));
  }
  Fallback(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
}

}  // namespace
}  // namespace kernels::cpu::avx2
