// neon.cc: the AArch64 Advanced SIMD kernels for every core (plain NEON, no extensions:
// Cortex-A72 / Pi 4 up): the weight types' matrix x vector tiles of neon_table.h with the
// widening-multiply integer dot, and the Q8_0 / Q8_1 / F16 activation quantizers. The
// dot-product level (neon_dotprod.cc) layers its own tiles over these; entries left null
// (Q2_K, Q3_K, the Q8_K and BF16 quantizers) fall back to the scalar reference, as on x86.
// On x86 this file compiles to nothing.
#if defined(__aarch64__)
#include "kernels/cpu/neon_table.h"

namespace kernels::cpu {
namespace neon {
namespace {

// 32 floats -> 32 int8 as avx2's quantize_block32 (ggml's x86 quantize_row_q8_0): d = amax
// / 127, q = x * (127 / amax) rounded half to even; returns d and the sum of q.
inline float quantize_block32(const float* x, int8_t* qs, int* sum) {
  float32x4_t v[8];
  float32x4_t amax = vdupq_n_f32(0.0f);
  for (int k = 0; k < 8; ++k) {
    v[k] = vld1q_f32(x + 4 * k);
    amax = vmaxq_f32(amax, vabsq_f32(v[k]));
  }
  const float amax_s = vmaxvq_f32(amax);
  const float d = amax_s / 127.f;
  const float id = amax_s != 0.0f ? 127.f / amax_s : 0.0f;
  int32x4_t s = vdupq_n_s32(0);
  for (int k = 0; k < 8; k += 2) {
    const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[k], id)), b = vcvtnq_s32_f32(vmulq_n_f32(v[k + 1], id));
    s = vaddq_s32(s, vaddq_s32(a, b));
    vst1_s8(qs + 4 * k, vmovn_s16(vcombine_s16(vmovn_s32(a), vmovn_s32(b))));
  }
  *sum = vaddvq_s32(s);
  return d;
}

inline uint16_t to_fp16(float f) {
  const __fp16 h = static_cast<__fp16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

void quantize_q8_0(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sum;
    y[b].d = to_fp16(quantize_block32(x + b * kQK, y[b].qs, &sum));
  }
}

void quantize_q8_1(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(out);
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sum;
    const float d = quantize_block32(x + b * kQK, y[b].qs, &sum);
    y[b].d = to_fp16(d);
    y[b].s = to_fp16(sum * d);
  }
}

void quantize_f16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) y[i] = to_fp16(x[i]);
}

}  // namespace
}  // namespace neon

const KernelTable& neon_table() {
  static const KernelTable table = [] {
    KernelTable t = neon::fill_table<neon::MullDot>();
    t.quantize[slot(tensor::Type::Q8_0)] = neon::quantize_q8_0;
    t.quantize[slot(tensor::Type::Q8_1)] = neon::quantize_q8_1;
    t.quantize[slot(tensor::Type::F16)] = neon::quantize_f16;
    return t;
  }();
  return table;
}

}  // namespace kernels::cpu
#endif  // __aarch64__
