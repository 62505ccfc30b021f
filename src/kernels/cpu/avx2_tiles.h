// avx2_tiles.h: private to kernels/cpu: the 32-element-block (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0) vec_dot and register-tiled matmul templates, parametrized on the integer dot
// (MaddubsDot for AVX2, a VNNI dpbusd policy in avx512.cc), so both ISAs share one tested
// loop structure. Matmul tiles are kTileRows weight rows x kTileCols activation rows: each
// weight block is decoded once per tile, each activation block loaded once per kTileRows
// rows; rows are the outer loop so weights stream from memory once while the activations
// stay in cache. Include only from files compiled with AVX2 flags.
#pragma once
#include "kernels/cpu/avx2_common.h"

namespace kernels::cpu::avx2 {
// Internal linkage: these are compiled with different -m flags in different files, so
// they must never be merged across translation units by the linker (ODR / SIGILL).
namespace {

constexpr int kTileRows = 4;  // weight rows per matmul tile
constexpr int kTileCols = 2;  // activation rows per tile (4 x 2 accumulators + 4 decoded blocks)
constexpr int kPrefetchBytes = 512;  // how far ahead in a weight row to prefetch

// Tile(rm, rn) runs one tile of rm weight rows x rn activation rows at (r, c).
template <int RM, class Tile>
inline void for_each_tile(int64_t r0, int64_t r1, int64_t n_batch, Tile&& tile) {
  int64_t r = r0;
  for (; r + RM <= r1; r += RM) tile.template operator()<RM>(r, n_batch);
  for (; r < r1; ++r) tile.template operator()<1>(r, n_batch);
}

// ---- 32-element quantized types ----------------------------------------------------------

// y[c * ys + r] = dot(W row r, X row c) for r < RM, c < RN; nb blocks per row.
template <class D, class Dot, int RM, int RN>
inline void tile_q(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                   int64_t ys) {
  using W = typename D::W;
  using A = typename D::A;
  __m256 acc[RM][RN];
  __m128 acc_m[RN];  // min terms, lane r = weight row r
  for (int c = 0; c < RN; ++c) {
    acc_m[c] = _mm_setzero_ps();
    for (int r = 0; r < RM; ++r) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i qw[RM];
    float dw[RM];
    float mw[4] = {0, 0, 0, 0};
    for (int r = 0; r < RM; ++r) {
      const W* wb = reinterpret_cast<const W*>(w + r * ws) + b;
      _mm_prefetch(reinterpret_cast<const char*>(wb) + kPrefetchBytes, _MM_HINT_T0);
      qw[r] = D::quants(*wb);
      dw[r] = fp16(wb->d);
      if constexpr (D::kHasMin) mw[r] = D::m(*wb);
    }
    for (int c = 0; c < RN; ++c) {
      const A* ab = reinterpret_cast<const A*>(x + c * xs) + b;
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab->qs));
      const float da = fp16(ab->d);
      for (int r = 0; r < RM; ++r)
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * da),
                                    _mm256_cvtepi32_ps(dot_block<D, Dot>(qw[r], qa)), acc[r][c]);
      if constexpr (D::kHasMin)
        acc_m[c] = _mm_fmadd_ps(_mm_loadu_ps(mw), _mm_set1_ps(act_s(*ab)), acc_m[c]);
    }
  }
  for (int c = 0; c < RN; ++c) {
    float m[4];
    _mm_storeu_ps(m, acc_m[c]);
    for (int r = 0; r < RM; ++r) y[c * ys + r] = hsum(acc[r][c]) + m[r];
  }
}

// One row, two blocks per step into two accumulators (hides the FMA latency).
template <class D, class Dot = MaddubsDot>
float vec_dot_q(int64_t n, const void* w, const void* x) {
  const auto* wb = static_cast<const typename D::W*>(w);
  const auto* ab = static_cast<const typename D::A*>(x);
  const int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float summ = 0.0f;
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(wb + b) + kPrefetchBytes, _MM_HINT_T0);
    const __m256i q0 = dot_block<D, Dot>(D::quants(wb[b]), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs)));
    const __m256i q1 = dot_block<D, Dot>(D::quants(wb[b + 1]), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b + 1].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(wb[b].d) * fp16(ab[b].d)), _mm256_cvtepi32_ps(q0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(wb[b + 1].d) * fp16(ab[b + 1].d)), _mm256_cvtepi32_ps(q1), acc1);
    if constexpr (D::kHasMin) summ += D::m(wb[b]) * act_s(ab[b]) + D::m(wb[b + 1]) * act_s(ab[b + 1]);
  }
  if (b < nb) {
    const __m256i q0 = dot_block<D, Dot>(D::quants(wb[b]), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(wb[b].d) * fp16(ab[b].d)), _mm256_cvtepi32_ps(q0), acc0);
    if constexpr (D::kHasMin) summ += D::m(wb[b]) * act_s(ab[b]);
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + summ;
}

template <class D, class Dot = MaddubsDot>
void matmul_q(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
              size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t nb = n / kQK;
  for_each_tile<kTileRows>(r0, r1, n_batch, [&]<int RM>(int64_t r, int64_t nbatch) {
    const uint8_t* wr = w + r * row_stride;
    int64_t c = 0;
    for (; c + kTileCols <= nbatch; c += kTileCols)
      tile_q<D, Dot, RM, kTileCols>(nb, wr, row_stride, x + c * xq_stride, xq_stride, y + c * y_stride + r, y_stride);
    for (; c < nbatch; ++c)
      tile_q<D, Dot, RM, 1>(nb, wr, row_stride, x + c * xq_stride, xq_stride, y + c * y_stride + r, y_stride);
  });
}

}  // namespace
}  // namespace kernels::cpu::avx2
