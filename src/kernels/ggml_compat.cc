// ggml_compat.cc: float ops in exactly ggml's x86 (AVX2+FMA+F16C) order of operations, so
// our activations round to the same int8 values as llama.cpp's and greedy tokens match:
// SiLU/SwiGLU with ggml_v_expf, GeGLU from ggml's F16 table of gelu, softmax with its 8-lane sums in double, and the F16 dot
// products of attention (4 accumulators of 8 lanes, fused multiply-add, ggml's reduction
// tree). Each op has an AVX2 version (target attributes, chosen at run time), a NEON one
// (AArch64's neon / dotprod / i8mm tables: the AVX2 version's 8 lanes as two float32x4, the
// same operations and reduction tree, so an ARM node's bits are x86's; issue 29) and a scalar
// one that performs the same IEEE operations with std::fma. Not here: anything that is
// already exact regardless of order (rmsnorm, rope, adds live in ops.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "util/fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SHARDLM_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace kernels {

namespace {

#if defined(__x86_64__)
bool use_avx2() { return runs_avx2(active_isa()); }
#endif
#if defined(__aarch64__)
bool use_neon() { return active_isa() != Isa::kScalar; }  // every AArch64 table is NEON
#endif

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// One lane of ggml_v_expf.
float expf_lane(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = bits(z) << 23;
  const float k = from_bits(e + bits(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126)) return std::fma(j, k, k);
  const uint32_t g = n <= 0 ? 0x82000000u : 0u;
  const float s1 = from_bits(g + 0x7f000000u);
  const float s2 = from_bits(e - g);
  if (std::fabs(n) > 192) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// ggml's reduction of 32 partial sums S[m] (m = index mod 32) to one float.
inline float reduce32(const float* s) {
  float q[8];
  for (int m = 0; m < 8; ++m) q[m] = (s[m] + s[m + 16]) + (s[m + 8] + s[m + 24]);
  const float u0 = q[0] + q[4], u1 = q[1] + q[5], u2 = q[2] + q[6], u3 = q[3] + q[7];
  return (u0 + u1) + (u2 + u3);
}

#if defined(__x86_64__)
SHARDLM_AVX2 __m256 v_expf(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256i c = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                     _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256i d = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
  return _mm256_or_ps(
      _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
      _mm256_andnot_ps(_mm256_castsi256_ps(d),
                       _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                    _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

SHARDLM_AVX2 int64_t swiglu_avx2(float* out, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1), v_expf(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  return i;
}

SHARDLM_AVX2 int64_t softmax_sum_avx2(float* x, int64_t n, float max, double* sum) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8) {
    const __m256 val = v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
    _mm256_storeu_ps(x + i, val);
    __m128 v2 = _mm_add_ps(_mm256_extractf128_ps(val, 1), _mm256_castps256_ps128(val));
    v2 = _mm_add_ps(v2, _mm_movehl_ps(v2, v2));
    v2 = _mm_add_ss(v2, _mm_movehdup_ps(v2));
    *sum += static_cast<double>(_mm_cvtss_f32(v2));
  }
  return i;
}

// sum += exp(x - max) over whole groups of 8 (each group's lanes summed in float).
SHARDLM_AVX2 int64_t sum_exp_avx2(const float* x, int64_t n, float max, double* sum) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8) {
    const __m256 val = v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
    __m128 v2 = _mm_add_ps(_mm256_extractf128_ps(val, 1), _mm256_castps256_ps128(val));
    v2 = _mm_add_ps(v2, _mm_movehl_ps(v2, v2));
    v2 = _mm_add_ss(v2, _mm_movehdup_ps(v2));
    *sum += static_cast<double>(_mm_cvtss_f32(v2));
  }
  return i;
}

SHARDLM_AVX2 float dot_f16_avx2(const uint16_t* x, const uint16_t* y, int64_t n) {
  const int64_t np = n & ~int64_t(31);
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j) {
      const __m256 ax = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8 * j)));
      const __m256 ay = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8 * j)));
      s[j] = _mm256_fmadd_ps(ax, ay, s[j]);
    }
  s[0] = _mm256_add_ps(s[0], s[2]);
  s[1] = _mm256_add_ps(s[1], s[3]);
  s[0] = _mm256_add_ps(s[0], s[1]);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s[0]), _mm256_extractf128_ps(s[0], 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  double sum = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
  for (int64_t i = np; i < n; ++i) sum += double(util::fp16_to_f32(x[i]) * util::fp16_to_f32(y[i]));
  return static_cast<float>(sum);
}

