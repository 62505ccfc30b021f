// amx.cc: the AMX-INT8 prompt GEMM (Intel Xeon Sapphire Rapids and later; issue 30 item 2)
// for Q4_0 weights in lane order. Compiled with -mamx-tile -mamx-int8 plus the AVX-512 flags,
// layered over the AVX-512 table by dispatch.cc only when CPUID reports AMX-TILE/AMX-INT8,
// the OS enables tile state and grants this process tile permission (arch_prctl, once).
//
// Arithmetic: lane order (avx2_tiles.h's gemm_lanes_q4_0): per (weight row r, activation
// column c), acc = fma(float(isum_b), dw_r * da_c, acc) for blocks b ascending, isum_b the
// exact integer dot of block b. One TDPBSSD over K = 32 bytes (one block) gives exactly
// those integers for 16 columns x 16 rows, so this GEMM gives gemm_lanes_q4_0's bits (the
// self-test and kernels_test check it to the bit). Decode-order batches (--exact-batches,
// or decode rows without --fast-batches) and batches under kAmxMinBatch take the AVX-512
// entry: AMX never changes what a default run computes, only how fast a prompt goes.
//
// Tiles: A = 16 activation columns x 32 int8 (a Q8_0 block's quants, loaded straight from
// the activation rows with their stride: no packing), B = one block of 16 weight rows in
// VNNI form (B[k][4m + j] = w[m][4k + j], w = nibble - 8), C[c][m] = int32 sums. Blocks go
// in pairs on two tile sets so one pair's products overlap the other's float epilogue.
//
// Testing without the hardware: the kernel is a template over its tile operations.
// HwTiles issues the instructions; EmuTiles is a plain-C++ model of the same instructions
// (configuration checks included: a shape the CPU would fault on fails a CHECK), so
// kernels_test runs the whole kernel, packing and epilogue included, on any AVX-512 CPU.
// Only HwTiles' handful of instructions run untested off Sapphire Rapids; dispatch.cc
// guards them with a self-test in a child process (a fault there disables AMX, not us).
#if defined(__x86_64__) || defined(_M_X64)
#include "kernels/cpu/kernel_table.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/avx2_tiles.h"
#include "util/check.h"

