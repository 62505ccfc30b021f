// avx2_cb_pairs.h: private to kernels/cpu, included by avx512.cc and avx2.cc: the decode
// tiles (matrix x vector and small vec_dot-order batches) of the 32-element codebook types
// IQ4_NL and MXFP4 on unsigned weights (avx512.cc's DecCodebook32U: values + 128, one
// vpdpbusd per 32 weights; avx2.cc: MXFP4's matrix x vector, values + 12 and maddubs), two
// blocks per register. ggml's AVX2 vec_dot of these types sums block b's int32 lanes
// (lane l = its elements 4l..4l+3 times the activations) into an 8-float accumulator, even
// blocks into one and odd blocks into another (avx2_tiles.h pair_acc). Here a block pair
// (2p, 2p+1) of a row is one 32-byte register of nibbles, [qs of 2p | qs of 2p+1]: its low
// nibbles are lanes 0..3 of both blocks, its high nibbles lanes 4..7, so the accumulators
// are kept as X = [even lanes 0..3 | odd lanes 0..3] and Y = [even 4..7 | odd 4..7] and one
// scale vector [d(2p) x4 | d(2p+1) x4] serves both. The activations are rearranged to match
// once per call (CbPairActs: [a(2p) 0..15 | a(2p+1) 0..15], [.. 16..31 | .. 16..31], and
// their -128 * 4-byte sums). Every float lane sees ggml's operations in ggml's order and
// the accumulators are put back into ggml's two before its horizontal sum, so each output
// is tile_q's to the bit; what is saved is the nibble unpacking (one shift and two masks
// per two blocks instead of a broadcast, a shift and a mask per block) and the scale
// broadcasts (one in-lane permute per row and pair). An odd last block: ggml's scalar tail.
#pragma once
#include <utility>

#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/avx2_lowbit.h"
#include "kernels/cpu/avx2_tiles.h"
#include "kernels/cpu/tu_vector.h"

namespace kernels::cpu::avx2 {
// Internal linkage: these are compiled with different -m flags in different files, so
// they must never be merged across translation units by the linker (ODR / SIGILL).
namespace {

// n_batch columns, per column c and block pair p, at [c * np + p]: the activation quants in
// the pair layout (lo, hi), their offset sums (-kOff * 4-byte sums: ol, oh) and scales.
struct CbPairActs {
  struct alignas(32) Pair {
    __m256i lo, hi, ol, oh;
    __m256 da;  // lanes 0..3: d of block 2p, 4..7: of 2p + 1
  };
  TuVector<Pair> p;
};

template <class D, class Dot>
inline void cb_pack_acts(int64_t np, const uint8_t* x, size_t xs, int64_t n_batch, CbPairActs& a) {
  if (a.p.size() < size_t(np * n_batch)) a.p.resize(size_t(np * n_batch));
  const __m256i off = _mm256_set1_epi8(char(D::kOff));
  for (int64_t c = 0; c < n_batch; ++c) {
    const BlockQ8_0* ab = reinterpret_cast<const BlockQ8_0*>(x + c * xs);
    for (int64_t p = 0; p < np; ++p) {
      const BlockQ8_0 &e = ab[2 * p], &o = ab[2 * p + 1];
      CbPairActs::Pair& q = a.p[size_t(c * np + p)];
      q.lo = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(o.qs), reinterpret_cast<const __m128i*>(e.qs));
      q.hi = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(o.qs + 16), reinterpret_cast<const __m128i*>(e.qs + 16));
      q.ol = _mm256_sub_epi32(_mm256_setzero_si256(), Dot::u8(off, q.lo));
      q.oh = _mm256_sub_epi32(_mm256_setzero_si256(), Dot::u8(off, q.hi));
      q.da = _mm256_set_m128(_mm_set1_ps(fp16(o.d)), _mm_set1_ps(fp16(e.d)));
    }
  }
}

// Lanes 0..3 = lane R of v's low half, 4..7 = lane R of its high half.
template <int R>
inline __m256 lane_bcast(__m256 v) { return _mm256_permute_ps(v, R * 0x55); }

