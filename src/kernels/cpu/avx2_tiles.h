// avx2_tiles.h: private to kernels/cpu: the 32-element-block (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0) vec_dot and register-tiled matmul templates, parametrized on the integer dot
// (MaddubsDot for AVX2, a VNNI dpbusd policy in avx512.cc), so both ISAs share one tested
// loop structure. Matmul tiles are kTileRows weight rows x kTileCols activation rows: each
// weight block is decoded once per tile, each activation block loaded once per kTileRows
// rows; rows are the outer loop so weights stream from memory once while the activations
// stay in cache. Batches of more than kDecodeTilesMaxBatch (prompt processing) take gemm_q
// instead: packed activation chunks and decoded weight tiles, same per-element arithmetic.
// The lane-order GEMMs and the table entry matmul_q are in avx2_lanes32.h.
// Include only from files compiled with AVX2 flags.
#pragma once
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/tu_vector.h"
#include "kernels/kernels.h"

namespace kernels::cpu::avx2 {
// Internal linkage: these are compiled with different -m flags in different files, so
// they must never be merged across translation units by the linker (ODR / SIGILL).
namespace {

// Lambdas of the hot loops are forced inline (GCC decides per instantiation otherwise).
#define SHARDLM_INLINE __attribute__((always_inline))

constexpr int kTileRows = 4;  // weight rows per matmul tile
constexpr int kTileCols = 2;  // activation rows per tile (4 x 2 accumulators + 4 decoded blocks)
// How far ahead in a weight row to prefetch. 512 made the fused Q4_K matrix x vector 30%
// slower out of cache on the AVX-512 EPYC (kernels_bench Matvec/Q4_K/65536x4096: 17.7
// against 25.5 GB/s; 0, 128, 384 and 1024 all near 256); Q4_0 / Q4_1 do not care.
constexpr int kPrefetchBytes = 256;

// The decode tiles (tile_q, avx2_cb_pairs.h's tile_cb_pairs) prefetch a coming tile of RM
// rows spread over the current one: lines [done, to) from pf, into L1 (_MM_HINT_T0) when
// that tile (RM x row stride) is at most kPrefetchL1TileBytes, else only into L2
// (_MM_HINT_T1). Measured from memory (weights in 2 MiB pages, 1 thread, Zen 4 with a 48
// KiB L1D, a harness streaming the 8B / 1B shapes' matrices, BENCHMARKS.md issue 28):
// IQ4_NL's 14336-wide rows (32 KiB tiles) 11-12 GB/s into L1, 21-22 into L2; 8192-wide
// (18 KiB) 12.3 against 21.8; 6144-wide (13.8 KiB) 13.4 against 21.5; 5120-wide (11.5 KiB)
// 17 against 17-21; 4096-wide (9 KiB) 21 against 20; 2048-wide (4.5 KiB) 22.5 against
// 14.8. Q4_0 / Q4_1 (tile_q, the tile after next) 13 -> 17-18 on 14336- and 8192-wide rows,
// the shorter ones unchanged. Prefetch only: the hint changes no result.
constexpr size_t kPrefetchL1TileBytes = 10 * 1024;
inline void prefetch_lines(const char* pf, size_t& done, size_t to, bool to_l1) {
  if (to_l1)
    for (; done < to; done += 64) _mm_prefetch(pf + done, _MM_HINT_T0);
  else
    for (; done < to; done += 64) _mm_prefetch(pf + done, _MM_HINT_T1);
}

// Tile(rm, rn) runs one tile of rm weight rows x rn activation rows at (r, c).
template <int RM, class Tile>
inline void for_each_tile(int64_t r0, int64_t r1, int64_t n_batch, Tile&& tile) {
  int64_t r = r0;
  for (; r + RM <= r1; r += RM) tile.template operator()<RM>(r, n_batch);
  for (; r < r1; ++r) tile.template operator()<1>(r, n_batch);
}

// ---- 32-element quantized types ----------------------------------------------------------

// Field F (an fp16: the scale d, or the min m) of block b of rows wr[0..R), lanes 0..R-1.
template <auto F, class W, size_t... R>
inline __m128i f16_of_rows(const W* const* wr, int64_t b, std::index_sequence<R...>) {
  __m128i h = _mm_setzero_si128();
  ((h = _mm_insert_epi16(h, wr[R][b].*F, R)), ...);
  return h;
}

// The float scales of blocks b and b + 1 of rows wr[0..R): lane r = block b of row r, lane
// 4 + r = block b + 1 (fp16 d through one conversion; MXFP4's E8M0 exponent as block_d
// builds it: the same floats as block_d, lane for lane).
template <class W, size_t... R>
inline __m256 pair_scales(const W* const* wr, int64_t b, std::index_sequence<R...> rows) {
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(f16_of_rows<&W::d>(wr, b, rows), f16_of_rows<&W::d>(wr, b + 1, rows)));
}
template <size_t... R>
inline __m256 pair_scales(const BlockMXFP4* const* wr, int64_t b, std::index_sequence<R...>) {
  alignas(32) int32_t e[8] = {};
  ((e[R] = wr[R][b].e, e[4 + R] = wr[R][b + 1].e), ...);
  const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(e));
  const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);  // (e - 1) << 23
  const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);            // e < 2: subnormal
  const __m256i lt2 = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, lt2));
}

