// avx2_cols4.h: private to kernels/cpu: decode batches of 4 or more sequences (vec_dot
// order) of the 32-element types on the AVX2 table (MaddubsDot), 2 weight rows x 4 columns
// per tile: the unsigned-dot types (Q4_0, Q5_0 and MXFP4 with their kOff, Q4_1 and Q5_1 with
// their min term) and the signed ones (Q8_0, IQ4_NL: dot_i8, |w| once per row and block,
// sign(a, w) per row and column).
// The float operations per (row, column) are tile_q's to the bit (block b ascending: acc =
// fma(set1(dw * da), float(int dot [- u8dot(kOff, a)]), acc), and for the min types acc_m =
// fma(m, s, acc_m); then hsum(acc) [+ acc_m]; the pair_acc types (IQ4_NL, MXFP4) sum the
// even blocks and the odd ones in two accumulators, then hsum(even + odd) and pair_tail),
// so every sequence's result stays the one it gets alone. What changes is what is done
// once: the columns are packed once per call by gemm_pack_acts (quants, float scales and s,
// u8dot(kOff, a); tile_q converts the scales and computes the offset terms per 4-row tile),
// and each weight block is unpacked once per 4 columns (tile_q: per 2), which the 16
// registers allow with 2 rows (8 accumulators; the pair types run the even blocks, then the
// odd ones, as gemm_tile_q does); the scale product dw * da is one multiply per (row,
// column) (a stored product read back by broadcast, as tile_q does, left GCC keeping the
// addresses on the stack here). Measured in BENCHMARKS.md ("Q4_0 / Q4_1 decode batches on
// an AVX2-only CPU", "Q8_0 and codebook decode batches"): Zen 3, 8 sequences, kernel Q4_0
// 1.22x, Q4_1 1.35x; model at 1 thread 1.12x, 1.35x.
// Include only from files compiled with AVX2 flags.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/avx2_tiles.h"

namespace kernels::cpu::avx2 {
namespace {  // internal linkage: see avx2_tiles.h

// y[(c0 + c) * ys + r] for r < RM, c < 4: weight rows w (stride ws) against columns c0..c0+3
// of the nc packed by gemm_pack_acts (quants, u8dot(kOff, a), float scales and s; block-major);
// x (stride xs): the same columns unpacked, for a pair type's odd last block (pair_tail).
template <class D, int RM>
inline void tile_cols4(int64_t nb, const uint8_t* w, size_t ws, const GemmActs& a, int64_t nc, int64_t c0,
                       const uint8_t* x, size_t xs, float* y, int64_t ys) {
  static_assert(RM == 1 || RM == 2, "acc_m holds 2 rows x 4 columns");
  using W = typename D::W;
  constexpr int RN = 4;
  constexpr bool kSignedDot = D::kSigned && D::kOff == 0;
  constexpr bool kPair = pair_acc<D>();
  __m256 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc[r][c] = _mm256_setzero_ps();
  const W* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc_m = _mm256_setzero_ps();  // min terms: lane 4 r + c
  // tile_q's prefetch: the RM rows of the tile after next, spread over this tile's blocks.
  const char* pf = reinterpret_cast<const char*>(w) + 2 * RM * ws;
  const size_t pf_total = RM * ws;
  const bool pf_l1 = pf_total <= kPrefetchL1TileBytes;
  size_t pf_done = 0;
  // Blocks b0, b0 + kStep, ... below end into acc.
  auto pass = [&]<int64_t kStep>(int64_t b0, int64_t end, std::integral_constant<int64_t, kStep>) SHARDLM_INLINE {
    const Quants32* __restrict pq = a.qs.data() + b0 * nc + c0;
    const Quants32* __restrict po = a.qoff.data() + b0 * nc + c0;
    const float* __restrict pd = a.d.data() + b0 * nc + c0;
    const float* __restrict ps = a.s.data() + b0 * nc + c0;
    for (int64_t b = b0; b < end; b += kStep, pq += kStep * nc, po += kStep * nc, pd += kStep * nc, ps += kStep * nc) {
      prefetch_lines(pf, pf_done, pf_total * size_t(b + 1) / size_t(nb), pf_l1);
      __m256i qw[RM], aw[RM];  // aw: |w| (the signed types), else unused
      __m256 dw[RM];
      for (int r = 0; r < RM; ++r) {
        dw[r] = _mm256_set1_ps(block_d(wr[r][b]));
        qw[r] = D::quants_u(wr[r][b]);
        if constexpr (kSignedDot) aw[r] = _mm256_sign_epi8(qw[r], qw[r]);
      }
      if constexpr (D::kHasMin) {
        const __m128 m0 = _mm_set1_ps(D::m(wr[0][b])), m1 = RM > 1 ? _mm_set1_ps(D::m(wr[RM - 1][b])) : m0;
        acc_m = _mm256_fmadd_ps(_mm256_set_m128(m1, m0), _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ps)), acc_m);
      }
      for (int c = 0; c < RN; ++c) {
        const __m256i qa = _mm256_load_si256(reinterpret_cast<const __m256i*>(pq[c].q));
        const __m256 da = _mm256_broadcast_ss(pd + c);
        for (int r = 0; r < RM; ++r) {
          const __m256i p = kSignedDot ? _mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(qa, qw[r]))  // dot_i8
                                       : _mm256_maddubs_epi16(qw[r], qa);
          __m256i q = _mm256_madd_epi16(p, ones);
          if constexpr (D::kOff > 0)
            q = _mm256_sub_epi32(q, _mm256_load_si256(reinterpret_cast<const __m256i*>(po[c].q)));
          acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(q), acc[r][c]);
        }
      }
    }
  };
  using Every = std::integral_constant<int64_t, 1>;
  using Other = std::integral_constant<int64_t, 2>;
  if constexpr (kPair) {
    const int64_t end = nb / 2 * 2;
    pass(0, end, Other{});
    __m256 even[RM][RN];
    for (int r = 0; r < RM; ++r)
      for (int c = 0; c < RN; ++c) even[r][c] = acc[r][c], acc[r][c] = _mm256_setzero_ps();
    pass(1, end, Other{});
    for (int c = 0; c < RN; ++c)
      for (int r = 0; r < RM; ++r) {
        const float s = hsum(_mm256_add_ps(even[r][c], acc[r][c]));
        const auto* ab = reinterpret_cast<const typename D::A*>(x + (c0 + c) * xs);
        y[(c0 + c) * ys + r] = end < nb ? pair_tail<D, MaddubsDot>(s, wr[r][end], ab[end]) : s;
      }
    return;
  }
  pass(0, nb, Every{});
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
  thread_local GemmActs acts;
  gemm_pack_acts<D, MaddubsDot>(nb, x, xs, n_batch, acts);
  for_each_tile<2>(r0, r1, n_batch, [&]<int RM>(int64_t r, int64_t nc) {
    const uint8_t* wr = w + r * ws;
    int64_t c = 0;
    for (; c + 4 <= nc; c += 4) tile_cols4<D, RM>(nb, wr, ws, acts, nc, c, x, xs, y + r, ys);
    for (; c < nc; ++c) tile_q<D, MaddubsDot, RM, 1>(nb, wr, ws, x + c * xs, xs, y + c * ys + r, ys);
  });
}

}  // namespace
}  // namespace kernels::cpu::avx2
