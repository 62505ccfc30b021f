// avx2_lanes32.h: private to kernels/cpu: the 32-element-block types' prompt batches in
// lane order (one float per output, summed block by block): the 8-row lane tile and GEMM
// (lane_tile, gemm_lanes: Q4_0 on AVX2; Q4_0 and Q8_0 through avx512.cc's VNNI lane and
// matmul_lanes32; on AVX2 Q8_0, IQ4_NL and MXFP4 take avx2_lowbit_lanes.h's
// matmul_cb_lanes) and matmul_q, the table entry that picks between the decode tiles, the
// vec_dot-order GEMM (avx2_tiles.h) and the lane GEMM. Q4_1 (x Q8_1) takes the same tile with
// its min term: per block acc = fma(float(isum), dw * da, acc), then acc = fma(m, s, acc)
// (lane_tile's kMin). Include only from files compiled with AVX2 flags.
#pragma once
#include <type_traits>

#include "kernels/cpu/avx2_cols4.h"
#include "kernels/cpu/avx2_tiles.h"
#include "kernels/cpu/tu_vector.h"

namespace kernels::cpu::avx2 {
namespace {  // internal linkage, as avx2_tiles.h (per-ISA copies never merged)

// ---- Q4_0 batches in "lane order": one float per output ------------------------------------
//
// The GEMM above keeps ggml's vec_dot order, which costs a convert and an 8-lane FMA per
// (row, column, block) and a horizontal sum per output. Here each output is one float
// lane instead, summed block by block: acc = fma(float(int dot of block b), dw * da, acc)
// (llama.cpp's repacked q4_0 GEMM sums in this order too). Eight weight rows share one
// register: the packed tile holds, per block, eight vectors V[k] whose int32 lane r is
// elements 4k..4k+3 of row r (unsigned nibbles 0..15); an activation column contributes
// broadcasts of its own elements 4k..4k+3. Per (block, column) that is 8 maddubs into
// int16 (at most 8 * 2 * 15 * 127 = 30480: no saturation), one madd to int32, the
// offset correction 8 * sum(a), one convert and one FMA for all eight rows. The integer
// dot is exact and the float operations per output do not depend on the other rows or
// columns, so a row's result is the same in any row range or batch.

struct LaneActs {                // a chunk of nc columns, block-major: [b * nc + c]
  TuVector<Quants32> qs;         // the activation quants
  TuVector<int32_t> off;         // 8 * sum of the block's quants (Q8_1: 0, no offset)
  TuVector<float> d;             // scale
  TuVector<float> s;             // Q8_1 only: its fp16 s (d * sum of the quants) as float
};
struct LaneRows {                // a tile of 8 rows
  TuVector<Quants32> v;          // [b * 8 + k]: V[k] of block b
  TuVector<float> d;             // [b * 8 + r]: scale of row r
  TuVector<float> m;             // Q4_1 only: [b * 8 + r]: min of row r
};

// A chunk of Q8_0 (or, A = BlockQ8_1, Q8_1) activation columns into LaneActs.
template <class A = BlockQ8_0>
inline void lane_pack_acts(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, LaneActs& p) {
  constexpr bool kQ8_1 = std::is_same_v<A, BlockQ8_1>;
  const size_t n = size_t(nb * nc);
  if (p.qs.size() < n) {
    p.qs.resize(n);
    p.off.resize(n);
    p.d.resize(n);
    if (kQ8_1) p.s.resize(n);
  }
  for (int64_t c = 0; c < nc; ++c) {
    const A* ab = reinterpret_cast<const A*>(x + c * xs);
    for (int64_t b = 0; b < nb; ++b) {
      const size_t i = size_t(b * nc + c);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.qs[i].q), q);
      p.d[i] = fp16(ab[b].d);
      if constexpr (kQ8_1) {
        p.off[i] = 0;
        p.s[i] = fp16(ab[b].s);
      } else {
        p.off[i] = hsum_i32(dot_u8(_mm256_set1_epi8(8), q));
      }
    }
  }
}

