// attention_avx2.cc: AVX2+FMA+F16C tile kernels for flash attention (see attention.h,
// attention_internal::TileKernels): Q.K scores for a block of query rows x keys, the
// P.V accumulation, and exp-and-sum of a score row. This file is compiled without ISA
// flags (CMake gives -mavx2 only to avx2.cc), so every function carries a target
// attribute and avx2_tile_kernels() hands them out only when kernels::active_isa() is
// AVX2 or AVX-512. Register blocking: up to 4 query rows share each K/V load.
// Deliberately not here: the tiling, online softmax and threading (attention.cc), and
// AVX-512 variants (this code already runs on AVX-512 machines).
#include "kernels/attention.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include <algorithm>

#include "kernels/kernels.h"
#include "tensor/types.h"

#define ATTN_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kernels::attention_internal {
namespace {

using tensor::BlockQ8_0;

// Sums of four vectors: {sum(a), sum(b), sum(c), sum(d)}.
ATTN_AVX2 inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// out[i] = horizontal sum of acc[i], i < N.
template <int N>
ATTN_AVX2 inline void reduce_all(const __m256* acc, float* out) {
  constexpr int kPadded = (N + 3) / 4 * 4;
  __m256 v[kPadded];
  for (int i = 0; i < kPadded; ++i) v[i] = i < N ? acc[i] : _mm256_setzero_ps();
  alignas(16) float tmp[kPadded];
  for (int i = 0; i < kPadded; i += 4) _mm_store_ps(tmp + i, reduce4(v[i], v[i + 1], v[i + 2], v[i + 3]));
  for (int i = 0; i < N; ++i) out[i] = tmp[i];
}

// 8 values of a float row starting at element i, as F32.
template <KvFormat F>
ATTN_AVX2 inline __m256 load8(const uint8_t* row, int i) {
  if constexpr (F == KvFormat::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  } else if constexpr (F == KvFormat::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + i / tensor::kQK;
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + i % tensor::kQK));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(_cvtsh_ss(b->d)));
  }
}

// ---- scores ----------------------------------------------------------------------------------

// out[r * NK + n] = dot(q_r, k_n) for F32 query rows against F16/F32 keys.
template <int NR, int NK, KvFormat F>
ATTN_AVX2 void scores_float_block(const float* q, size_t q_stride, const uint8_t* const* kp, int hd,
                                  float* out) {
  __m256 acc[NR * NK];
  for (int i = 0; i < NR * NK; ++i) acc[i] = _mm256_setzero_ps();
  for (int i = 0; i < hd; i += 8) {
    __m256 kv[NK];
    for (int n = 0; n < NK; ++n) kv[n] = load8<F>(kp[n], i);
    for (int r = 0; r < NR; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * q_stride + i);
      for (int n = 0; n < NK; ++n) acc[r * NK + n] = _mm256_fmadd_ps(qv, kv[n], acc[r * NK + n]);
    }
  }
  reduce_all<NR * NK>(acc, out);
}

// The same for Q8_0 query blocks against Q8_0 keys: per block d_q * d_k * (int8 dot), the
// int8 dot by the sign trick of ggml's vec_dot_q8_0_q8_0 (|k| unsigned x sign-moved q).
template <int NR, int NK>
ATTN_AVX2 void scores_q8_block(const uint8_t* q, size_t q_row_bytes, const uint8_t* const* kp, int hd,
                               float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NR * NK];
  for (int i = 0; i < NR * NK; ++i) acc[i] = _mm256_setzero_ps();
  for (int b = 0; b < hd / tensor::kQK; ++b) {
    __m256i kb[NK], ak[NK];
    float dk[NK];
    for (int n = 0; n < NK; ++n) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(kp[n]) + b;
      kb[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
      ak[n] = _mm256_sign_epi8(kb[n], kb[n]);
      dk[n] = _cvtsh_ss(blk->d);
    }
    for (int r = 0; r < NR; ++r) {
      const auto* qb = reinterpret_cast<const BlockQ8_0*>(q + r * q_row_bytes) + b;
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb->qs));
      const float dq = _cvtsh_ss(qb->d);
      for (int n = 0; n < NK; ++n) {
        const __m256i dot16 = _mm256_maddubs_epi16(ak[n], _mm256_sign_epi8(qv, kb[n]));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, ones));
        acc[r * NK + n] = _mm256_fmadd_ps(_mm256_set1_ps(dq * dk[n]), dot, acc[r * NK + n]);
      }
    }
  }
  reduce_all<NR * NK>(acc, out);
}

