// amx.cc: the AMX-INT8 prompt GEMMs (Intel Xeon Sapphire Rapids and later; issue 30 item 2)
// for Q4_0, Q4_1, Q8_0, IQ4_NL, MXFP4, Q4_K, Q5_K and Q6_K weights in lane order. Compiled with
// -mamx-tile -mamx-int8 plus the AVX-512 flags, layered over the AVX-512 table by
// dispatch.cc only when CPUID reports AMX-TILE/AMX-INT8, the OS enables tile state and
// grants this process tile permission.
//
// Arithmetic: lane order (avx2_tiles.h's gemm_lanes_q4_0, avx2_kquants.h's lane_tile_k):
// per (weight row, activation column) one float, acc = fma(float(isum), dw * da, acc) per
// block (Q4_1: then acc = fma(m, s, acc); Q4_K, Q5_K: the int32 sums of scale x sub-block dot and min x bsums first, then its two
// FMAs per super-block; Q6_K: sum of scale x sub-block dot, one FMA). One TDPBSSD over
// K = 32 bytes (one block, one Q4_K sub-block; K = 16 for a Q6_K sub-block) gives exactly
// those integers for 16 columns x 16 rows, so these GEMMs give gemm_lanes'
// bits (the self-test and kernels_test check it to the bit). Decode-order batches
// (--exact-batches, decode rows without --fast-batches) and batches under kAmxMinBatch take
// the AVX-512 entry: AMX never changes what a run computes, only how fast a prompt goes.
//
// Tiles: A = 16 activation columns x K int8 (a Q8_0 block's or a Q8_K sub-block's quants,
// loaded straight from the activation rows with their stride: no packing), B = one block or
// sub-block of 16 weight rows in VNNI form (B[k][4m + t] = w[m][4k + t]), C[c][m] = int32.
// K (bytes per product) is the type's kK; one tile configuration per GEMM.
//
// Testing without the hardware: the kernels are templates over their tile operations
// (amx_tiles.h: HwTiles issues the instructions, EmuTiles models them), so kernels_test runs
// them whole, packing and epilogues included, on any AVX-512 CPU. Only HwTiles' handful of
// instructions run untested off Sapphire Rapids; dispatch.cc runs them once at start-up in
// a child process against gemm_lanes (a fault or a wrong sum disables AMX, not us).
#if defined(__x86_64__) || defined(_M_X64)
#include "kernels/cpu/kernel_table.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512BW__)

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/avx2_kquants.h"
#include "kernels/cpu/avx2_lanes32.h"
#include "kernels/cpu/avx2_lowbit.h"
#include "kernels/cpu/tu_vector.h"
#include "kernels/kernels.h"
#include "tensor/quants.h"
#include "util/check.h"

