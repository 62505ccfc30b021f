// avx2_off_cols.h: private to kernels/cpu: decode batches of 4 or more sequences (vec_dot
// order) of the offset types Q4_0 and Q5_0 on the AVX2 table (MaddubsDot), 2 weight rows x
// 4 columns per tile. The float operations per (row, column) are tile_q's to the bit (block
// b ascending: acc = fma(set1(dw * da), float(u8dot(quants_u, a) - u8dot(kOff, a)), acc),
// then hsum), so every sequence's result stays the one it gets alone. What changes is what
// is done once: the columns' scales and their -u8dot(kOff, a) terms are computed once per
// call (tile_q: once per 4-row tile), and each weight block is unpacked once per 4 columns
// (tile_q: per 2), which the 16 registers allow with 2 rows (8 accumulators); the scale
// product dw * da is one multiply per (row, column) (a stored product read back by
// broadcast, as tile_q does, left GCC keeping the addresses on the stack here). Measured in
// BENCHMARKS.md ("Q4_0 decode batches on an AVX2-only CPU"): Zen 3, Q4_0 8 sequences 1.22x
// in the kernel, 1.12x in the model at 1 thread.
// Include only from files compiled with AVX2 flags.
#pragma once
#include <cstdint>

#include "kernels/cpu/avx2_tiles.h"
#include "kernels/cpu/tu_vector.h"

namespace kernels::cpu::avx2 {
namespace {  // internal linkage: see avx2_tiles.h

// A batch's columns, block-major (element [b * nc + c]): the activation scale, and the
// offset term -u8dot(kOff, a) as 8 int32 lanes.
struct OffCols {
  TuVector<float> d;
  TuVector<Quants32> qoff;
};

template <class D>
void pack_off_cols(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, OffCols& p) {
  using A = typename D::A;
  const size_t n = size_t(nb * nc);
  if (p.d.size() < n) {
    p.d.resize(n);
    p.qoff.resize(n);
  }
  for (int64_t c = 0; c < nc; ++c) {
    const A* ab = reinterpret_cast<const A*>(x + c * xs);
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs));
      const __m256i off = _mm256_sub_epi32(_mm256_setzero_si256(), dot_u8(_mm256_set1_epi8(D::kOff), qa));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.qoff[size_t(b * nc + c)].q), off);
      p.d[size_t(b * nc + c)] = fp16(ab[b].d);
    }
  }
}

// y[(c0 + c) * ys + r] for r < RM, c < 4: weight rows w (stride ws) against columns c0..c0+3
// (x, stride xs; p packed from the same x, nc columns).
template <class D, int RM>
inline void tile_off4(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, const OffCols& p,
                      int64_t nc, int64_t c0, float* y, int64_t ys) {
  using W = typename D::W;
  using A = typename D::A;
  constexpr int RN = 4;
  __m256 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc[r][c] = _mm256_setzero_ps();
  const W* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  const A* xa[RN];
  for (int c = 0; c < RN; ++c) xa[c] = reinterpret_cast<const A*>(x + (c0 + c) * xs);
  const __m256i ones = _mm256_set1_epi16(1);
  const float* __restrict pd = p.d.data() + c0;
  const Quants32* __restrict po = p.qoff.data() + c0;
  // tile_q's prefetch: the RM rows of the tile after next, spread over this tile's blocks.
  const char* pf = reinterpret_cast<const char*>(w) + 2 * RM * ws;
  const size_t pf_total = RM * ws;
  const bool pf_l1 = pf_total <= kPrefetchL1TileBytes;
  size_t pf_done = 0;
  for (int64_t b = 0; b < nb; ++b, pd += nc, po += nc) {
    prefetch_lines(pf, pf_done, pf_total * size_t(b + 1) / size_t(nb), pf_l1);
    __m256i qw[RM];
    __m256 dw[RM];
    for (int r = 0; r < RM; ++r) {
      dw[r] = _mm256_set1_ps(block_d(wr[r][b]));
      qw[r] = D::quants_u(wr[r][b]);
    }
    for (int c = 0; c < RN; ++c) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa[c][b].qs));
      const __m256i off = _mm256_load_si256(reinterpret_cast<const __m256i*>(po[c].q));
      const __m256 da = _mm256_broadcast_ss(pd + c);
      for (int r = 0; r < RM; ++r) {
        const __m256i q = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_maddubs_epi16(qw[r], qa), ones));
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(q), acc[r][c]);
      }
    }
  }
  for (int c = 0; c < RN; ++c)
    for (int r = 0; r < RM; ++r) y[(c0 + c) * ys + r] = hsum(acc[r][c]);
}

// Rows [r0, r1) x n_batch (>= 4) columns in vec_dot order: 2-row tiles, 4 columns at a
// time, the last n_batch % 4 columns through tile_q.
template <class D>
void matmul_off_cols(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x, size_t xs,
                     int64_t n_batch, float* y, int64_t ys) {
  static_assert(D::kOff > 0 && !D::kHasMin && !pair_acc<D>());
  thread_local OffCols cols;
  pack_off_cols<D>(nb, x, xs, n_batch, cols);
  for_each_tile<2>(r0, r1, n_batch, [&]<int RM>(int64_t r, int64_t nc) {
    const uint8_t* wr = w + r * ws;
    int64_t c = 0;
    for (; c + 4 <= nc; c += 4) tile_off4<D, RM>(nb, wr, ws, x, xs, cols, nc, c, y + r, ys);
    for (; c < nc; ++c) tile_q<D, MaddubsDot, RM, 1>(nb, wr, ws, x + c * xs, xs, y + c * ys + r, ys);
  });
}

}  // namespace
}  // namespace kernels::cpu::avx2
