// avx2.cc: the AVX2 + FMA + F16C kernels (x86-64), compiled with those flags only here and
// chosen at run time by dispatch.cc: vec_dot and matmul for every supported weight type,
// and the activation quantizers. The float types' kernels are here; the 32-element quant
// types' register-tiled loops are in avx2_tiles.h, the K-quants in avx2_kquants.h (their
// fused decode dots in avx2_kfused.h), the decoders of Q2_K, Q3_K, IQ4_NL, IQ4_XS and
// MXFP4 (into those loops) in avx2_lowbit.h.
// Deliberately no threading (callers split rows) and no repacking of the stored weights
// into interleaved layouts (the batched path decodes weight tiles into scratch per call).
#if defined(__x86_64__) || defined(_M_X64)
#include <cmath>

#include "kernels/cpu/avx2_cb_pairs.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/avx2_kfused.h"
#include "kernels/cpu/avx2_kquants.h"
#include "kernels/cpu/avx2_lowbit.h"
#include "kernels/cpu/avx2_lowbit_lanes.h"
#include "kernels/cpu/avx2_lanes32.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/kernels.h"

namespace kernels::cpu {
namespace avx2 {
namespace {

// ---- float types (F32, F16, BF16): "blocks" of 8 elements plus a scalar tail ---------------

template <class D, int RM, int RN>
inline void tile_f(int64_t n, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                   int64_t ys) {
  using E = typename D::E;
  __m256 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) {
    __m256 vw[RM];
    for (int r = 0; r < RM; ++r) {
      const E* p = reinterpret_cast<const E*>(w + r * ws) + i;
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      vw[r] = D::load8(p);
    }
    for (int c = 0; c < RN; ++c) {
      const __m256 vx = D::load8(reinterpret_cast<const E*>(x + c * xs) + i);
      for (int r = 0; r < RM; ++r) acc[r][c] = _mm256_fmadd_ps(vw[r], vx, acc[r][c]);
    }
  }
  for (int r = 0; r < RM; ++r) {
    for (int c = 0; c < RN; ++c) {
      float s = hsum(acc[r][c]);
      const E* pw = reinterpret_cast<const E*>(w + r * ws);
      const E* px = reinterpret_cast<const E*>(x + c * xs);
      // fused, as GCC contracted it under -mfma; written out so NEON can do the same
      for (int64_t i = n8; i < n; ++i) s = std::fma(D::one(pw + i), D::one(px + i), s);
      y[c * ys + r] = s;
    }
  }
}

template <class D>
float vec_dot_f(int64_t n, const void* w, const void* x) {
  using E = typename D::E;
  const E* pw = static_cast<const E*>(w);
  const E* px = static_cast<const E*>(x);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(pw + i) + kPrefetchBytes, _MM_HINT_T0);
    for (int u = 0; u < 4; ++u)
      acc[u] = _mm256_fmadd_ps(D::load8(pw + i + 8 * u), D::load8(px + i + 8 * u), acc[u]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(D::load8(pw + i), D::load8(px + i), acc[0]);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += D::one(pw + i) * D::one(px + i);
  return s;
}

// ---- matmul drivers: rows outer (weights stream once), activation tiles inner -----------

template <class D>
void matmul_f(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
              size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  for_each_tile<kTileRows>(r0, r1, n_batch, [&]<int RM>(int64_t r, int64_t nbatch) {
    const uint8_t* wr = w + r * row_stride;
    int64_t c = 0;
    for (; c + kTileCols <= nbatch; c += kTileCols)
      tile_f<D, RM, kTileCols>(n, wr, row_stride, x + c * xq_stride, xq_stride, y + c * y_stride + r, y_stride);
    for (; c < nbatch; ++c)
      tile_f<D, RM, 1>(n, wr, row_stride, x + c * xq_stride, xq_stride, y + c * y_stride + r, y_stride);
  });
}

// ---- activation quantizers -------------------------------------------------------------

// 32 floats -> 32 int8 as ggml's x86 quantize_row_q8_0 (d = amax / 127, q = x * (127 / amax)
// rounded half to even); returns d and the sum of q.
inline float quantize_block32(const float* x, int8_t* qs, int* sum) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[k]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float amax_s = _mm_cvtss_f32(m);
  const float d = amax_s / 127.f;
  const __m256 id = _mm256_set1_ps(amax_s != 0.0f ? 127.f / amax_s : 0.0f);
  __m256i i[4];
  for (int k = 0; k < 4; ++k)
    i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
  __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), p);
  return d;
}