// ggml's AVX2 vec_dot of the 32-element codebook types (IQ4_NL, MXFP4) sums the even blocks
// into one accumulator and the odd ones into another, adds the two before the horizontal
// sum, and an odd last block after it as a scalar fused multiply-add (quants.c, -mfma):
// D::kPairAcc. The tiles below follow it for those types.
template <class D>
constexpr bool pair_acc() {
  if constexpr (requires { D::kPairAcc; }) return D::kPairAcc;
  else return false;
}
// Whether a pair type converts the scales of two blocks of its rows at once (pair_scales,
// as the fp16 types' step_pair) rather than per row and block: D::kPairScales. Measured
// faster with VNNI's one-instruction dot (avx512.cc), slower in the AVX2 build on Zen 4.
template <class D>
constexpr bool pair_scales_of() {
  if constexpr (requires { D::kPairScales; }) return D::kPairScales;
  else return false;
}
// s + d * (integer dot of block (w, a)), rounded once: the odd last block of a kPairAcc type.
template <class D, class Dot>
inline float pair_tail(float s, const typename D::W& w, const typename D::A& a) {
  alignas(32) int32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l),
                     dot_block<D, Dot>(D::quants(w), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs))));
  const int32_t sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));  // exact
  return std::fma(block_d(w) * fp16(a.d), float(sum), s);
}

