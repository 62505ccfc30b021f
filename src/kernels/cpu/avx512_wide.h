// avx512_wide.h: private to kernels/cpu/avx512.cc: 512-bit forms of the K-quant matrix x
// vector (Q4_K, Q5_K, Q6_K; issue 30 items 1 and 3), for cores that issue 512-bit operations
// whole (Intel Xeon since Skylake-SP). Each step of avx2_kfused.h's FusedQ45K / FusedQ6K
// dot takes two of its 32-element chunks at once: one zmm holds chunk 2p in its low half and
// chunk 2p + 1 in its high half, its activations are the next 64 bytes, its int16 scales
// the two chunks' own. The int32 lanes of the two halves are added at the end, so each of
// the 8 int32 lanes holds the same integer as the 256-bit form (exact: no overflow), and
// the float steps after it are the same calls: every output equals the 256-bit form's to
// the bit (KernelsAvx512.WideKQuantFormsEqualNarrow). Only dot (matrix x vector and
// vec_dot) is wide; the decode batches' dot_cols stay the 256-bit ones. Which form the
// avx512 table uses is chosen per CPU at start (avx512.cc, avx512_kquant_width).
#pragma once
#include "kernels/cpu/avx2_kfused.h"

namespace kernels::cpu::avx512 {
namespace {

using namespace avx2;

// The zero-masked forms below: GCC 12 warns that the plain intrinsics' undefined operands
// "may be used uninitialized" (-Werror).
// A zmm of halves lo and hi.
inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_maskz_inserti64x4(__mmask8(0xFF), _mm512_castsi256_si512(lo), hi, 1);
}
// Sum of a zmm's two halves' int32 lanes.
inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(__mmask8(0xF), v, 0),
                          _mm512_maskz_extracti64x4_epi64(__mmask8(0xF), v, 1));
}
// The 128-bit x in all four lanes.
inline __m512i broadcast4(__m128i x) { return _mm512_maskz_broadcast_i32x4(__mmask16(0xFFFF), x); }

// Q4_K / Q5_K: chunks 2c (low nibbles) and 2c + 1 (high nibbles) of 32-byte group c.
template <class F>
struct WideQ45K : F {
  template <class Scale>
  static void dot(const typename F::W& b, const BlockQ8_K& a, AccK& acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    const __m256i mins_and_scales = _mm256_cvtepu8_epi16(unpack_scales_k4(b.scales));
    const __m128i mins16 = _mm256_extracti128_si256(mins_and_scales, 1);
    const __m512i scales = broadcast4(_mm256_castsi256_si128(mins_and_scales));
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (F::kQ5) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    auto fifth = [&](__m256i q, int j) SHARDLM_INLINE {
      if constexpr (!F::kQ5) return q;
      return _mm256_or_si256(
          q, _mm256_and_si256(j <= 4 ? _mm256_slli_epi16(hbits, 4 - j) : _mm256_srli_epi16(hbits, j - 4), bit4));
    };
    __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      const __m512i q = join(fifth(_mm256_and_si256(bits, m4), 2 * c),
                             fifth(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), 2 * c + 1));
      const __m512i s = _mm512_shuffle_epi8(scales, join(scale_shuffle_k4(2 * c), scale_shuffle_k4(2 * c + 1)));
      const __m512i qa = _mm512_loadu_si512(a.qs + 64 * c);
      sum[c % 2] = _mm512_dpwssd_epi32(sum[c % 2], s, _mm512_maddubs_epi16(q, qa));
    }
    const __m256i sumi = fold(_mm512_add_epi32(sum[0], sum[1]));
    const float d = fp16(b.d), dmin = fp16(b.dmin);
    const __m128i mins = _mm_madd_epi16(mins16, bsum_pairs(a));
    acc.v = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(sumi), acc.v);
    if constexpr (F::kQ5) add_q5_k_mins(mins, -dmin * a.d, acc);
    else acc.m = _mm_fmadd_ps(_mm_set1_ps(-dmin * a.d), _mm_cvtepi32_ps(mins), acc.m);
  }
};

// Q6_K: chunks 4h + 2p and 4h + 2p + 1 (16-element scales 8h + 4p .. 8h + 4p + 3).
struct WideQ6K : FusedQ6K {
  template <class Scale>
  static void dot(const W& b, const BlockQ8_K& a, AccK& acc) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m128i half = h == 0 ? _mm256_castsi256_si128(sc16) : _mm256_extracti128_si256(sc16, 1);
      const __m512i scales = broadcast4(half);  // scales 8h .. 8h+7 in every 128-bit lane
      __m256i q[4];
      q6_k_quants(b, h, q);
      #pragma GCC unroll 2
      for (int p = 0; p < 2; ++p) {
        const __m512i s = _mm512_shuffle_epi8(
            scales, join(scale_shuffle(4 * p, 4 * p + 1), scale_shuffle(4 * p + 2, 4 * p + 3)));
        const __m512i qa = _mm512_loadu_si512(a.qs + 128 * h + 64 * p);
        sum[p] = _mm512_dpwssd_epi32(sum[p], s, _mm512_maddubs_epi16(join(q[2 * p], q[2 * p + 1]), qa));
      }
    }
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums));
    const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 5);  // the +32 of every quant
    const __m256i sumi = fold(_mm512_add_epi32(sum[0], sum[1]));
    acc.v = _mm256_fmadd_ps(_mm256_set1_ps(fp16(b.d) * a.d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, bias)),
                            acc.v);
  }
};

}  // namespace
}  // namespace kernels::cpu::avx512
