// vec_dot_iq4.h: private to kernels/: the scalar reference dot products of the 4-bit
// codebook types (IQ4_NL and MXFP4 with Q8_0, IQ4_XS with Q8_K), in ggml's *_generic order.
#pragma once
#include <cstdint>

#include "tensor/types.h"

namespace kernels::ref {
float dot_iq4_nl(int64_t n, const tensor::BlockIQ4_NL* x, const tensor::BlockQ8_0* y);
float dot_iq4_xs(int64_t n, const tensor::BlockIQ4_XS* x, const tensor::BlockQ8_K* y);
float dot_mxfp4(int64_t n, const tensor::BlockMXFP4* x, const tensor::BlockQ8_0* y);
}  // namespace kernels::ref
