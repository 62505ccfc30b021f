// avx2_common.h: private to kernels/cpu: AVX2 building blocks shared by avx2.cc and
// avx2_kquants.h (and reused by avx512.cc): horizontal sums, nibble / bit unpacking, the
// signed int8 dot, and per-type "block decoders" for the 32-element types. Include only
// from translation units compiled with -mavx2 -mfma -mf16c (the header #errors otherwise).
// Deliberately no tables and no exported symbols: everything is inline.
#pragma once
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "avx2_common.h needs -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/codebook.h"
#include "tensor/types.h"

namespace kernels::cpu::avx2 {
// Internal linkage: these are compiled with different -m flags in different files, so
// they must never be merged across translation units by the linker (ODR / SIGILL).
namespace {

using namespace tensor;

inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline int hsum_i32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 1));
  return _mm_cvtsi128_si32(x);
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high (16..31).
// (Broadcast load, one variable shift of the high lane, one and: 2 ALU uops.)
inline __m256i nibbles32(const uint8_t* p) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set (bit j -> byte j).
inline __m256i bits32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                         0x0101010101010101, 0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Sum of products of 32 signed bytes, as 8 int32 lanes (sign trick: |w| * sign(a, w)).
// Neither side may be -128 (our quantizers produce -127..127, as ggml's do).
inline __m256i dot_i8(__m256i w, __m256i a) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// Same for unsigned weights (0..127) times signed activations.
inline __m256i dot_u8(__m256i w, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}

// ---- 32-element block decoders: quants(b) is the block's 32 integer weights in element
// order; kSigned says whether they are signed; kHasMin types add m * activation.s.
// quants_u(b) is the same weights plus kOff as unsigned bytes (kOff > 0 only for the
// offset types Q4_0 / Q5_0): the int dot is then u8dot(quants_u, a) - u8dot(kOff, a),
// exactly the same int32 lanes (no saturation: 31 * 127 * 2 < 32767) for fewer uops.
struct DecQ4_0 {
  using W = BlockQ4_0; using A = BlockQ8_0;
  static constexpr bool kSigned = true, kHasMin = false;
  static constexpr int kOff = 8;
  static __m256i quants(const W& b) { return _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8)); }
  static __m256i quants_u(const W& b) { return nibbles32(b.qs); }
  static float m(const W&) { return 0.0f; }
};
struct DecQ4_1 {
  using W = BlockQ4_1; using A = BlockQ8_1;
  static constexpr bool kSigned = false, kHasMin = true;
  static __m256i quants(const W& b) { return nibbles32(b.qs); }
  static constexpr int kOff = 0;
  static __m256i quants_u(const W& b) { return quants(b); }
  static float m(const W& b) { return fp16(b.m); }
};
struct DecQ5_0 {
  using W = BlockQ5_0; using A = BlockQ8_0;
  static constexpr bool kSigned = true, kHasMin = false;
  static __m256i quants(const W& b) {
    // (q4 | bit<<4) - 16 == q4 | (bit ? 0x00 : 0xF0) as int8
    const __m256i hi = _mm256_andnot_si256(bits32(b.qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
    return _mm256_or_si256(nibbles32(b.qs), hi);
  }
  static constexpr int kOff = 16;
  static __m256i quants_u(const W& b) {
    return _mm256_or_si256(nibbles32(b.qs), _mm256_and_si256(bits32(b.qh), _mm256_set1_epi8(0x10)));
  }
  static float m(const W&) { return 0.0f; }
};
struct DecQ5_1 {
  using W = BlockQ5_1; using A = BlockQ8_1;
  static constexpr bool kSigned = false, kHasMin = true;
  static __m256i quants(const W& b) {
    return _mm256_or_si256(nibbles32(b.qs), _mm256_and_si256(bits32(b.qh), _mm256_set1_epi8(0x10)));
  }
  static constexpr int kOff = 0;
  static __m256i quants_u(const W& b) { return quants(b); }
  static float m(const W& b) { return fp16(b.m); }
};
struct DecQ8_0 {
  using W = BlockQ8_0; using A = BlockQ8_0;
  static constexpr bool kSigned = true, kHasMin = false;
  static __m256i quants(const W& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
  static constexpr int kOff = 0;
  static __m256i quants_u(const W& b) { return quants(b); }
  static float m(const W&) { return 0.0f; }
};

// The float scale of a 32-element weight block: its fp16 d, or MXFP4's E8M0 exponent.
template <class W>
inline float block_d(const W& b) { return fp16(b.d); }
inline float block_d(const BlockMXFP4& b) { return e8m0_to_fp32_half(b.e); }

inline float act_s(const BlockQ8_0&) { return 0.0f; }
inline float act_s(const BlockQ8_1& a) { return fp16(a.s); }

// The AVX2 integer-dot policy (avx512.cc has a VNNI one with the same interface).
struct MaddubsDot {
  static __m256i i8(__m256i w, __m256i a) { return dot_i8(w, a); }
  static __m256i u8(__m256i w, __m256i a) { return dot_u8(w, a); }
  static __m256i u8_acc(__m256i acc, __m256i w, __m256i a) { return _mm256_add_epi32(acc, dot_u8(w, a)); }
};

template <class D, class Dot>
inline __m256i dot_block(__m256i qw, __m256i qa) {
  if constexpr (D::kSigned) return Dot::i8(qw, qa);
  else return Dot::u8(qw, qa);
}

// ---- float "decoders": 8 elements at a time as __m256, plus a scalar for tails.
struct DecF32 {
  using E = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float one(const float* p) { return *p; }
};
struct DecF16 {
  using E = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float one(const uint16_t* p) { return fp16(*p); }
};
struct DecBF16 {
  using E = uint16_t;
  static __m256 load8(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static float one(const uint16_t* p) {
    const uint32_t u = uint32_t(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

}  // namespace
}  // namespace kernels::cpu::avx2