namespace kernels::cpu {
namespace amx {
namespace {

using namespace avx2;

constexpr int kCols = 16;     // activation columns per tile product (A and C rows)
constexpr int kRows = 16;     // weight rows per tile product (C's int32 columns)
// Batches from this many columns take AMX. A guess (one full A tile), not measured: no
// session has had a Sapphire Rapids machine since this was written (docs/BENCHMARKS.md).
constexpr int64_t kAmxMinBatch = 16;
constexpr size_t kChunkBytes = size_t(1) << 20;  // activation bytes per column chunk (L2)

// K = k bytes per product (32: a 32-element block or sub-block; 16: a Q6_K sub-block).
TileConfig make_config(int k) {
  TileConfig c;
  for (int t : {kA0, kA1}) c.rows[t] = kCols, c.colsb[t] = uint16_t(k);
  for (int t : {kB0, kB1}) c.rows[t] = uint8_t(k / 4), c.colsb[t] = kRows * 4;
  for (int t : {kC0, kC1}) c.rows[t] = kCols, c.colsb[t] = kRows * 4;
  return c;
}

// int32 -> float (vcvtdq2ps). The zero-masked form: GCC 12 warns that the plain intrinsic's
// _mm512_undefined_ps() "may be used uninitialized".
inline __m512 to_float(__m512i v) { return _mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), v); }

// A group of 16 activation columns for the A tiles: the k quants of product j of block b
// of column c at base + b * block + k * j + c * stride (the activation rows themselves, or
// a zero-padded copy of a partial group).
struct Cols {
  const uint8_t* base;
  size_t block, stride, k;
  const uint8_t* at(int64_t b, int j) const { return base + b * block + k * j; }
};

// Packs the 8x8-dword transposes of 16 rows' 32-byte vectors R[0..16) into one B tile of
// K = 32: dst[64 k + 4 m + t] = byte 4k + t of R[m] (its halves, dst and dst + 256, are the
// B tiles of K = 16 of bytes 0..15 and 16..31).
inline void pack_b(const __m256i R[kRows], uint8_t* dst) {
  Quants32 lo[8], hi[8];
  transpose_8x8_epi32(R, lo);
  transpose_8x8_epi32(R + 8, hi);
  for (int k = 0; k < 8; ++k) {
    std::memcpy(dst + 64 * k, lo[k].q, 32);
    std::memcpy(dst + 64 * k + 32, hi[k].q, 32);
  }
}

// The tile products of sub-blocks j (and j + 1 if nj == 2) of block b: their int32 sums
// into sums[j] (and sums[j + 1]), [column][row]. wq: B tiles of kRows * a.k bytes.
template <class Ops>
inline void products(const Cols& a, const uint8_t* wq, int64_t b, int j, int nj, int32_t (*sums)[kCols][kRows],
                     int sub_blocks) {
  const size_t packed = kRows * a.k;
  const uint8_t* w0 = wq + (b * sub_blocks + j) * packed;
  Ops::template load<kA0>(a.at(b, j), a.stride);
  Ops::template load<kB0>(w0, 64);
  if (nj == 2) {
    Ops::template load<kA1>(a.at(b, j + 1), a.stride);
    Ops::template load<kB1>(w0 + packed, 64);
  }
  Ops::template zero<kC0>();
  Ops::template dpbssd<kC0, kA0, kB0>();
  if (nj == 2) {
    Ops::template zero<kC1>();
    Ops::template dpbssd<kC1, kA1, kB1>();
  }
  Ops::template store<kC0>(sums[j], 64);
  if (nj == 2) Ops::template store<kC1>(sums[j + 1], 64);
}

// The K-quants' exact int32 sum over a super-block's nj products for column c: sum_j of
// sc[j * 16 + m] x sums[j][c][m] (vpmulld, vpaddd), per weight row m.
template <int nj>
inline __m512i scaled_sum(const int32_t* sc, const int32_t (*sums)[kCols][kRows], int c) {
  __m512i s = _mm512_mullo_epi32(_mm512_loadu_si512(sc), _mm512_load_si512(sums[0][c]));
  #pragma GCC unroll 16
  for (int j = 1; j < nj; ++j)
    s = _mm512_add_epi32(s, _mm512_mullo_epi32(_mm512_loadu_si512(sc + j * kRows), _mm512_load_si512(sums[j][c])));
  return s;
}

inline void store_rows(const __m512* acc, int cn, int rm, float* y, int64_t ys) {
  const __mmask16 mask = rm == kRows ? __mmask16(0xFFFF) : __mmask16((1u << rm) - 1);
  for (int c = 0; c < cn; ++c) _mm512_mask_storeu_ps(y + c * ys, mask, acc[c]);
}

// ---- the 32-element types x Q8_0 (Q4_1: x Q8_1): one product per block -------------------
// Q4_0, Q8_0, IQ4_NL, MXFP4: D::quants gives a block's 32 signed int8 weights (TDPBSSD is
// signed x signed: no offset term), block_d its float scale. Q4_1 (D::kHasMin): its nibbles
// 0..15 (exact as signed int8), then per block the min term acc = fma(m, s, acc) (lane_tile's
// kMin), s the Q8_1 column's fp16 s.
template <class D>
struct Q32 {
  using W = typename D::W;
  using A = typename D::A;  // BlockQ8_0, or Q4_1's BlockQ8_1
  static constexpr bool kMin = D::kHasMin;
  static constexpr int kQK = 32, kSub = 1, kK = 32;  // elements, products, bytes per product
  static constexpr int kPackedBlock = kK * kRows;
  struct Rows {                 // 16 weight rows (rm real, the rest zeros)
    TuVector<uint8_t> q;        // [b]: B tile (the signed quants)
    TuVector<float> d, m;       // [b * 16 + m]: scale, and Q4_1's min
  };
  struct Acts {                 // a chunk's columns, padded to ncp
    TuVector<float> d, s;       // [b * ncp + c]: scale, and Q8_1's s
  };
  static void pack_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, Rows& p) {
    p.q.resize(size_t(nb) * kPackedBlock);
    p.d.resize(size_t(nb) * kRows);
    if (kMin) p.m.resize(size_t(nb) * kRows);
    for (int64_t b = 0; b < nb; ++b) {
      __m256i R[kRows];
      for (int m = 0; m < kRows; ++m) {
        const bool real = m < rm;
        const W& blk = reinterpret_cast<const W*>(w + (real ? m : 0) * ws)[b];
        R[m] = real ? D::quants(blk) : _mm256_setzero_si256();
        p.d[size_t(b * kRows + m)] = real ? block_d(blk) : 0.0f;
        if constexpr (kMin) p.m[size_t(b * kRows + m)] = real ? D::m(blk) : 0.0f;
      }
      pack_b(R, p.q.data() + b * kPackedBlock);
    }
  }
  static void pack_acts(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, int64_t ncp, Acts& p) {
    p.d.assign(size_t(nb * ncp), 0.0f);
    if (kMin) p.s.assign(size_t(nb * ncp), 0.0f);
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t b = 0; b < nb; ++b) {
        const A& ab = reinterpret_cast<const A*>(x + c * xs)[b];
        p.d[size_t(b * ncp + c)] = fp16(ab.d);
        if constexpr (kMin) p.s[size_t(b * ncp + c)] = act_s(ab);
      }
  }
  // y[c * ys + m]: columns c0.. of the chunk times the rows; acc[c] lane m as lane_tile:
  // fma(float(isum_b), dw[m] * da[c], acc) (Q4_1: then fma(m[m], s[c], acc)).
  template <class Ops>
  static void tile(int64_t nb, const Cols& a, const Rows& w, const Acts& acts, int64_t c0, int64_t ncp, int cn, int rm,
                   float* y, int64_t ys) {
    alignas(64) int32_t sums[2][kCols][kRows];
    __m512 acc[kCols];
    for (auto& v : acc) v = _mm512_setzero_ps();
    auto epilogue = [&](int64_t b, const int32_t (*s)[kRows]) __attribute__((always_inline)) {
      const __m512 dw = _mm512_loadu_ps(w.d.data() + b * kRows);
      const float* da = acts.d.data() + b * ncp + c0;
      #pragma GCC unroll 16
      for (int c = 0; c < kCols; ++c)
        acc[c] = _mm512_fmadd_ps(to_float(_mm512_load_si512(s[c])), _mm512_mul_ps(dw, _mm512_set1_ps(da[c])), acc[c]);
      if constexpr (kMin) {
        const __m512 mw = _mm512_loadu_ps(w.m.data() + b * kRows);
        const float* sa = acts.s.data() + b * ncp + c0;
        #pragma GCC unroll 16
        for (int c = 0; c < kCols; ++c) acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sa[c]), acc[c]);
      }
    };
    int64_t b = 0;  // blocks in pairs on the two tile sets
    for (; b + 2 <= nb; b += 2) {
      Ops::template load<kA0>(a.at(b, 0), a.stride);
      Ops::template load<kB0>(w.q.data() + b * kPackedBlock, 64);
      Ops::template load<kA1>(a.at(b + 1, 0), a.stride);
      Ops::template load<kB1>(w.q.data() + (b + 1) * kPackedBlock, 64);
      Ops::template zero<kC0>();
      Ops::template zero<kC1>();
      Ops::template dpbssd<kC0, kA0, kB0>();
      Ops::template dpbssd<kC1, kA1, kB1>();
      Ops::template store<kC0>(sums[0], 64);
      Ops::template store<kC1>(sums[1], 64);
      epilogue(b, sums[0]);
      epilogue(b + 1, sums[1]);
    }
    if (b < nb) {
      products<Ops>(a, w.q.data(), b, 0, 1, sums, kSub);
      epilogue(b, sums[0]);
    }
    store_rows(acc, cn, rm, y, ys);
  }
};

