// avx2_cols4.h: private to kernels/cpu: decode batches of 4 or more sequences (vec_dot
// order) of the unsigned-dot 32-element types (Q4_0 and Q5_0 with their kOff, Q4_1 and Q5_1
// with their min term) on the AVX2 table (MaddubsDot), 2 weight rows x 4 columns per tile.
// The float operations per (row, column) are tile_q's to the bit (block b ascending: acc =
// fma(set1(dw * da), float(u8dot(quants_u, a) [- u8dot(kOff, a)]), acc), and for the min
// types acc_m = fma(m, s, acc_m); then hsum(acc) [+ acc_m]), so every sequence's result
// stays the one it gets alone. What changes is what is done once: the columns are packed
// once per call by gemm_pack_acts (quants, float scales and s, u8dot(kOff, a); tile_q
// converts the scales and computes the offset terms per 4-row tile), and each weight block
// is unpacked once per 4 columns (tile_q: per 2), which the 16 registers allow with 2 rows
// (8 accumulators); the scale product dw * da is one multiply per (row, column) (a stored
// product read back by broadcast, as tile_q does, left GCC keeping the addresses on the
// stack here). Measured in BENCHMARKS.md ("Q4_0 / Q4_1 decode batches on an AVX2-only
// CPU"): Zen 3, 8 sequences, kernel Q4_0 1.22x, Q4_1 1.35x; model at 1 thread 1.12x, 1.35x.
// Include only from files compiled with AVX2 flags.
#pragma once
#include <cstdint>

#include "kernels/cpu/avx2_tiles.h"

namespace kernels::cpu::avx2 {
namespace {  // internal linkage: see avx2_tiles.h

// The types this file serves: an unsigned integer dot (offset or min), no pair accumulators.
template <class D>
constexpr bool cols4_type() {
  return (D::kOff > 0 || !D::kSigned) && !pair_acc<D>();
}

// y[(c0 + c) * ys + r] for r < RM, c < 4: weight rows w (stride ws) against columns c0..c0+3
// of the nc packed by gemm_pack_acts (quants, u8dot(kOff, a), float scales and s; block-major).
template <class D, int RM>
inline void tile_cols4(int64_t nb, const uint8_t* w, size_t ws, const GemmActs& a, int64_t nc, int64_t c0, float* y,
                       int64_t ys) {
  static_assert(RM == 1 || RM == 2, "acc_m holds 2 rows x 4 columns");
  using W = typename D::W;
  constexpr int RN = 4;
  __m256 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc[r][c] = _mm256_setzero_ps();
  const W* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  const __m256i ones = _mm256_set1_epi16(1);
  const Quants32* __restrict pq = a.qs.data() + c0;
  const Quants32* __restrict po = a.qoff.data() + c0;
  const float* __restrict pd = a.d.data() + c0;
  const float* __restrict ps = a.s.data() + c0;
  __m256 acc_m = _mm256_setzero_ps();  // min terms: lane 4 r + c
  // tile_q's prefetch: the RM rows of the tile after next, spread over this tile's blocks.
  const char* pf = reinterpret_cast<const char*>(w) + 2 * RM * ws;
  const size_t pf_total = RM * ws;
  const bool pf_l1 = pf_total <= kPrefetchL1TileBytes;
  size_t pf_done = 0;
  for (int64_t b = 0; b < nb; ++b, pq += nc, po += nc, pd += nc, ps += nc) {
    prefetch_lines(pf, pf_done, pf_total * size_t(b + 1) / size_t(nb), pf_l1);
    __m256i qw[RM];
    __m256 dw[RM];
    for (int r = 0; r < RM; ++r) {
      dw[r] = _mm256_set1_ps(block_d(wr[r][b]));
      qw[r] = D::quants_u(wr[r][b]);
    }
    if constexpr (D::kHasMin) {
      const __m128 m0 = _mm_set1_ps(D::m(wr[0][b])), m1 = RM > 1 ? _mm_set1_ps(D::m(wr[RM - 1][b])) : m0;
      acc_m = _mm256_fmadd_ps(_mm256_set_m128(m1, m0), _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ps)), acc_m);
    }
    for (int c = 0; c < RN; ++c) {
      const __m256i qa = _mm256_load_si256(reinterpret_cast<const __m256i*>(pq[c].q));
      const __m256 da = _mm256_broadcast_ss(pd + c);
      for (int r = 0; r < RM; ++r) {
        __m256i q = _mm256_madd_epi16(_mm256_maddubs_epi16(qw[r], qa), ones);
        if constexpr (D::kOff > 0) q = _mm256_sub_epi32(q, _mm256_load_si256(reinterpret_cast<const __m256i*>(po[c].q)));
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(q), acc[r][c]);
      }
    }
  }
  alignas(32) float m[8];
  _mm256_store_ps(m, acc_m);
  for (int c = 0; c < RN; ++c)
    for (int r = 0; r < RM; ++r) y[(c0 + c) * ys + r] = D::kHasMin ? hsum(acc[r][c]) + m[4 * r + c] : hsum(acc[r][c]);
}

// Rows [r0, r1) x n_batch (>= 4) columns in vec_dot order: 2-row tiles, 4 columns at a
// time, the last n_batch % 4 columns through tile_q.
template <class D>
void matmul_cols4(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x, size_t xs,
                  int64_t n_batch, float* y, int64_t ys) {
  static_assert(cols4_type<D>());
  thread_local GemmActs acts;
  gemm_pack_acts<D, MaddubsDot>(nb, x, xs, n_batch, acts);
  for_each_tile<2>(r0, r1, n_batch, [&]<int RM>(int64_t r, int64_t nc) {
    const uint8_t* wr = w + r * ws;
    int64_t c = 0;
    for (; c + 4 <= nc; c += 4) tile_cols4<D, RM>(nb, wr, ws, acts, nc, c, y + r, ys);
    for (; c < nc; ++c) tile_q<D, MaddubsDot, RM, 1>(nb, wr, ws, x + c * xs, xs, y + c * ys + r, ys);
  });
}

}  // namespace
}  // namespace kernels::cpu::avx2