template <int NR, int NK>
ATTN_AVX2 void scores_rows(KvFormat f, const uint8_t* q, size_t q_row_bytes, const uint8_t* k,
                           size_t k_row_bytes, int n_keys, int hd, float* s, int ld) {
  for (int j = 0; j < n_keys; j += NK) {
    const uint8_t* kp[NK];
    // Past the last key, repeat it (computed, then dropped) so the block stays full.
    for (int n = 0; n < NK; ++n) kp[n] = k + size_t(std::min(j + n, n_keys - 1)) * k_row_bytes;
    float out[NR * NK];
    const auto* qf = reinterpret_cast<const float*>(q);
    const size_t qs = q_row_bytes / sizeof(float);
    switch (f) {
      case KvFormat::kF16: scores_float_block<NR, NK, KvFormat::kF16>(qf, qs, kp, hd, out); break;
      case KvFormat::kF32: scores_float_block<NR, NK, KvFormat::kF32>(qf, qs, kp, hd, out); break;
      case KvFormat::kQ8_0: scores_q8_block<NR, NK>(q, q_row_bytes, kp, hd, out); break;
    }
    const int nn = std::min(NK, n_keys - j);
    for (int r = 0; r < NR; ++r)
      for (int n = 0; n < nn; ++n) s[r * ld + j + n] = out[r * NK + n];
  }
}

ATTN_AVX2 void scores_avx2(KvFormat f, const uint8_t* q, size_t q_row_bytes, int n_rows,
                           const uint8_t* k, size_t k_row_bytes, int n_keys, int hd, float* s,
                           int ld) {
  for (int r = 0; r < n_rows; r += 4) {
    const uint8_t* qr = q + size_t(r) * q_row_bytes;
    float* sr = s + size_t(r) * ld;
    switch (std::min(4, n_rows - r)) {
      case 4: scores_rows<4, 2>(f, qr, q_row_bytes, k, k_row_bytes, n_keys, hd, sr, ld); break;
      case 3: scores_rows<3, 2>(f, qr, q_row_bytes, k, k_row_bytes, n_keys, hd, sr, ld); break;
      case 2: scores_rows<2, 4>(f, qr, q_row_bytes, k, k_row_bytes, n_keys, hd, sr, ld); break;
      default: scores_rows<1, 4>(f, qr, q_row_bytes, k, k_row_bytes, n_keys, hd, sr, ld); break;
    }
  }
}

// ---- P.V --------------------------------------------------------------------------------------

// acc[r][d0 .. d0 + 8*DC) += sum_j p[r][j] * v_j[same], for every d0; NR rows at once so a
// converted V vector feeds NR FMAs.
template <int NR, int DC, KvFormat F>
ATTN_AVX2 void accv_block(const float* p, int ld, const uint8_t* v, size_t v_row_bytes, int n_keys,
                          int hd, float* acc) {
  for (int d0 = 0; d0 < hd; d0 += 8 * DC) {
    __m256 a[NR * DC];
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < DC; ++c) a[r * DC + c] = _mm256_loadu_ps(acc + size_t(r) * hd + d0 + 8 * c);
    for (int j = 0; j < n_keys; ++j) {
      const uint8_t* vr = v + size_t(j) * v_row_bytes;
      __m256 vv[DC];
      for (int c = 0; c < DC; ++c) vv[c] = load8<F>(vr, d0 + 8 * c);
      for (int r = 0; r < NR; ++r) {
        const __m256 pr = _mm256_broadcast_ss(p + r * ld + j);
        for (int c = 0; c < DC; ++c) a[r * DC + c] = _mm256_fmadd_ps(pr, vv[c], a[r * DC + c]);
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < DC; ++c) _mm256_storeu_ps(acc + size_t(r) * hd + d0 + 8 * c, a[r * DC + c]);
  }
}

