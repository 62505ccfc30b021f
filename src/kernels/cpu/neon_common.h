// neon_common.h: private to kernels/cpu: AArch64 Advanced SIMD building blocks shared by
// neon_tiles.h and neon_kquants.h: fp16 scales, the x86 kernels' 8-lane horizontal sum, the
// two integer-dot policies (plain widening multiplies, or sdot with the dot-product
// extension) and the 32-element block decoders. The arithmetic contract is the AVX2 one
// (avx2_common.h): a block's integer dot is 8 int32 lanes, lane k = the sum of the products
// of elements 4k..4k+3 (NEON holds them as two int32x4: elements 0..15 and 16..31), so
// the float operations that follow can be the x86 kernels' to the bit.
// Deliberately no tables and no exported symbols: everything is inline, internal linkage
// (the header is compiled with different -march flags in neon.cc and neon_dotprod.cc).
#pragma once
#if !defined(__aarch64__)
#error "neon_common.h is AArch64 only"
#endif
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "tensor/codebook.h"
#include "tensor/types.h"

namespace kernels::cpu::neon {
namespace {

using namespace tensor;

inline float fp16(uint16_t h) {
  __fp16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

// The 8 float lanes (lo = lanes 0..3, hi = 4..7) summed as avx2::hsum does:
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
inline float hsum8(float32x4_t lo, float32x4_t hi) {
  const float32x4_t x = vaddq_f32(lo, hi);
  const float32x2_t h = vadd_f32(vget_low_f32(x), vget_high_f32(x));  // x0 + x2, x1 + x3
  return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

// ((m0 + m2) + (m1 + m3)), as avx2's finish of Q4_K's four min lanes.
inline float hsum4(float32x4_t m) {
  const float32x2_t h = vadd_f32(vget_low_f32(m), vget_high_f32(m));
  return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

// Integer dots of 16 int8 pairs into 4 int32 lanes, lane k = products 4k..4k+3.
// kAccumulates: acc(c, a, b) = c + dot(a, b) in one instruction (sdot), which the K-quant
// tiles use to chain a super-block's dots (neon_kquants.h).
struct MullDot {  // plain Advanced SIMD (Cortex-A72): widening multiplies, pairwise adds
  static constexpr bool kAccumulates = false;
  static int32x4_t dot(int8x16_t a, int8x16_t b) {
    const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));  // 0+1, 2+3, 4+5, 6+7
    const int32x4_t hi = vpaddlq_s16(vmull_high_s8(a, b));
    return vpaddq_s32(lo, hi);
  }
};
#if defined(__ARM_FEATURE_DOTPROD)
struct SdotDot {  // the dot-product extension (Cortex-A76, Neoverse N1 / V1): one sdot
  static constexpr bool kAccumulates = true;
  static int32x4_t dot(int8x16_t a, int8x16_t b) { return vdotq_s32(vdupq_n_s32(0), a, b); }
  static int32x4_t acc(int32x4_t c, int8x16_t a, int8x16_t b) { return vdotq_s32(c, a, b); }
};
#endif

// 16 packed nibble bytes -> elements 0..15 (low nibbles) and 16..31 (high).
inline void nibbles(const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
  const uint8x16_t b = vld1q_u8(p);
  lo = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F)));
  hi = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
}

// The 32 bits of qh as 0x10 per element whose bit is set (bit j -> element j).
inline void fifth_bits(const uint8_t* qh, uint8x16_t& lo, uint8x16_t& hi) {
  uint32_t u;
  std::memcpy(&u, qh, 4);
  const uint8x8_t bytes = vcreate_u8(u);
  static const uint8_t kIdxLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static const uint8_t kIdxHi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t t = vcombine_u8(bytes, bytes), bit = vld1q_u8(kBit), m = vdupq_n_u8(0x10);
  lo = vandq_u8(vtstq_u8(vqtbl1q_u8(t, vld1q_u8(kIdxLo)), bit), m);
  hi = vandq_u8(vtstq_u8(vqtbl1q_u8(t, vld1q_u8(kIdxHi)), bit), m);
}

// ---- 32-element block decoders: quants(b, lo, hi) = the block's 32 integer weights in
// element order (0..15, 16..31) as int8; kHasMin types add m * activation.s per block.
struct DecQ4_0 {
  using W = BlockQ4_0; using A = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void quants(const W& b, int8x16_t& lo, int8x16_t& hi) {
    nibbles(b.qs, lo, hi);
    lo = vsubq_s8(lo, vdupq_n_s8(8));
    hi = vsubq_s8(hi, vdupq_n_s8(8));
  }
  static float m(const W&) { return 0.0f; }
};
struct DecQ4_1 {
  using W = BlockQ4_1; using A = BlockQ8_1;
  static constexpr bool kHasMin = true;
  static void quants(const W& b, int8x16_t& lo, int8x16_t& hi) { nibbles(b.qs, lo, hi); }
  static float m(const W& b) { return fp16(b.m); }
};
struct DecQ5_0 {
  using W = BlockQ5_0; using A = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void quants(const W& b, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t hl, hh;
    nibbles(b.qs, lo, hi);
    fifth_bits(b.qh, hl, hh);
    lo = vsubq_s8(vorrq_s8(lo, vreinterpretq_s8_u8(hl)), vdupq_n_s8(16));
    hi = vsubq_s8(vorrq_s8(hi, vreinterpretq_s8_u8(hh)), vdupq_n_s8(16));
  }
  static float m(const W&) { return 0.0f; }
};
struct DecQ5_1 {
  using W = BlockQ5_1; using A = BlockQ8_1;
  static constexpr bool kHasMin = true;
  static void quants(const W& b, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t hl, hh;
    nibbles(b.qs, lo, hi);
    fifth_bits(b.qh, hl, hh);
    lo = vorrq_s8(lo, vreinterpretq_s8_u8(hl));
    hi = vorrq_s8(hi, vreinterpretq_s8_u8(hh));
  }
  static float m(const W& b) { return fp16(b.m); }
};
struct DecQ8_0 {
  using W = BlockQ8_0; using A = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void quants(const W& b, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(b.qs);
    hi = vld1q_s8(b.qs + 16);
  }
  static float m(const W&) { return 0.0f; }
};

// A 32-element block's scale: its fp16 d, or MXFP4's E8M0 exponent (half, as the doubled
// values want: tensor/codebook.h).
template <class W>
inline float block_d(const W& b) { return fp16(b.d); }
inline float block_d(const BlockMXFP4& b) { return e8m0_to_fp32_half(b.e); }

inline float act_s(const BlockQ8_0&) { return 0.0f; }
inline float act_s(const BlockQ8_1& a) { return fp16(a.s); }

}  // namespace
}  // namespace kernels::cpu::neon