// ---- Q4_K / Q5_K x Q8_K: eight products per super-block (one per 32-element sub-block) -----
// Lane order as gemm_lanes' lane_tile_k: per super-block, sumi = sum_j sc_j * isum_j and
// summ = sum_j m_j * (bsums of sub-block j), exact int32 (vpmulld, vpmaddwd), then acc =
// fma(float(sumi), d * da, acc) and acc = fma(float(summ), 0 - dmin * da, acc). Q5_K's
// quants (0..31, k45_subblocks) are exact as signed int8 too.
template <class Block>
struct QK45 {
  using W = Block;
  using A = BlockQ8_K;
  static constexpr int kQK = 256, kSub = 8, kK = 32;
  static constexpr int kPackedBlock = kK * kRows;
  struct Rows {
    TuVector<uint8_t> q;      // [b * 8 + j]: B tile of sub-block j (quants 0..15 / 0..31)
    TuVector<int32_t> sc;     // [(b * 8 + j) * 16 + m]: 6-bit scale
    TuVector<int32_t> mn;     // [(b * 4 + p) * 16 + m]: int16 pair (m_2p, m_2p+1)
    TuVector<float> d, dmin;  // [b * 16 + m]
  };
  struct Acts {
    TuVector<float> d;      // [b * ncp + c]
    TuVector<int32_t> bs2;  // [(b * 4 + p) * ncp + c]: int16 pair (bs_2p, bs_2p+1), sub-block sums
  };
  static void pack_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, Rows& p) {
    p.q.resize(size_t(nb) * kSub * kPackedBlock);
    p.sc.resize(size_t(nb) * kSub * kRows);
    p.mn.resize(size_t(nb) * 4 * kRows);
    p.d.resize(size_t(nb) * kRows);
    p.dmin.resize(size_t(nb) * kRows);
    for (int64_t b = 0; b < nb; ++b) {
      __m256i q[kSub][kRows];  // [j][m]
      for (int m = 0; m < kRows; ++m) {
        uint8_t s8[8] = {}, m8[8] = {};
        float d = 0.0f, dmin = 0.0f;
        if (m < rm) {
          const W& blk = reinterpret_cast<const W*>(w + m * ws)[b];
          k45_subblocks(blk, &q[0][m], kRows);
          unpack_scales_k4(blk.scales, s8, m8);
          d = fp16(blk.d);
          dmin = fp16(blk.dmin);
        } else {
          for (int j = 0; j < kSub; ++j) q[j][m] = _mm256_setzero_si256();
        }
        for (int j = 0; j < kSub; ++j) p.sc[size_t((b * kSub + j) * kRows + m)] = s8[j];
        for (int t = 0; t < 4; ++t)
          p.mn[size_t((b * 4 + t) * kRows + m)] = int32_t(uint32_t(m8[2 * t]) | (uint32_t(m8[2 * t + 1]) << 16));
        p.d[size_t(b * kRows + m)] = d;
        p.dmin[size_t(b * kRows + m)] = dmin;
      }
      for (int j = 0; j < kSub; ++j) pack_b(q[j], p.q.data() + (b * kSub + j) * kPackedBlock);
    }
  }
  static void pack_acts(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, int64_t ncp, Acts& p) {
    p.d.assign(size_t(nb * ncp), 0.0f);
    p.bs2.assign(size_t(nb * 4 * ncp), 0);
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t b = 0; b < nb; ++b) {
        const A& ab = reinterpret_cast<const A*>(x + c * xs)[b];
        p.d[size_t(b * ncp + c)] = ab.d;
        for (int t = 0; t < 4; ++t) {
          const auto lo = uint16_t(int16_t(ab.bsums[4 * t] + ab.bsums[4 * t + 1]));
          const auto hi = uint16_t(int16_t(ab.bsums[4 * t + 2] + ab.bsums[4 * t + 3]));
          p.bs2[size_t((b * 4 + t) * ncp + c)] = int32_t(uint32_t(lo) | (uint32_t(hi) << 16));
        }
      }
  }
  template <class Ops>
  static void tile(int64_t nb, const Cols& a, const Rows& w, const Acts& acts, int64_t c0, int64_t ncp, int cn, int rm,
                   float* y, int64_t ys) {
    alignas(64) int32_t sums[kSub][kCols][kRows];
    __m512 acc[kCols];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      for (int j = 0; j < kSub; j += 2) products<Ops>(a, w.q.data(), b, j, 2, sums, kSub);
      const int32_t* sc = w.sc.data() + b * kSub * kRows;
      const int32_t* mn = w.mn.data() + b * 4 * kRows;
      const __m512 d = _mm512_loadu_ps(w.d.data() + b * kRows), dmin = _mm512_loadu_ps(w.dmin.data() + b * kRows);
      const float* da = acts.d.data() + b * ncp + c0;
      const int32_t* bs2 = acts.bs2.data() + b * 4 * ncp + c0;
      for (int c = 0; c < kCols; ++c) {
        const __m512i sumi = scaled_sum<kSub>(sc, sums, c);
        __m512i summ = _mm512_madd_epi16(_mm512_loadu_si512(mn), _mm512_set1_epi32(bs2[c]));
        #pragma GCC unroll 4
        for (int t = 1; t < 4; ++t)
          summ = _mm512_add_epi32(summ, _mm512_madd_epi16(_mm512_loadu_si512(mn + t * kRows),
                                                          _mm512_set1_epi32(bs2[t * ncp + c])));
        const __m512 dac = _mm512_set1_ps(da[c]);
        acc[c] = _mm512_fmadd_ps(to_float(sumi), _mm512_mul_ps(d, dac), acc[c]);
        acc[c] = _mm512_fmadd_ps(to_float(summ), _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmin, dac)),
                                 acc[c]);
      }
    }
    store_rows(acc, cn, rm, y, ys);
  }
};

