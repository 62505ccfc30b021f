// cpu_backend.h: the forward pass's ops on the CPU (model/backend.h): the kernels of
// kernels.h and attention.h on a thread pool, over host buffers and a host KV cache. This is
// the code the transformer ran before the backend interface, moved: the same kernels in the
// same order, so its results are bit-identical to what they were (llama.cpp's golden
// logits, multi-node exact sync, batched == alone).
// Deliberately not here: the layer loop (Transformer::step) and the ring checks of
// sliding-window slots (Transformer::check_rings).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/kv_cache.h"

namespace model {

// "cpu (avx512, 2 threads)": the CPU, its kernel table and thread count, as every node names
// its device (speed probe, /cluster, bench).
std::string cpu_description(int threads);

class CpuBackend : public Backend {
 public:
  // CHECKs that rc's KV type and attention mode can run (attention_unsupported).
  CpuBackend(const Config& cfg, const Weights& w, util::ThreadPool& pool, const RunConfig& rc,
             const Partition& part);
  std::string describe() const override;  // cpu_description(its pool's threads)
  void begin(const Segment* segs, int n_segs, int n, const float* x) override;
  void set_blocks(int slot, int from, std::span<const int32_t> blocks) override { kv_.set_blocks(slot, from, blocks); }
  bool kv_covers(int slot, int end) const override { return kv_.covers(slot, end); }
  bool kv_copy(const KvCopy& c) override { return kv_.copy(c); }
  void rmsnorm(Act out, Act in, const Vector& w, int n) override;
  void linear(const Matrix& w, Act in, Act out, int n) override;
  void head_norm(Act a, const Vector& w, int n) override;
  void rope(Act a, int layer, int n) override;
  void scale_queries(float s, int n) override;
  void kv_store(int layer, const Segment* segs, int n_segs) override;
  void attention(int layer, const Segment* segs, int n_segs) override;
  void glu(Activation act, int n) override;
  void residual(int n) override;
  void add_bias(Act a, const Vector& b, int n) override;
  util::Status moe(int layer, int n) override;
  util::Expected<ReduceSide> reduce_begin(Act in, int n, int cols, bool experts) override;
  util::Status reduce_end() override;
  util::Status end_batch(const Segment* segs, int n_segs, float* logits) override;

 private:
  // Rows [row0, row0 + n) of a batch multiplied in one kernels::matmul call.
  struct Run {
    int row0, n;
    kernels::BatchOrder order;
  };
  float* buf(Act a);
  // An op wrote a: its cached quantization (act_) is stale.
  void wrote(Act a) {
    if (act_src_ == buf(a)) act_src_ = nullptr;
  }
  // Adjacent segments of the same batch order merged into runs.
  void plan_runs(const Segment* segs, int n_segs);
  // y[b][rows] = W x[b] for the rows of runs, activations quantized once per (input, type).
  void linear(const Matrix& w, const float* x, int n, float* y, const std::vector<Run>& runs, int64_t y_stride);
  class Local;  // LocalLinear over this batch
  // --- mixture of experts (cfg.moe())
  class MoeDown;  // LocalLinear of the experts' down projections
  // Router probabilities (router_) -> the picked experts (sel_), their weights (wts_) and
  // the (token, slot) pairs grouped by expert (group_, group_at_).
  void route(const LayerWeights& lw, int n);
  // y[p][R] = expert(stack, e_p) . x_p for every pair p (R = stack's rows per expert), one
  // kernels::matmul per expert over its group's rows: x_p is row p / div of xq (div = k:
  // one row per token; 1: one per pair).
  void expert_matmul(const Matrix& stack, const uint8_t* xq, size_t xq_stride, int div, float* y);
  const void* quantized(const float* x, int n, int64_t cols, tensor::Type t);
  void matmul_runs(const Matrix& w, const void* xq, size_t xq_stride, float* y, int64_t y_stride,
                   const std::vector<Run>& runs);

  const Config& cfg_;
  const Weights& w_;
  util::ThreadPool& pool_;
  Partition part_;
  KvCache kv_;
  int q_dim_, kv_dim_;  // local: n_heads * head_dim, n_kv_heads * head_dim
  AttentionMode mode_;
  bool lane_order_, decode_lanes_, attn_bf16_;
  std::vector<Run> runs_;      // of the batch being evaluated
  std::vector<int> row_slot_, row_pos_;  // [B] each row's slot and position
  std::vector<int> kv_of_head_;  // [local heads] local KV head each query head reads

  // Scratch for one batch of up to B = max_batch tokens.
  std::vector<float> x_;       // [B][dim] residual stream
  std::vector<float> xn_;      // [B][dim] normed input of the current block
  std::vector<float> q_;       // [B][q_dim]
  std::vector<float> k_, v_;   // [B][kv_dim]
  std::vector<float> att_;     // [B][q_dim] attention output per head
  std::vector<float> gate_, up_;  // [B][n_ff]; MoE: [B * k][n_ff], one row per (token, expert)
  std::vector<float> proj_;    // [B][dim] output of wo / w_down before the residual add
  std::vector<float> scores_;  // [threads][ctx] attention scores
  std::vector<float> rope_;    // [B][n_rot] cos/sin per token position
  std::vector<float> rope_swa_;  // [B][n_rot] the same at the windowed layers' base (gemma)
  std::vector<float> router_;  // [B][n_expert] router logits, then probabilities
  std::vector<int> sel_;       // [B][k] picked experts, most probable first
  std::vector<float> wts_;     // [B][k] their weights
  std::vector<int> group_, group_at_;  // pairs (t * k + i) of expert e: group_[group_at_[e] .. group_at_[e + 1])
  std::vector<float> exp_out_;  // [B * k][R] an expert op's outputs in group order, then per pair
  std::vector<uint8_t> pack_, pair_act_;  // quantized rows in group order; the pairs' down inputs
  std::vector<uint8_t> act_;   // quantized activations
  std::unique_ptr<LocalLinear> local_;  // an open reduce point's products (reduce_begin)
  int moe_layer_ = -1;          // the MoE layer whose pairs are in gate_ (moe)
  const float* act_src_ = nullptr;
  tensor::Type act_type_ = tensor::Type::F32;
};

}  // namespace model
