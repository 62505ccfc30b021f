// quants.h: reference (scalar) quantization and dequantization of rows for every
// supported type, bit-compatible with ggml's *_ref functions. Rows have n elements, a
// multiple of the type's block size. Dot products live in kernels/, not here.
#pragma once
#include <cstdint>

#include "tensor/types.h"

namespace tensor {

// dst[0..n) = value of each element of a row stored as type t.
void dequantize_row(Type t, const void* src, float* dst, int64_t n);
// Encodes n floats as type t (F32, F16, BF16, Q4_0 ... Q6_K, IQ4_NL, IQ4_XS, MXFP4, and
// Q8_1 / Q8_K).
void quantize_row(Type t, const float* src, void* dst, int64_t n);

// Index of the first of n_blocks blocks of type t whose scale is not finite (an fp16 d, or
// min / dmin, that is NaN or infinite; an MXFP4 exponent of 0xFF, E8M0's NaN), or -1: the
// check ggml's ggml_validate_row_data makes (tensor/validate.cc). Float types: always -1.
int64_t first_bad_scale(Type t, const void* data, int64_t n_blocks);

}  // namespace tensor