using Q4_K = QK45<BlockQ4_K>;
using Q5_K = QK45<BlockQ5_K>;

// ---- Q6_K x Q8_K: sixteen products of K = 16 per super-block (one per sub-block) ----------
// Lane order as gemm_lanes' lane_tile_q6: per super-block sumi = sum_s sc_s * (dot of the
// unsigned quants) - 32 * sum_s sc_s * bsums_s, exact int32, then acc = fma(float(sumi),
// d * da, acc). The tiles take the quants less 32 (-32..31, signed x signed), whose dots
// are those same integers: sumi = sum_s sc_s * isum_s (vpmulld), no bias term.
struct Q6_K {
  using W = BlockQ6_K;
  using A = BlockQ8_K;
  static constexpr int kQK = 256, kSub = 16, kK = 16;
  static constexpr int kPackedBlock = kK * kRows;
  struct Rows {
    TuVector<uint8_t> q;   // [b * 16 + s]: B tile of sub-block s
    TuVector<int32_t> sc;  // [(b * 16 + s) * 16 + m]: int8 scale
    TuVector<float> d;     // [b * 16 + m]
  };
  struct Acts {
    TuVector<float> d;  // [b * ncp + c]
  };
  static void pack_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, Rows& p) {
    p.q.resize(size_t(nb) * kSub * kPackedBlock);
    p.sc.resize(size_t(nb) * kSub * kRows);
    p.d.resize(size_t(nb) * kRows);
    const __m256i bias = _mm256_set1_epi8(32);
    for (int64_t b = 0; b < nb; ++b) {
      __m256i q[8][kRows];  // [32-element chunk j][m]: quants - 32
      for (int m = 0; m < kRows; ++m) {
        const bool real = m < rm;
        const W& blk = reinterpret_cast<const W*>(w + (real ? m : 0) * ws)[b];
        __m256i u[8];
        for (int h = 0; h < 2; ++h) q6_k_quants(blk, h, u + 4 * h);
        for (int j = 0; j < 8; ++j) q[j][m] = real ? _mm256_sub_epi8(u[j], bias) : _mm256_setzero_si256();
        for (int s = 0; s < kSub; ++s) p.sc[size_t((b * kSub + s) * kRows + m)] = real ? blk.scales[s] : 0;
        p.d[size_t(b * kRows + m)] = real ? fp16(blk.d) : 0.0f;
      }
      for (int j = 0; j < 8; ++j) pack_b(q[j], p.q.data() + (b * kSub + 2 * j) * kPackedBlock);
    }
  }
  static void pack_acts(int64_t nb, const uint8_t* x, size_t xs, int64_t nc, int64_t ncp, Acts& p) {
    p.d.assign(size_t(nb * ncp), 0.0f);
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t b = 0; b < nb; ++b) p.d[size_t(b * ncp + c)] = reinterpret_cast<const A*>(x + c * xs)[b].d;
  }
  template <class Ops>
  static void tile(int64_t nb, const Cols& a, const Rows& w, const Acts& acts, int64_t c0, int64_t ncp, int cn, int rm,
                   float* y, int64_t ys) {
    alignas(64) int32_t sums[kSub][kCols][kRows];
    __m512 acc[kCols];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      for (int s = 0; s < kSub; s += 2) products<Ops>(a, w.q.data(), b, s, 2, sums, kSub);
      const int32_t* sc = w.sc.data() + b * kSub * kRows;
      const __m512 d = _mm512_loadu_ps(w.d.data() + b * kRows);
      const float* da = acts.d.data() + b * ncp + c0;
      for (int c = 0; c < kCols; ++c) {
        const __m512i sumi = scaled_sum<kSub>(sc, sums, c);
        acc[c] = _mm512_fmadd_ps(to_float(sumi), _mm512_mul_ps(d, _mm512_set1_ps(da[c])), acc[c]);
      }
    }
    store_rows(acc, cn, rm, y, ys);
  }
};

