// attention.h: causal self-attention over a per-head KV cache (F16, F32 or Q8_0 rows).
// attention_ref is the naive reference (materialises every score); flash_attention tiles
// queries x KV positions with an online softmax and processes the query heads that share a
// KV head together, so each K/V tile is read once per group; flash_decode splits a single
// query's context across threads and merges the partial softmaxes (flash decoding).
//
// Numerics follow llama.cpp's CPU flash-attention path with an F32 V accumulator: Q is
// rounded to the K cache's dot-product type (F16 for an F16 cache, Q8_0 blocks -- quantized
// by kernels::quantize_activation -- for a Q8_0 cache, F32 for F32), scores and the online
// softmax are F32, V is converted to F32 and accumulated in F32. Opt-in (AttentionArgs::bf16,
// `--attn-bf16`): Q, K, V and P rounded to BF16, both products on vdpbf16ps into F32
// (cpu/attention_avx512bf16.cc), the softmax F32 as above.
// Masks: causal, optionally narrowed to a sliding window (AttentionArgs::window: a query at
// position p sees p - window + 1 .. p, as llama.cpp's SWA mask), over a cache that may be a
// ring (KvHeadView::ring); attention sinks join each softmax's denominator.
// Deliberately not here: other masks, ALiBi, logit soft-capping, different K and V formats
// or head sizes, and the KV cache itself (model/ owns where rows live; these functions only
// read them).
#pragma once
#include <cstddef>
#include <cstdint>

#include "util/thread_pool.h"

