// avx2_lowbit.h: private to kernels/cpu, included by avx2.cc: the block decoders of the
// low-bit and codebook types, plugged into the loops that already exist:
//   IQ4_NL, MXFP4 (32 elements, x Q8_0): 32-element decoders for avx2_tiles.h (vec_dot_q,
//     the decode tiles and gemm_q): the 4-bit indices through a byte shuffle of the
//     16-value table give signed int8 weights (|w| <= 127, so the sign-trick int8 dot
//     applies; MXFP4's tiles take them + 12, unsigned); MXFP4's scale is its E8M0
//     exponent (block_d in avx2_common.h).
//   Q2_K, Q3_K, IQ4_XS (256 elements, x Q8_K): decoders into a DecodedK for
//     avx2_kquants.h (vec_dot_k, matmul_k), each with its own integer dot (D::dot):
//     Q2_K: unsigned 2-bit quants, 4-bit scales per 16, mins through the 16 bsums;
//     Q3_K: 3-bit quants + 4 (0..7), 6-bit signed scales per 16, the bias as Q6_K's;
//     IQ4_XS: signed codebook values, one 6-bit scale per 32.
//   Q2_K, Q3_K, IQ4_XS matrix x vector and decode batches: fused (FusedQ2K, FusedQ3K,
//     FusedIQ4XS for matmul_fused and matmul_cols, as Q4_K / Q6_K): the same int32 lanes
//     and float steps as the DecodedK dots, no DecodedK.
// Integer sums are exact, so results differ from kernels::ref only in float summation
// order (the kernels tests' 1e-5 relative bound). Prompt batches of 4 or more take the
// lane-order GEMMs of avx2_lowbit_lanes.h (vec_dot order here under --exact-batches).
#pragma once
#include <array>

#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/avx2_kfused.h"
#include "kernels/cpu/avx2_tiles.h"
#include "tensor/codebook.h"

namespace kernels::cpu::avx2 {
// Internal linkage: these are compiled with different -m flags in different files, so
// they must never be merged across translation units by the linker (ODR / SIGILL).
namespace {

// ---- 32-element codebook types --------------------------------------------------------

inline __m256i table16(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// kOffset > 0: the tiles multiply the unsigned values + kOffset by the activations and
// subtract kOffset times the activations' 4-byte lane sums once per block and column
// (avx2_tiles.h kOff): one vpdpbusd (or maddubs + madd) per row and block instead of the
// signed product's two sign flips first; the same int32 lanes, so the same bits. MXFP4
// (|v| <= 12) takes it: maddubs' pairs stay below 2 * 24 * 128, no saturation; IQ4_NL's
// values + 127 would saturate AVX2's maddubs.
template <class Block, const int8_t* kValues, int kOffset = 0>
struct DecCodebook32 {
  using W = Block; using A = BlockQ8_0;
  static constexpr bool kSigned = true, kHasMin = false;
  static constexpr bool kPairAcc = true;  // ggml's two accumulators (avx2_tiles.h pair_acc)
  static constexpr int kOff = kOffset;
  static constexpr std::array<int8_t, 16> kShifted = [] {
    std::array<int8_t, 16> u{};
    for (int i = 0; i < 16; ++i) u[i] = int8_t(kValues[i] + kOffset);
    return u;
  }();
  static __m256i table_u() { return table16(kShifted.data()); }  // quants_u's table (avx2_cb_pairs.h)
  static __m256i quants(const W& b) { return _mm256_shuffle_epi8(table16(kValues), nibbles32(b.qs)); }
  static __m256i quants_u(const W& b) {
    if constexpr (kOffset == 0) return quants(b);
    else return _mm256_shuffle_epi8(table16(kShifted.data()), nibbles32(b.qs));
  }
  static float m(const W&) { return 0.0f; }
};
using DecIQ4_NL = DecCodebook32<BlockIQ4_NL, kIQ4NLValues>;
using DecMXFP4 = DecCodebook32<BlockMXFP4, kMXFP4Values, 12>;
static_assert(DecMXFP4::kShifted[0] == 12 && DecMXFP4::kShifted[7] == 24 && DecMXFP4::kShifted[15] == 0);

// ---- 256-element types into a DecodedK ------------------------------------------------

// Sub-blocks of 16: scale of elements 0..15 of chunk j in int16 lanes 0..7, of 16..31 in 8..15.
inline __m256i scale_pair(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16(short(hi)), _mm_set1_epi16(short(lo))); }

inline __m256i sum_scaled(const DecodedK& k, const BlockQ8_K& a) {
  __m256i sumi = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) {
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * j));
    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(k.scale[j], _mm256_maddubs_epi16(k.q[j], qa)));
  }
  return sumi;
}