// y[c * ys + r] = dot(W row r, X row c) for r < RM, c < RN; nb blocks per row.
// Per (row, activation row) the float operations are exactly ggml's vec_dot sequence: one
// accumulator (two for pair_acc types, see above), acc = fma(set1(dw * da), float(int dot of block b), acc) for b ascending,
// then hsum. What is shared across the RM rows (the activation block, its scale, and for
// the offset types its kOff-weighted lane sums) is loaded / computed once per block, and
// the rows' fp16 scales (and mins) of a block pair are converted as one vector.
// kPrefetch: software-prefetch the tile after next (below); off, the hardware prefetcher alone.
template <class D, class Dot, int RM, int RN, bool kPrefetch = true>
inline void tile_q(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                   int64_t ys) {
  static_assert(RM <= 4, "a block pair's scales of RM rows fill one 8-lane vector");
  using W = typename D::W;
  using A = typename D::A;
  using Rows = std::make_index_sequence<RM>;
  constexpr bool kPair = pair_acc<D>();
  __m256 acc[RM][RN], acc_odd[kPair ? RM : 1][kPair ? RN : 1];
  __m256 (*cur)[RN] = acc;  // where step() accumulates: acc, or for an odd block of a pair type acc_odd
  __m128 acc_m[RN];  // min terms, lane r = weight row r
  for (int c = 0; c < RN; ++c) {
    acc_m[c] = _mm_setzero_ps();
    for (int r = 0; r < RM; ++r) acc[r][c] = _mm256_setzero_ps();
  }
  if constexpr (kPair)
    for (int c = 0; c < RN; ++c)
      for (int r = 0; r < RM; ++r) acc_odd[r][c] = _mm256_setzero_ps();
  const W* wr[RM];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  // prod[c][j * 4 + r] = dw * da of row r, block b + j: one 8-lane multiply for a block
  // pair (the same IEEE products as the scalar dw * da), read back by broadcast loads.
  alignas(32) float prod[RN][8];
  // One block b: ps(c, r) is the scale product of (row r, column c); mw the rows' mins.
  auto step = [&](int64_t b, auto&& ps, __m128 mw) SHARDLM_INLINE {
    __m256i qa[RN], qoff[RN];
    for (int c = 0; c < RN; ++c) {
      const A* ab = reinterpret_cast<const A*>(x + c * xs) + b;
      qa[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab->qs));
      // -u8dot(kOff, a): the integer dot starts from it (Dot::u8_acc), one op less per row
      if constexpr (D::kOff > 0) qoff[c] = _mm256_sub_epi32(_mm256_setzero_si256(), Dot::u8(_mm256_set1_epi8(D::kOff), qa[c]));
    }
    for (int r = 0; r < RM; ++r) {
      const W* wb = wr[r] + b;
      if constexpr (D::kOff > 0) {
        const __m256i qw = D::quants_u(*wb);
        for (int c = 0; c < RN; ++c) {
          const __m256i q = Dot::u8_acc(qoff[c], qw, qa[c]);
          cur[r][c] = _mm256_fmadd_ps(ps(c, r), _mm256_cvtepi32_ps(q), cur[r][c]);
        }
      } else {
        const __m256i qw = D::quants(*wb);
        for (int c = 0; c < RN; ++c)
          cur[r][c] = _mm256_fmadd_ps(ps(c, r), _mm256_cvtepi32_ps(dot_block<D, Dot>(qw, qa[c])), cur[r][c]);
      }
    }
    if constexpr (D::kHasMin)
      for (int c = 0; c < RN; ++c) {
        const A* ab = reinterpret_cast<const A*>(x + c * xs) + b;
        acc_m[c] = _mm_fmadd_ps(mw, _mm_set1_ps(act_s(*ab)), acc_m[c]);
      }
  };
  // Blocks b and b + 1: the RM rows' 2 * RM fp16 scales in one vector, one conversion and
  // one multiply per column (instead of a conversion, a multiply and a broadcast per row).
  // (WB depends on the generic b: only the types with fp16 scales instantiate this.)
  // A pair type (kPair) puts block b + 1 into acc_odd (ggml's odd accumulator).
  auto step_pair = [&](auto b) SHARDLM_INLINE {
    using WB = std::conditional_t<sizeof(b) != 0, W, void>;
    const __m256 dw = pair_scales(reinterpret_cast<const WB* const*>(wr), b, Rows());
    for (int c = 0; c < RN; ++c) {
      const A* ab = reinterpret_cast<const A*>(x + c * xs) + b;
      const __m256 da = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(fp16(ab[0].d))),
                                             _mm_set1_ps(fp16(ab[1].d)), 1);
      _mm256_store_ps(prod[c], _mm256_mul_ps(dw, da));
    }
    __m256 mw = _mm256_setzero_ps();
    if constexpr (D::kHasMin)
      mw = _mm256_cvtph_ps(_mm_unpacklo_epi64(f16_of_rows<&W::m>(wr, b, Rows()), f16_of_rows<&W::m>(wr, b + 1, Rows())));
    step(b, [&](int c, int r) SHARDLM_INLINE { return _mm256_broadcast_ss(&prod[c][r]); }, _mm256_castps256_ps128(mw));
    if constexpr (kPair) cur = acc_odd;
    step(b + 1, [&](int c, int r) SHARDLM_INLINE { return _mm256_broadcast_ss(&prod[c][4 + r]); },
         _mm256_extractf128_ps(mw, 1));
    if constexpr (kPair) cur = acc;
  };
  // Block b alone: a conversion, a multiply and a broadcast per row and column.
  auto step_single = [&](int64_t b) SHARDLM_INLINE {
    float da[RN];
    for (int c = 0; c < RN; ++c) da[c] = fp16((reinterpret_cast<const A*>(x + c * xs) + b)->d);
    __m128 mw = _mm_setzero_ps();
    if constexpr (D::kHasMin) mw = _mm_cvtph_ps(f16_of_rows<&W::m>(wr, b, Rows()));
    step(b, [&](int c, int r) SHARDLM_INLINE { return _mm256_set1_ps(block_d(wr[r][b]) * da[c]); }, mw);
  };
  // Prefetch: the RM rows of the tile after next (RM * ws bytes from w + 2 * RM * ws, one
  // sequential stream) spread evenly over this tile's blocks. Prefetching the next tile
  // instead: 30B-A3B shape Q4_0 decode 32 against 35 tokens/s, SmolLM2 Q4_1 154 against 172
  // (1 thread, AVX-512 EPYC); each row's own blocks ahead instead: half of either.
  const char* pf = reinterpret_cast<const char*>(w) + 2 * RM * ws;
  const size_t pf_total = RM * ws;
  const bool pf_l1 = pf_total <= kPrefetchL1TileBytes;  // else into L2 (prefetch_lines)
  size_t pf_done = 0;
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    const size_t pf_to = pf_total * size_t(b + 2) / size_t(nb);
    if constexpr (kPrefetch) prefetch_lines(pf, pf_done, pf_to, pf_l1);
    // Q8_0 (memory-bound at ~50 GB/s) keeps per-row scales: the pair conversion measured 5%
    // slower for it on the AVX-512 EPYC (with AVX2 kernels, one run 5-10% faster: the
    // choice follows the dev machine's ISA), while the 4- and 5-bit types gained 5-20%
    // (kernels_bench Matvec, BENCHMARKS.md).
    if constexpr (kPair && !pair_scales_of<D>()) {
      step_single(b);
      cur = acc_odd;
      step_single(b + 1);
      cur = acc;
    } else if constexpr (std::is_same_v<D, DecQ8_0>) {
      step_single(b);
      step_single(b + 1);
    } else {
      step_pair(b);
    }
  }
  if (!kPair && b < nb) step_single(b);
  for (int c = 0; c < RN; ++c) {
    alignas(16) float m[4];
    _mm_store_ps(m, acc_m[c]);
    for (int r = 0; r < RM; ++r) {
      if constexpr (kPair) {
        const float s = hsum(_mm256_add_ps(acc[r][c], acc_odd[r][c]));
        y[c * ys + r] = b < nb ? pair_tail<D, Dot>(s, wr[r][b], reinterpret_cast<const A*>(x + c * xs)[b]) : s;
      } else {
        y[c * ys + r] = D::kHasMin ? hsum(acc[r][c]) + m[r] : hsum(acc[r][c]);
      }
    }
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
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(block_d(wb[b]) * fp16(ab[b].d)), _mm256_cvtepi32_ps(q0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(block_d(wb[b + 1]) * fp16(ab[b + 1].d)), _mm256_cvtepi32_ps(q1), acc1);
    if constexpr (D::kHasMin) summ += D::m(wb[b]) * act_s(ab[b]) + D::m(wb[b + 1]) * act_s(ab[b + 1]);
  }
  if constexpr (pair_acc<D>())  // ggml's scalar tail after the sum
    return b < nb ? pair_tail<D, Dot>(hsum(_mm256_add_ps(acc0, acc1)), wb[b], ab[b]) : hsum(_mm256_add_ps(acc0, acc1));
  if (b < nb) {
    const __m256i q0 = dot_block<D, Dot>(D::quants(wb[b]), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(block_d(wb[b]) * fp16(ab[b].d)), _mm256_cvtepi32_ps(q0), acc0);
    if constexpr (D::kHasMin) summ += D::m(wb[b]) * act_s(ab[b]);
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + summ;
}

