// attention_neon.cc: the flash-attention tile kernels (attention.h, attention_internal::
// TileKernels) in AArch64 Advanced SIMD, with cpu/attention_avx2.cc's arithmetic to the bit,
// so an ARM node's attention rounds as an x86 node's (issue 29, "one arithmetic"):
//   scores: per (query row, key) 8 float lanes (two float32x4), lane k += q * k over the
//     elements 8i + k (fused), or for a Q8_0 cache lane k = fma(dq * dk, float(int dot of
//     elements 4k..4k+3), lane k) per block; then avx2's reduce4 order ((l0 + l1) + (l2 + l3))
//     + ((l4 + l5) + (l6 + l7));
//   P.V: per element acc = fma(p_j, v_j, acc), keys in order;
//   exp: avx2's exp8 (the same clamps, Cody-Waite split, Cephes polynomial, fused steps) and
//     its 8-lane sum with a -inf padded tail; scale_max and the F16 round trip as avx2's.
// Plain ARMv8 NEON (no extension), chosen by neon_tile_kernels() when kernels::active_isa()
// is a NEON table. The register blocking of the AVX2 file is not copied: it does not change
// any output's operations. On x86 this file compiles to a null neon_tile_kernels().
#include "kernels/attention.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "tensor/types.h"

namespace kernels::attention_internal {
namespace {

using tensor::BlockQ8_0;

struct F8 {  // 8 float lanes, as one __m256
  float32x4_t lo, hi;
};

inline float fp16(uint16_t h) {
  __fp16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

// avx2's reduce4 of one vector: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
inline float reduce8(F8 a) {
  const float32x4_t p = vpaddq_f32(a.lo, a.hi);  // l0+l1, l2+l3, l4+l5, l6+l7
  const float32x4_t q = vpaddq_f32(p, p);
  return vgetq_lane_f32(q, 0) + vgetq_lane_f32(q, 1);
}

// 8 values of a row starting at element i, as F32 (avx2's load8).
template <KvFormat F>
inline F8 load8(const uint8_t* row, int i) {
  if constexpr (F == KvFormat::kF16) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(row) + i));
    return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
  } else if constexpr (F == KvFormat::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + i;
    return {vld1q_f32(p), vld1q_f32(p + 4)};
  } else {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + i / tensor::kQK;
    const int16x8_t q = vmovl_s8(vld1_s8(b->qs + i % tensor::kQK));
    const float d = fp16(b->d);
    return {vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), d),
            vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(q)), d)};
  }
}

template <KvFormat F>
float dot_float(const float* q, const uint8_t* k, int hd) {
  F8 acc{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (int i = 0; i < hd; i += 8) {
    const F8 kv = load8<F>(k, i);
    acc.lo = vfmaq_f32(acc.lo, vld1q_f32(q + i), kv.lo);
    acc.hi = vfmaq_f32(acc.hi, vld1q_f32(q + i + 4), kv.hi);
  }
  return reduce8(acc);
}

// Lane k = the products of elements 4k..4k+3 (avx2's maddubs + madd), exact.
inline int32x4_t dot4(int8x16_t a, int8x16_t b) {
  return vpaddq_s32(vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b))), vpaddlq_s16(vmull_high_s8(a, b)));
}

float dot_q8(const uint8_t* q, const uint8_t* k, int hd) {
  F8 acc{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  const auto* qb = reinterpret_cast<const BlockQ8_0*>(q);
  const auto* kb = reinterpret_cast<const BlockQ8_0*>(k);
  for (int b = 0; b < hd / tensor::kQK; ++b) {
    const float p = fp16(qb[b].d) * fp16(kb[b].d);
    const int32x4_t lo = dot4(vld1q_s8(qb[b].qs), vld1q_s8(kb[b].qs));
    const int32x4_t hi = dot4(vld1q_s8(qb[b].qs + 16), vld1q_s8(kb[b].qs + 16));
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(lo), p);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(hi), p);
  }
  return reduce8(acc);
}

void scores_neon(KvFormat f, const uint8_t* q, size_t q_row_bytes, int n_rows, const uint8_t* k,
                 size_t k_row_bytes, int n_keys, int hd, float* s, int ld) {
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* qr = q + size_t(r) * q_row_bytes;
    const auto* qf = reinterpret_cast<const float*>(qr);
    for (int j = 0; j < n_keys; ++j) {
      const uint8_t* kr = k + size_t(j) * k_row_bytes;
      float v = 0.0f;
      switch (f) {
        case KvFormat::kF16: v = dot_float<KvFormat::kF16>(qf, kr, hd); break;
        case KvFormat::kF32: v = dot_float<KvFormat::kF32>(qf, kr, hd); break;
        case KvFormat::kQ8_0: v = dot_q8(qr, kr, hd); break;
      }
      s[r * ld + j] = v;
    }
  }
}

// acc[r][d0 .. d0 + 8) += p[r][j] * v_j[same] for every key j, NR rows per converted V vector.
template <KvFormat F, int NR>
void accv_block(const float* p, int ld, const uint8_t* v, size_t v_row_bytes, int n_keys, int hd, float* acc) {
  for (int d0 = 0; d0 < hd; d0 += 8) {
    F8 a[NR];
    for (int r = 0; r < NR; ++r) a[r] = {vld1q_f32(acc + size_t(r) * hd + d0), vld1q_f32(acc + size_t(r) * hd + d0 + 4)};
    for (int j = 0; j < n_keys; ++j) {
      const F8 vv = load8<F>(v + size_t(j) * v_row_bytes, d0);
      for (int r = 0; r < NR; ++r) {
        const float pr = p[r * ld + j];
        a[r].lo = vfmaq_n_f32(a[r].lo, vv.lo, pr);
        a[r].hi = vfmaq_n_f32(a[r].hi, vv.hi, pr);
      }
    }
    for (int r = 0; r < NR; ++r) {
      vst1q_f32(acc + size_t(r) * hd + d0, a[r].lo);
      vst1q_f32(acc + size_t(r) * hd + d0 + 4, a[r].hi);
    }
  }
}