// Rows [r0, r1) x n_batch columns in lane order: activation columns in chunks of about
// kChunkBytes (L2), each 16-row tile packed once per chunk, 16-column groups inner; a
// chunk's last partial group reads a zero-padded copy of its quants.
template <class Ops, class K>
void gemm(int64_t n, const void* W, size_t ws, int64_t r0, int64_t r1, const void* xq, size_t xs, int64_t n_batch,
          float* y, int64_t ys) {
  using A = typename K::A;
  const int64_t nb = n / K::kQK;
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  thread_local typename K::Rows rows;
  thread_local typename K::Acts acts;
  thread_local TuVector<uint8_t> stage;
  static const TileConfig cfg = make_config(K::kK);
  const int64_t chunk = std::max<int64_t>(kCols, int64_t(kChunkBytes / (size_t(nb) * sizeof(A))) / kCols * kCols);
  Ops::config(cfg);
  for (int64_t c0 = 0; c0 < n_batch; c0 += chunk) {
    const int64_t nc = std::min(chunk, n_batch - c0), ncp = (nc + kCols - 1) / kCols * kCols;
    const int64_t full = nc / kCols * kCols;
    const int rem = int(nc - full);
    const uint8_t* xc = x + c0 * xs;
    K::pack_acts(nb, xc, xs, nc, ncp, acts);
    if (rem) {
      stage.assign(size_t(nb) * kCols * K::kQK, 0);
      for (int c = 0; c < rem; ++c)
        for (int64_t b = 0; b < nb; ++b)
          std::memcpy(&stage[size_t(b * kCols + c) * K::kQK], reinterpret_cast<const A*>(xc + (full + c) * xs)[b].qs,
                      K::kQK);
    }
    for (int64_t r = r0; r < r1; r += kRows) {
      const int rm = int(std::min<int64_t>(kRows, r1 - r));
      K::pack_rows(nb, w + r * ws, ws, rm, rows);
      float* yr = y + c0 * ys + r;
      for (int64_t c = 0; c < full; c += kCols)
        K::template tile<Ops>(nb, Cols{xc + c * xs + offsetof(A, qs), sizeof(A), xs, K::kK}, rows, acts, c, ncp,
                              kCols, rm, yr + c * ys, ys);
      if (rem)
        K::template tile<Ops>(nb, Cols{stage.data(), size_t(kCols) * K::kQK, size_t(K::kQK), K::kK}, rows, acts,
                              full, ncp, rem, rm, yr + full * ys, ys);
    }
  }
  Ops::release();
}

