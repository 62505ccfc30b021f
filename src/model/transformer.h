// transformer.h: the forward pass of the llama family (llama, qwen2, qwen3) on one node:
// embedding, then per layer attention and MLP with residual adds, then norm and logits.
// It evaluates a batch of consecutive tokens at once (matrix x matrix for the weights,
// causal attention against the KV cache). Deliberately no networking: a distributed
// executor reuses the same steps with sliced weights and an all-reduce in between.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace model {

class Transformer {
 public:
  // ctx: positions the KV cache holds; max_batch: tokens evaluated per internal step.
  Transformer(const Config& cfg, const Weights& w, util::ThreadPool& pool, int ctx,
              KvType kv_type = KvType::kF16, int max_batch = 32);

  // Evaluates tokens[0..n) at positions pos..pos+n-1, appending to the KV cache.
  // logits (if not null) receives n_vocab floats for the last token, or n * n_vocab
  // for every token when all_logits is set.
  void forward(const int32_t* tokens, int n, int pos, float* logits, bool all_logits = false);

  const Config& config() const { return cfg_; }
  int ctx() const { return kv_.ctx(); }

 private:
  void step(const int32_t* tokens, int n, int pos, float* logits, bool all_logits);
  void attention(int layer, int n, int pos);
  // y[b][rows] = W x[b], activations quantized once per (input, type).
  void linear(const Matrix& w, const float* x, int n, float* y);
  const void* quantized(const float* x, int n, int64_t cols, tensor::Type t);

  const Config& cfg_;
  const Weights& w_;
  util::ThreadPool& pool_;
  KvCache kv_;
  int max_batch_;

  // Scratch for one batch of up to max_batch_ tokens.
  std::vector<float> x_;       // [B][dim] residual stream
  std::vector<float> xn_;      // [B][dim] normed input of the current block
  std::vector<float> q_;       // [B][q_dim]
  std::vector<float> k_, v_;   // [B][kv_dim]
  std::vector<float> att_;     // [B][q_dim] attention output per head
  std::vector<float> gate_, up_;  // [B][n_ff]
  std::vector<float> proj_;    // [B][dim] output of wo / w_down before the residual add
  std::vector<float> scores_;  // [threads][ctx] attention scores
  std::vector<float> rope_;    // [B][n_rot] cos/sin per token position
  std::vector<uint8_t> act_;   // quantized activations
  const float* act_src_ = nullptr;
  tensor::Type act_type_ = tensor::Type::F32;
};

}  // namespace model