// ---- batched products (prompt processing): compute-bound, so organised for arithmetic --------
//
// Same per-element float arithmetic as tile_q (block b ascending: acc = fma(dw * da,
// float(int dot), acc); then hsum, plus the min terms), with everything that does not
// depend on the (row, column) pair taken out of the inner loop:
//  * columns go in chunks that fit in L2; a chunk is packed once per call into block-major
//    order (the quants of block b of all its columns adjacent), with the fp16 scales
//    converted to float and, for the offset types, the kOff correction precomputed;
//  * each tile of kGemmRows weight rows is decoded once per chunk into 32-byte quants and
//    float scales (L1-resident), then used for every column of the chunk;
//  * the inner tile is kGemmRows x RN (up to 12 accumulators in registers); the RM x RN
//    scale products dw * da of a block are RN 4-wide multiplies (the same single-precision
//    products as the scalar dw * da) read back as broadcast loads.
// Integer dots are exact, so the only float operations per element are ggml's.
constexpr int kGemmRows = 4;          // weight rows per tile (one __m128 of scales)
constexpr int64_t kGemmMinBatch = 4;  // smaller batches take the decode tiles (memory-bound)
static_assert(kGemmMinBatch == ::kernels::kLaneMinBatch, "kernels.h promises lane order from kLaneMinBatch");
// vec_dot order: batches up to this many columns (decode rows of several sequences) also
// take the decode tiles, whose 4-row weight tile stays in L1 across the column pairs;
// measured faster than the packed GEMM there (1B shape Q4_0, 1 thread, 4 rows: 19.6 vs
// 15.6 tokens/s; 8 rows: 19.7 vs 18.7).
constexpr int64_t kDecodeTilesMaxBatch = 16;
constexpr size_t kGemmChunkBytes = 256 * 1024;  // packed activations per column chunk (L2)
constexpr int64_t kGemmMinChunkTiles = 8;  // at least this many column tiles per chunk, so a
                                           // decoded weight tile is reused enough (long rows)