inline __m256i load_bsums(const BlockQ8_K& a) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums)); }

// Q2_K: element 128n + 32j + l = (qs[32n + l] >> 2j) & 3 (chunk 4n + j), sub-block s of 16
// has scale scales[s] & 15 and min scales[s] >> 4: sum = d * sumi - dmin * sum_s m_s bsums_s.
struct DecQ2_K {
  using W = BlockQ2_K;
  static void decode(const W& b, DecodedK& k) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; ++n) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * n));
      for (int j = 0; j < 4; ++j) k.q[4 * n + j] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
    }
    for (int j = 0; j < 8; ++j) k.scale[j] = scale_pair(b.scales[2 * j] & 15, b.scales[2 * j + 1] & 15);
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    k.aux = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
    k.d = fp16(b.d);
    k.dmin = fp16(b.dmin);
  }
  static void dot(const DecodedK& k, const BlockQ8_K& a, AccK& s) {
    const __m256i mins = _mm256_madd_epi16(k.aux, load_bsums(a));
    s.v = _mm256_fmadd_ps(_mm256_set1_ps(-k.dmin * a.d), _mm256_cvtepi32_ps(mins), s.v);  // mins first, as ggml
    s.v = _mm256_fmadd_ps(_mm256_set1_ps(k.d * a.d), _mm256_cvtepi32_ps(sum_scaled(k, a)), s.v);
  }
};

// Q3_K's 16 sub-block scales (ggml's 6-bit unpacking, minus 32) as int8 lanes 0..15, in a
// register (a 16-byte reload of four word stores would stall store forwarding).
inline __m128i q3_k_scales(const uint8_t* scales) {
  uint32_t aux[4];
  std::memcpy(aux, scales, 12);
  const uint32_t tmp = aux[2], km1 = 0x03030303, km2 = 0x0f0f0f0f;
  aux[2] = ((aux[0] >> 4) & km2) | (((tmp >> 4) & km1) << 4);
  aux[3] = ((aux[1] >> 4) & km2) | (((tmp >> 6) & km1) << 4);
  aux[0] = (aux[0] & km2) | (((tmp >> 0) & km1) << 4);
  aux[1] = (aux[1] & km2) | (((tmp >> 2) & km1) << 4);
  return _mm_sub_epi8(_mm_set_epi32(int(aux[3]), int(aux[2]), int(aux[1]), int(aux[0])), _mm_set1_epi8(32));
}

// Q3_K: element 128n + 32j + l has low bits (qs[32n + l] >> 2j) & 3 and, unless bit 4n + j
// of hmask[l] is set, -4: stored here as q + 4 = low | hbit << 2 (0..7), the -4 taken off
// through the bsums (as Q6_K's +32). Sub-block scales: ggml's 6-bit unpacking, minus 32.
struct DecQ3_K {
  using W = BlockQ3_K;
  static void decode(const W& b, DecodedK& k) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
    for (int n = 0; n < 2; ++n) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * n));
      for (int j = 0; j < 4; ++j) {
        const int c = 4 * n + j;
        const __m256i h = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(c)), one);
        k.q[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3), _mm256_slli_epi16(h, 2));
      }
    }
    const __m128i v = q3_k_scales(b.scales);
    alignas(16) int8_t sc[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), v);
    for (int j = 0; j < 8; ++j) k.scale[j] = scale_pair(sc[2 * j], sc[2 * j + 1]);
    k.aux = _mm256_cvtepi8_epi16(v);
    k.d = fp16(b.d);
    k.dmin = 0.0f;
  }
  // ggml's lanes: the -4 taken off per element pair in int16 (maddubs(q + 4, a) -
  // maddubs(4, a) = the pair's (q) a exactly), so lane l holds sc * (its elements' q a) only.
  static void dot(const DecodedK& k, const BlockQ8_K& a, AccK& s) {
    const __m256i m4 = _mm256_set1_epi8(4);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * j));
      const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(k.q[j], qa), _mm256_maddubs_epi16(m4, qa));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(k.scale[j], p16));
    }
    s.v = _mm256_fmadd_ps(_mm256_set1_ps(k.d * a.d), _mm256_cvtepi32_ps(sumi), s.v);
  }
};