SHARDLM_AVX2 float dot_f32_avx2(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t(31);
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), s[j]);
  s[0] = _mm256_add_ps(s[0], s[2]);
  s[1] = _mm256_add_ps(s[1], s[3]);
  s[0] = _mm256_add_ps(s[0], s[1]);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s[0]), _mm256_extractf128_ps(s[0], 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  float sum = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

// acc[m][0..hd) += v[t][0..hd) * p[t] for t = m (mod 32), in increasing t, fused.
SHARDLM_AVX2 void weighted_rows_avx2(const uint16_t* v, size_t stride, const uint16_t* p, int64_t n, int hd,
                                     float* acc) {
  for (int64_t t = 0; t < n; ++t) {
    if (p[t] == 0) continue;  // fma(v, +0, acc) == acc for finite v
    const __m256 pt = _mm256_set1_ps(util::fp16_to_f32(p[t]));
    float* a = acc + (t % 32) * hd;
    const uint16_t* vr = v + t * stride;
    for (int i = 0; i < hd; i += 8) {
      const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + i)));
      _mm256_storeu_ps(a + i, _mm256_fmadd_ps(vv, pt, _mm256_loadu_ps(a + i)));
    }
  }
}
#endif


#if defined(__aarch64__)
// 4 lanes of v_expf above (ggml_v_expf), operation for operation.
float32x4_t v_expf(float32x4_t x) {
  const float32x4_t r = vdupq_n_f32(0x1.8p23f);
  const float32x4_t z = vfmaq_f32(r, x, vdupq_n_f32(0x1.715476p+0f));
  const float32x4_t n = vsubq_f32(z, r);
  const float32x4_t b = vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(0x1.62e4p-1f)), n, vdupq_n_f32(0x1.7f7d1cp-20f));
  const uint32x4_t e = vshlq_n_u32(vreinterpretq_u32_f32(z), 23);
  const float32x4_t k = vreinterpretq_f32_u32(vaddq_u32(e, vreinterpretq_u32_f32(vdupq_n_f32(1))));
  const uint32x4_t c = vcagtq_f32(n, vdupq_n_f32(126));
  const float32x4_t u = vmulq_f32(b, b);
  const float32x4_t j =
      vfmaq_f32(vmulq_f32(vdupq_n_f32(0x1.ffffecp-1f), b),
                vfmaq_f32(vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), b),
                          vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), b), u),
                u);
  if (!vmaxvq_u32(c)) return vfmaq_f32(k, j, k);
  const uint32x4_t g = vandq_u32(vclezq_f32(n), vdupq_n_u32(0x82000000u));
  const float32x4_t s1 = vreinterpretq_f32_u32(vaddq_u32(g, vdupq_n_u32(0x7f000000u)));
  const float32x4_t s2 = vreinterpretq_f32_u32(vsubq_u32(e, g));
  const uint32x4_t d = vcagtq_f32(n, vdupq_n_f32(192));
  return vbslq_f32(d, vmulq_f32(s1, s1), vbslq_f32(c, vmulq_f32(vfmaq_f32(s2, s2, j), s1), vfmaq_f32(k, k, j)));
}

// AVX2's sum of 8 lanes (lo, hi): ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
float hsum8(float32x4_t lo, float32x4_t hi) {
  const float32x4_t a = vaddq_f32(hi, lo);
  return vpadds_f32(vadd_f32(vget_low_f32(a), vget_high_f32(a)));
}

// AVX2's reduction of 4 accumulators of 8 lanes (s[j][0] lanes 0-3, s[j][1] lanes 4-7).
float reduce_4x8(float32x4_t (*s)[2]) {
  float32x4_t t[2];
  for (int h = 0; h < 2; ++h) t[h] = vaddq_f32(vaddq_f32(s[0][h], s[2][h]), vaddq_f32(s[1][h], s[3][h]));
  const float32x4_t t0 = vaddq_f32(t[0], t[1]);
  const float32x4_t p = vpaddq_f32(t0, t0);
  return vpadds_f32(vget_low_f32(p));
}

float32x4_t load_f16(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

int64_t swiglu_neon(float* out, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8)
    for (int h = 0; h < 8; h += 4) {
      const float32x4_t x = vld1q_f32(gate + i + h);
      const float32x4_t silu = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1), v_expf(vsubq_f32(vdupq_n_f32(0), x))));
      vst1q_f32(out + i + h, vmulq_f32(silu, vld1q_f32(up + i + h)));
    }
  return i;
}

