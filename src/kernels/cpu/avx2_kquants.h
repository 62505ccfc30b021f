// avx2_kquants.h: private to kernels/cpu, included by avx2.cc and avx512.cc: the
// K-quant (Q4_K, Q5_K, Q6_K) x Q8_K dot products. For batches each weight super-block is
// first decoded into a DecodedK (8 x 32 unsigned quants plus int16 scales), then dotted
// with any number of Q8_K activation blocks (matmul decodes 4 rows once and reuses them for
// every activation row); Q4_K's, Q5_K's and Q6_K's matrix x vector and decode batches are
// fused (avx2_kfused.h). Prompt batches of Q4_K,
// Q5_K and Q6_K take the lane-order gemm_lanes (see kernels.h). Integer sums are exact, so
// results differ from kernels::ref only by float summation order.
// Q2_K, Q3_K and IQ4_XS decode into DecodedK in avx2_lowbit.h (Q2_K and Q3_K also fused there).
#pragma once
#include <algorithm>

#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/avx2_lanes32.h"
#include "kernels/cpu/tu_vector.h"

namespace kernels::cpu::avx2 {
// Internal linkage: these are compiled with different -m flags in different files, so
// they must never be merged across translation units by the linker (ODR / SIGILL).
namespace {

struct DecodedK {
  __m256i q[8];       // chunk j: quants of elements 32j..32j+31, unsigned (Q6_K: 0..63, +32 bias)
  __m256i scale[8];   // chunk j: int16 scale per maddubs lane
  __m256i aux;        // Q4_K/Q5_K: 8 int16 mins in the low half; Q6_K: the 16 int16 scales
  float d, dmin;
};

// Q4_K / Q5_K 6-bit scales and mins (ggml's kmask unpacking): bytes 0..7 the scales, 8..15
// the mins, in a register (as ggml's _mm_set_epi32 of the four words).
inline __m128i unpack_scales_k4(const uint8_t* scales) {
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
  const uint32_t m_lo = u[1] & 0x3f3f3f3f;
  const uint32_t s_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
  const uint32_t s_lo = u[0] & 0x3f3f3f3f;
  return _mm_set_epi32(int(m_hi), int(m_lo), int(s_hi), int(s_lo));
}

inline void unpack_scales_k4(const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  const __m128i v = unpack_scales_k4(scales);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(sc), v);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(m), _mm_unpackhi_epi64(v, v));
}

// d, dmin, 6-bit scales and mins of a Q4_K / Q5_K block into k.
inline void decode_scales_k4(uint16_t d, uint16_t dmin, const uint8_t* scales, DecodedK& k) {
  uint8_t sc[8], m[8];
  unpack_scales_k4(scales, sc, m);
  for (int j = 0; j < 8; ++j) k.scale[j] = _mm256_set1_epi16(sc[j]);
  k.aux = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))));
  k.d = fp16(d);
  k.dmin = fp16(dmin);
}

struct DecQ4_K {
  using W = BlockQ4_K;
  static constexpr bool kMins = true;
  static void decode(const W& b, DecodedK& k) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      k.q[2 * c] = _mm256_and_si256(bits, m4);
      k.q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    }
    decode_scales_k4(b.d, b.dmin, b.scales, k);
  }
};

struct DecQ5_K {
  using W = BlockQ5_K;
  static constexpr bool kMins = true;
  static constexpr bool kDecodedAbove16 = true;  // avx2_kfused.h decoded_above_16
  static void decode(const W& b, DecodedK& k) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    for (int c = 0; c < 4; ++c) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      // chunk j takes bit j of qh[l] as its fifth bit
      const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c)), one);
      const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c + 1)), one);
      k.q[2 * c] = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(h0, 4));
      k.q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                       _mm256_slli_epi16(h1, 4));
    }
    decode_scales_k4(b.d, b.dmin, b.scales, k);
  }
};

// Q6_K's quants of half h (elements 128h..128h+127) as four 32-element chunks, unsigned
// 0..63 (the +32 bias still in).
inline void q6_k_quants(const BlockQ6_K& b, int h, __m256i* q) {
  const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
  const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
  const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
  const __m256i bh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
  q[0] = _mm256_or_si256(_mm256_and_si256(b1, m15), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4));
  q[1] = _mm256_or_si256(_mm256_and_si256(b2, m15), _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), _mm256_and_si256(bh, _mm256_set1_epi8(48)));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                         _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(static_cast<char>(0xC0))), 2));
}

