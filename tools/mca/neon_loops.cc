// neon_loops.cc: the NEON matrix x vector inner loops as plain functions, for llvm-mca
// (tools/mca_neon.sh): each calls the tile the dotprod table uses for n_batch = 1 (32-element
// types: a 4-row tile, K-quants: one row) so the loop body compiled here is the shipped one;
// the mca_gemm_* ones the tiles prompt batches of 4+ run (lane order: Q4_0 4 rows x 2
// tokens, Q4_K one row x 2 tokens), NEON's GEMM micro-kernels for now.
#include "kernels/cpu/neon_kquants.h"
#include "kernels/cpu/neon_tiles.h"

using namespace kernels::cpu::neon;

extern "C" {
void mca_q4_0(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, float* y) {
  tile_q<DecQ4_0, SdotDot, 4, 1>(nb, w, ws, x, 0, y, 1);
}
void mca_q8_0(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, float* y) {
  tile_q<DecQ8_0, SdotDot, 4, 1>(nb, w, ws, x, 0, y, 1);
}
void mca_q4_k(int64_t nb, const uint8_t* w, const uint8_t* x, float* y) { row_k<KQ4, SdotDot, 1, false>(nb, w, x, 0, y, 0); }
void mca_q6_k(int64_t nb, const uint8_t* w, const uint8_t* x, float* y) { row_k<KQ6, SdotDot, 1, false>(nb, w, x, 0, y, 0); }
void mca_gemm_q4_0(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y) {
  tile_q<DecQ4_0, SdotDot, 4, 2, true>(nb, w, ws, x, xs, y, 4);
}
void mca_gemm_q4_k(int64_t nb, const uint8_t* w, const uint8_t* x, size_t xs, float* y) {
  row_k<KQ4, SdotDot, 2, true>(nb, w, x, xs, y, 1);
}
}
