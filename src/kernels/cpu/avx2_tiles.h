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
// Per (row, activation row) the float operations are exactly ggml's vec_dot sequence: one
// accumulator, acc = fma(set1(dw * da), float(int dot of block b), acc) for b ascending,
// then hsum. What is shared across the RM rows (the activation block, its scale, and for
// the offset types its kOff-weighted lane sums) is loaded / computed once per block.
template <class D, class Dot, int RM, int RN>
inline void tile_q(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                   int64_t ys) {
  using W = typename D::W;
  using A = typename D::A;
  __m256 acc[RM][RN];
  __m128 acc_m[RN][(RM + 3) / 4];  // min terms, lane r % 4 = weight row r
  for (int c = 0; c < RN; ++c) {
    for (int g = 0; g < (RM + 3) / 4; ++g) acc_m[c][g] = _mm_setzero_ps();
    for (int r = 0; r < RM; ++r) acc[r][c] = _mm256_setzero_ps();
  }
  const W* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  auto step = [&](int64_t b) {
    __m256i qa[RN], qoff[RN];
    float da[RN];
    for (int c = 0; c < RN; ++c) {
      const A* ab = reinterpret_cast<const A*>(x + c * xs) + b;
      qa[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab->qs));
      da[c] = fp16(ab->d);
      if constexpr (D::kOff > 0) qoff[c] = Dot::u8(_mm256_set1_epi8(D::kOff), qa[c]);
    }
    float mw[(RM + 3) / 4 * 4] = {};
    for (int r = 0; r < RM; ++r) {
      const W* wb = wr[r] + b;
      const float dw = fp16(wb->d);
      if constexpr (D::kHasMin) mw[r] = D::m(*wb);
      if constexpr (D::kOff > 0) {
        const __m256i qw = D::quants_u(*wb);
        for (int c = 0; c < RN; ++c) {
          const __m256i q = _mm256_sub_epi32(Dot::u8(qw, qa[c]), qoff[c]);
          acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da[c]), _mm256_cvtepi32_ps(q), acc[r][c]);
        }
      } else {
        const __m256i qw = D::quants(*wb);
        for (int c = 0; c < RN; ++c)
          acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da[c]),
                                      _mm256_cvtepi32_ps(dot_block<D, Dot>(qw, qa[c])), acc[r][c]);
      }
    }
    if constexpr (D::kHasMin)
      for (int c = 0; c < RN; ++c) {
        const A* ab = reinterpret_cast<const A*>(x + c * xs) + b;
        const __m128 s = _mm_set1_ps(act_s(*ab));
        for (int g = 0; g < (RM + 3) / 4; ++g)
          acc_m[c][g] = _mm_fmadd_ps(_mm_loadu_ps(mw + 4 * g), s, acc_m[c][g]);
      }
  };
  // Prefetch: the next tile's RM rows (RM * ws bytes from w + RM * ws, one sequential
  // stream) spread evenly over this tile's blocks, so they are in cache when it starts.
  const char* pf = reinterpret_cast<const char*>(w) + RM * ws;
  const size_t pf_total = RM * ws;
  size_t pf_done = 0;
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    const size_t pf_to = pf_total * size_t(b + 2) / size_t(nb);
    for (; pf_done < pf_to; pf_done += 64) _mm_prefetch(pf + pf_done, _MM_HINT_T0);
    step(b);
    step(b + 1);
  }
  if (b < nb) step(b);
  for (int c = 0; c < RN; ++c) {
    float m[(RM + 3) / 4 * 4];
    for (int g = 0; g < (RM + 3) / 4; ++g) _mm_storeu_ps(m + 4 * g, acc_m[c][g]);
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