struct DecQ6_K {
  using W = BlockQ6_K;
  static constexpr bool kMins = false;
  static void decode(const W& b, DecodedK& k) {
    for (int h = 0; h < 2; ++h) q6_k_quants(b, h, k.q + 4 * h);
    for (int j = 0; j < 8; ++j)
      k.scale[j] = _mm256_set_m128i(_mm_set1_epi16(b.scales[2 * j + 1]), _mm_set1_epi16(b.scales[2 * j]));
    k.aux = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    k.d = fp16(b.d);
    k.dmin = 0.0f;
  }
};

// The activation block's 16 bsums added in pairs: the sums of its eight 32-element chunks.
inline __m128i bsum_pairs(const BlockQ8_K& a) {
  const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums));
  return _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
}

// A K-quant dot product's float accumulators: 8 lanes of scaled sums and, for Q4_K, the 4
// lanes of its mins, kept apart until the end as ggml_vec_dot_q4_K_q8_K does; for Q5_K one
// float of its min terms in lane 0 of m (ggml_vec_dot_q5_K_q8_K's summs: per super-block
// summs = fma(-dmin * da, float(sum of the 8 m_j cs_j), summs), added after the horizontal
// sum; add_q5_k_mins). So a row's dot equals ggml's AVX2 one to the bit.
struct AccK {
  __m256 v = _mm256_setzero_ps();
  __m128 m = _mm_setzero_ps();
};

// Q5_K: m[0] = fma(dmin_da, float(the sum of the 4 min lanes), m[0]) (one rounding).
inline void add_q5_k_mins(__m128i mins, float dmin_da, AccK& acc) {
  const __m128i m2 = _mm_add_epi32(mins, _mm_unpackhi_epi64(mins, mins));
  const __m128 m = _mm_cvtepi32_ps(_mm_add_epi32(m2, _mm_shuffle_epi32(m2, 1)));
  acc.m = _mm_fmadd_ss(_mm_set_ss(dmin_da), m, acc.m);
}

template <class D>
inline float finish_k(const AccK& a) {
  if constexpr (std::is_same_v<D, DecQ4_K>) {
    __m128 m = _mm_add_ps(a.m, _mm_movehl_ps(a.m, a.m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return hsum(a.v) + _mm_cvtss_f32(m);
  } else if constexpr (std::is_same_v<D, DecQ5_K>) {
    return hsum(a.v) + _mm_cvtss_f32(a.m);
  } else {
    return hsum(a.v);
  }
}

// acc += (decoded super-block) . (activation block).
// A decoder with its own integer dot (D::dot, avx2_lowbit.h) uses that instead.
template <class D>
inline void dot_k(const DecodedK& k, const BlockQ8_K& a, AccK& s) {
  if constexpr (requires { D::dot(k, a, s); }) {
    D::dot(k, a, s);
  } else {
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * j));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(k.scale[j], _mm256_maddubs_epi16(k.q[j], qa)));
    }
    if constexpr (D::kMins) {
      // sum_j m_j * (bsums[2j] + bsums[2j+1]), in 4 lanes
      const __m128i mins = _mm_madd_epi16(_mm256_castsi256_si128(k.aux), bsum_pairs(a));
      s.v = _mm256_fmadd_ps(_mm256_set1_ps(k.d * a.d), _mm256_cvtepi32_ps(sumi), s.v);
      if constexpr (std::is_same_v<D, DecQ4_K>) {
        s.m = _mm_fmadd_ps(_mm_set1_ps(-k.dmin * a.d), _mm_cvtepi32_ps(mins), s.m);
      } else {  // Q5_K: one scalar (integer sum exact in any order)
        add_q5_k_mins(mins, -k.dmin * a.d, s);
      }
    } else {
      // the +32 bias of Q6_K: subtract 32 * sum_s scale_s * bsums[s]
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums));
      sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(_mm256_madd_epi16(k.aux, bsums), 5));
      s.v = _mm256_fmadd_ps(_mm256_set1_ps(k.d * a.d), _mm256_cvtepi32_ps(sumi), s.v);
    }
  }
}