// Columns per tile: 12 accumulators for the unsigned-operand types; Q8_0's signed dot needs
// two registers per weight block (|w| and w), so it gets 8.
template <class D>
constexpr int gemm_cols() { return D::kSigned && D::kOff == 0 ? 2 : 3; }

struct alignas(32) Quants32 { int8_t q[32]; };

// A chunk of nc activation columns, block-major: element [b * nc + c].
struct GemmActs {
  TuVector<Quants32> qs;    // the 32 int8 quants
  TuVector<Quants32> qoff;  // Dot::u8(kOff, qs) for the offset types (8 int32)
  TuVector<float> d, s;     // scale, and sum term (Q8_1)
};

// A tile of rm weight rows, block-major: q[b * kGemmRows + r]; d / m[b * 4 + r] (rows
// past rm are zero).
struct GemmRows {
  TuVector<Quants32> q;
  TuVector<float> d, m;
  TuVector<float> prod;  // scratch for gemm_tile_q: nb * 4 * RN scale products
};

template <class D, class Dot>
void gemm_pack_acts(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, GemmActs& p) {
  using A = typename D::A;
  const size_t n = size_t(nb * nc);
  if (p.qs.size() < n) {
    p.qs.resize(n);
    p.qoff.resize(n);
    p.d.resize(n);
    p.s.resize(n);
  }
  for (int64_t c = 0; c < nc; ++c) {
    const A* ab = reinterpret_cast<const A*>(x + c * xs);
    for (int64_t b = 0; b < nb; ++b) {
      const size_t i = size_t(b * nc + c);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.qs[i].q), q);
      if constexpr (D::kOff > 0)
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.qoff[i].q), Dot::u8(_mm256_set1_epi8(D::kOff), q));
      p.d[i] = fp16(ab[b].d);
      if constexpr (D::kHasMin) p.s[i] = act_s(ab[b]);
    }
  }
}