namespace kernels::cpu {
namespace amx {
namespace {

using namespace avx2;

constexpr int kCols = 16;     // activation columns per tile product (A and C rows)
constexpr int kRows = 16;     // weight rows per tile product (C's int32 columns)
constexpr int kBlock = 32;    // the K of one product: one Q4_0 / Q8_0 block
constexpr int kPackedBlock = kBlock * kRows;  // bytes of one block of a packed 16-row tile
// Batches from this many columns take AMX. A guess (one full A tile), not measured: no
// session has had a Sapphire Rapids machine since this was written (docs/BENCHMARKS.md).
constexpr int64_t kAmxMinBatch = 16;
constexpr size_t kChunkBytes = size_t(1) << 20;  // activation bytes per column chunk (L2)

enum : int { kA0 = 0, kA1 = 1, kB0 = 2, kB1 = 3, kC0 = 4, kC1 = 5 };  // tile registers

struct alignas(64) TileConfig {  // LDTILECFG's 64-byte operand, palette 1
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

TileConfig make_config() {
  TileConfig c;
  for (int t : {kA0, kA1}) c.rows[t] = kCols, c.colsb[t] = kBlock;
  for (int t : {kB0, kB1}) c.rows[t] = kBlock / 4, c.colsb[t] = kRows * 4;
  for (int t : {kC0, kC1}) c.rows[t] = kCols, c.colsb[t] = kRows * 4;
  return c;
}

// The instructions. GCC's tile macros take the register number as a literal token, hence
// the if-constexpr ladders. Their asm names no memory operand for loads, so a compiler
// barrier orders each load after the stores that filled its source.
struct HwTiles {
  static void config(const TileConfig& c) { _tile_loadconfig(&c); }
  static void release() { _tile_release(); }
  template <int T>
  static void load(const void* p, size_t stride) {
    __asm__ volatile("" ::: "memory");
    if constexpr (T == kA0) _tile_loadd(0, p, stride);
    else if constexpr (T == kA1) _tile_loadd(1, p, stride);
    else if constexpr (T == kB0) _tile_loadd(2, p, stride);
    else { static_assert(T == kB1); _tile_loadd(3, p, stride); }
  }
  template <int T>
  static void zero() {
    if constexpr (T == kC0) _tile_zero(4);
    else { static_assert(T == kC1); _tile_zero(5); }
  }
  template <int C, int A, int B>
  static void dpbssd() {
    if constexpr (C == kC0) { static_assert(A == kA0 && B == kB0); _tile_dpbssd(4, 0, 2); }
    else { static_assert(C == kC1 && A == kA1 && B == kB1); _tile_dpbssd(5, 1, 3); }
  }
  template <int T>
  static void store(void* p, size_t stride) {
    if constexpr (T == kC0) _tile_stored(4, p, stride);
    else { static_assert(T == kC1); _tile_stored(5, p, stride); }
  }
};

// The same instructions in C++, after the Intel SDM's pseudo-code (TILELOADD, TILEZERO,
// TDPBSSD, TILESTORED): a tile is `rows` rows of `colsb` bytes, the rest of a 64-byte row
// and the rows past `rows` read as zero; TDPBSSD faults unless C.rows == A.rows,
// A.colsb == 4 * B.rows and C.colsb == B.colsb.
struct EmuTiles {
  struct State {
    TileConfig cfg;
    bool configured = false;
    alignas(64) uint8_t t[8][16 * 64] = {};
  };
  static State& s() {
    thread_local State st;
    return st;
  }
  static void config(const TileConfig& c) {
    CHECK(c.palette == 1 && c.start_row == 0);
    for (int t = 0; t < 8; ++t) CHECK(c.rows[t] <= 16 && c.colsb[t] <= 64);
    State& st = s();
    st.cfg = c;
    st.configured = true;
    std::memset(st.t, 0, sizeof st.t);
  }
  static void release() { s().configured = false; }
  template <int T>
  static void load(const void* p, size_t stride) {
    State& st = s();
    CHECK(st.configured && st.cfg.rows[T] > 0);
    std::memset(st.t[T], 0, sizeof st.t[T]);
    for (int r = 0; r < st.cfg.rows[T]; ++r)
      std::memcpy(st.t[T] + r * 64, static_cast<const uint8_t*>(p) + r * stride, st.cfg.colsb[T]);
  }
  template <int T>
  static void zero() {
    CHECK(s().configured);
    std::memset(s().t[T], 0, sizeof s().t[T]);
  }
  template <int C, int A, int B>
  static void dpbssd() {
    State& st = s();
    const TileConfig& c = st.cfg;
    CHECK(st.configured && c.rows[C] == c.rows[A] && c.colsb[A] == 4 * c.rows[B] && c.colsb[C] == c.colsb[B]);
    CHECK(c.colsb[A] % 4 == 0 && c.colsb[C] % 4 == 0);
    for (int m = 0; m < c.rows[C]; ++m)
      for (int n = 0; n < c.colsb[C] / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, st.t[C] + m * 64 + 4 * n, 4);
        for (int k = 0; k < c.colsb[A] / 4; ++k)
          for (int j = 0; j < 4; ++j)
            acc += int32_t(int8_t(st.t[A][m * 64 + 4 * k + j])) * int8_t(st.t[B][k * 64 + 4 * n + j]);
        std::memcpy(st.t[C] + m * 64 + 4 * n, &acc, 4);
      }
  }
  template <int T>
  static void store(void* p, size_t stride) {
    State& st = s();
    CHECK(st.configured);
    for (int r = 0; r < st.cfg.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, st.t[T] + r * 64, st.cfg.colsb[T]);
  }
};

// int32 -> float (vcvtdq2ps). The zero-masked form: GCC 12 warns that the plain intrinsic's
// _mm512_undefined_ps() "may be used uninitialized".
inline __m512 to_float(__m512i v) { return _mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), v); }

// A tile of 16 weight rows (rm of them real, the rest zeros), packed per block for B:
// q[b * 512 + 64 k + 4 m + j] = w[m][4k + j], and the rows' scales d[b * 16 + m].
struct PackedRows {
  std::vector<uint8_t> q;
  std::vector<float> d;
};

void pack_rows(int64_t nb, const uint8_t* w, size_t ws, int rm, PackedRows& p) {
  p.q.resize(size_t(nb) * kPackedBlock);
  p.d.resize(size_t(nb) * kRows);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i R[kRows];
    for (int m = 0; m < kRows; ++m) {
      if (m < rm) {
        const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(w + m * ws)[b];
        R[m] = DecQ4_0::quants(blk);
        p.d[size_t(b * kRows + m)] = fp16(blk.d);
      } else {
        R[m] = _mm256_setzero_si256();
        p.d[size_t(b * kRows + m)] = 0.0f;
      }
    }
    Quants32 lo[8], hi[8];  // [k]: bytes 4k..4k+3 of rows 0..7 / 8..15
    transpose_8x8_epi32(R, lo);
    transpose_8x8_epi32(R + 8, hi);
    uint8_t* dst = p.q.data() + b * kPackedBlock;
    for (int k = 0; k < 8; ++k) {
      std::memcpy(dst + 64 * k, lo[k].q, 32);
      std::memcpy(dst + 64 * k + 32, hi[k].q, 32);
    }
  }
}