template <class D>
float vec_dot_k(int64_t n, const void* w, const void* x) {
  const auto* wb = static_cast<const typename D::W*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  AccK acc;
  DecodedK k;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(wb + i + 4), _MM_HINT_T0);
    D::decode(wb[i], k);
    dot_k<D>(k, xb[i], acc);
  }
  return finish_k<D>(acc);
}

// ---- Q4_K and Q5_K batches in lane order (the K-quant counterpart of gemm_lanes_q4_0) ------
//
// Per output, per super-block: acc = fma(float(sumi), d * da, acc), then acc =
// fma(float(summ), -(dmin * da), acc), with sumi = sum_j sc_j * (int dot of sub-block j)
// and summ = sum_j m_j * (sum of the activations of sub-block j, from bsums). A tile of 8
// rows holds per super-block: v[8 j + k], int32 lane r = quants 4k..4k+3 of sub-block j of
// row r; sc[j] int16 lanes 2r, 2r+1 = sc_j of row r; mn[p] int16 lanes 2r, 2r+1 = m_2p,
// m_2p+1 of row r; d and dmin per row. A column's sub-block j is 8 broadcasts of its own
// 4-byte groups: 8 maddubs summed in int16 (|sum| <= 8 * 2 * 15 * 128 = 30720), one madd by
// the scales; the min term is 4 madds of mn[p] by the column's bsum pairs.
// Q5_K: the same with its 5-bit quants (0..31) in place of the nibbles; four maddubs per
// int16 sum (4 * 2 * 31 * 128 = 31744), two madds by the scales.
struct LaneActsK {
  TuVector<BlockQ8_K> q;  // [b * nc + c]: the chunk's blocks, block-major
  TuVector<int32_t> bs2;  // [(b * nc + c) * 4 + p] = int16 pair (bsum_2p, bsum_2p+1)
};
struct LaneRowsK {
  TuVector<Quants32> v;     // [b * 64 + 8 j + k]
  TuVector<Quants32> sc;    // [b * 8 + j]
  TuVector<Quants32> mn;    // [b * 4 + p]
  TuVector<float> d, dmin;  // [b * 8 + r]
};

inline void lane_pack_acts_k(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, LaneActsK& p) {
  const size_t n = size_t(nb * nc);
  if (p.q.size() < n) {
    p.q.resize(n);
    p.bs2.resize(4 * n);
  }
  for (int64_t c = 0; c < nc; ++c) {
    const BlockQ8_K* ab = reinterpret_cast<const BlockQ8_K*>(x + c * xs);
    for (int64_t b = 0; b < nb; ++b) {
      const size_t i = size_t(b * nc + c);
      p.q[i] = ab[b];
      int16_t pair[8];
      for (int j = 0; j < 8; ++j) pair[j] = int16_t(ab[b].bsums[2 * j] + ab[b].bsums[2 * j + 1]);
      std::memcpy(&p.bs2[4 * i], pair, sizeof pair);
    }
  }
}

// The quants (0..15) of a Q4_K block's 8 sub-blocks of 32: sub-block j into q[j * stride].
inline void q4_k_subblocks(const BlockQ4_K& blk, __m256i* q, int stride) {
  for (int c = 0; c < 4; ++c) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
    q[2 * c * stride] = _mm256_and_si256(bits, _mm256_set1_epi8(0x0F));
    q[(2 * c + 1) * stride] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), _mm256_set1_epi8(0x0F));
  }
}