template <class D>
void gemm_pack_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, GemmRows& p) {
  using W = typename D::W;
  const size_t n = size_t(nb * kGemmRows);
  if (p.q.size() < n) {
    p.q.resize(n);
    p.d.resize(n);
    p.m.resize(n);
    p.prod.resize(n * 4);
  }
  for (int r = 0; r < kGemmRows; ++r) {
    const W* wr = reinterpret_cast<const W*>(w + r * ws);
    for (int64_t b = 0; b < nb; ++b) {
      const size_t i = size_t(b * kGemmRows + r);
      if (r >= rm) {
        p.d[i] = p.m[i] = 0.0f;
        continue;
      }
      const __m256i q = D::kOff > 0 ? D::quants_u(wr[b]) : D::quants(wr[b]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.q[i].q), q);
      p.d[i] = block_d(wr[b]);
      p.m[i] = D::kHasMin ? D::m(wr[b]) : 0.0f;
    }
  }
}

// y[c * ys + r] for r < RM, c < RN: packed rows w, packed columns c0..c0+RN of a chunk of nc.
template <class D, class Dot, int RM, int RN>
inline void gemm_tile_q(int64_t nb, GemmRows& w, const GemmActs& a, int64_t nc, int64_t c0, float* y,
                        int64_t ys) {
  __m256 acc[RM][RN];
  __m128 acc_m[RN];
  #pragma GCC unroll 4
  for (int c = 0; c < RN; ++c) {
    acc_m[c] = _mm_setzero_ps();
    #pragma GCC unroll 4
    for (int r = 0; r < RM; ++r) acc[r][c] = _mm256_setzero_ps();
  }
  // prod[c * 4 + r] = dw[r] * da[c] of block b, as the scalar products would be; stored and
  // read back by broadcast loads (load ports are idle here, the FP pipes are not).
  float* __restrict prod = w.prod.data();
  // Blocks b0, b0 + step, ... below `end` (pair_acc types: the even blocks, then the odd
  // ones, as ggml's two accumulators; others: every block in order).
  constexpr bool kPair = pair_acc<D>();
  const int64_t end = kPair ? nb / 2 * 2 : nb;
  auto pass = [&](int64_t b0, int64_t step) SHARDLM_INLINE {
  for (int64_t b = b0; b < end; b += step) {
    const Quants32* __restrict wq = w.q.data() + b * kGemmRows;
    const float* __restrict wd = w.d.data() + b * 4;
    const float* __restrict wm = w.m.data() + b * 4;
    const Quants32* __restrict aq = a.qs.data() + c0 + b * nc;
    const Quants32* __restrict ao = a.qoff.data() + c0 + b * nc;
    const float* __restrict ad = a.d.data() + c0 + b * nc;
    const float* __restrict as = a.s.data() + c0 + b * nc;
    const __m128 vdw = _mm_load_ps(wd);
    #pragma GCC unroll 4
    for (int c = 0; c < RN; ++c) _mm_store_ps(prod + c * 4, _mm_mul_ps(vdw, _mm_set1_ps(ad[c])));
    #pragma GCC unroll 4
    for (int r = 0; r < RM; ++r) {
      const __m256i qw = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq[r].q));
      #pragma GCC unroll 4
      for (int c = 0; c < RN; ++c) {
        const __m256i qa = _mm256_load_si256(reinterpret_cast<const __m256i*>(aq[c].q));
        __m256i q;
        if constexpr (D::kOff > 0) q = _mm256_sub_epi32(Dot::u8(qw, qa), _mm256_load_si256(reinterpret_cast<const __m256i*>(ao[c].q)));
        else q = dot_block<D, Dot>(qw, qa);
        acc[r][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(prod + c * 4 + r), _mm256_cvtepi32_ps(q), acc[r][c]);
      }
    }
    if constexpr (D::kHasMin) {
      const __m128 vmw = _mm_load_ps(wm);
      #pragma GCC unroll 4
      for (int c = 0; c < RN; ++c) acc_m[c] = _mm_fmadd_ps(vmw, _mm_set1_ps(as[c]), acc_m[c]);
    }
  }
  };
  if constexpr (kPair) {
    pass(0, 2);
    __m256 even[RM][RN];
    for (int c = 0; c < RN; ++c)
      for (int r = 0; r < RM; ++r) even[r][c] = acc[r][c], acc[r][c] = _mm256_setzero_ps();
    pass(1, 2);
    for (int c = 0; c < RN; ++c)
      for (int r = 0; r < RM; ++r) {
        float sum = hsum(_mm256_add_ps(even[r][c], acc[r][c]));
        if (end < nb) {  // ggml's scalar tail: the odd last block after the sum
          alignas(32) int32_t l[8];
          const __m256i qw = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.q[end * kGemmRows + r].q));
          const __m256i qa = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.qs[c0 + end * nc + c].q));
          const __m256i q = D::kOff > 0 ? _mm256_sub_epi32(Dot::u8(qw, qa), _mm256_load_si256(reinterpret_cast<const __m256i*>(
                                                                    a.qoff[c0 + end * nc + c].q)))
                                        : dot_block<D, Dot>(qw, qa);  // (the rows hold quants_u for kOff)
          _mm256_store_si256(reinterpret_cast<__m256i*>(l), q);
          const int32_t isum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
          sum = std::fma(w.d[end * 4 + r] * a.d[c0 + end * nc + c], float(isum), sum);
        }
        y[c * ys + r] = sum;
      }
    return;
  }
  pass(0, 1);
  #pragma GCC unroll 4
  for (int c = 0; c < RN; ++c) {
    alignas(16) float m[4];
    _mm_store_ps(m, acc_m[c]);
    #pragma GCC unroll 4
    for (int r = 0; r < RM; ++r) y[c * ys + r] = D::kHasMin ? hsum(acc[r][c]) + m[r] : hsum(acc[r][c]);
  }
}