template <int NR, int DC>
ATTN_AVX2 void accv_rows(KvFormat f, const float* p, int ld, const uint8_t* v, size_t v_row_bytes,
                         int n_keys, int hd, float* acc) {
  switch (f) {
    case KvFormat::kF16: accv_block<NR, DC, KvFormat::kF16>(p, ld, v, v_row_bytes, n_keys, hd, acc); break;
    case KvFormat::kF32: accv_block<NR, DC, KvFormat::kF32>(p, ld, v, v_row_bytes, n_keys, hd, acc); break;
    case KvFormat::kQ8_0: accv_block<NR, DC, KvFormat::kQ8_0>(p, ld, v, v_row_bytes, n_keys, hd, acc); break;
  }
}

ATTN_AVX2 void accumulate_v_avx2(KvFormat f, const float* p, int ld, int n_rows, const uint8_t* v,
                                 size_t v_row_bytes, int n_keys, int hd, float* acc) {
  const bool wide = hd % 32 == 0;  // 4 vectors per chunk for 1-2 rows, else 2
  for (int r = 0; r < n_rows; r += 4) {
    const float* pr = p + size_t(r) * ld;
    float* ar = acc + size_t(r) * hd;
    switch (std::min(4, n_rows - r)) {
      case 4: accv_rows<4, 2>(f, pr, ld, v, v_row_bytes, n_keys, hd, ar); break;
      case 3: accv_rows<3, 2>(f, pr, ld, v, v_row_bytes, n_keys, hd, ar); break;
      case 2:
        if (wide) accv_rows<2, 4>(f, pr, ld, v, v_row_bytes, n_keys, hd, ar);
        else accv_rows<2, 2>(f, pr, ld, v, v_row_bytes, n_keys, hd, ar);
        break;
      default:
        if (wide) accv_rows<1, 4>(f, pr, ld, v, v_row_bytes, n_keys, hd, ar);
        else accv_rows<1, 2>(f, pr, ld, v, v_row_bytes, n_keys, hd, ar);
        break;
    }
  }
}

// ---- exp ----------------------------------------------------------------------------------------

// e^x for 8 lanes: x = n ln2 + r (Cody-Waite split of ln2), e^r by a degree-5 polynomial
// (Cephes expf coefficients), times 2^n built in the exponent bits. About 1 ulp; lanes below
// ln(FLT_MIN) (and -inf) give exactly 0.
ATTN_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.33654f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

ATTN_AVX2 float exp_sum_avx2(float* x, int n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {  // tail through a -inf padded buffer (exp gives 0 there)
    alignas(32) float tail[8];
    for (int j = 0; j < 8; ++j) tail[j] = i + j < n ? x[i + j] : -__builtin_inff();
    const __m256 e = exp8(_mm256_sub_ps(_mm256_load_ps(tail), mv));
    _mm256_store_ps(tail, e);
    for (int j = 0; i + j < n; ++j) x[i + j] = tail[j];
    sum = _mm256_add_ps(sum, e);
  }
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

ATTN_AVX2 float scale_max_avx2(float* x, int n, float scale) {
  const __m256 sv = _mm256_set1_ps(scale);
  __m256 mx = _mm256_set1_ps(-__builtin_inff());
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
    _mm256_storeu_ps(x + i, v);
    mx = _mm256_max_ps(mx, v);
  }
  alignas(32) float m8[8];
  _mm256_store_ps(m8, mx);
  float m = m8[0];
  for (int j = 1; j < 8; ++j) m = std::max(m, m8[j]);
  for (; i < n; ++i) m = std::max(m, x[i] *= scale);
  return m;
}

// Round to F16 and back with F16C (round to nearest even, as util::f32_to_fp16).
ATTN_AVX2 void round_f16_avx2(float* x, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; ++i) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

const TileKernels kAvx2Kernels = {scores_avx2, accumulate_v_avx2, scale_max_avx2, exp_sum_avx2,
                                  round_f16_avx2};

}  // namespace

const TileKernels* avx2_tile_kernels() {
  const Isa isa = active_isa();
  return runs_avx2(isa) ? &kAvx2Kernels : nullptr;
}

}  // namespace kernels::attention_internal

#else  // not x86-64

namespace kernels::attention_internal {
const TileKernels* avx2_tile_kernels() { return nullptr; }
}  // namespace kernels::attention_internal

#endif
