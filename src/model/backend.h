// backend.h: what executes the forward pass (issue 15). A Backend owns the buffers of a
// batch (activations, the KV cache; weights where they must be copied, e.g. to a device),
// its threads or queue, and its numeric settings (lane order); model::Transformer's step
// is the skeleton (per layer attention and MLP with residual adds) written once as calls of
// the ops below. Activations are named (Act) so the skeleton never holds a pointer into
// memory it may not be able to read. Backends: CpuBackend (model/cpu_backend.h, the
// kernels of kernels.h and attention.h) and, with SHARDLM_VULKAN, the Vulkan one
// (model/vulkan/vulkan_backend.h).
// Deliberately not here: batching, sequences and slots (runtime/), choosing a device
// (the CLI's factory), numerics (each backend states its own), and the cluster: at a
// reduce point a backend lends its rows and products (reduce_begin), and the Transformer
// alone calls the Collective (model/parallel.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "model/transformer.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace model {

// A batch's activation buffers, rows b < n of each (B = RunConfig::max_batch rows).
enum class Act : uint8_t {
  kX,     // [B][dim] residual stream
  kXn,    // [B][dim] normed input of the current block
  kQ,     // [B][q_dim] local heads
  kK,     // [B][kv_dim] local KV heads
  kV,     // [B][kv_dim]
  kAtt,   // [B][q_dim] attention output per head
  kGate,  // [B][n_ff] local MLP rows (MoE: [B * k][n_ff], one row per (token, expert))
  kUp,    // [B][n_ff]
  kProj,  // [B][dim] a reduce point's output before the residual add
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu (avx512, 2 threads)", "Vulkan device 0 (llvmpipe ..., 2.0 GiB of device memory)".
  virtual std::string describe() const = 0;
  // A new batch of n rows (segs in order): kX = x[n][dim] * cfg.embed_scale; each row's
  // slot, position and rope table; the batch's per-segment matmul order.
  virtual void begin(const Segment* segs, int n_segs, int n, const float* x) = 0;
  // A paged KV cache (kv_cache.h): slot's block table from entry `from` on, and whether it
  // covers positions [0, end). Both backends read their caches through these tables.
  virtual void set_blocks(int /*slot*/, int /*from*/, std::span<const int32_t> /*blocks*/) {}
  virtual bool kv_covers(int /*slot*/, int /*end*/) const { return true; }
  // The host KV cache (kv_cache.h's KvCopy); false: not done (no host cache here, or the
  // entry is not as the root says).
  virtual bool kv_copy(const KvCopy& /*c*/) { return false; }
  // out[b] = rmsnorm(in[b]) * w for b < n, rows of dim values (in may be out).
  virtual void rmsnorm(Act out, Act in, const Vector& w, int n) = 0;
  // out[b][r] = W[r] . in[b] for b < n and every row r of w.
  virtual void linear(const Matrix& w, Act in, Act out, int n) = 0;
  // Layer l's attention, in the steps Transformer::attention takes (the order and the
  // conditions written once there): add_bias on kQ, kK, kV; head_norm; rope; scale_queries;
  // kv_store; attention.
  // Each head (head_dim values) of n rows of a = kQ or kK rms-normed by w.
  virtual void head_norm(Act a, const Vector& w, int n) = 0;
  // Rope on each head of n rows of a = kQ or kK at its row's position (begin), with layer's
  // table (a windowed layer's own base).
  virtual void rope(Act a, int layer, int n) = 0;
  // kQ *= s over n rows (Gemma's query scale: attention then leaves the scores unscaled). A
  // backend may fold s into its attention's scale instead (the Vulkan one: the same bits for
  // a power-of-two s).
  virtual void scale_queries(float s, int n) = 0;
  // The rows of kK and kV into layer's KV cache, each segment's into its slot at its positions.
  virtual void kv_store(int layer, const Segment* segs, int n_segs) = 0;
  // Causal attention of each segment's kQ rows against its own slot of layer's cache, into kAtt.
  virtual void attention(int layer, const Segment* segs, int n_segs) = 0;
  // kGate = act(kGate) * kUp over n rows of the local MLP.
  virtual void glu(Activation act, int n) = 0;
  // kX += kProj over n rows.
  virtual void residual(int n) = 0;
  // a[b] += bias for b < n (the q, k, v biases; gpt-oss's output-projection bias on kProj,
  // after the reduce).
  virtual void add_bias(Act a, const Vector& bias, int n) = 0;
  // The MLP block of an MoE layer up to its down projections: the router, the picked
  // experts' gate and up products and their GLU into kGate, one row per (token, picked
  // expert) pair ([n * k][n_ff], token-major). Its down projection is a reduce point like
  // the dense one (reduce_begin with experts).
  virtual util::Status moe(int layer, int n) = 0;
  // A reduce point's local side (model/parallel.h), which the Transformer hands to its
  // Collective (or, on one node, multiplies itself): the input rows x (n rows of cols
  // floats of `in`) and the output y ([n][dim]) in host memory, and this node's products.
  // experts: the MoE down projection of the pairs moe() left in kGate (local: the picked
  // experts' products, weighted and summed per token). Valid until reduce_end.
  struct ReduceSide {
    const float* x = nullptr;
    float* y = nullptr;
    LocalLinear* local = nullptr;
  };
  virtual util::Expected<ReduceSide> reduce_begin(Act in, int n, int cols, bool experts) = 0;
  // y becomes kProj (a device uploads it). Error: the backend's products failed.
  virtual util::Status reduce_end() = 0;
  // Completes the batch (a device's queued work done) and, when logits is not null, writes
  // there (host memory) norm(x) Wout of the rows each segment asks for, packed segment after
  // segment, soft-capped (see Transformer::forward_batch). Error: the device failed.
  virtual util::Status end_batch(const Segment* segs, int n_segs, float* logits) = 0;
};

// Row pos of a backend's rope table (n_rot floats, (cos, sin) pairs; YaRN and the file's
// frequency factors as the model asks), and of the windowed layers' table when row_swa is
// not null (their own base).
void rope_row(const Config& c, const Weights& w, int pos, float* row, float* row_swa);

// Rows each layer's KV cache keeps (a sliding-window layer fewer than ctx; transformer.cc).
std::vector<int> kv_layer_ctx(const Config& c, int ctx, int max_batch);

// Makes a node's backend for its sliced weights (the CLI's --device). Error: the device
// cannot run this model (missing, too small, an unsupported architecture or setting).
using BackendFactory = std::function<util::Expected<std::unique_ptr<Backend>>(
    const Config& cfg, const Weights& w, util::ThreadPool& pool, const RunConfig& rc, const Partition& part)>;

}  // namespace model