template <KvFormat F>
void accv_rows(const float* p, int ld, int n_rows, const uint8_t* v, size_t v_row_bytes, int n_keys, int hd,
               float* acc) {
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) accv_block<F, 4>(p + size_t(r) * ld, ld, v, v_row_bytes, n_keys, hd, acc + size_t(r) * hd);
  for (; r < n_rows; ++r) accv_block<F, 1>(p + size_t(r) * ld, ld, v, v_row_bytes, n_keys, hd, acc + size_t(r) * hd);
}

void accumulate_v_neon(KvFormat f, const float* p, int ld, int n_rows, const uint8_t* v, size_t v_row_bytes,
                       int n_keys, int hd, float* acc) {
  switch (f) {
    case KvFormat::kF16: accv_rows<KvFormat::kF16>(p, ld, n_rows, v, v_row_bytes, n_keys, hd, acc); break;
    case KvFormat::kF32: accv_rows<KvFormat::kF32>(p, ld, n_rows, v, v_row_bytes, n_keys, hd, acc); break;
    case KvFormat::kQ8_0: accv_rows<KvFormat::kQ8_0>(p, ld, n_rows, v, v_row_bytes, n_keys, hd, acc); break;
  }
}

// avx2's exp8, four lanes: the same operations in the same order.
inline float32x4_t exp4(float32x4_t x) {
  const uint32x4_t underflow = vcltq_f32(x, vdupq_n_f32(-87.33654f));
  x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.0f)), vdupq_n_f32(-87.33654f));
  const float32x4_t n = vrndmq_f32(vfmaq_f32(vdupq_n_f32(0.5f), x, vdupq_n_f32(1.44269504088896341f)));
  x = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  x = vfmsq_f32(x, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t y = vdupq_n_f32(1.9875691500e-4f);
  y = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), y, x);
  y = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), y, x);
  y = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), y, x);
  y = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), y, x);
  y = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), y, x);
  y = vfmaq_f32(vaddq_f32(x, vdupq_n_f32(1.0f)), y, vmulq_f32(x, x));
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t r = vmulq_f32(y, vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(r), underflow));
}

float exp_sum_neon(float* x, int n, float m) {
  const float32x4_t mv = vdupq_n_f32(m);
  F8 sum{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  auto step = [&](float* p) {
    const float32x4_t lo = exp4(vsubq_f32(vld1q_f32(p), mv)), hi = exp4(vsubq_f32(vld1q_f32(p + 4), mv));
    vst1q_f32(p, lo);
    vst1q_f32(p + 4, hi);
    sum.lo = vaddq_f32(sum.lo, lo);
    sum.hi = vaddq_f32(sum.hi, hi);
  };
  int i = 0;
  for (; i + 8 <= n; i += 8) step(x + i);
  if (i < n) {  // tail through a -inf padded buffer (exp gives 0 there)
    float tail[8];
    for (int j = 0; j < 8; ++j) tail[j] = i + j < n ? x[i + j] : -__builtin_inff();
    step(tail);
    for (int j = 0; i + j < n; ++j) x[i + j] = tail[j];
  }
  // avx2's: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
  const float32x4_t s4 = vaddq_f32(sum.lo, sum.hi);
  const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

float scale_max_neon(float* x, int n, float scale) {
  float32x4_t mx_lo = vdupq_n_f32(-__builtin_inff()), mx_hi = mx_lo;
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t lo = vmulq_n_f32(vld1q_f32(x + i), scale), hi = vmulq_n_f32(vld1q_f32(x + i + 4), scale);
    vst1q_f32(x + i, lo);
    vst1q_f32(x + i + 4, hi);
    mx_lo = vmaxq_f32(mx_lo, lo);
    mx_hi = vmaxq_f32(mx_hi, hi);
  }
  float m8[8];
  vst1q_f32(m8, mx_lo);
  vst1q_f32(m8 + 4, mx_hi);
  float m = m8[0];
  for (int j = 1; j < 8; ++j) m = std::max(m, m8[j]);
  for (; i < n; ++i) m = std::max(m, x[i] *= scale);
  return m;
}

// Round to F16 and back (round to nearest even, as util::f32_to_fp16 and F16C).
void round_f16_neon(float* x, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vcvt_f32_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) x[i] = static_cast<float>(static_cast<__fp16>(x[i]));
}

const TileKernels kNeonKernels = {scores_neon, accumulate_v_neon, scale_max_neon, exp_sum_neon, round_f16_neon};

}  // namespace

const TileKernels* neon_tile_kernels() {
  const Isa isa = active_isa();
  return (isa == Isa::kNeon || isa == Isa::kNeonDot || isa == Isa::kNeonI8mm) ? &kNeonKernels : nullptr;
}

}  // namespace kernels::attention_internal

#else  // not AArch64

namespace kernels::attention_internal {
const TileKernels* neon_tile_kernels() { return nullptr; }
}  // namespace kernels::attention_internal

#endif