// out[k] int32 lane r = R[r] int32 lane k (8 x 8 transpose of 32-bit groups): out[k]
// holds bytes 4k..4k+3 of all eight rows.
inline void transpose_8x8_epi32(const __m256i R[8], Quants32* out) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(R[2 * i], R[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(R[2 * i], R[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0..3 (h = 0) and 4..7 (h = 1)
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[k].q), _mm256_permute2x128_si256(u[k], u[4 + k], 0x20));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[k + 4].q), _mm256_permute2x128_si256(u[k], u[4 + k], 0x31));
  }
}

// y[0..rm) = the first rm lanes of v.
inline void store_lanes(float* y, __m256 v, int rm) {
  if (rm == 8) {
    _mm256_storeu_ps(y, v);
    return;
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int r = 0; r < rm; ++r) y[r] = t[r];
}

// Rows r..r+rm (rm <= 8; missing rows are zeros) of a 32-element type's weights into the lane
// layout, as unsigned bytes D::quants_u (Q4_0: the nibbles; avx512.cc's VNNI tiles: w + 128).
// Q4_1 (D::kHasMin) also its mins into LaneRows::m.
template <class D = DecQ4_0>
inline void lane_pack_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, LaneRows& p) {
  if (p.v.size() < size_t(nb * 8)) {
    p.v.resize(size_t(nb * 8));
    p.d.resize(size_t(nb * 8));
    if (D::kHasMin) p.m.resize(size_t(nb * 8));
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i R[8];
    for (int r = 0; r < 8; ++r) {
      if (r < rm) {
        const auto& blk = reinterpret_cast<const typename D::W*>(w + r * ws)[b];
        R[r] = D::quants_u(blk);
        p.d[size_t(b * 8 + r)] = block_d(blk);
        if constexpr (D::kHasMin) p.m[size_t(b * 8 + r)] = D::m(blk);
      } else {
        R[r] = _mm256_setzero_si256();
        p.d[size_t(b * 8 + r)] = 0.0f;
        if constexpr (D::kHasMin) p.m[size_t(b * 8 + r)] = 0.0f;
      }
    }
    transpose_8x8_epi32(R, &p.v[size_t(b * 8)]);
  }
}

// A block's int dot in the lane layout from the 8 packed vectors V (u = w + 8), a column's
// 4-byte groups q4 and LaneActs::off = 8 * sum(a): 8 maddubs in int16 (<= 30480), one madd.
struct MaddubsLane {
  static __m256i dot(const __m256i* V, const int32_t* q4, int32_t off) {
    __m256i s = _mm256_maddubs_epi16(V[0], _mm256_set1_epi32(q4[0]));
    #pragma GCC unroll 8
    for (int k = 1; k < 8; ++k) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(V[k], _mm256_set1_epi32(q4[k])));
    return _mm256_sub_epi32(_mm256_madd_epi16(s, _mm256_set1_epi16(1)), _mm256_set1_epi32(off));
  }
};

// y[c * ys + r] for r < rm, c < RN: a packed 8-row tile times columns c0..c0+RN of a chunk,
// each block's int dot by Lane::dot. kMin (Q4_1): then acc = fma(m, s, acc) per block.
template <int RN, class Lane, bool kMin = false>
inline void lane_tile(int64_t nb, const LaneRows& w, int rm, const LaneActs& a, int64_t nc, int64_t c0, float* y,
                      int64_t ys) {
  __m256 acc[RN];
  for (int c = 0; c < RN; ++c) acc[c] = _mm256_setzero_ps();
  const Quants32* __restrict v = w.v.data();
  const float* __restrict wd = w.d.data();
  const float* __restrict wm = kMin ? w.m.data() : nullptr;
  const Quants32* __restrict aq = a.qs.data() + c0;
  const int32_t* __restrict ao = a.off.data() + c0;
  const float* __restrict ad = a.d.data() + c0;
  const float* __restrict as = kMin ? a.s.data() + c0 : nullptr;
  for (int64_t b = 0; b < nb; ++b, v += 8, wd += 8, aq += nc, ao += nc, ad += nc) {
    const __m256 dw = _mm256_loadu_ps(wd);
    __m256i V[8];
    #pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) V[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(v[k].q));
    #pragma GCC unroll 8
    for (int c = 0; c < RN; ++c) {
      const __m256i q = Lane::dot(V, reinterpret_cast<const int32_t*>(aq[c].q), ao[c]);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_mul_ps(dw, _mm256_set1_ps(ad[c])), acc[c]);
    }
    if constexpr (kMin) {
      const __m256 mw = _mm256_loadu_ps(wm);
      #pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(as[c]), acc[c]);
      wm += 8;
      as += nc;
    }
  }
  for (int c = 0; c < RN; ++c) store_lanes(y + c * ys, acc[c], rm);
}