namespace kernels {

enum class KvFormat { kF16, kF32, kQ8_0 };

// One KV head's cache: position p's row (head_dim values) is at base + p * row_bytes, or,
// for a ring of `ring` rows, at base + (p % ring) * row_bytes, or, paged (blocks set), at
// base + blocks[p / block_rows] * block_stride + (p % block_rows) * row_bytes. Flash
// attention reads a ring in whole tiles of 64 positions: its size is a multiple of 64, or
// larger than every position read. A ring must still hold every position of each query's
// window. block_rows is a multiple of the KV tile (64) too, so a tile is always one
// contiguous run of rows.
struct KvHeadView {
  KvFormat format;
  const uint8_t* k;  // [n_ctx][row_bytes], or block 0's rows
  const uint8_t* v;  // [n_ctx][row_bytes], or block 0's rows
  size_t row_bytes;  // >= kv_row_bytes(format, head_dim); rows aligned to 4 (F32) / 2 bytes
  int ring = 0;      // > 0: rows kept (position p in row p % ring); 0: every position
  const int32_t* blocks = nullptr;  // paged: [n_ctx / block_rows] block ids; nullptr: contiguous
  int block_rows = 0;
  size_t block_stride = 0;  // bytes from one block to the next
};

struct AttentionArgs {
  int n_q;              // query tokens in this batch, at positions pos0 .. pos0+n_q-1
  int pos0;
  int n_heads;          // local query heads
  int n_kv_heads;       // local KV heads
  const int* kv_of_head;  // [n_heads]: query head h reads KV head kv_of_head[h]
  int head_dim;
  float scale;          // usually 1/sqrt(head_dim)
  const float* q;       // q[t * q_stride + h * head_dim + i], already roped
  size_t q_stride;
  float* out;           // out[t * out_stride + h * head_dim + i]
  size_t out_stride;
  const KvHeadView* kv;  // [n_kv_heads], all of one format
  // gpt-oss: one logit per local query head joining each softmax's denominator (nullptr: none).
  const float* sinks = nullptr;
  // > 0: a sliding window: the query at position p attends to max(0, p - window + 1) .. p.
  int window = 0;
  // Opt-in (`--attn-bf16`, model::RunConfig::attn_bf16): with an F16 cache, head_dim a
  // multiple of 32 and attention_bf16_available(), Q, K, V and the softmax numerators P are
  // rounded to BF16 and both products run on vdpbf16ps into F32 (cpu/attention_avx512bf16.cc);
  // otherwise ignored. Changes the numbers (about 3 significant digits per operand), not the
  // batch/thread/node invariance. attention_ref ignores it.
  bool bf16 = false;
};

// Whether this CPU has AVX512_BF16 and the active ISA is an AVX-512 one (SHARDLM_ISA=avx2
// turns the BF16 path off too).
bool attention_bf16_available();
// The head sizes the BF16 tiles take (whole 32-element chunks, at most 256).
constexpr bool attention_bf16_head_dim_ok(int head_dim) { return head_dim % 32 == 0 && head_dim <= 256; }

// Naive causal attention: query t attends to positions 0 .. pos0 + t (within the window, if
// one is set). Single thread.
void attention_ref(const AttentionArgs& a);
// Tiled flash attention for a batch of queries, split across the pool's threads. Calls
// flash_decode when n_q == 1, the pool has several threads and the context is long.
void flash_attention(const AttentionArgs& a, util::ThreadPool& pool);
// Several segments (one sequence's queries against its own KV views each) in one pass over
// the pool; every row bit-identical to flash_attention of its segment alone.
void flash_attention_batch(const AttentionArgs* segs, int n_segs, util::ThreadPool& pool);
// n_q == 1 only: the context is split into chunks across threads; each chunk yields a
// partial (max, sum, acc) per head, merged with log-sum-exp.
void flash_decode(const AttentionArgs& a, util::ThreadPool& pool);

// Bytes of one cached row of head_dim values (Q8_0 needs head_dim % 32 == 0).
size_t kv_row_bytes(KvFormat f, int head_dim);
// Encodes head_dim floats into one cache row (F16 round-to-nearest-even, Q8_0 as ggml).
void kv_store_row(KvFormat f, const float* x, uint8_t* dst, int head_dim);
// Decodes one cache row to floats (tests and debugging).
void kv_load_row(KvFormat f, const uint8_t* src, float* x, int head_dim);

// ---- internal: the tile kernels shared by attention.cc (scalar),
// cpu/attention_avx2.cc and cpu/attention_neon.cc. Not for callers outside the kernels module.
namespace attention_internal {

// Queries prepared for the cache format: F32 rows (already rounded through F16 for an F16
// cache) or Q8_0 blocks (BlockQ8_0[head_dim / 32]), q_row_bytes apart.
struct TileKernels {
  // s[r * ld + j] = dot(q_r, k_j) (unscaled) for r < n_rows, j < n_keys.
  void (*scores)(KvFormat f, const uint8_t* q, size_t q_row_bytes, int n_rows,
                 const uint8_t* k, size_t k_row_bytes, int n_keys, int head_dim, float* s,
                 int ld);
  // acc[r * head_dim + i] += sum_j p[r * ld + j] * v_j[i].
  void (*accumulate_v)(KvFormat f, const float* p, int ld, int n_rows, const uint8_t* v,
                       size_t v_row_bytes, int n_keys, int head_dim, float* acc);
  // x[i] *= scale for i < n; returns the largest x[i].
  float (*scale_max)(float* x, int n, float scale);
  // x[i] = exp(x[i] - m) (exactly 0 for x[i] = -inf); returns the sum.
  float (*exp_sum)(float* x, int n, float m);
  // The queries against an F16 cache: x[i] rounded to F16 (nearest even) and back; the BF16
  // kernels instead pack x to BF16 pairs in place (its first 2n bytes), which their scores read.
  void (*round_q)(float* x, int n);
};

const TileKernels& scalar_tile_kernels();
// The AVX2+FMA+F16C kernels, or nullptr when not compiled in (non-x86) or when
// kernels::active_isa() does not allow them. They need head_dim % 16 == 0.
const TileKernels* avx2_tile_kernels();
// The AArch64 NEON kernels (cpu/attention_neon.cc: avx2's arithmetic to the bit, so ARM and
// x86 nodes attend alike), or nullptr when not compiled in (non-AArch64) or when
// kernels::active_isa() is not a NEON table. Also head_dim % 16 == 0 only.
const TileKernels* neon_tile_kernels();
// `base` with the BF16 scores, P.V and query packing (cpu/attention_avx512bf16.cc; F16 cache,
// head_dim % 32 == 0, head_dim <= 256); only called when attention_bf16_available(). `base`
// itself where the compiler lacks -mavx512bf16 or the target is not x86-64.
TileKernels avx512bf16_tile_kernels(const TileKernels& base);

}  // namespace attention_internal
}  // namespace kernels
