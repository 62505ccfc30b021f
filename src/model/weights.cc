// weights.cc: tensor lookup by name with shape and type checks.
#include "model/weights.h"

#include <algorithm>

#include "model/schema.h"
#include "tensor/quants.h"

namespace model {

namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

class Binder {
 public:
  Binder(const gguf::File& f, bool check_scales) : f_(f), check_scales_(check_scales) {}

  // n_stack > 0: n_stack stacked matrices (ggml ne = [cols, rows, n_stack]), bound as one
  // of n_stack * rows rows. Absent tensors are an error unless optional.
  util::Status matrix(const std::string& name, int64_t cols, int64_t rows, Matrix* out, bool optional = false,
                      int64_t n_stack = 0) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (optional) return util::ok_status();
      return util::Status::error("model is missing tensor '" + name + "'");
    }
    std::vector<int64_t> want = {cols, rows};
    if (n_stack > 0) want.push_back(n_stack);
    if (t->ne != want)
      return util::Status::error("tensor '" + name + "' has shape " + shape_str(t->ne) + ", expected " +
                                 shape_str(want) +
                                 (n_stack > 0 && t->ne.size() == 3 && t->ne[2] != n_stack
                                      ? " (the model's expert_count is " + std::to_string(n_stack) + ")"
                                      : ""));
    const auto& tr = tensor::traits(t->type);
    if (!tr.supported)
      return util::Status::error("tensor '" + name + "' has type " + tr.name +
                                 ", which shardlm does not support; requantize the model to one of "
                                 "F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4");
    if (check_scales_ && tr.block_size > 1) {
      const int64_t n_blocks = int64_t(t->n_bytes / tr.block_bytes);
      const int64_t bad = tensor::first_bad_scale(t->type, t->data, n_blocks);
      if (bad >= 0) {
        const int64_t per_row = cols / tr.block_size;
        return util::Status::error("tensor '" + name + "' (" + tr.name + ") has a NaN or infinite scale in block " +
                                   std::to_string(bad % per_row) + " of row " + std::to_string(bad / per_row) +
                                   "; the file is corrupt");
      }
    }
    out->type = t->type;
    out->cols = cols;
    out->rows = rows * std::max<int64_t>(n_stack, 1);
    out->row_bytes = tensor::row_bytes(t->type, cols);
    out->data = t->data;
    return util::ok_status();
  }

  // Loads a 1-D tensor of n values into F32; absent tensors are an error unless optional.
  // n_stack > 0: n_stack stacked vectors (ggml ne = [n, n_stack]), n * n_stack values.
  util::Status vector(const std::string& name, int64_t n, Vector* out, bool optional = false, int64_t n_stack = 0) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (optional) return util::ok_status();
      return util::Status::error("model is missing tensor '" + name + "'");
    }
    std::vector<int64_t> want = {n};
    if (n_stack > 0) want.push_back(n_stack);
    if (n_stack > 0 ? t->ne != want : t->n_elements() != n || t->ne[0] != n)
      return util::Status::error("tensor '" + name + "' has shape " + shape_str(t->ne) + ", expected " +
                                 shape_str(want));
    n *= std::max<int64_t>(n_stack, 1);
    if (!tensor::traits(t->type).supported || tensor::traits(t->type).block_size != 1)
      return util::Status::error("tensor '" + name + "' must be F32, F16 or BF16, not " +
                                 tensor::traits(t->type).name);
    out->resize(n);
    tensor::dequantize_row(t->type, t->data, out->data(), n);
    return util::ok_status();
  }

 private:
  const gguf::File& f_;
  const bool check_scales_;
};

}  // namespace

size_t Weights::matrix_bytes(const Config& c) const {
  size_t total = output.bytes();
  for (const auto& l : layers) {
    for (const Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router}) total += m->bytes();
    for (const Matrix* m : {&l.gate_exps, &l.up_exps, &l.down_exps})
      total += c.moe() ? m->bytes() / c.n_expert * c.n_expert_used : 0;
  }
  return total;
}

util::Expected<Weights> bind_weights(const gguf::File& f, const Config& c, bool check_scales) {
  Binder b(f, check_scales);
  Weights w;
  RETURN_IF_ERROR(b.matrix(kTokenEmbdName, c.dim, c.n_vocab, &w.token_embd));
  RETURN_IF_ERROR(b.vector(kOutputNormName, c.dim, &w.output_norm));
  if (f.find_tensor(kOutputName)) {
    RETURN_IF_ERROR(b.matrix(kOutputName, c.dim, c.n_vocab, &w.output));
  } else {
    w.output = w.token_embd;  // tied embeddings (Llama 3.2, SmolLM2, Gemma 3)
  }
  RETURN_IF_ERROR(b.vector(kRopeFreqsName, c.n_rot / 2, &w.rope_freqs, /*optional=*/true));
  w.layers.resize(c.n_layers);
  const auto schema = layer_schema();
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    LayerWeights& l = w.layers[i];
    for (const LayerTensor& t : schema) {
      if (t.matrix)
        RETURN_IF_ERROR(b.matrix(p + t.name, dim_of(t.cols, c), dim_of(t.rows, c), &(l.*t.m), !t.needed(c),
                                 t.experts ? c.n_expert : 0));
      else
        RETURN_IF_ERROR(b.vector(p + t.name, dim_of(t.rows, c), &(l.*t.v), !t.needed(c), t.experts ? c.n_expert : 0));
    }
  }
  return w;
}

}  // namespace model