// The quants (0..31) of a Q5_K block's 8 sub-blocks: the nibbles with bit j of qh[l] as
// sub-block j's fifth bit.
inline void q5_k_subblocks(const BlockQ5_K& blk, __m256i* q, int stride) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), bit = _mm256_set1_epi8(0x10);
  const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
  for (int c = 0; c < 4; ++c) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
    // bit 2c (2c + 1) of each qh byte to bit 4: 16-bit shifts by at most 3, masked per byte
    const __m256i h0 = 2 * c <= 4 ? _mm256_sll_epi16(hbits, _mm_cvtsi32_si128(4 - 2 * c))
                                  : _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c - 4));
    const __m256i h1 = 2 * c + 1 <= 4 ? _mm256_sll_epi16(hbits, _mm_cvtsi32_si128(3 - 2 * c))
                                      : _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c - 3));
    q[2 * c * stride] = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_and_si256(h0, bit));
    q[(2 * c + 1) * stride] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), _mm256_and_si256(h1, bit));
  }
}
inline void k45_subblocks(const BlockQ4_K& blk, __m256i* q, int stride) { q4_k_subblocks(blk, q, stride); }
inline void k45_subblocks(const BlockQ5_K& blk, __m256i* q, int stride) { q5_k_subblocks(blk, q, stride); }

// int8 lanes 8h..8h+7 of v as int32 lanes holding the int16 pair (x, x): a row's scales,
// transposed into the lane tiles' int16 pairs 2r, 2r + 1.
inline __m256i scale_pairs(__m128i v, int h) {
  const __m256i x = _mm256_cvtepi8_epi32(h ? _mm_unpackhi_epi64(v, v) : v);
  return _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(x, 16));
}

template <class Block>  // BlockQ4_K or BlockQ5_K
inline void lane_pack_rows_k(int64_t nb, const uint8_t* w, size_t ws, int rm, LaneRowsK& p) {
  if (p.v.size() < size_t(nb * 64)) {
    p.v.resize(size_t(nb * 64));
    p.sc.resize(size_t(nb * 8));
    p.mn.resize(size_t(nb * 4));
    p.d.resize(size_t(nb * 8));
    p.dmin.resize(size_t(nb * 8));
  }
  for (int64_t b = 0; b < nb; ++b) {
    // Row r's quants of sub-block j, its scales each doubled into an int32 (int16 lanes 2r,
    // 2r + 1 after the transpose) and its mins in pairs (m_2q, m_2q+1), q < 4.
    __m256i q[8][8], sc[8], mn[8];  // q: [j][r]
    for (int r = 0; r < 8; ++r) {
      if (r < rm) {
        const Block& blk = reinterpret_cast<const Block*>(w + r * ws)[b];
        k45_subblocks(blk, &q[0][r], 8);
        const __m128i v = unpack_scales_k4(blk.scales);  // 6-bit: as int8, >= 0
        sc[r] = scale_pairs(v, 0);
        mn[r] = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(v, v)));
        p.d[size_t(b * 8 + r)] = fp16(blk.d);
        p.dmin[size_t(b * 8 + r)] = fp16(blk.dmin);
      } else {
        for (int j = 0; j < 8; ++j) q[j][r] = _mm256_setzero_si256();
        sc[r] = mn[r] = _mm256_setzero_si256();
        p.d[size_t(b * 8 + r)] = p.dmin[size_t(b * 8 + r)] = 0.0f;
      }
    }
    for (int j = 0; j < 8; ++j) transpose_8x8_epi32(q[j], &p.v[size_t(b * 64 + 8 * j)]);
    transpose_8x8_epi32(sc, &p.sc[size_t(b * 8)]);
    Quants32 m[8];
    transpose_8x8_epi32(mn, m);
    std::copy(m, m + 4, &p.mn[size_t(b * 4)]);
  }
}