void quantize_q8_0(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sum;
    y[b].d = _cvtss_sh(quantize_block32(x + b * kQK, y[b].qs, &sum), _MM_FROUND_TO_NEAREST_INT);
  }
}

void quantize_q8_1(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(out);
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sum;
    const float d = quantize_block32(x + b * kQK, y[b].qs, &sum);
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    y[b].s = _cvtss_sh(sum * d, _MM_FROUND_TO_NEAREST_INT);
  }
}

// Q8_K as the reference (ggml's quantize_row_q8_K_ref): max = the first element of largest
// |x|, q = nearest_int(-127 / max * x) capped at 127, bsums per 16, d = 1 / iscale. The
// products and their rounding (half to even, |q| <= 128) are the reference's, so the bytes
// are; a block holding a NaN takes the reference (its max scan skips NaNs).
void quantize_q8_k(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(out);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int k = 0; k < kQK_K / 8; ++k) {
      const __m256 v = _mm256_loadu_ps(x + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan)) {
      ::kernels::ref::quantize_activation(Type::Q8_K, x, y + b, kQK_K);
      continue;
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax_s = _mm_cvtss_f32(m);
    BlockQ8_K& q = y[b];
    if (amax_s == 0.0f) {
      std::memset(&q, 0, sizeof q);
      continue;
    }
    float max = 0.0f;
    const __m256 am = _mm256_set1_ps(amax_s);
    for (int k = 0; k < kQK_K / 8; ++k) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + 8 * k)), am, _CMP_EQ_OQ));
      if (hit) {
        max = x[8 * k + __builtin_ctz(unsigned(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 id = _mm256_set1_ps(iscale);
    for (int g = 0; g < kQK_K / 32; ++g) {
      __m256i i[4];
      for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), id));
      __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));  // caps at 127
      p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.qs + 32 * g), p);
      // bsums of elements 32g..32g+15 and 32g+16..: sums of the stored (capped) int8s
      const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), p);             // pairs
      const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));             // 4s
      alignas(32) int32_t l[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(l), s32);
      q.bsums[2 * g] = int16_t(l[0] + l[1] + l[2] + l[3]);
      q.bsums[2 * g + 1] = int16_t(l[4] + l[5] + l[6] + l[7]);
    }
    q.d = 1 / iscale;
  }
}

void quantize_f16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// MXFP4 times one vector (decode, gpt-oss's experts): avx2_cb_pairs.h's two-block tiles with
// the values + 12 (kOff; maddubs' pairs stay below 2 * 24 * 127, no saturation), as the
// AVX-512 table runs them with vpdpbusd: one nibble unpacking per two blocks and the scales
// of 4 rows' block pairs in one conversion. Zen 3, 1 thread: 1.28x in L3, 1.51x from memory
// (Matvec/MXFP4/4096x4096, 14336x4096), the gpt-oss-20b shape's decode 1.08-1.11x
// (BENCHMARKS.md "MXFP4 decode on an AVX2-only CPU"). The same bits as tile_q (ggml's
// order; kernels_test, VecDotVsGgml). Batches keep
// tile_q / cols4 (the pair tile measured slower at 2 columns), and IQ4_NL keeps tile_q:
// its signed values need the sign trick, with which the pair tile measured no faster.
void matmul_mxfp4(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                  size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch > 1) return matmul_q<DecMXFP4, MaddubsDot>(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
  matmul_cb_pairs<DecMXFP4, MaddubsDot>(n / kQK, static_cast<const uint8_t*>(W), row_stride, r0, r1,
                                        static_cast<const uint8_t*>(xq), xq_stride, 1, y, y_stride);
}

}  // namespace
}  // namespace avx2