template <class K, tensor::Type kType>
void matmul(int64_t n, const void* W, size_t ws, int64_t r0, int64_t r1, const void* xq, size_t xs, int64_t n_batch,
            float* y, int64_t ys) {
  if (n_batch >= kAmxMinBatch && ::kernels::lane_order()) return gemm<HwTiles, K>(n, W, ws, r0, r1, xq, xs, n_batch, y, ys);
  avx512_table().matmul[slot(kType)](n, W, ws, r0, r1, xq, xs, n_batch, y, ys);
}

}  // namespace
}  // namespace amx

const KernelTable& amx_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.matmul[slot(tensor::Type::Q4_0)] = amx::matmul<amx::Q32<avx2::DecQ4_0>, tensor::Type::Q4_0>;
    t.matmul[slot(tensor::Type::Q4_1)] = amx::matmul<amx::Q32<avx2::DecQ4_1>, tensor::Type::Q4_1>;
    t.matmul[slot(tensor::Type::Q8_0)] = amx::matmul<amx::Q32<avx2::DecQ8_0>, tensor::Type::Q8_0>;
    t.matmul[slot(tensor::Type::IQ4_NL)] = amx::matmul<amx::Q32<avx2::DecIQ4_NL>, tensor::Type::IQ4_NL>;
    t.matmul[slot(tensor::Type::MXFP4)] = amx::matmul<amx::Q32<avx2::DecMXFP4>, tensor::Type::MXFP4>;
    t.matmul[slot(tensor::Type::Q4_K)] = amx::matmul<amx::Q4_K, tensor::Type::Q4_K>;
    t.matmul[slot(tensor::Type::Q5_K)] = amx::matmul<amx::Q5_K, tensor::Type::Q5_K>;
    t.matmul[slot(tensor::Type::Q6_K)] = amx::matmul<amx::Q6_K, tensor::Type::Q6_K>;
    return t;
  }();
  return table;
}

