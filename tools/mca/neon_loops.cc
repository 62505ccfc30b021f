// neon_loops.cc: the NEON inner loops as plain functions, for llvm-mca (tools/mca_neon.sh):
// each calls the tile the shipped tables run, so the loop body compiled here is the shipped
// one. mca_q4_0 .. mca_q6_k: matrix x vector (n_batch = 1; 32-element types: a 4-row tile,
// K-quants: one row), the dotprod table's. mca_gemm_*: prompt batches of 4+ in lane order,
// the packed GEMM tiles of neon_gemm.h (sdot: 8 rows x 4 columns for Q4_0 / Q8_0, x 2 for the
// K-quants); mca_mmla_*: the i8mm table's smmla tiles (compiled with +i8mm only);
// mca_old_gemm_*: what batches ran before those tiles.
#include "kernels/cpu/neon_gemm.h"
#include "kernels/cpu/neon_kquants.h"
#include "kernels/cpu/neon_lowbit_lanes.h"
#include "kernels/cpu/neon_tiles.h"

using namespace kernels::cpu::neon;

extern "C" {
void mca_q4_0(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, float* y) {
  tile_q<DecQ4_0, SdotDot, 4, 1>(nb, w, ws, x, 0, y, 1);
}
void mca_q8_0(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, float* y) {
  tile_q8_0_4rows<SdotDot, 1>(nb, w, ws, x, 0, y, 1);
}
void mca_q4_k(int64_t nb, const uint8_t* w, const uint8_t* x, float* y) { row_k<KQ4, SdotDot, 1, false>(nb, w, x, 0, y, 0); }
void mca_q6_k(int64_t nb, const uint8_t* w, const uint8_t* x, float* y) { row_k<KQ6, SdotDot, 1, false>(nb, w, x, 0, y, 0); }
void mca_q2_k(int64_t nb, const uint8_t* w, const uint8_t* x, float* y) { row_k<KQ2, SdotDot, 1, false>(nb, w, x, 0, y, 0); }
void mca_q3_k(int64_t nb, const uint8_t* w, const uint8_t* x, float* y) { row_k<KQ3, SdotDot, 1, false>(nb, w, x, 0, y, 0); }
void mca_iq4_xs(int64_t nb, const uint8_t* w, const uint8_t* x, float* y) { row_k<KIQ4XS, SdotDot, 1, false>(nb, w, x, 0, y, 0); }
// Q8_0 batches in vec_dot order (tile_q8_0_4rows, 4 rows x 2 columns) until 2026-12-05; since
// then in lane order through SdotQ8_0 / MmlaQ8_0 as Q4_0.
void mca_old_gemm_q8_0(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y) {
  tile_q8_0_4rows<SdotDot, 2>(nb, w, ws, x, xs, y, 4);
}
void mca_gemm_q8_0(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  SdotQ8_0::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_gemm_q4_0(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  SdotQ4_0::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_gemm_q4_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  SdotQ4_K::run<2>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_gemm_q6_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  SdotQ6_K::run<2>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
// Before neon_gemm.h (until 2026-12-05): batches in lane order ran the decode tiles
// (Q4_0: 4 rows x 2 columns; K-quants: a row x 2 columns), on the dotprod and i8mm tables.
void mca_old_gemm_q4_0(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y) {
  tile_q<DecQ4_0, SdotDot, 4, 2, true>(nb, w, ws, x, xs, y, 4);
}
void mca_old_gemm_q4_k(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {
  row_k<KQ4, SdotDot, 2, true>(nb, w, x, xs, y, 1);
}
void mca_old_gemm_q6_k(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {
  row_k<KQ6, SdotDot, 2, true>(nb, w, x, xs, y, 1);
}
// Q2_K, Q3_K, IQ4_XS batches: before neon_lowbit_lanes.h (until 2026-12-05) a row x 2
// columns of row_k in vec_dot order; now its lane-order tiles, 8 rows x 4 columns as shipped.
void mca_old_gemm_q2_k(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {
  row_k<KQ2, SdotDot, 2, false>(nb, w, x, xs, y, 1);
}
void mca_old_gemm_q3_k(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {
  row_k<KQ3, SdotDot, 2, false>(nb, w, x, xs, y, 1);
}
void mca_old_gemm_iq4_xs(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {
  row_k<KIQ4XS, SdotDot, 2, false>(nb, w, x, xs, y, 1);
}
void mca_gemm_q2_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  SdotK<GQ2_K>::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_gemm_q3_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  SdotK<GQ3_K>::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_gemm_iq4_xs(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  SdotK<GIQ4_XS>::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
}  // extern "C"

// Decode batches of 2 columns in vec_dot order (row_k<K, SdotDot, 2, false>, as shipped)
// beside the same super-block x 2 columns with a compiler barrier between the columns, so
// each column unpacks the weight block again, as row_k's column loop did while GCC left it
// rolled (until 2026-12-05; llvm-mca cannot model the rolled loop's two passes itself).
template <class K, bool kSep>
static void batch2(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {
  const auto* wb = reinterpret_cast<const typename K::W*>(w);
  const auto* a0 = reinterpret_cast<const BlockQ8_K*>(x);
  const auto* a1 = reinterpret_cast<const BlockQ8_K*>(x + xs);
  AccK acc[2];
  for (int64_t b = 0; b < nb; ++b) {
    K::add(K::template ints<SdotDot>(wb[b], a0[b]), acc[0]);
    if constexpr (kSep) asm volatile("" ::: "memory");
    K::add(K::template ints<SdotDot>(wb[b], a1[b]), acc[1]);
  }
  y[0] = K::finish(acc[0]);
  y[1] = K::finish(acc[1]);
}

extern "C" {
#define SHARDLM_MCA_BATCH2(name, K)                                                             \
  void mca_b2_##name(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {     \
    row_k<K, SdotDot, 2, false>(nb, w, x, xs, y, 1);                                            \
  }                                                                                             \
  void mca_b2sep_##name(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {  \
    batch2<K, true>(nb, w, x, xs, y);                                                           \
  }
SHARDLM_MCA_BATCH2(q4_k, KQ4)
SHARDLM_MCA_BATCH2(q5_k, KQ5)
SHARDLM_MCA_BATCH2(q6_k, KQ6)
SHARDLM_MCA_BATCH2(q2_k, KQ2)
SHARDLM_MCA_BATCH2(q3_k, KQ3)
SHARDLM_MCA_BATCH2(iq4_xs, KIQ4XS)

#if defined(__ARM_FEATURE_MATMUL_INT8)
void mca_mmla_q2_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  MmlaK<GQ2_K>::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_mmla_q3_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  MmlaK<GQ3_K>::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_mmla_iq4_xs(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  MmlaK<GIQ4_XS>::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_mmla_q4_0(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  MmlaQ4_0::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_mmla_q8_0(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  MmlaQ8_0::run<4>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_mmla_q4_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  MmlaQ4_K::run<2>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
void mca_mmla_q6_k(int64_t nb, const GemmRows& w, const int8x16_t* a, size_t as, const uint8_t* x, size_t xs, const float* da, float* y) {
  MmlaQ6_K::run<2>(nb, w, a, as, x, xs, da, 4, y, 8, 8);
}
#endif
}