// Rows [r0, r1) x n_batch columns: column chunks outer, row tiles inner.
template <class D, class Dot>
void gemm_q(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x, size_t xs,
            int64_t n_batch, float* y, int64_t ys) {
  constexpr int RN = gemm_cols<D>();
  thread_local GemmActs acts;
  thread_local GemmRows rows;
  const size_t col_bytes = size_t(nb) * (sizeof(Quants32) + (D::kOff > 0 ? 32 : 0) + 8);
  const int64_t chunk = std::max<int64_t>(kGemmMinChunkTiles * RN, int64_t(kGemmChunkBytes / col_bytes) / RN * RN);
  for (int64_t c0 = 0; c0 < n_batch; c0 += chunk) {
    const int64_t nc = std::min(chunk, n_batch - c0);
    gemm_pack_acts<D, Dot>(nb, x + c0 * xs, xs, nc, acts);
    auto row_tile = [&]<int RM>(int64_t r) {
      gemm_pack_rows<D>(nb, w + r * ws, ws, RM, rows);
      float* yr = y + c0 * ys + r;
      int64_t c = 0;
      for (; c + RN <= nc; c += RN) gemm_tile_q<D, Dot, RM, RN>(nb, rows, acts, nc, c, yr + c * ys, ys);
      for (; c < nc; ++c) gemm_tile_q<D, Dot, RM, 1>(nb, rows, acts, nc, c, yr + c * ys, ys);
    };
    int64_t r = r0;
    for (; r + kGemmRows <= r1; r += kGemmRows) row_tile.template operator()<kGemmRows>(r);
    for (; r < r1; ++r) row_tile.template operator()<1>(r);
  }
}

}  // namespace
}  // namespace kernels::cpu::avx2
