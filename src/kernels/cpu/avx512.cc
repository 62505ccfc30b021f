// avx512.cc: the AVX-512 VNNI kernels (x86-64, compiled with -mavx512f/bw/vl/dq/vnni). They
// reuse the AVX2 loop structure of avx2_tiles.h with one change: the int8 dot of a block
// is a single vpdpbusd (on 256-bit registers, AVX512-VL) instead of vpmaddubsw + vpmaddwd.
// For our operand ranges (|w|, |a| <= 127, so no vpmaddubsw saturation) both give the same
// integers, so these kernels are correct by construction; they are tested by the same
// kernels_test cases on a machine that has AVX-512 VNNI (set_isa(kAvx512)). Q4_K's and Q6_K's
// matrix x vector add their scaled int16 pairs with one vpdpwssd instead of vpmaddwd +
// vpaddd (VnniScale; the same int32s), and so do Q2_K's and Q3_K's (FusedQ2K / FusedQ3K,
// their 2-16 column decode batches too, by matmul_cols as on the AVX2 table);
// IQ4_NL and MXFP4 take vpdpbusd through two-block decode tiles (avx2_cb_pairs.h; their larger
// vec_dot-order batches the AVX2 entry: measured faster). IQ4_XS has no VNNI matrix x vector (a
// fused one measured no faster) but is here too: compiled with AVX-512VL the same code has
// 32 ymm registers and spills less (measured on Zen 4, BENCHMARKS.md). The lane-order prompt
// GEMMs of these five types (avx2_lowbit_lanes.h) take VnniDot / VnniScale here. Entries
// left null here (float types, quantizers) fall back to the AVX2 table. The K-quant matrix x
// vector (Q4_K, Q5_K, Q6_K) has a 512-bit form too (avx512_wide.h, the same bits): a core
// that issues 512-bit operations as two halves (Zen 4) measured it 20% slower, one that
// issues them whole should not, so the width is chosen per CPU at start by a short
// measurement of both (avx512_kquant_width; SHARDLM_AVX512_WIDTH=256|512 forces one).
#if defined(__x86_64__) || defined(_M_X64)
#include "kernels/cpu/kernel_table.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/avx2_cb_pairs.h"
#include "kernels/cpu/avx2_kfused.h"
#include "kernels/cpu/avx2_kquants.h"
#include "kernels/cpu/avx2_lanes32.h"
#include "kernels/cpu/avx2_lowbit.h"
#include "kernels/cpu/avx2_lowbit_lanes.h"
#include "kernels/cpu/avx512_wide.h"
#include "kernels/cpu/tu_vector.h"

namespace kernels::cpu {
namespace avx512 {
namespace {

using namespace avx2;

struct VnniDot {
  // unsigned w (0..127) x signed a, 4 bytes per int32 lane: exactly madd(maddubs(w, a), 1)
  static __m256i u8(__m256i w, __m256i a) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a); }
  static __m256i u8_acc(__m256i acc, __m256i w, __m256i a) { return _mm256_dpbusd_epi32(acc, w, a); }
  static __m256i i8(__m256i w, __m256i a) { return u8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)); }
};

// K-quant scales: sum + madd(scale, p16) in one vpdpwssd (the same int32s: exact).
struct VnniScale {
  static __m256i acc(__m256i sum, __m256i scale, __m256i p16) { return _mm256_dpwssd_epi32(sum, scale, p16); }
  // IQ4_XS lane GEMM (avx2_lowbit_lanes.h, lane_flip): per row lane, sum over a 32-element
  // sub-block of (a + 128) * v, eight vpdpbusd (activations + 128 as the unsigned operand,
  // signed weights: exact in int32). Two chains of four (even and odd k), added at the end:
  // the same int32s, half the vpdpbusd latency chain (a chain of eight left the multipliers
  // half idle on Zen 4).
  static __m256i xs_sub_flip(const Quants32* v, const int32_t* q4u) {
    __m256i r[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int k = 0; k < 8; ++k)
      r[k % 2] = _mm256_dpbusd_epi32(r[k % 2], _mm256_set1_epi32(q4u[k]),
                                     _mm256_load_si256(reinterpret_cast<const __m256i*>(v[k].q)));
    return _mm256_add_epi32(r[0], r[1]);
  }
};

