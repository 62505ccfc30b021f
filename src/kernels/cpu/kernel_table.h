// kernel_table.h: private to kernels/: the per-ISA function tables that dispatch.cc picks
// from at run time. Each ISA file (avx2.cc, avx512.cc, amx.cc, neon.cc, neon_dotprod.cc, neon_i8mm.cc) fills one
// table; an entry left null means "use the next ISA down" (amx -> avx512 -> avx2 -> scalar
// reference, i8mm -> dotprod -> neon -> scalar), so an ISA
// file may speed up only the pairs it cares about. No dispatch logic lives here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/types.h"

namespace kernels::cpu {

// One weight row (n elements of the weight type) · activations of its vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* w_row, const void* xq);
// Rows [r0, r1) of W times n_batch activation rows; same contract as kernels::matmul.
using MatmulFn = void (*)(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1,
                          const void* xq, size_t xq_stride, int64_t n_batch, float* y,
                          int64_t y_stride);
// Activation quantizer for one vec_dot_type: n floats -> out.
using QuantizeFn = void (*)(const float* x, void* out, int64_t n);

constexpr int kMaxTypeId = 40;  // table slots, indexed by tensor::Type's ggml id

struct KernelTable {
  VecDotFn vec_dot[kMaxTypeId] = {};
  MatmulFn matmul[kMaxTypeId] = {};
  QuantizeFn quantize[kMaxTypeId] = {};  // indexed by the activation type
};

inline int slot(tensor::Type t) { return static_cast<int>(t); }

// The weight types every table holds (the scalar one all of them) and the activation types.
inline constexpr tensor::Type kWeightTypes[] = {
    tensor::Type::F32,  tensor::Type::F16,  tensor::Type::BF16, tensor::Type::Q4_0,   tensor::Type::Q4_1,
    tensor::Type::Q5_0, tensor::Type::Q5_1, tensor::Type::Q8_0, tensor::Type::Q2_K,   tensor::Type::Q3_K,
    tensor::Type::Q4_K, tensor::Type::Q5_K, tensor::Type::Q6_K, tensor::Type::IQ4_NL, tensor::Type::IQ4_XS,
    tensor::Type::MXFP4};
inline constexpr tensor::Type kActivationTypes[] = {tensor::Type::F32,  tensor::Type::F16,  tensor::Type::BF16,
                                                    tensor::Type::Q8_0, tensor::Type::Q8_1, tensor::Type::Q8_K};

// The known-answer self-test of a flat table t against the flat table below it (self_test.cc):
// "" when every weight type's vec_dot and matmul and every activation quantizer agree
// (bitwise: to the bit; else within kernels_test's 1e-5 of sum |w x|), else what differed.
std::string self_test(const KernelTable& t, const KernelTable& ref, bool bitwise);

#if defined(__x86_64__) || defined(_M_X64)
const KernelTable& avx2_table();
const KernelTable& avx512_table();  // with the K-quant matrix x vector of avx512_kquant_width()
// The AVX-512 table with its K-quant matrix x vector (Q4_K, Q5_K, Q6_K) 256 or 512 bits
// wide: the same bits (avx512_wide.h). kernels_test checks one against the other.
const KernelTable& avx512_table_of_width(int bits);
// The width avx512_table() uses: SHARDLM_AVX512_WIDTH (256 or 512; anything else: a message
// and exit 2), else measured once, at first use, on this CPU (512 where its Q4_K matrix x
// vector runs more than 3% faster than the 256-bit form's). *speedup (if given): the measured
// 512 / 256 speed, 0 when forced. 0 if built without AVX-512.
int avx512_kquant_width(double* speedup);
const KernelTable& amx_table();  // AMX-INT8 entries over avx512 (amx.cc; empty if built without)
// amx.cc's lane-order GEMMs (Q4_0, Q4_1, Q8_0, IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K) against the
// AVX-512 table's on one odd shape each, to the bit: "" or what differed (self_test.cc).
// emulated: on the C++ model of the tile instructions (any AVX-512 CPU); else on the
// hardware (dispatch.cc runs it in a child process).
std::string amx_self_test(bool emulated);
// Type t's AMX GEMM, whatever the batch and order, on the emulated tile unit or the
// hardware; null for a type without one or if built without AMX support.
MatmulFn amx_gemm(tensor::Type t, bool emulated);
#endif
#if defined(__aarch64__)
const KernelTable& neon_table();          // plain Advanced SIMD (neon.cc)
const KernelTable& neon_dotprod_table();  // + sdot, layered over neon_table (neon_dotprod.cc)
const KernelTable& neon_i8mm_table();     // + smmla prompt GEMMs, over neon_dotprod_table (neon_i8mm.cc)
#endif

}  // namespace kernels::cpu
