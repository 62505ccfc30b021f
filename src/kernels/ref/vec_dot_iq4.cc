// vec_dot_iq4.cc: the scalar reference dot products of IQ4_NL, IQ4_XS and MXFP4 (see
// vec_dot_iq4.h). Integer sums of value[q] * q8 per half block, then one float
// multiply-add per block (per sub-block of 32 for IQ4_XS), in the order of ggml's
// ggml_vec_dot_{iq4_nl_q8_0,iq4_xs_q8_K,mxfp4_q8_0}_generic, so the result equals
// llama.cpp's scalar path bit for bit.
#include "kernels/ref/vec_dot_iq4.h"

#include "tensor/codebook.h"
#include "util/fp16.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace kernels::ref {

using namespace tensor;
using util::fp16_to_f32;

namespace {
// sum over j < 16 of q8[j] * values[qs[j] & 15] + q8[j + 16] * values[qs[j] >> 4]
int dot_half_blocks(const int8_t* values, const uint8_t* qs, const int8_t* q8) {
  int sumi1 = 0, sumi2 = 0;
  for (int j = 0; j < 16; ++j) {
    sumi1 += q8[j] * values[qs[j] & 0xf];
    sumi2 += q8[j + 16] * values[qs[j] >> 4];
  }
  return sumi1 + sumi2;
}
}  // namespace

float dot_iq4_nl(int64_t n, const BlockIQ4_NL* x, const BlockQ8_0* y) {
  float sumf = 0;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const float d = fp16_to_f32(y[ib].d) * fp16_to_f32(x[ib].d);
    sumf += d * dot_half_blocks(kIQ4NLValues, x[ib].qs, y[ib].qs);
  }
  return sumf;
}

float dot_mxfp4(int64_t n, const BlockMXFP4* x, const BlockQ8_0* y) {
  float sumf = 0;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const float d = fp16_to_f32(y[ib].d) * e8m0_to_fp32_half(x[ib].e);
    sumf += d * dot_half_blocks(kMXFP4Values, x[ib].qs, y[ib].qs);
  }
  return sumf;
}

float dot_iq4_xs(int64_t n, const BlockIQ4_XS* x, const BlockQ8_K* y) {
  float sumf = 0;
  for (int64_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    const float d4d8 = fp16_to_f32(x[ibl].d) * y[ibl].d;
    uint16_t h = x[ibl].scales_h;
    const uint8_t* qs = x[ibl].qs;
    const int8_t* q8 = y[ibl].qs;
    for (int ib = 0; ib < kQK_K / 32; ib += 2) {
      const uint8_t ls1 = (x[ibl].scales_l[ib / 2] & 0xf) | ((h << 4) & 0x30);
      const uint8_t ls2 = (x[ibl].scales_l[ib / 2] >> 4) | ((h << 2) & 0x30);
      h >>= 4;
      const float d1 = d4d8 * (ls1 - 32);
      const float d2 = d4d8 * (ls2 - 32);
      sumf += d1 * dot_half_blocks(kIQ4NLValues, qs, q8);
      sumf += d2 * dot_half_blocks(kIQ4NLValues, qs + 16, q8 + 32);
      qs += 32;
      q8 += 64;
    }
  }
  return sumf;
}

}  // namespace kernels::ref