// IQ4_XS: sub-block ib of 32 holds codebook indices in qs[16 ib..] (as IQ4_NL) and the
// 6-bit scale ls (tensor::iq4_xs_scale gives ls - 32), weight d * (ls - 32) * value.
struct DecIQ4_XS {
  using W = BlockIQ4_XS;
  static constexpr bool kDecodedAbove16 = true;  // avx2_kfused.h decoded_above_16
  static void decode(const W& b, DecodedK& k) {
    const __m256i values = table16(kIQ4NLValues);
    for (int ib = 0; ib < 8; ++ib) {
      k.q[ib] = _mm256_shuffle_epi8(values, nibbles32(b.qs + 16 * ib));
      k.scale[ib] = _mm256_set1_epi16(short(iq4_xs_scale(b, ib)));
    }
    k.aux = _mm256_setzero_si256();
    k.d = fp16(b.d);
    k.dmin = 0.0f;
  }
  static void dot(const DecodedK& k, const BlockQ8_K& a, AccK& s) {
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * j));
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(k.q[j], k.q[j]), _mm256_sign_epi8(qa, k.q[j]));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(k.scale[j], p16));
    }
    s.v = _mm256_fmadd_ps(_mm256_set1_ps(k.d * a.d), _mm256_cvtepi32_ps(sumi), s.v);
  }
};

// ---- Q2_K and Q3_K matrix x vector and decode batches: fused ---------------------------
// As FusedQ4K / FusedQ6K (avx2_kfused.h): the scales of chunk c (sub-blocks 2c, 2c+1)
// picked from one int16 vector by a byte shuffle, the quants unpacked and consumed in
// registers, no DecodedK. Every int32 lane gets the same integers as DecQ2_K::dot /
// DecQ3_K::dot (lane l: bytes 4l..4l+3 of each chunk times its scale; the min / bias
// term lane l from bsums 2l, 2l+1), and the float operations are theirs in their order,
// so matrix x vector and the decode batches equal matmul_k's batches to the bit.

// Quants of chunk 4n + j (j = 0..3) from the 32 bytes of qs half n: (bits >> 2j) & 3.
inline __m256i q2_bits(__m256i bits, int j) { return _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), _mm256_set1_epi8(3)); }

// halves[n]: the int16 scales 8n..8n+7 in both 128-bit lanes.
inline void scale_halves(__m256i sc16, __m256i* halves) {
  const __m128i lo = _mm256_castsi256_si128(sc16), hi = _mm256_extracti128_si256(sc16, 1);
  halves[0] = _mm256_set_m128i(lo, lo);
  halves[1] = _mm256_set_m128i(hi, hi);
}

// The activation quants of chunk 4n + j.
inline __m256i chunk_acts(const BlockQ8_K& a, int n, int j) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 128 * n + 32 * j));
}

// dot_cols (as FusedQ4K's, avx2_kfused.h): acc[c] += one block . activation block a[c] for
// c < N, each chunk's quants and scale vector built once for the N columns, two int32
// chains per column (chunk j into chain j % 2); one column is dot_cols<1>. matmul_cols runs them
// for decode batches (2-16 sequences in vec_dot order).
struct FusedQ2K {
  using W = BlockQ2_K;
  using D = DecQ2_K;
  template <class Scale, int N>
  static void dot_cols(const W& b, const BlockQ8_K* const* a, AccK* acc) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i m15 = _mm_set1_epi8(15);
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m15));
    __m256i halves[2];
    scale_halves(_mm256_cvtepu8_epi16(_mm_and_si128(sc, m15)), halves);
    __m256i sum[N][2];
    for (int c = 0; c < N; ++c) sum[c][0] = sum[c][1] = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * n));
      for (int j = 0; j < 4; ++j) {
        const __m256i q = q2_bits(bits, j);
        const __m256i scale = _mm256_shuffle_epi8(halves[n], scale_shuffle(2 * j, 2 * j + 1));
        for (int c = 0; c < N; ++c)
          sum[c][j % 2] = Scale::acc(sum[c][j % 2], scale, _mm256_maddubs_epi16(q, chunk_acts(*a[c], n, j)));
      }
    }
    const float d = fp16(b.d), dmin = fp16(b.dmin);
    for (int c = 0; c < N; ++c) {
      const __m256i mins = _mm256_madd_epi16(mins16, load_bsums(*a[c]));
      const __m256i sumi = _mm256_add_epi32(sum[c][0], sum[c][1]);
      acc[c].v = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * a[c]->d), _mm256_cvtepi32_ps(mins), acc[c].v);
      acc[c].v = _mm256_fmadd_ps(_mm256_set1_ps(d * a[c]->d), _mm256_cvtepi32_ps(sumi), acc[c].v);
    }
  }
};