// sum += exp(x - max) over whole groups of 8 (each group's lanes summed in float); store:
// x = exp(x - max) too (softmax).
template <bool kStore>
int64_t sum_exp_neon(float* x, int64_t n, float max, double* sum) {
  int64_t i = 0;
  const float32x4_t m = vdupq_n_f32(max);
  for (; i + 7 < n; i += 8) {
    const float32x4_t lo = v_expf(vsubq_f32(vld1q_f32(x + i), m)), hi = v_expf(vsubq_f32(vld1q_f32(x + i + 4), m));
    if constexpr (kStore) {
      vst1q_f32(x + i, lo);
      vst1q_f32(x + i + 4, hi);
    }
    *sum += static_cast<double>(hsum8(lo, hi));
  }
  return i;
}

float dot_f16_neon(const uint16_t* x, const uint16_t* y, int64_t n) {
  const int64_t np = n & ~int64_t(31);
  float32x4_t s[4][2];
  for (auto& a : s) a[0] = a[1] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h)
        s[j][h] = vfmaq_f32(s[j][h], load_f16(x + i + 8 * j + 4 * h), load_f16(y + i + 8 * j + 4 * h));
  double sum = reduce_4x8(s);
  for (int64_t i = np; i < n; ++i) sum += double(util::fp16_to_f32(x[i]) * util::fp16_to_f32(y[i]));
  return static_cast<float>(sum);
}

float dot_f32_neon(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t(31);
  float32x4_t s[4][2];
  for (auto& a : s) a[0] = a[1] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h)
        s[j][h] = vfmaq_f32(s[j][h], vld1q_f32(x + i + 8 * j + 4 * h), vld1q_f32(y + i + 8 * j + 4 * h));
  float sum = reduce_4x8(s);
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

// weighted_rows_avx2, 4 lanes at a time (hd % 8 == 0 as there, so the same rows skip).
void weighted_rows_neon(const uint16_t* v, size_t stride, const uint16_t* p, int64_t n, int hd, float* acc) {
  for (int64_t t = 0; t < n; ++t) {
    if (p[t] == 0) continue;  // fma(v, +0, acc) == acc for finite v
    const float32x4_t pt = vdupq_n_f32(util::fp16_to_f32(p[t]));
    float* a = acc + (t % 32) * hd;
    const uint16_t* vr = v + t * stride;
    for (int i = 0; i < hd; i += 4) vst1q_f32(a + i, vfmaq_f32(vld1q_f32(a + i), load_f16(vr + i), pt));
  }
}
#endif

}  // namespace

float ggml_expf(float x) { return expf_lane(x); }

void swiglu(float* out, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
#if defined(__x86_64__)
  if (use_avx2()) i = swiglu_avx2(out, gate, up, n);
#endif
#if defined(__aarch64__)
  if (use_neon()) i = swiglu_neon(out, gate, up, n);
#endif
  if (i == 0) {  // scalar: the same lane operations
    for (; i + 7 < n; i += 8)
      for (int l = 0; l < 8; ++l) {
        const float x = gate[i + l];
        out[i + l] = x / (1.0f + expf_lane(0.0f - x)) * up[i + l];
      }
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];  // ggml's scalar tail
}

float gelu(float x) {
  // As GCC compiles ggml_gelu_f32 (1 + a x x contracted to one fma): the table then equals
  // ggml_table_gelu_f16 in all 65536 entries (checked against libggml-cpu's table).
  const float inner = 0.79788456080286535587989211986876f * x * std::fma(0.044715f * x, x, 1.0f);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

namespace {
// ggml_table_gelu_f16: for every F16 value h, the F16 rounding of gelu(h).
const std::vector<uint16_t>& gelu_table() {
  static const std::vector<uint16_t> t = [] {
    std::vector<uint16_t> v(1 << 16);
    for (uint32_t h = 0; h < v.size(); ++h) v[h] = util::f32_to_fp16(gelu(util::fp16_to_f32(uint16_t(h))));
    return v;
  }();
  return t;
}
}  // namespace

void geglu(float* out, const float* gate, const float* up, int64_t n) {
  const std::vector<uint16_t>& t = gelu_table();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f)
      out[i] = 0.0f;
    else if (x >= 10.0f)
      out[i] = x * up[i];
    else
      out[i] = util::fp16_to_f32(t[util::f32_to_fp16(x)]) * up[i];
  }
}

void swiglu_oai(float* out, const float* gate, const float* up, int64_t n, float alpha, float limit) {
  for (int64_t k = 0; k < n; ++k) {
    const float x = std::min(gate[k], limit);
    const float y = std::clamp(up[k], -limit, limit);
    const float glu = x / (1.f + std::exp(alpha * (-x)));
    out[k] = glu * (y + 1.f);
  }
}