// y[c * ys + r] for r < RM, c < RN: rows w (stride ws) times columns c0.. of the packed acts.
template <class D, class Dot, int RM, int RN>
inline void tile_cb_pairs(int64_t nb, const uint8_t* w, size_t ws, const CbPairActs& a, int64_t c0, const uint8_t* x,
                          size_t xs, float* y, int64_t ys) {
  static_assert(RM <= 4, "a block pair's scales of RM rows fill one 8-lane vector");
  using W = typename D::W;
  using A = typename D::A;
  using Rows = std::make_index_sequence<RM>;
  const int64_t np = nb / 2;
  const W* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  __m256 X[RM][RN], Y[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) X[r][c] = Y[r][c] = _mm256_setzero_ps();
  const __m256i table = D::table_u(), m4 = _mm256_set1_epi8(0x0f);
  const CbPairActs::Pair* ap = a.p.data() + c0 * np;
  // Prefetch the next tile (RM * ws bytes from w + RM * ws), spread evenly over this tile's
  // pairs. Not tile_q's tile after next: on the Llama 3 8B shape (4096- and 14336-wide rows,
  // weights in 2 MiB pages) IQ4_NL decode gave 3.32 / 3.74 tokens/s with the tile after
  // next, 4.56 / 4.27 with the next one (1 thread, Zen 4, BENCHMARKS.md issue 28); one row
  // at a time with the hardware prefetcher alone, 2.82 / 3.00. Into L1 for tiles of up to
  // kPrefetchL1TileBytes, into L2 beyond (avx2_tiles.h prefetch_lines).
  const char* pf = reinterpret_cast<const char*>(w) + RM * ws;
  const size_t pf_total = RM * ws;
  const bool pf_l1 = pf_total <= kPrefetchL1TileBytes;
  size_t pf_done = 0;
  for (int64_t p = 0; p < np; ++p) {
    prefetch_lines(pf, pf_done, pf_total * size_t(p + 1) / size_t(np), pf_l1);
    const int64_t b = 2 * p;
    const __m256 dw = pair_scales(static_cast<const W* const*>(wr), b, Rows());  // lane r: row r's block b, 4 + r: b + 1
    __m256i ql[RM], qh[RM];
    for (int r = 0; r < RM; ++r) {
      const __m256i raw = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(wr[r][b + 1].qs),
                                              reinterpret_cast<const __m128i*>(wr[r][b].qs));
      ql[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, m4));
      qh[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
    }
    for (int c = 0; c < RN; ++c) {
      const CbPairActs::Pair& q = ap[c * np + p];
      const __m256 prod = _mm256_mul_ps(dw, q.da);  // the same products as dw * da per block
      [&]<size_t... R>(std::index_sequence<R...>) SHARDLM_INLINE {
        ((X[R][c] = _mm256_fmadd_ps(lane_bcast<int(R)>(prod), _mm256_cvtepi32_ps(Dot::u8_acc(q.ol, ql[R], q.lo)), X[R][c]),
          Y[R][c] = _mm256_fmadd_ps(lane_bcast<int(R)>(prod), _mm256_cvtepi32_ps(Dot::u8_acc(q.oh, qh[R], q.hi)), Y[R][c])),
         ...);
      }(Rows());
    }
  }
  for (int c = 0; c < RN; ++c)
    for (int r = 0; r < RM; ++r) {
      const __m256 even = _mm256_permute2f128_ps(X[r][c], Y[r][c], 0x20), odd = _mm256_permute2f128_ps(X[r][c], Y[r][c], 0x31);
      const float s = hsum(_mm256_add_ps(even, odd));
      y[c * ys + r] = 2 * np < nb ? pair_tail<D, Dot>(s, wr[r][nb - 1], reinterpret_cast<const A*>(x + (c0 + c) * xs)[nb - 1]) : s;
    }
}

// Rows [r0, r1) x n_batch columns (n_batch <= kDecodeTilesMaxBatch): tiles of 4 rows x 2
// columns as tile_q's, the activations rearranged once per call.
template <class D, class Dot>
void matmul_cb_pairs(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x, size_t xs,
                     int64_t n_batch, float* y, int64_t ys) {
  thread_local CbPairActs acts;
  const int64_t np = nb / 2;
  cb_pack_acts<D, Dot>(np, x, xs, n_batch, acts);
  for_each_tile<kTileRows>(r0, r1, n_batch, [&]<int RM>(int64_t r, int64_t nbatch) {
    const uint8_t* wr = w + r * ws;
    int64_t c = 0;
    for (; c + kTileCols <= nbatch; c += kTileCols)
      tile_cb_pairs<D, Dot, RM, kTileCols>(nb, wr, ws, acts, c, x, xs, y + c * ys + r, ys);
    for (; c < nbatch; ++c) tile_cb_pairs<D, Dot, RM, 1>(nb, wr, ws, acts, c, x, xs, y + c * ys + r, ys);
  });
}

}  // namespace
}  // namespace kernels::cpu::avx2