// y[c * ys + r] for r < rm, c < RN: a packed 8-row Q4_K (kFive: Q5_K) tile times columns
// c0..c0+RN.
template <int RN, bool kFive = false>
inline void lane_tile_k(int64_t nb, const LaneRowsK& w, int rm, const LaneActsK& a, int64_t nc, int64_t c0,
                        float* y, int64_t ys) {
  __m256 acc[RN];
  for (int c = 0; c < RN; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Quants32* v = &w.v[size_t(b * 64)];
    const BlockQ8_K* ab = &a.q[size_t(b * nc + c0)];
    __m256i sumi[RN];
    for (int c = 0; c < RN; ++c) sumi[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      __m256i V[8];
      #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) V[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(v[8 * j + k].q));
      const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[size_t(b * 8 + j)].q));
      #pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) {
        const int32_t* q4 = reinterpret_cast<const int32_t*>(ab[c].qs + 32 * j);  // 4-byte aligned
        if constexpr (kFive) {  // groups 0..3 and 4..7 summed in int16 apart (quants up to 31)
          __m256i s[2];
          #pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            s[h] = _mm256_maddubs_epi16(V[4 * h], _mm256_set1_epi32(q4[4 * h]));
            #pragma GCC unroll 4
            for (int k = 1; k < 4; ++k)
              s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(V[4 * h + k], _mm256_set1_epi32(q4[4 * h + k])));
          }
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(_mm256_madd_epi16(s[0], sc), _mm256_madd_epi16(s[1], sc)));
        } else {
          __m256i s = _mm256_maddubs_epi16(V[0], _mm256_set1_epi32(q4[0]));
          #pragma GCC unroll 8
          for (int k = 1; k < 8; ++k)
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(V[k], _mm256_set1_epi32(q4[k])));
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(s, sc));
        }
      }
    }
    const __m256 d = _mm256_loadu_ps(&w.d[size_t(b * 8)]);
    const __m256 dmin = _mm256_loadu_ps(&w.dmin[size_t(b * 8)]);
    const int32_t* bs2 = &a.bs2[size_t(b * nc + c0) * 4];
    #pragma GCC unroll 8
    for (int c = 0; c < RN; ++c) {
      __m256i summ = _mm256_setzero_si256();
      for (int q = 0; q < 4; ++q)
        summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(
                                                           w.mn[size_t(b * 4 + q)].q)),
                                                       _mm256_set1_epi32(bs2[4 * c + q])));
      const __m256 da = _mm256_set1_ps(ab[c].d);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_mul_ps(d, da), acc[c]);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(dmin, da)),
                               acc[c]);
    }
  }
  for (int c = 0; c < RN; ++c) store_lanes(y + c * ys, acc[c], rm);
}

// ---- Q6_K batches in lane order -------------------------------------------------------------
//
// Per output, per super-block: acc = fma(float(sumi), d * da, acc), sumi = sum over the 16
// sub-blocks s of sc_s * (int dot of the 16 quants, 0..63) - 32 * sum_s sc_s * bsums[s].
// Tile per super-block: v[8 j + k] as for Q4_K (32-element chunk j; groups k < 4 are
// sub-block 2j, k >= 4 sub-block 2j + 1); sc[s] int16 lanes 2r, 2r+1 = sc_s of row r;
// scp[p] int16 lanes 2r, 2r+1 = sc_2p, sc_2p+1 of row r (for the bias); d per row. Quants
// up to 63 allow only two maddubs per int16 sum (2 * 2 * 63 * 128 = 32256).
struct LaneRowsQ6 {
  TuVector<Quants32> v;    // [b * 64 + 8 j + k]
  TuVector<Quants32> sc;   // [b * 16 + s]
  TuVector<Quants32> scp;  // [b * 8 + p]
  TuVector<float> d;       // [b * 8 + r]
};

inline void lane_pack_rows_q6_k(int64_t nb, const uint8_t* w, size_t ws, int rm, LaneRowsQ6& p) {
  if (p.v.size() < size_t(nb * 64)) {
    p.v.resize(size_t(nb * 64));
    p.sc.resize(size_t(nb * 16));
    p.scp.resize(size_t(nb * 8));
    p.d.resize(size_t(nb * 8));
  }
  for (int64_t b = 0; b < nb; ++b) {
    // Row r's quants, its scales sc_0..sc_7 and sc_8..sc_15 each doubled into an int32
    // (int16 lanes 2r, 2r + 1 after the transpose), and its scale pairs (sc_2p, sc_2p+1).
    __m256i q[8][8], lo[8], hi[8], pairs[8];  // q: [j][r]
    for (int r = 0; r < 8; ++r) {
      if (r < rm) {
        const BlockQ6_K& blk = reinterpret_cast<const BlockQ6_K*>(w + r * ws)[b];
        __m256i k[8];
        for (int h = 0; h < 2; ++h) q6_k_quants(blk, h, k + 4 * h);
        for (int j = 0; j < 8; ++j) q[j][r] = k[j];
        const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
        pairs[r] = _mm256_cvtepi8_epi16(s);
        lo[r] = scale_pairs(s, 0);
        hi[r] = scale_pairs(s, 1);
        p.d[size_t(b * 8 + r)] = fp16(blk.d);
      } else {
        for (int j = 0; j < 8; ++j) q[j][r] = _mm256_setzero_si256();
        pairs[r] = lo[r] = hi[r] = _mm256_setzero_si256();
        p.d[size_t(b * 8 + r)] = 0.0f;
      }
    }
    for (int j = 0; j < 8; ++j) transpose_8x8_epi32(q[j], &p.v[size_t(b * 64 + 8 * j)]);
    transpose_8x8_epi32(lo, &p.sc[size_t(b * 16)]);
    transpose_8x8_epi32(hi, &p.sc[size_t(b * 16 + 8)]);
    transpose_8x8_epi32(pairs, &p.scp[size_t(b * 8)]);
  }
}