void softmax(float* x, int64_t n, const float* sink) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  if (sink) max = std::max(max, *sink);  // as ggml: the sink corrects the max
  double sum = 0.0;
  int64_t i = 0;
#if defined(__x86_64__)
  if (use_avx2()) i = softmax_sum_avx2(x, n, max, &sum);
#endif
#if defined(__aarch64__)
  if (use_neon()) i = sum_exp_neon<true>(x, n, max, &sum);
#endif
  if (i == 0) {
    for (; i + 7 < n; i += 8) {
      float v[8];
      for (int l = 0; l < 8; ++l) x[i + l] = v[l] = expf_lane(x[i + l] - max);
      float a[4];
      for (int l = 0; l < 4; ++l) a[l] = v[l + 4] + v[l];
      sum += static_cast<double>((a[0] + a[2]) + (a[1] + a[3]));
    }
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  if (sink) sum += static_cast<double>(std::exp(*sink - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

float log_sum_exp(const float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  if (max == -INFINITY || std::isnan(max)) return max;
  double sum = 0.0;
  int64_t i = 0;
#if defined(__x86_64__)
  if (use_avx2()) i = sum_exp_avx2(x, n, max, &sum);
#endif
#if defined(__aarch64__)
  if (use_neon()) i = sum_exp_neon<false>(const_cast<float*>(x), n, max, &sum);
#endif
  if (i == 0) {
    for (; i + 7 < n; i += 8) {
      float v[8];
      for (int l = 0; l < 8; ++l) v[l] = expf_lane(x[i + l] - max);
      float a[4];
      for (int l = 0; l < 4; ++l) a[l] = v[l + 4] + v[l];
      sum += static_cast<double>((a[0] + a[2]) + (a[1] + a[3]));
    }
  }
  for (; i < n; ++i) sum += static_cast<double>(expf_lane(x[i] - max));
  return static_cast<float>(max + std::log(sum));
}

float dot_f16(const uint16_t* x, const uint16_t* y, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2()) return dot_f16_avx2(x, y, n);
#endif
#if defined(__aarch64__)
  if (use_neon()) return dot_f16_neon(x, y, n);
#endif
  const int64_t np = n & ~int64_t(31);
  float s[32] = {};
  for (int64_t i = 0; i < np; ++i) s[i % 32] = std::fma(util::fp16_to_f32(x[i]), util::fp16_to_f32(y[i]), s[i % 32]);
  double sum = reduce32(s);
  for (int64_t i = np; i < n; ++i) sum += double(util::fp16_to_f32(x[i]) * util::fp16_to_f32(y[i]));
  return static_cast<float>(sum);
}

float dot_f32(const float* x, const float* y, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2()) return dot_f32_avx2(x, y, n);
#endif
#if defined(__aarch64__)
  if (use_neon()) return dot_f32_neon(x, y, n);
#endif
  const int64_t np = n & ~int64_t(31);
  float s[32] = {};
  for (int64_t i = 0; i < np; ++i) s[i % 32] = std::fma(x[i], y[i], s[i % 32]);
  float sum = reduce32(s);
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

void weighted_sum_f16(const uint16_t* v, size_t stride, const uint16_t* p, int64_t n, int hd, float* out) {
  // ggml computes out[i] = dot_f16(V^T[i], p) over n padded to a multiple of 32 (the tail
  // is zero); lane m of its accumulators sums positions t = m (mod 32).
  std::vector<float> acc(size_t(32) * hd, 0.0f);
  bool done = false;
#if defined(__x86_64__)
  if (use_avx2() && hd % 8 == 0) {
    weighted_rows_avx2(v, stride, p, n, hd, acc.data());
    done = true;
  }
#endif
#if defined(__aarch64__)
  if (use_neon() && hd % 8 == 0) {
    weighted_rows_neon(v, stride, p, n, hd, acc.data());
    done = true;
  }
#endif
  if (!done)
    for (int64_t t = 0; t < n; ++t)
      for (int i = 0; i < hd; ++i)
        acc[(t % 32) * hd + i] = std::fma(util::fp16_to_f32(v[t * stride + i]), util::fp16_to_f32(p[t]), acc[(t % 32) * hd + i]);
  float s[32];
  for (int i = 0; i < hd; ++i) {
    for (int m = 0; m < 32; ++m) s[m] = acc[m * hd + i];
    out[i] = reduce32(s);
  }
}

}  // namespace kernels
