// neon.cc: the AArch64 NEON kernels. On x86 this file compiles to nothing. For now it
// provides the 32-element-block vec_dots (Q4_0, Q8_0 x Q8_0) and the F32 dot using
// vdotq_s32 when the dot-product extension is available (otherwise vmull/vpadal); every
// entry left null falls back to the scalar reference. Matmul uses the scalar driver
// over these vec_dots. Deliberately small: it cannot be run on the x86 dev machines,
// only cross-compiled; the same kernels_test cases cover it on an ARM machine.
#if defined(__ARM_NEON)
#include <arm_neon.h>

#include "kernels/cpu/kernel_table.h"
#include "util/fp16.h"

namespace kernels::cpu {
namespace neon {
namespace {

using namespace tensor;

inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t hi = vmull_s8(vget_high_s8(a), vget_high_s8(b));
  return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

float vec_dot_q4_0(int64_t n, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(x);
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8x16_t q = vld1q_u8(wb[b].qs);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    int32x4_t s = vdupq_n_s32(0);
    s = dot16(s, lo, vld1q_s8(ab[b].qs));
    s = dot16(s, hi, vld1q_s8(ab[b].qs + 16));
    const float d = util::fp16_to_f32(wb[b].d) * util::fp16_to_f32(ab[b].d);
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), d);
  }
  return vaddvq_f32(acc);
}

float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(x);
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32x4_t s = vdupq_n_s32(0);
    s = dot16(s, vld1q_s8(wb[b].qs), vld1q_s8(ab[b].qs));
    s = dot16(s, vld1q_s8(wb[b].qs + 16), vld1q_s8(ab[b].qs + 16));
    const float d = util::fp16_to_f32(wb[b].d) * util::fp16_to_f32(ab[b].d);
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), d);
  }
  return vaddvq_f32(acc);
}

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc0 = vfmaq_f32(acc0, vld1q_f32(a + i), vld1q_f32(b + i));
    acc1 = vfmaq_f32(acc1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
  }
  float s = vaddvq_f32(vaddq_f32(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <VecDotFn kDot>
void matmul_rows(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                 size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < n_batch; ++b)
      y[b * y_stride + r] = kDot(n, w + r * row_stride, x + b * xq_stride);
}

}  // namespace
}  // namespace neon

const KernelTable& neon_table() {
  static const KernelTable table = [] {
    using namespace neon;
    KernelTable t;
    t.vec_dot[slot(Type::Q4_0)] = vec_dot_q4_0;
    t.matmul[slot(Type::Q4_0)] = matmul_rows<vec_dot_q4_0>;
    t.vec_dot[slot(Type::Q8_0)] = vec_dot_q8_0;
    t.matmul[slot(Type::Q8_0)] = matmul_rows<vec_dot_q8_0>;
    t.vec_dot[slot(Type::F32)] = vec_dot_f32;
    t.matmul[slot(Type::F32)] = matmul_rows<vec_dot_f32>;
    return t;
  }();
  return table;
}

}  // namespace kernels::cpu
#endif  // __ARM_NEON
