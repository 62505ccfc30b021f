// weights.h: binds a model's tensors by name, checking each one's shape and type against
// the Config (model/schema.h lists a layer's tensors), so a missing or misshapen tensor is reported by name before any compute.
// Matrices point into the mapped file (no copy); small vectors (norms, biases) are held
// as F32 copies. Deliberately no slicing across nodes here (that is plan/ and runtime/).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/config.h"
#include "tensor/types.h"
#include "util/status.h"

namespace model {

// A row-major matrix of `rows` rows with `cols` elements each (ggml ne = [cols, rows]).
struct Matrix {
  tensor::Type type = tensor::Type::F32;
  int64_t cols = 0;
  int64_t rows = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  size_t bytes() const { return row_bytes * static_cast<size_t>(rows); }
};

using Vector = std::vector<float>;  // F32 copy; empty when the tensor is absent

struct LayerWeights {
  Vector attn_norm;   // [dim]
  Matrix wq;          // [q_dim rows][dim]
  Matrix wk, wv;      // [kv_dim rows][dim]
  Vector bq, bk, bv;  // qwen2 biases: [q_dim], [kv_dim], [kv_dim]
  Vector q_norm, k_norm;  // qwen3, gemma3: [head_dim]
  Matrix wo;          // [dim rows][q_dim]
  Vector bo;          // gpt-oss: [dim] output-projection bias (added after the reduce)
  Vector sinks;       // gpt-oss: [n_heads] one attention-sink logit per (local) query head
  Vector attn_post_norm;  // gemma3: [dim]
  Vector ffn_norm;    // [dim]
  Matrix w_gate, w_up;  // [n_ff rows][dim]
  Matrix w_down;      // [dim rows][n_ff]
  Vector ffn_post_norm;   // gemma3: [dim]
  // MoE (qwen3moe) instead of w_gate, w_up, w_down: the router and the stacked experts,
  // expert e in rows [e * R, (e + 1) * R) (see expert()).
  Matrix router;      // [n_expert rows][dim]
  Matrix gate_exps, up_exps;  // n_expert x [n_ff rows][dim]
  Matrix down_exps;   // n_expert x [dim rows][n_ff]
  // gpt-oss: the router's bias [n_expert] and the experts' biases, expert e's at [e * R, (e + 1) * R).
  Vector router_b;
  Vector gate_exps_b, up_exps_b;  // n_expert x [n_ff]
  Vector down_exps_b;             // n_expert x [dim] (or the node's rows of it: Cut::kOutRows)
};

// Expert e of n stacked experts (a view).
inline Matrix expert(const Matrix& m, int e, int n) {
  Matrix out = m;
  out.rows = m.rows / n;
  out.data = m.data ? m.row(int64_t(e) * out.rows) : nullptr;
  return out;
}

using Storage = std::vector<std::shared_ptr<const std::vector<uint8_t>>>;  // owned buffers

struct Weights {
  Matrix token_embd;  // [n_vocab rows][dim]
  Vector output_norm; // [dim]
  Matrix output;      // [n_vocab rows][dim]; the token embedding when tied
  Vector rope_freqs;  // [n_rot/2] llama 3.1 frequency factors; empty when absent
  std::vector<LayerWeights> layers;
  // Buffers that matrices point into when they are not in a mapped file (slices received
  // from the root, re-encoded column slices).
  Storage storage;
  // Bytes of the output and layer matrices read per token (of an MoE layer: the router and
  // n_expert_used of its n_expert experts).
  size_t matrix_bytes(const Config& c) const;
};

// check_scales: also refuse a quantized matrix with a non-finite block scale (reads every
// block's scale, so every page of the matrices: the loader's choice, not inspect's or plan's).
util::Expected<Weights> bind_weights(const gguf::File& file, const Config& cfg, bool check_scales = false);

}  // namespace model
