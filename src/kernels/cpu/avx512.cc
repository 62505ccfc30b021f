// avx512.cc: the AVX-512 VNNI kernels (x86-64, compiled with -mavx512f/bw/vl/dq/vnni). They
// reuse the AVX2 loop structure of avx2_tiles.h with one change: the int8 dot of a block
// is a single vpdpbusd (on 256-bit registers, AVX512-VL) instead of vpmaddubsw + vpmaddwd.
// For our operand ranges (|w|, |a| <= 127, so no vpmaddubsw saturation) both give the same
// integers, so these kernels are correct by construction; they are tested by the same
// kernels_test cases on a machine that has AVX-512 VNNI (set_isa(kAvx512)). Q4_K's and Q6_K's
// matrix x vector add their scaled int16 pairs with one vpdpwssd instead of vpmaddwd +
// vpaddd (VnniScale; the same int32s), and so do Q2_K's and Q3_K's (FusedQ2K / FusedQ3K);
// IQ4_NL and MXFP4 take vpdpbusd through two-block decode tiles (avx2_cb_pairs.h; their larger
// vec_dot-order batches the AVX2 entry: measured faster). IQ4_XS has no VNNI matrix x vector (a
// fused one measured no faster) but is here too: compiled with AVX-512VL the same code has
// 32 ymm registers and spills less (measured on Zen 4, BENCHMARKS.md). The lane-order prompt
// GEMMs of these five types (avx2_lowbit_lanes.h) take VnniDot / VnniScale here. Entries
// left null here (float types, quantizers) fall back to the AVX2 table. No 512-bit-wide forms: a 512-bit Q4_K matrix x
// vector measured 20% slower on Zen 4, which issues 512-bit operations as two halves.
#if defined(__x86_64__) || defined(_M_X64)
#include "kernels/cpu/kernel_table.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include "kernels/cpu/avx2_cb_pairs.h"
#include "kernels/cpu/avx2_kfused.h"
#include "kernels/cpu/avx2_kquants.h"
#include "kernels/cpu/avx2_lowbit.h"
#include "kernels/cpu/avx2_lowbit_lanes.h"
#include "kernels/cpu/avx2_lanes32.h"

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

// IQ4_NL, MXFP4 in the decode tiles: the weights + 128 as unsigned bytes (the value table
// with its sign bit flipped), so the int8 dot is one vpdpbusd from -128 * (sum of the
// activation's 4 bytes), computed once per block and column (tile_q's kOff path): the same
// int32 lanes as the sign trick's three operations (no saturation: 4 * 255 * 128 < 2^31).
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
// sum(a) (LaneActs::off is 8 * sum(a)): exactly the block's int dot (vpdpbusd does not
// saturate; |sum| < 2^31), so each output is the lane-order reference's to the bit. Against
// MaddubsLane (Q4_0) and TileCB's sign trick (Q8_0): half the integer instructions.
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

}  // namespace
}  // namespace avx512

const KernelTable& avx512_table() {
  static const KernelTable table = [] {
    using namespace avx2;
    using avx512::VnniDot;
    using avx512::VnniScale;
    KernelTable t;
    auto set = [&t](Type type, VecDotFn v, MatmulFn m) {
      t.vec_dot[slot(type)] = v;
      t.matmul[slot(type)] = m;
    };
    set(Type::Q4_0, vec_dot_q<DecQ4_0, VnniDot>, avx512::matmul_lanes_u<DecQ4_0, matmul_q<DecQ4_0, VnniDot>>);
    set(Type::Q4_1, vec_dot_q<DecQ4_1, VnniDot>, matmul_q<DecQ4_1, VnniDot>);
    set(Type::Q5_0, vec_dot_q<DecQ5_0, VnniDot>, matmul_q<DecQ5_0, VnniDot>);
    set(Type::Q5_1, vec_dot_q<DecQ5_1, VnniDot>, matmul_q<DecQ5_1, VnniDot>);
    set(Type::Q8_0, vec_dot_q<DecQ8_0, VnniDot>, avx512::matmul_lanes_u<avx512::DecQ8_0_U, matmul_q<DecQ8_0, VnniDot>>);
    set(Type::Q4_K, vec_dot_fused<FusedQ4K, VnniScale>, matmul_cols<FusedQ4K, VnniScale>);
    set(Type::Q5_K, vec_dot_fused<FusedQ5K, VnniScale>, matmul_cols<FusedQ5K, VnniScale>);
    set(Type::Q6_K, vec_dot_fused<FusedQ6K, VnniScale>, matmul_cols<FusedQ6K, VnniScale>);
    set(Type::IQ4_NL, vec_dot_q<DecIQ4_NL, VnniDot>,
        matmul_cb_lanes<DecIQ4_NL, VnniDot, avx512::matmul_codebook<DecIQ4_NL, Type::IQ4_NL>>);
    set(Type::MXFP4, vec_dot_q<DecMXFP4, VnniDot>,
        matmul_cb_lanes<DecMXFP4, VnniDot, avx512::matmul_codebook<DecMXFP4, Type::MXFP4>>);
    set(Type::Q2_K, vec_dot_fused<FusedQ2K, VnniScale>,
        matmul_low_lanes<DecQ2_K, VnniScale, matmul_fused<FusedQ2K, VnniScale>>);
    set(Type::Q3_K, vec_dot_fused<FusedQ3K, VnniScale>,
        matmul_low_lanes<DecQ3_K, VnniScale, matmul_fused<FusedQ3K, VnniScale>>);
    set(Type::IQ4_XS, vec_dot_k<DecIQ4_XS>,  // AVX-512 registers, AVX2 integers; batches with vpdpwssd
        matmul_low_lanes<DecIQ4_XS, VnniScale, matmul_k<DecIQ4_XS>>);
    return t;
  }();
  return table;
}

}  // namespace kernels::cpu

#else  // built without the AVX-512 flags: nothing to add over AVX2
namespace kernels::cpu {
const KernelTable& avx512_table() {
  static const KernelTable table;
  return table;
}
}  // namespace kernels::cpu
#endif
#endif  // x86-64