// Rows [r0, r1) x n_batch columns in lane order: column chunks outer (packed once into L2,
// col_bytes each), 8-row tiles packed once per chunk, RN-column register tiles
// (Tile<RN>::run) inner. Shared by the Q4_0 and the K-quant lane GEMMs. PrefetchRows: the
// next tile's rows into L2 during this one (off only where it measured slower).
template <class Acts, void (*PackActs)(int64_t, const uint8_t*, size_t, int64_t, Acts&), class Rows,
          void (*PackRows)(int64_t, const uint8_t*, size_t, int, Rows&), template <int> class Tile, int RN,
          bool PrefetchRows = true>
inline void gemm_lanes(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x, size_t xs,
                       int64_t n_batch, float* y, int64_t ys, size_t col_bytes) {
  thread_local Acts acts;
  thread_local Rows rows;
  const int64_t chunk = std::max<int64_t>(kGemmMinChunkTiles * RN, int64_t(kGemmChunkBytes / col_bytes) / RN * RN);
  for (int64_t c0 = 0; c0 < n_batch; c0 += chunk) {
    const int64_t nc = std::min(chunk, n_batch - c0);
    PackActs(nb, x + c0 * xs, xs, nc, acts);
    for (int64_t r = r0; r < r1; r += 8) {
      const int rm = int(std::min<int64_t>(8, r1 - r));
      PackRows(nb, w + r * ws, ws, rm, rows);
      // The next tile's weight rows into L2 while this one runs (a prompt reads them from
      // memory once per chunk; the packing stalled on them).
      if (PrefetchRows && r + 8 < r1) {
        size_t done = 0;
        prefetch_lines(reinterpret_cast<const char*>(w + (r + 8) * ws), done,
                       size_t(std::min<int64_t>(8, r1 - r - 8)) * ws, /*to_l1=*/false);
      }
      float* yr = y + c0 * ys + r;
      int64_t c = 0;
      for (; c + RN <= nc; c += RN) Tile<RN>::run(nb, rows, rm, acts, nc, c, yr + c * ys, ys);
      for (; c < nc; ++c) Tile<1>::run(nb, rows, rm, acts, nc, c, yr + c * ys, ys);
    }
  }
}

template <class Lane, bool kMin = false>
struct LaneTile {
  template <int RN>
  struct T {
    static void run(int64_t nb, const LaneRows& w, int rm, const LaneActs& a, int64_t nc, int64_t c0, float* y,
                    int64_t ys) {
      lane_tile<RN, Lane, kMin>(nb, w, rm, a, nc, c0, y, ys);
    }
  };
};