// IQ4_NL, MXFP4 in the decode tiles and the lane GEMM (matmul_lanes_u): the weights + 128 as
// unsigned bytes (the value table with its sign bit flipped), so the int8 dot is one vpdpbusd
// from -128 * (sum of the activation's 4 bytes), computed once per block and column (tile_q's
// kOff path; VnniLane): the same int32 lanes as the sign trick's three operations (no
// saturation: 4 * 255 * 128 < 2^31).
template <class Block, const int8_t* kValues>
struct DecCodebook32U : DecCodebook32<Block, kValues> {
  static constexpr int kOff = 128;
  static constexpr bool kPairScales = true;  // avx2_tiles.h pair_scales_of
  static __m256i table_u() { return _mm256_xor_si256(table16(kValues), _mm256_set1_epi8(char(0x80))); }
  static __m256i quants_u(const Block& b) { return _mm256_shuffle_epi8(table_u(), nibbles32(b.qs)); }
};
using DecIQ4_NL_U = DecCodebook32U<BlockIQ4_NL, kIQ4NLValues>;
using DecMXFP4_U = DecCodebook32U<BlockMXFP4, kMXFP4Values>;

// Q8_0 as unsigned bytes for the lane GEMM below: w + 128 (the sign bit flipped).
struct DecQ8_0_U : DecQ8_0 {
  static constexpr int kOff = 128;
  static __m256i quants_u(const BlockQ8_0& b) { return _mm256_xor_si256(quants(b), _mm256_set1_epi8(char(0x80))); }
};

// The lane tile's block dot (avx2_tiles.h lane_tile) with VNNI, for the 32-element types as
// unsigned bytes u = w + U::kOff (Q4_0's nibbles, kOff 8; Q8_0's w + 128) packed by
// lane_pack_rows<U>: eight vpdpbusd in two chains (even and odd k), the first from -kOff *
// sum(a) (LaneActs::off is 8 * sum(a); Q4_1's kOff is 0: its nibbles as they are, then
// lane_tile's min term): exactly the block's int dot (vpdpbusd does not
// saturate; |sum| < 2^31), so each output is the lane-order reference's to the bit. Against
// MaddubsLane (Q4_0) and TileCB's sign trick (Q8_0, IQ4_NL, MXFP4 through DecCodebook32U):
// half the integer instructions.
template <class U>
struct VnniLane {
  static __m256i dot(const __m256i* V, const int32_t* q4, int32_t off) {
    __m256i s[2] = {_mm256_set1_epi32(-off * (U::kOff / 8)), _mm256_setzero_si256()};
    #pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) s[k % 2] = _mm256_dpbusd_epi32(s[k % 2], V[k], _mm256_set1_epi32(q4[k]));
    return _mm256_add_epi32(s[0], s[1]);
  }
};
template <class U, MatmulFn Fallback>
constexpr MatmulFn matmul_lanes_u =
    matmul_lanes32<LaneRows, lane_pack_rows<U>, LaneTile<VnniLane<U>>::template T, Fallback>;

// IQ4_NL, MXFP4: vpdpbusd pays in the decode tiles (matrix x vector, batches up to
// kDecodeTilesMaxBatch); their packed GEMM (ggml's two-accumulator order since issue 31)
// measured 2-5% faster in the AVX2 build on Zen 4, so larger batches take the AVX2 entry.
// Both give the same bits (the self-test checks the tables against each other).
template <class D, tensor::Type kType>
void matmul_codebook(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                     size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch > kDecodeTilesMaxBatch)
    return avx2_table().matmul[slot(kType)](n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
  using U = std::conditional_t<std::is_same_v<D, DecIQ4_NL>, DecIQ4_NL_U, DecMXFP4_U>;
  matmul_cb_pairs<U, VnniDot>(n / kQK, static_cast<const uint8_t*>(W), row_stride, r0, r1,
                              static_cast<const uint8_t*>(xq), xq_stride, n_batch, y, y_stride);
}

