// kernels.h: the compute interface. Every op has a scalar reference (kernels/ref) and
// SIMD versions (kernels/cpu: AVX2, AVX-512 VNNI, NEON) chosen once at run time; the
// public functions here dispatch. Quantized matrix products take activations already
// quantized to the weight type's vec_dot_type (quantize once per op, use for all rows).
// CUDA kernels (kernels/cuda, behind SHARDLM_CUDA) will implement the same signatures.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/types.h"

namespace kernels {

// AArch64 levels (each table layered over the one below, as avx512 over avx2): kNeon plain
// Advanced SIMD (Cortex-A72, Pi 4), kNeonDot + the dot-product extension (sdot: Cortex-A76,
// Pi 5, Neoverse N1), kNeonI8mm + int8 matrix multiply (Neoverse V1, Graviton 3; no
// i8mm kernel yet, so its table is kNeonDot's). Names: "neon", "dotprod", "i8mm".
enum class Isa { kScalar, kAvx2, kAvx512, kNeon, kNeonDot, kNeonI8mm, kAmx };  // kAmx: AVX-512 + AMX-INT8
constexpr int kIsaCount = 7;
// The x86 tables that run AVX2 code (avx2, avx512 and amx build on it).
inline bool runs_avx2(Isa isa) { return isa == Isa::kAvx2 || isa == Isa::kAvx512 || isa == Isa::kAmx; }
Isa detected_isa();       // best this CPU supports
Isa active_isa();         // what dispatch uses now
bool isa_supported(Isa isa);  // this CPU can run that table and it passed its start-up self-test
void set_isa(Isa isa);    // tests and benchmarks: force a path (CHECKs it is supported)
const char* isa_name(Isa isa);
// On the avx512 / amx tables, the width their K-quant matrix x vector takes on this CPU and
// why, for `devices` and `bench`: " (K-quant decode 256-bit; 512-bit measured 0.86x)" or
// " (K-quant decode 512-bit; SHARDLM_AVX512_WIDTH)"; "" on other tables.
std::string kquant_width_note();

// Activations: bytes needed for n values as `t` (a vec_dot_type), and the quantizer.
size_t activation_bytes(tensor::Type t, int64_t n);
void quantize_activation(tensor::Type t, const float* x, void* out, int64_t n);

// dot product of one weight row (type wt, n elements) with activations quantized to
// traits(wt).vec_dot_type.
float vec_dot(tensor::Type wt, int64_t n, const void* w_row, const void* xq);

// Matrix products over weight rows [r0, r1) of W (row_stride bytes apart, n elements):
//   y[b * y_stride + r] = dot(W[r], xq[b])  for b in [0, n_batch)
// xq rows are xq_stride bytes apart. n_batch = 1 is matrix x vector.
// Every output is summed in ggml's vec_dot order (bit-identical to vec_dot and to
// llama.cpp's matrix x vector), except Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4, Q2_K,
// Q3_K and IQ4_XS with n_batch >= 4 on SIMD (x86, NEON; kernels/cpu/avx2_lowbit_lanes.h for the
// last three): there each output is one float, acc = fma(float(int dot of block b), dw * da,
// acc) for b ascending (Q4_1: then acc = fma(m, s, acc) per block, m its fp16 min and s Q8_1's
// fp16 s, the int dot over the unsigned nibbles 0..15; Q4_K and Q5_K: then acc =
// fma(float(min term), -(dmin * da), acc) per super-block; Q5_K exactly Q4_K's order with its
// 5-bit quants in place of the nibbles)
// ("lane order", as llama.cpp's repacked GEMMs; 1.5-2x faster), so such a prompt batch
// differs from token-by-token decode in the last bits. Either way an output depends only
// on its own row and column, never on the row range or the batch's other columns
// (multi-node runs stay bit-identical to one node).
// order: kLanes allows lane order (taken for n_batch >= 4 where a type has it), kVecDot
// forces vec_dot order for every output, bit-identical to matrix x vector whatever n_batch
// (the runtime's decode rows in a batch of many sequences, and `--exact-batches`).
// set_lane_order(false) is a process-wide veto for tests and tools (kLanes then acts as
// kVecDot); lane_order() tells whether the matmul running on this thread may use lanes.
enum class BatchOrder : uint8_t { kLanes = 0, kVecDot = 1 };
constexpr int64_t kLaneMinBatch = 4;  // lane order is taken from this many columns on
void set_lane_order(bool on);
bool lane_order();
// Whether batches of kLaneMinBatch or more columns of weight type wt sum in lane order on the
// table in use (when allowed): the list above, for tests and tools comparing the two orders.
bool lane_order_type(tensor::Type wt);
void matmul(tensor::Type wt, int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1,
            const void* xq, size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride,
            BatchOrder order = BatchOrder::kLanes);

namespace ref {
float vec_dot(tensor::Type wt, int64_t n, const void* w_row, const void* xq);
void quantize_activation(tensor::Type t, const float* x, void* out, int64_t n);
}  // namespace ref

// ---- float ops (scalar code shared by all paths; matched to ggml's order of operations)
// out = x / sqrt(mean(x^2) + eps) * w   (sum of squares accumulated in double as ggml does)
void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps);
// silu(gate) * up, elementwise, with ggml's vector exp (ggml_compat.cc)
void swiglu(float* out, const float* gate, const float* up, int64_t n);
// gpt-oss's clamped SwiGLU, as ggml's swiglu_oai: g = min(gate, limit), u = clamp(up, -limit,
// limit), out = g / (1 + exp(-alpha g)) * (u + 1) (libm expf, scalar as ggml's CPU op)
void swiglu_oai(float* out, const float* gate, const float* up, int64_t n, float alpha, float limit);
// gelu(gate) * up, elementwise, as ggml's CPU GeGLU: gelu (tanh form) read from a table of
// its F16-rounded values at the F16-rounded input, x * up above 10, 0 below -10
void geglu(float* out, const float* gate, const float* up, int64_t n);
// ggml_gelu_f32: 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), no table
float gelu(float x);
void add(float* out, const float* a, const float* b, int64_t n);
// In-place softmax of x[0..n), summed as ggml does (8-lane groups in double). sink (gpt-oss's
// attention sinks): one more logit joining the max and the denominator but not the output,
// as ggml_soft_max_ext with sinks (its exp added to the double sum last, libm expf).
void softmax(float* x, int64_t n, const float* sink = nullptr);
// log(sum(exp(x[i]))) over x[0..n), with ggml's vector exp (fast; -inf when n == 0)
float log_sum_exp(const float* x, int64_t n);
// ggml_v_expf for one value (bit-exact with ggml's AVX2 exp)
float ggml_expf(float x);
// F32 dot product as ggml_vec_dot_f32 (AVX2, -mfma): 4 x 8 lanes fused, reduced as
// dot_f16, a tail past the last 32 fused into the float sum. llama.cpp's matrix x vector of
// an F32 weight (an MoE router at decode: llamafile's sgemm takes batches of 2+ only).
float dot_f32(const float* x, const float* y, int64_t n);
// F16 dot product in ggml's accumulation order (4 x 8 lanes, fused multiply-add).
float dot_f16(const uint16_t* x, const uint16_t* y, int64_t n);
// out[i] = sum over t < n of v[t * stride + i] * p[t] (F16 values and weights), summed in
// the order of ggml's dot_f16 over positions (llama.cpp's V x softmax product).
void weighted_sum_f16(const uint16_t* v, size_t stride, const uint16_t* p, int64_t n, int hd, float* out);