template <int RN>
inline void lane_tile_q6(int64_t nb, const LaneRowsQ6& w, int rm, const LaneActsK& a, int64_t nc, int64_t c0,
                         float* y, int64_t ys) {
  __m256 acc[RN];
  for (int c = 0; c < RN; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Quants32* v = &w.v[size_t(b * 64)];
    const BlockQ8_K* ab = &a.q[size_t(b * nc + c0)];
    __m256i sumi[RN];
    for (int c = 0; c < RN; ++c) sumi[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      __m256i V[8];
      #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) V[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(v[8 * j + k].q));
      const __m256i s0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[size_t(b * 16 + 2 * j)].q));
      const __m256i s1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[size_t(b * 16 + 2 * j + 1)].q));
      #pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) {
        const int32_t* q4 = reinterpret_cast<const int32_t*>(ab[c].qs + 32 * j);  // 4-byte aligned
        __m256i t[4];
        #pragma GCC unroll 4
        for (int h = 0; h < 4; ++h)
          t[h] = _mm256_add_epi16(_mm256_maddubs_epi16(V[2 * h], _mm256_set1_epi32(q4[2 * h])),
                                  _mm256_maddubs_epi16(V[2 * h + 1], _mm256_set1_epi32(q4[2 * h + 1])));
        const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(t[0], s0), _mm256_madd_epi16(t[1], s0));
        const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(t[2], s1), _mm256_madd_epi16(t[3], s1));
        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(lo, hi));
      }
    }
    const __m256 d = _mm256_loadu_ps(&w.d[size_t(b * 8)]);
    #pragma GCC unroll 8
    for (int c = 0; c < RN; ++c) {
      int32_t bp[8];
      std::memcpy(bp, ab[c].bsums, sizeof bp);
      __m256i bias = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t)
        bias = _mm256_add_epi32(bias, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(
                                                            w.scp[size_t(b * 8 + t)].q)),
                                                        _mm256_set1_epi32(bp[t])));
      const __m256i q = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(bias, 5));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_mul_ps(d, _mm256_set1_ps(ab[c].d)), acc[c]);
    }
  }
  for (int c = 0; c < RN; ++c) store_lanes(y + c * ys, acc[c], rm);
}

template <int RN>
struct TileQ4K {
  static void run(int64_t nb, const LaneRowsK& w, int rm, const LaneActsK& a, int64_t nc, int64_t c0, float* y,
                  int64_t ys) {
    lane_tile_k<RN>(nb, w, rm, a, nc, c0, y, ys);
  }
};

template <int RN>
struct TileQ5K {
  static void run(int64_t nb, const LaneRowsK& w, int rm, const LaneActsK& a, int64_t nc, int64_t c0, float* y,
                  int64_t ys) {
    lane_tile_k<RN, true>(nb, w, rm, a, nc, c0, y, ys);
  }
};

template <int RN>
struct TileQ6K {
  static void run(int64_t nb, const LaneRowsQ6& w, int rm, const LaneActsK& a, int64_t nc, int64_t c0, float* y,
                  int64_t ys) {
    lane_tile_q6<RN>(nb, w, rm, a, nc, c0, y, ys);
  }
};