// IQ4_XS below the lane GEMM: 2-16 column decode batches fused (matmul_cols, as the AVX2
// table: each block unpacked once per 4 columns instead of matmul_k's DecodedK stored and
// re-read per column, which made 2 sequences slower than one there); one column and more
// than 16 keep matmul_k (vec_dot_k's matrix x vector measured as fast as a fused one on
// Zen 4). The same bits either way (vec_dot order; kernels_test, the start-up self-test).
void matmul_iq4_xs(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                   size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch > 1 && n_batch <= kDecodeTilesMaxBatch)
    return matmul_cols<FusedIQ4XS, VnniScale>(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
  matmul_k<DecIQ4_XS>(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
}

}  // namespace
}  // namespace avx512

namespace avx512 {
namespace {
KernelTable make_table(bool wide) {
  using namespace avx2;
  using avx512::VnniDot;
  using avx512::VnniScale;
  KernelTable t;
  auto set = [&t](Type type, VecDotFn v, MatmulFn m) {
    t.vec_dot[slot(type)] = v;
    t.matmul[slot(type)] = m;
  };
  set(Type::Q4_0, vec_dot_q<DecQ4_0, VnniDot>, avx512::matmul_lanes_u<DecQ4_0, matmul_q<DecQ4_0, VnniDot>>);
  set(Type::Q4_1, vec_dot_q<DecQ4_1, VnniDot>,  // the nibbles as vpdpbusd's unsigned operand, kOff 0
      matmul_lanes32<LaneRows, lane_pack_rows<DecQ4_1>, LaneTile<avx512::VnniLane<DecQ4_1>, true>::T,
                     own_function<matmul_q<DecQ4_1, VnniDot>>, BlockQ8_1>);
  set(Type::Q5_0, vec_dot_q<DecQ5_0, VnniDot>, matmul_q<DecQ5_0, VnniDot>);
  set(Type::Q5_1, vec_dot_q<DecQ5_1, VnniDot>, matmul_q<DecQ5_1, VnniDot>);
  set(Type::Q8_0, vec_dot_q<DecQ8_0, VnniDot>, avx512::matmul_lanes_u<avx512::DecQ8_0_U, matmul_q<DecQ8_0, VnniDot>>);
  if (wide) {
    set(Type::Q4_K, vec_dot_fused<WideQ45K<FusedQ4K>, VnniScale>, matmul_cols<WideQ45K<FusedQ4K>, VnniScale>);
    set(Type::Q5_K, vec_dot_fused<WideQ45K<FusedQ5K>, VnniScale>, matmul_cols<WideQ45K<FusedQ5K>, VnniScale>);
    set(Type::Q6_K, vec_dot_fused<WideQ6K, VnniScale>, matmul_cols<WideQ6K, VnniScale>);
  } else {
    set(Type::Q4_K, vec_dot_fused<FusedQ4K, VnniScale>, matmul_cols<FusedQ4K, VnniScale>);
    set(Type::Q5_K, vec_dot_fused<FusedQ5K, VnniScale>, matmul_cols<FusedQ5K, VnniScale>);
    set(Type::Q6_K, vec_dot_fused<FusedQ6K, VnniScale>, matmul_cols<FusedQ6K, VnniScale>);
  }
  set(Type::IQ4_NL, vec_dot_q<DecIQ4_NL, VnniDot>,
      avx512::matmul_lanes_u<DecIQ4_NL_U, avx512::matmul_codebook<DecIQ4_NL, Type::IQ4_NL>>);
  set(Type::MXFP4, vec_dot_q<DecMXFP4, VnniDot>,
      avx512::matmul_lanes_u<DecMXFP4_U, avx512::matmul_codebook<DecMXFP4, Type::MXFP4>>);
  set(Type::Q2_K, vec_dot_fused<FusedQ2K, VnniScale>,
      matmul_low_lanes<DecQ2_K, VnniScale, matmul_cols<FusedQ2K, VnniScale>>);
  set(Type::Q3_K, vec_dot_fused<FusedQ3K, VnniScale>,
      matmul_low_lanes<DecQ3_K, VnniScale, matmul_cols<FusedQ3K, VnniScale>>);
  set(Type::IQ4_XS, vec_dot_k<DecIQ4_XS>,  // AVX-512 registers, AVX2 integers; batches with vpdpwssd
      matmul_low_lanes<DecIQ4_XS, VnniScale, avx512::matmul_iq4_xs>);
  return t;
}

// 64 rows x 4096 of Q4_K (147 KB: in L2, so the arithmetic is timed, not the memory) times
// one activation row, through each form, alternately, 5 rounds of 4 products: the best
// time of each. Weights and activations are a byte pattern with unit scales (no
// subnormals). About 0.3 ms on Zen 4, once per process.
double measure_wide_speedup(const KernelTable& narrow, const KernelTable& wide) {
  constexpr int64_t kN = 4096, kR = 64, kNb = kN / 256;
  TuVector<BlockQ4_K> w(size_t(kR * kNb));
  for (size_t i = 0; i < w.size(); ++i) {
    auto* bytes = reinterpret_cast<uint8_t*>(&w[i]);
    for (size_t k = 0; k < sizeof(BlockQ4_K); ++k) bytes[k] = uint8_t((i * 131 + k * 37) % 251);
    w[i].d = 0x3C00;     // 1.0
    w[i].dmin = 0x3800;  // 0.5
  }
  TuVector<BlockQ8_K> x(static_cast<size_t>(kNb));
  for (size_t i = 0; i < x.size(); ++i) {
    for (int k = 0; k < 256; ++k) x[i].qs[k] = int8_t((int(i) * 7 + k * 13) % 255 - 127);
    for (int k = 0; k < 16; ++k) x[i].bsums[k] = int16_t(k * 5 - 40);
    x[i].d = 1.0f;
  }
  TuVector<float> y(static_cast<size_t>(kR));
  const size_t ws = size_t(kNb) * sizeof(BlockQ4_K);
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 5; ++round)
    for (int k = 0; k < 2; ++k) {
      const MatmulFn f = (k ? wide : narrow).matmul[slot(Type::Q4_K)];
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < 4; ++it) f(kN, w.data(), ws, 0, kR, x.data(), 0, 1, y.data(), kR);
      best[k] = std::min(best[k], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  return best[0] / best[1];
}

struct Width {
  int bits = 256;
  double speedup = 0.0;  // measured 512-bit / 256-bit speed; 0 when forced
};

const Width& width() {
  static const Width w = [] {
    Width r;
    if (const char* env = std::getenv("SHARDLM_AVX512_WIDTH"); env && *env) {
      if (std::strcmp(env, "256") != 0 && std::strcmp(env, "512") != 0) {
        std::fprintf(stderr, "shardlm: SHARDLM_AVX512_WIDTH=%s: the AVX-512 K-quant kernels come in 256 and 512 "
                             "bits wide; set 256 or 512, or unset it to measure at start\n", env);
        std::exit(2);
      }
      r.bits = std::atoi(env);
      return r;
    }
    r.speedup = measure_wide_speedup(avx512_table_of_width(256), avx512_table_of_width(512));
    r.bits = r.speedup > 1.03 ? 512 : 256;  // 512 only where clearly faster
    return r;
  }();
  return w;
}
}  // namespace
}  // namespace avx512

const KernelTable& avx512_table_of_width(int bits) {
  static const KernelTable narrow = avx512::make_table(false), wide = avx512::make_table(true);
  return bits == 512 ? wide : narrow;
}

int avx512_kquant_width(double* speedup) {
  if (speedup) *speedup = avx512::width().speedup;
  return avx512::width().bits;
}

const KernelTable& avx512_table() { return avx512_table_of_width(avx512_kquant_width(nullptr)); }

}  // namespace kernels::cpu

#else  // built without the AVX-512 flags: nothing to add over AVX2
namespace kernels::cpu {
const KernelTable& avx512_table() {
  static const KernelTable table;
  return table;
}
const KernelTable& avx512_table_of_width(int) { return avx512_table(); }
int avx512_kquant_width(double* speedup) {
  if (speedup) *speedup = 0.0;
  return 0;
}
}  // namespace kernels::cpu
#endif
#endif  // x86-64