namespace amx {
namespace {
template <class Ops>
MatmulFn gemm_of(tensor::Type t) {
  using tensor::Type;
  switch (t) {
    case Type::Q4_0: return gemm<Ops, Q32<avx2::DecQ4_0>>;
    case Type::Q4_1: return gemm<Ops, Q32<avx2::DecQ4_1>>;
    case Type::Q8_0: return gemm<Ops, Q32<avx2::DecQ8_0>>;
    case Type::IQ4_NL: return gemm<Ops, Q32<avx2::DecIQ4_NL>>;
    case Type::MXFP4: return gemm<Ops, Q32<avx2::DecMXFP4>>;
    case Type::Q4_K: return gemm<Ops, Q4_K>;
    case Type::Q5_K: return gemm<Ops, Q5_K>;
    case Type::Q6_K: return gemm<Ops, Q6_K>;
    default: return nullptr;
  }
}
}  // namespace
}  // namespace amx

MatmulFn amx_gemm(tensor::Type t, bool emulated) {
  return emulated ? amx::gemm_of<amx::EmuTiles>(t) : amx::gemm_of<amx::HwTiles>(t);
}

}  // namespace kernels::cpu

#else  // built without the AMX flags: no table
namespace kernels::cpu {
const KernelTable& amx_table() {
  static const KernelTable table;
  return table;
}
MatmulFn amx_gemm(tensor::Type, bool) { return nullptr; }
}  // namespace kernels::cpu
#endif
#endif  // x86-64