struct FusedQ3K {
  using W = BlockQ3_K;
  using D = DecQ3_K;
  template <class Scale, int N>
  static void dot_cols(const W& b, const BlockQ8_K* const* a, AccK* acc) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(q3_k_scales(b.scales));
    __m256i halves[2];
    scale_halves(sc16, halves);
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
    const __m256i m4 = _mm256_set1_epi8(4);
    __m256i sum[N][2];
    for (int c = 0; c < N; ++c) sum[c][0] = sum[c][1] = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * n));
      for (int j = 0; j < 4; ++j) {
        const int k = 4 * n + j;  // bit k of hmask[l], moved to bit 2 (within each byte)
        const __m256i h = k < 2 ? _mm256_slli_epi16(hbits, 2 - k) : _mm256_srli_epi16(hbits, k - 2);
        const __m256i low = q2_bits(bits, j), four = _mm256_andnot_si256(h, m4);
        const __m256i scale = _mm256_shuffle_epi8(halves[n], scale_shuffle(2 * j, 2 * j + 1));
        for (int c = 0; c < N; ++c) {
          // ggml's int16 pairs: maddubs(low, a) - maddubs(4 where the high bit is clear, a)
          const __m256i qa = chunk_acts(*a[c], n, j);
          const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(low, qa), _mm256_maddubs_epi16(four, qa));
          sum[c][j % 2] = Scale::acc(sum[c][j % 2], scale, p16);
        }
      }
    }
    const float d = fp16(b.d);
    for (int c = 0; c < N; ++c) {
      const __m256i sumi = _mm256_add_epi32(sum[c][0], sum[c][1]);
      acc[c].v = _mm256_fmadd_ps(_mm256_set1_ps(d * a[c]->d), _mm256_cvtepi32_ps(sumi), acc[c].v);
    }
  }
};

// IQ4_XS, fused as Q2_K / Q3_K: sub-block ib's codebook values through the byte shuffle and
// its 6-bit scale - 32 as one int16 broadcast, the int8 dot with the sign trick: the
// integers and float steps of DecIQ4_XS::dot (ggml's iq4_xs lanes), no DecodedK.
struct FusedIQ4XS {
  using W = BlockIQ4_XS;
  using D = DecIQ4_XS;
  template <class Scale, int N>
  static void dot_cols(const W& b, const BlockQ8_K* const* a, AccK* acc) {
    const __m256i values = table16(kIQ4NLValues);
    __m256i sum[N][2];
    for (int c = 0; c < N; ++c) sum[c][0] = sum[c][1] = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const __m256i q = _mm256_shuffle_epi8(values, nibbles32(b.qs + 16 * ib));
      const __m256i aq = _mm256_sign_epi8(q, q);
      const __m256i scale = _mm256_set1_epi16(short(iq4_xs_scale(b, ib)));
      for (int c = 0; c < N; ++c) {
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[c]->qs + 32 * ib));
        sum[c][ib % 2] = Scale::acc(sum[c][ib % 2], scale, _mm256_maddubs_epi16(aq, _mm256_sign_epi8(qa, q)));
      }
    }
    const float d = fp16(b.d);
    for (int c = 0; c < N; ++c) {
      const __m256i sumi = _mm256_add_epi32(sum[c][0], sum[c][1]);
      acc[c].v = _mm256_fmadd_ps(_mm256_set1_ps(d * a[c]->d), _mm256_cvtepi32_ps(sumi), acc[c].v);
    }
  }
};

}  // namespace
}  // namespace kernels::cpu::avx2