// Rotary position embedding. rope_cache fills cache[0..n_rot) with (cos, sin) pairs for
// position pos, as ggml_rope_cache_init does (theta multiplied up pair by pair, divided by
// the optional per-pair freq_factors, times freq_scale). rope_apply rotates one head of
// head_dim values: adjacent pairs (x[2i], x[2i+1]) for llama ("norm"), or halves
// (x[i], x[i + n_rot/2]) for neox; dimensions past n_rot are left alone.
void rope_cache(float* cache, int64_t pos, int n_rot, float freq_base, float freq_scale,
                const float* freq_factors);
// YaRN (ggml_rope_ext with ext_factor != 0): ggml's rope_yarn per pair, the interpolated and
// extrapolated angles mixed by the ramp over corr_dims, cos and sin times mscale (attn_factor
// times 1 + 0.1 ln(1 / freq_scale)). ext_factor 0 and attn_factor 1 give rope_cache.
struct Yarn {
  float ext_factor = 0.0f, attn_factor = 1.0f, beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;
};
void rope_cache_yarn(float* cache, int64_t pos, int n_rot, float freq_base, float freq_scale,
                     const float* freq_factors, const Yarn& y);
void rope_apply(float* x, const float* cache, int n_rot, bool neox);

}  // namespace kernels