// F as its own function (F inlined into it, nothing into its callers): Q4_1's matmul_q as
// matmul_lanes32's Fallback. Inlined into the lane entry instead, its vec_dot-order GEMM
// measured 10-20% slower (Decode/Q4_1/8192x2048/seqs64, Zen 4) and its decode tiles a few %.
template <MatmulFn F>
__attribute__((noinline)) void own_function(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1,
                                            const void* xq, size_t xq_stride, int64_t n_batch, float* y,
                                            int64_t y_stride) {
  F(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
}

// The table entry of a 32-element lane GEMM: batches of kGemmMinBatch or more in lane
// order when allowed, everything else (decode, --exact-batches) through Fallback.
template <class Rows, void (*PackRows)(int64_t, const uint8_t*, size_t, int, Rows&), template <int> class Tile,
          MatmulFn Fallback, class A = BlockQ8_0>
void matmul_lanes32(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                    size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch >= kGemmMinBatch && ::kernels::lane_order())
    return gemm_lanes<LaneActs, lane_pack_acts<A>, Rows, PackRows, Tile, 4>(
        n / kQK, static_cast<const uint8_t*>(W), row_stride, r0, r1, static_cast<const uint8_t*>(xq), xq_stride,
        n_batch, y, y_stride, size_t(n / kQK) * (sizeof(Quants32) + (std::is_same_v<A, BlockQ8_1> ? 12 : 8)));
  Fallback(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
}

inline void gemm_lanes_q4_0(int64_t nb, const uint8_t* w, size_t ws, int64_t r0, int64_t r1, const uint8_t* x,
                            size_t xs, int64_t n_batch, float* y, int64_t ys) {
  gemm_lanes<LaneActs, lane_pack_acts<>, LaneRows, lane_pack_rows<>, LaneTile<MaddubsLane>::T, 4>(
      nb, w, ws, r0, r1, x, xs, n_batch, y, ys, size_t(nb) * (sizeof(Quants32) + 8));
}

template <class D, class Dot = MaddubsDot>
void matmul_q(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
              size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t nb = n / kQK;
  if (n_batch >= kGemmMinBatch) {
    if constexpr (std::is_same_v<D, DecQ4_0>)
      if (::kernels::lane_order()) return gemm_lanes_q4_0(nb, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride);
    if (n_batch > kDecodeTilesMaxBatch) return gemm_q<D, Dot>(nb, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride);
    // Decode batches of the 32-element types in vec_dot order: avx2_cols4.h.
    if constexpr (std::is_same_v<Dot, MaddubsDot>)
      return matmul_cols4<D>(nb, w, row_stride, r0, r1, x, xq_stride, n_batch, y, y_stride);
  }
  // Q8_0 times one vector, as in decode, where the weights come from memory: one row at a
  // time and only the hardware prefetcher (one sequential stream) reads 1.4-1.75x faster
  // than 4-row tiles with software prefetch (matrices of 512-201088 x 2880-4096, cold
  // cache, 1 thread, Zen 4: 201088 x 2880, gpt-oss's output, 40 -> 26 ms), same bits; the
  // tiles stay faster only on a matrix already in cache (36 against 30 GB/s at 4096 x 2880).
  // Rows of more than kPrefetchL1TileBytes (Q8_0 rows over ~9600 wide: the 8B shape's
  // 14336-wide ffn_down) software-prefetch the row after next into L2 (tile_q's prefetch,
  // prefetch_lines): from 2 MiB-page memory 16.1-18.4 -> 25.9-28.6 GB/s on that matrix,
  // as fast as the 4096-wide ones (25-28; 1 thread, Zen 4, BENCHMARKS.md issue 28).
  // The AVX-512 table only (VnniDot): the CPUs that run the AVX2 table read Q8_0 faster
  // through the 4-row tiles below (Zen 3, the first AVX2-only CPU measured: tg32 of the 1B
  // shape 14.3 through the tiles, 10.9 one row at a time; BENCHMARKS.md "An AVX2-only CPU").
  if constexpr (std::is_same_v<D, DecQ8_0> && !std::is_same_v<Dot, MaddubsDot>)
    if (n_batch == 1) {
      if (row_stride > kPrefetchL1TileBytes)
        for (int64_t r = r0; r < r1; ++r)
          tile_q<D, Dot, 1, 1, true>(nb, w + r * row_stride, row_stride, x, xq_stride, y + r, y_stride);
      else
        for (int64_t r = r0; r < r1; ++r)
          tile_q<D, Dot, 1, 1, false>(nb, w + r * row_stride, row_stride, x, xq_stride, y + r, y_stride);
      return;
    }
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