// Q4_K's (and Q5_K's) lane GEMM prefetches the next row tile on the AVX-512 table only: on the AVX2 table
// it measured 6% slower with it (Zen 4 forced to AVX2, the 1B shape's pp512, perf samples of
// the GEMM, 2 alternations: 26.2k against 24.6k), while AVX-512 Q4_K and both tables' Q4_0 /
// Q6_K gain 4-12% (docs/BENCHMARKS.md, "Zen 4 and the AVX2 table against the binary before").
#if defined(__AVX512F__)
inline constexpr bool kQ4KPrefetchRows = true;
#else
inline constexpr bool kQ4KPrefetchRows = false;
#endif

// Activation chunks of the super-block lane GEMMs (Q4_K, Q5_K, Q6_K here; Q2_K, Q3_K, IQ4_XS
// in avx2_lowbit_lanes.h): packing an 8-row tile (decode, transposes) is repeated per chunk,
// and chunks 4x kGemmChunkBytes measured faster: 1B-shape pp512 Q3_K 7% (Zen 4, 1 MiB of L2
// a core), Q4_K 10-15% and Q6_K 4-7% (Zen 3, 512 KiB). super_col_bytes is the col_bytes
// that makes gemm_lanes' kGemmChunkBytes chunks hold kSuperChunkBytes.
constexpr size_t kSuperChunkBytes = 4 * kGemmChunkBytes;
inline size_t super_col_bytes(int64_t nb) {
  return size_t(nb) * (sizeof(BlockQ8_K) + 16) * kGemmChunkBytes / kSuperChunkBytes;
}

// Rows [r0, r1) x all n_batch activation rows. Each group of up to 4 weight rows is decoded
// once per super-block and reused for up to kGroup activation rows. (Q4_K, Q5_K and Q6_K
// batches of kGemmMinBatch or more take the lane-order gemm_lanes.)
template <class D>
void matmul_k(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
              size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t nb = n / kQK_K;
  if (n_batch == 1) {
    for (int64_t r = r0; r < r1; ++r) y[r] = vec_dot_k<D>(n, w + r * row_stride, x);
    return;
  }
  if (n_batch >= kGemmMinBatch && ::kernels::lane_order()) {
    const size_t col_bytes = super_col_bytes(nb);
    if constexpr (std::is_same_v<D, DecQ4_K>)
      return gemm_lanes<LaneActsK, lane_pack_acts_k, LaneRowsK, lane_pack_rows_k<BlockQ4_K>, TileQ4K, 4,
                        kQ4KPrefetchRows>(nb, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride, col_bytes);
    if constexpr (std::is_same_v<D, DecQ5_K>)
      return gemm_lanes<LaneActsK, lane_pack_acts_k, LaneRowsK, lane_pack_rows_k<BlockQ5_K>, TileQ5K, 4,
                        kQ4KPrefetchRows>(nb, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride, col_bytes);
    if constexpr (std::is_same_v<D, DecQ6_K>)
      return gemm_lanes<LaneActsK, lane_pack_acts_k, LaneRowsQ6, lane_pack_rows_q6_k, TileQ6K, 4>(
          nb, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride, col_bytes);
  }
  constexpr int kRows = 4, kGroup = 16;
  for (int64_t r = r0; r < r1; r += kRows) {
    const int rm = static_cast<int>(r1 - r < kRows ? r1 - r : kRows);
    for (int64_t c0 = 0; c0 < n_batch; c0 += kGroup) {
      const int rn = static_cast<int>(n_batch - c0 < kGroup ? n_batch - c0 : kGroup);
      AccK acc[kRows][kGroup];
      DecodedK k[kRows];
      for (int64_t b = 0; b < nb; ++b) {
        for (int i = 0; i < rm; ++i)
          D::decode(reinterpret_cast<const typename D::W*>(w + (r + i) * row_stride)[b], k[i]);
        for (int c = 0; c < rn; ++c) {
          const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(x + (c0 + c) * xq_stride)[b];
          for (int i = 0; i < rm; ++i) dot_k<D>(k[i], a, acc[i][c]);
        }
      }
      for (int i = 0; i < rm; ++i)
        for (int c = 0; c < rn; ++c) y[(c0 + c) * y_stride + r + i] = finish_k<D>(acc[i][c]);
    }
  }
}

}  // namespace
}  // namespace kernels::cpu::avx2