// y[c * ys + m] for c < cn, m < rm: 16 columns (A rows: block b of column c at a + c *
// a_stride + b * a_block) times a packed 16-row tile. da[b * da_stride + c]: the columns'
// scales. acc[c] lane m follows lane_tile: fma(float(isum), dw[m] * da[c], acc).
template <class Ops>
void tile16(int64_t nb, const uint8_t* a, size_t a_block, size_t a_stride, const PackedRows& w, const float* da,
            int64_t da_stride, int cn, int rm, float* y, int64_t ys) {
  alignas(64) int32_t sums[2][kCols][kRows];
  __m512 acc[kCols];
  for (auto& v : acc) v = _mm512_setzero_ps();
  auto epilogue = [&](int64_t b, const int32_t (*s)[kRows]) __attribute__((always_inline)) {
    const __m512 dw = _mm512_loadu_ps(w.d.data() + b * kRows);
    const float* dab = da + b * da_stride;
    #pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c)
      acc[c] = _mm512_fmadd_ps(to_float(_mm512_load_si512(s[c])), _mm512_mul_ps(dw, _mm512_set1_ps(dab[c])), acc[c]);
  };
  const uint8_t* wq = w.q.data();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    Ops::template load<kA0>(a + b * a_block, a_stride);
    Ops::template load<kB0>(wq + b * kPackedBlock, 64);
    Ops::template load<kA1>(a + (b + 1) * a_block, a_stride);
    Ops::template load<kB1>(wq + (b + 1) * kPackedBlock, 64);
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
    Ops::template load<kA0>(a + b * a_block, a_stride);
    Ops::template load<kB0>(wq + b * kPackedBlock, 64);
    Ops::template zero<kC0>();
    Ops::template dpbssd<kC0, kA0, kB0>();
    Ops::template store<kC0>(sums[0], 64);
    epilogue(b, sums[0]);
  }
  const __mmask16 mask = rm == kRows ? __mmask16(0xFFFF) : __mmask16((1u << rm) - 1);
  for (int c = 0; c < cn; ++c) _mm512_mask_storeu_ps(y + c * ys, mask, acc[c]);
}

// Rows [r0, r1) x n_batch columns, Q4_0 weights x Q8_0 activations, in lane order.
template <class Ops>
void gemm_q4_0(int64_t n, const void* W, size_t ws, int64_t r0, int64_t r1, const void* xq, size_t xs,
               int64_t n_batch, float* y, int64_t ys) {
  const int64_t nb = n / kBlock;
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  constexpr size_t kA = sizeof(BlockQ8_0);
  thread_local PackedRows rows;
  thread_local std::vector<float> da;       // [b * kCols * groups + c] of a chunk
  thread_local std::vector<uint8_t> stage;  // a chunk's last, partial column group, zero-padded
  static const TileConfig cfg = make_config();
  const int64_t chunk = std::max<int64_t>(kCols, int64_t(kChunkBytes / (size_t(nb) * kA)) / kCols * kCols);
  Ops::config(cfg);
  for (int64_t c0 = 0; c0 < n_batch; c0 += chunk) {
    const int64_t nc = std::min(chunk, n_batch - c0), ncp = (nc + kCols - 1) / kCols * kCols;
    const int64_t full = nc / kCols * kCols;
    const int rem = int(nc - full);
    const uint8_t* xc = x + c0 * xs;
    da.assign(size_t(nb * ncp), 0.0f);
    for (int64_t c = 0; c < nc; ++c) {
      const auto* ab = reinterpret_cast<const BlockQ8_0*>(xc + c * xs);
      for (int64_t b = 0; b < nb; ++b) da[size_t(b * ncp + c)] = fp16(ab[b].d);
    }
    if (rem) {
      stage.assign(size_t(nb) * kCols * kBlock, 0);
      for (int c = 0; c < rem; ++c) {
        const auto* ab = reinterpret_cast<const BlockQ8_0*>(xc + (full + c) * xs);
        for (int64_t b = 0; b < nb; ++b) std::memcpy(&stage[size_t(b * kCols + c) * kBlock], ab[b].qs, kBlock);
      }
    }
    for (int64_t r = r0; r < r1; r += kRows) {
      const int rm = int(std::min<int64_t>(kRows, r1 - r));
      pack_rows(nb, w + r * ws, ws, rm, rows);
      float* yr = y + c0 * ys + r;
      for (int64_t c = 0; c < full; c += kCols)
        tile16<Ops>(nb, xc + c * xs + offsetof(BlockQ8_0, qs), kA, xs, rows, da.data() + c, ncp, kCols, rm,
                    yr + c * ys, ys);
      if (rem)
        tile16<Ops>(nb, stage.data(), size_t(kCols) * kBlock, kBlock, rows, da.data() + full, ncp, rem, rm,
                    yr + full * ys, ys);
    }
  }
  Ops::release();
}

