// neon.cc: the AArch64 Advanced SIMD kernels for every core (plain NEON, no extensions:
// Cortex-A72 / Pi 4 up): the weight types' matrix x vector tiles of neon_table.h with the
// widening-multiply integer dot, and every activation quantizer (Q8_0, Q8_1, F16 as the
// x86 kernels; Q8_K and BF16 equal to the scalar reference byte for byte, as x86's Q8_K;
// x86 leaves BF16 to the reference). The dot-product level (neon_dotprod.cc) layers its own tiles
// over these. On x86 this file compiles to nothing.
#if defined(__aarch64__)
#include <cmath>

#include "kernels/cpu/neon_table.h"
#include "util/fp16.h"

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

// As ref::quantize_q8_k (ggml's quantize_row_q8_K_ref): max = the first element of the
// largest magnitude, iscale = -127 / max, q = min(127, nearest_int(iscale * x)) (ties to
// even, as vcvtn), the 16 sums of 16, d = 1 / iscale; an all-zero block is all zeros.
void quantize_q8_k(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(out);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float32x4_t am = vdupq_n_f32(0.0f);
    for (int j = 0; j < kQK_K; j += 4) am = vmaxnmq_f32(am, vabsq_f32(vld1q_f32(x + j)));  // NaN skipped, as ref
    const float amax = vmaxnmvq_f32(am);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    float max = 0.0f;
    for (int j = 0; j < kQK_K; ++j)
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    const float iscale = -127.f / max;
    const int32x4_t top = vdupq_n_s32(127);
    for (int j = 0; j < kQK_K; j += 16) {
      int32x4_t v[4];
      for (int k = 0; k < 4; ++k) v[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), iscale)), top);
      const int16x8_t h0 = vcombine_s16(vmovn_s32(v[0]), vmovn_s32(v[1])), h1 = vcombine_s16(vmovn_s32(v[2]), vmovn_s32(v[3]));
      vst1q_s8(y[i].qs + j, vcombine_s8(vmovn_s16(h0), vmovn_s16(h1)));
      y[i].bsums[j / 16] = static_cast<int16_t>(vaddvq_s32(vaddq_s32(vaddq_s32(v[0], v[1]), vaddq_s32(v[2], v[3]))));
    }
    y[i].d = 1 / iscale;
  }
}

// As util::f32_to_bf16: NaN kept quiet, otherwise round to nearest even.
void quantize_bf16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(x + i));
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    const uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fffu), odd)), 16);
    const uint32x4_t quiet = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(64));
    vst1_u16(y + i, vmovn_u32(vbslq_u32(nan, quiet, rounded)));
  }
  for (; i < n; ++i) y[i] = util::f32_to_bf16(x[i]);
}

}  // namespace
}  // namespace neon

const KernelTable& neon_table() {
  static const KernelTable table = [] {
    KernelTable t = neon::fill_table<neon::MullDot>();
    t.quantize[slot(tensor::Type::Q8_0)] = neon::quantize_q8_0;
    t.quantize[slot(tensor::Type::Q8_1)] = neon::quantize_q8_1;
    t.quantize[slot(tensor::Type::F16)] = neon::quantize_f16;
    t.quantize[slot(tensor::Type::Q8_K)] = neon::quantize_q8_k;
    t.quantize[slot(tensor::Type::BF16)] = neon::quantize_bf16;
    return t;
  }();
  return table;
}

}  // namespace kernels::cpu
#endif  // __aarch64__
