// transformer.h: the forward pass of the llama family (llama, qwen2, qwen3, qwen3moe) and gemma3 on one node:
// embedding, then per layer attention and MLP with residual adds, then norm and logits.
// A batch carries rows of several sequences at once (segments: consecutive positions of
// one KV slot), with matrix x matrix products for the weights and causal attention of each
// segment against its own slot. The layer loop (step) is written once; a Backend
// (model/backend.h: CPU, or Vulkan) executes its ops. Deliberately no networking and no sequence bookkeeping:
// the runtime's node executor drives it with sliced weights (a Partition) and a Collective
// (model/parallel.h), which the step alone calls at the reduce points, dense and MoE alike.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/parallel.h"
#include "model/run_config.h"
#include "kernels/kernels.h"
#include "model/weights.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace model {

// Rows [.., .. + n) of a batch: positions pos .. pos+n-1 of one sequence, in KV slot `slot`.
enum class Logits : uint8_t { kNone = 0, kLast = 1, kAll = 2 };
// rowwise: vec_dot order however many rows (a cluster rebuilding a slot evaluates decode
// rows that ran one per step, n at a time, with the bits they had).
// blocks_from >= 0: the slot's KV block table from entry blocks_from on becomes blocks
// (kv_cache.h; the root's allocation, carried by the step) before the rows are evaluated.
struct Segment {
  int slot = 0, pos = 0, n = 0;
  Logits logits = Logits::kNone;
  bool rowwise = false;
  int blocks_from = -1;
  std::span<const int32_t> blocks = {};
};
// Why (cfg, kv_type, mode, and --attn-bf16 when set) cannot run on this node, or "" when it can.
std::string attention_unsupported(const Config& cfg, KvType kv_type, AttentionMode mode, bool attn_bf16 = false);

class Backend;
enum class Act : uint8_t;

class Transformer {
 public:
  // ctx: positions the KV cache holds; max_batch: tokens evaluated per internal step.
  // attention: kExact (default) is llama.cpp's non-flash CPU path operation for operation
  // (F16 or F32 cache); kFlash is kernels::flash_attention (any KvType, Q8_0 included),
  // whose rows do not depend on how a prompt is split into batches nor on the threads.
  // A Q8_0 cache needs kFlash and head_dim % 32 == 0 (CHECKed; callers report it first,
  // see attention_unsupported).
  Transformer(const Config& cfg, const Weights& w, util::ThreadPool& pool, int ctx,
              KvType kv_type = KvType::kF16, int max_batch = 32, AttentionMode attention = AttentionMode::kExact);
  Transformer(const Config& cfg, const Weights& w, util::ThreadPool& pool, int ctx, KvType kv_type,
              int max_batch, const Partition& part, Collective* comm,
              AttentionMode attention = AttentionMode::kExact);
  Transformer(const Config& cfg, const Weights& w, util::ThreadPool& pool, const RunConfig& rc,
              const Partition& part, Collective* comm);
  // The same on a given backend (made for cfg, w, rc and part; model/backend.h).
  Transformer(const Config& cfg, const Weights& w, std::unique_ptr<Backend> backend, const RunConfig& rc,
              const Partition& part, Collective* comm);
  ~Transformer();

  // Evaluates one batch: x[rows][dim] embedded rows of segs in order (rows = sum of n <=
  // max_batch; a slot appears at most once, positions inside the context), appending to
  // each segment's KV slot. logits (if not null) receives, segment after segment, the
  // local n_vocab floats of the rows each asks for (kLast: its last row; kAll: every row).
  // A row's result depends only on its own segment and slot. Fails when the Collective
  // does, or when a segment rewinds a sliding-window slot further than its ring keeps.
  util::Status forward_batch(const Segment* segs, int n_segs, const float* x, float* logits);

  // Evaluates tokens[0..n) at positions pos..pos+n-1 of slot 0, in batches of max_batch.
  // logits (if not null) receives the local n_vocab floats for the last token, or n rows
  // of them for every token when all_logits is set. Needs the token embedding.
  // Fails only when the Collective does (never on one node).
  util::Status forward(const int32_t* tokens, int n, int pos, float* logits, bool all_logits = false);
  // The same from embedded rows x[n][dim] (a worker gets these from the root).
  util::Status forward_embedded(const float* x, int n, int pos, float* logits, bool all_logits = false);
  // Embedding row of a token: x[dim].
  void embed(int32_t token, float* x) const;

  const Config& config() const { return cfg_; }
  const Partition& partition() const { return part_; }
  AttentionMode attention_mode() const { return rc_.attention; }
  KvType kv_type() const { return rc_.kv_type; }
  int ctx() const { return rc_.ctx; }
  int n_slots() const { return rc_.n_slots; }
  int max_batch() const { return max_batch_; }

  // What runs the ops (the CPU backend unless one was given).
  const Backend& backend() const { return *be_; }
  // The step's copies between the KV pool and the host cache (KvCopy), in order, before
  // its rows; an error names the first one this node cannot do.
  util::Status kv_copies(std::span<const KvCopy> copies);

 private:
  util::Status step(const Segment* segs, int n_segs, float* logits);  // input in the backend's kX
  // Rows [i, i + nb) of a single-sequence call of n rows (slot 0).
  util::Status forward_chunk(const float* x, int nb, int pos, float* logits, bool all_logits, int i, int n);
  // A sliding-window ring cannot be rewound past what it keeps: the error names the slot.
  util::Status check_rings(const Segment* segs, int n_segs);
  // A reduce point: kProj[n][dim] = W in over all nodes, from this node's input columns
  // (experts: the MoE down projection of moe()'s pairs, w one expert's slice).
  util::Status project(ReducePoint at, const Matrix& w, Act in, int n, int col0, int cols, bool experts = false);
  // gemma: kProj's rows normed by w (nothing when w is empty).
  void post_norm(const Vector& w, int n);
  // Layer l's attention over n rows from kQ, kK, kV into kAtt: the preparation every backend
  // shares (biases, q/k norms, rope, the query scale, the KV store), then attention.
  void attention(int l, const Segment* segs, int n_segs, int n);

  const Config& cfg_;
  const Weights& w_;
  Partition part_;
  Collective* comm_;
  RunConfig rc_;
  int max_batch_;
  std::vector<int> layer_ctx_;  // [layer] KV rows each layer keeps (kv_layer_ctx)
  std::vector<int> ring_hi_;    // [slot] last position written (sliding-window rings)
  std::unique_ptr<Backend> be_;
};

}  // namespace model
