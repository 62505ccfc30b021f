// parallel.h: how the model meets the cluster (DESIGN §3-4), apart from the forward pass:
// the part of every layer a node computes (Partition), the two reduce points per layer
// where the nodes' parts meet (ReducePoint), what a node's backend lends a reduce point
// (LocalLinear: its own products) and what carries it out over the nodes (Collective,
// implemented in runtime/: reduce.h, net_collective.h). model::Transformer alone calls a
// Collective, once per reduce point; a Backend never sees one (model/backend.h).
#pragma once
#include <cstdint>

#include "model/config.h"
#include "model/weights.h"
#include "util/status.h"

namespace model {

// The part of every layer a node computes (DESIGN §3); the whole model by default. The
// Weights given with it are already sliced: wq rows of the local heads, wk/wv rows of the
// local KV heads, gate/up rows of the local MLP range, output rows of the local vocabulary
// range; Wo and down as the Collective's sync mode cuts them (runtime/reduce.h).
struct Partition {
  int head_begin = 0, n_heads = 0;      // query heads [head_begin, head_begin + n_heads)
  int kv_begin = 0, n_kv_heads = 0;     // KV heads computed (and cached) here
  int ff_begin = 0, n_ff = 0;           // local MLP rows
  int vocab_begin = 0, n_vocab = 0;     // local logits range
  static Partition whole(const Config& c) {
    Partition p;
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.n_ff = c.n_ff;
    p.n_vocab = c.n_vocab;
    return p;
  }
};

// This node's products, as a Collective asks for them (the model's matmuls, threads and
// per-segment batch order over the batch's rows).
// An MoE layer's down projection: the input rows are the batch's (token, picked expert)
// pairs, token-major, and y has one row per token, the picked experts' products weighted
// by the router and summed; w is then one expert's down slice (its shape and type; each
// input row is multiplied by its own expert's).
class LocalLinear {
 public:
  virtual ~LocalLinear() = default;
  virtual int rows() const = 0;  // input rows
  virtual int out_rows() const { return rows(); }  // output rows
  // y[b * y_stride + r] = W[r] . x[b] for every row r of w; x[b]: w.cols floats.
  virtual void linear(const Matrix& w, const float* x, float* y, int64_t y_stride) = 0;
  // The same from activations already quantized to w's vec_dot_type, xq_stride apart.
  virtual void linear_quantized(const Matrix& w, const void* xq, size_t xq_stride, float* y, int64_t y_stride) = 0;
};

// The two points per layer where the nodes' parts meet (DESIGN §4): the attention output
// projection and the MLP down projection. Absent (nullptr) on one node.
enum class ReducePoint : uint8_t { kAttention = 0, kMlp = 1 };
class Collective {
 public:
  virtual ~Collective() = default;
  // y[n][dim] = W x for the whole input, bit-identical on every node, from this node's
  // columns [col0, col0 + cols) of the input (x[n][cols]: its heads' attention output or
  // its MLP rows) and its slice w of the weight. A failure (a peer died or timed out) ends
  // the forward pass with that Status.
  virtual util::Status reduce(ReducePoint at, const Matrix& w, const float* x, int col0, int cols, float* y,
                              LocalLinear& local) = 0;
};

}  // namespace model