void matmul_q4_0(int64_t n, const void* W, size_t ws, int64_t r0, int64_t r1, const void* xq, size_t xs,
                 int64_t n_batch, float* y, int64_t ys) {
  if (n_batch >= kAmxMinBatch && ::kernels::lane_order())
    return gemm_q4_0<HwTiles>(n, W, ws, r0, r1, xq, xs, n_batch, y, ys);
  avx512_table().matmul[slot(Type::Q4_0)](n, W, ws, r0, r1, xq, xs, n_batch, y, ys);
}

}  // namespace
}  // namespace amx

const KernelTable& amx_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.matmul[slot(tensor::Type::Q4_0)] = amx::matmul_q4_0;
    return t;
  }();
  return table;
}

MatmulFn amx_emulated_q4_0() { return amx::gemm_q4_0<amx::EmuTiles>; }

std::string amx_self_test(bool emulated) {
  using tensor::BlockQ4_0;
  using tensor::BlockQ8_0;
  // Odd shapes: two full row tiles and 3 rows, 7 blocks (a pair loop and a tail), 37
  // columns (two full column groups and 5), random quants and scales.
  constexpr int64_t kR = 35, kN = 7 * 32, kB = 37;
  std::mt19937 rng(30);
  std::vector<uint8_t> w(size_t(kR) * (kN / 32) * sizeof(BlockQ4_0)), x(size_t(kB) * (kN / 32) * sizeof(BlockQ8_0));
  for (auto& v : w) v = uint8_t(rng());
  for (auto& v : x) v = uint8_t(int(rng() % 255) - 127);  // a quantizer's range, -127..127
  auto fix_scales = [&rng](uint8_t* p, size_t n_blocks, size_t stride) {  // fp16 scales in [2^-10, 0.5)
    for (size_t i = 0; i < n_blocks; ++i) {
      const uint16_t h = uint16_t(0x1400 + rng() % 0x2400);
      std::memcpy(p + i * stride, &h, 2);
    }
  };
  fix_scales(w.data(), w.size() / sizeof(BlockQ4_0), sizeof(BlockQ4_0));
  fix_scales(x.data(), x.size() / sizeof(BlockQ8_0), sizeof(BlockQ8_0));
  const size_t ws = (kN / 32) * sizeof(BlockQ4_0), xs = (kN / 32) * sizeof(BlockQ8_0);
  std::vector<float> got(size_t(kB * kR), -1.0f), want(size_t(kB * kR), -2.0f);
  avx2::gemm_lanes_q4_0(kN / 32, w.data(), ws, 0, kR, x.data(), xs, kB, want.data(), kR);
  (emulated ? amx::gemm_q4_0<amx::EmuTiles> : amx::gemm_q4_0<amx::HwTiles>)(kN, w.data(), ws, 0, kR, x.data(), xs,
                                                                          kB, got.data(), kR);
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "Q4_0 AMX GEMM, row %d column %d: %.9g, expected %.9g", int(i % kR),
                    int(i / kR), double(got[i]), double(want[i]));
      return buf;
    }
  return "";
}

}  // namespace kernels::cpu

#else  // built without the AMX flags: no table
namespace kernels::cpu {
const KernelTable& amx_table() {
  static const KernelTable table;
  return table;
}
MatmulFn amx_emulated_q4_0() { return nullptr; }
std::string amx_self_test(bool) { return "built without AMX support"; }
}  // namespace kernels::cpu
#endif
#endif  // x86-64