const KernelTable& avx2_table() {
  static const KernelTable table = [] {
    using namespace avx2;
    KernelTable t;
    auto set = [&t](Type type, VecDotFn v, MatmulFn m) {
      t.vec_dot[slot(type)] = v;
      t.matmul[slot(type)] = m;
    };
    set(Type::F32, vec_dot_f<DecF32>, matmul_f<DecF32>);
    set(Type::F16, vec_dot_f<DecF16>, matmul_f<DecF16>);
    set(Type::BF16, vec_dot_f<DecBF16>, matmul_f<DecBF16>);
    set(Type::Q4_0, vec_dot_q<DecQ4_0>, matmul_q<DecQ4_0>);
    set(Type::Q4_1, vec_dot_q<DecQ4_1>,  // batches in lane order (avx2_lanes32.h, with the min term)
        matmul_lanes32<LaneRows, lane_pack_rows<DecQ4_1>, LaneTile<MaddubsLane, true>::T,
                       own_function<matmul_q<DecQ4_1>>, BlockQ8_1>);
    set(Type::Q5_0, vec_dot_q<DecQ5_0>, matmul_q<DecQ5_0>);
    set(Type::Q5_1, vec_dot_q<DecQ5_1>, matmul_q<DecQ5_1>);
    set(Type::Q8_0, vec_dot_q<DecQ8_0>, matmul_cb_lanes<DecQ8_0, MaddubsDot, matmul_q<DecQ8_0>>);
    set(Type::Q4_K, vec_dot_fused<FusedQ4K, MaddScale>, matmul_cols<FusedQ4K, MaddScale>);
    set(Type::Q5_K, vec_dot_fused<FusedQ5K, MaddScale>, matmul_cols<FusedQ5K, MaddScale>);
    set(Type::Q6_K, vec_dot_fused<FusedQ6K, MaddScale>, matmul_cols<FusedQ6K, MaddScale>);
    set(Type::IQ4_NL, vec_dot_q<DecIQ4_NL>, matmul_cb_lanes<DecIQ4_NL, MaddubsDot, matmul_q<DecIQ4_NL, MaddubsDot>>);
    set(Type::MXFP4, vec_dot_q<DecMXFP4>, matmul_cb_lanes<DecMXFP4, MaddubsDot, matmul_mxfp4>);
    set(Type::Q2_K, vec_dot_fused<FusedQ2K, MaddScale>,
        matmul_low_lanes<DecQ2_K, MaddScale, matmul_cols<FusedQ2K, MaddScale>>);
    set(Type::Q3_K, vec_dot_fused<FusedQ3K, MaddScale>,
        matmul_low_lanes<DecQ3_K, MaddScale, matmul_cols<FusedQ3K, MaddScale>>);
    set(Type::IQ4_XS, vec_dot_fused<FusedIQ4XS, MaddScale>,
        matmul_low_lanes<DecIQ4_XS, MaddScale, matmul_cols<FusedIQ4XS, MaddScale>>);
    t.quantize[slot(Type::Q8_0)] = quantize_q8_0;
    t.quantize[slot(Type::Q8_1)] = quantize_q8_1;
    t.quantize[slot(Type::F16)] = quantize_f16;
    t.quantize[slot(Type::Q8_K)] = quantize_q8_k;  // the reference's bytes (ggml's x86 build runs that)
    // BF16, F32: the reference.
    return t;
  }();
  return table;
}

}  // namespace kernels::cpu
#endif  // x86-64
