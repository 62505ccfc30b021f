// slicer.cc: row views, column copies / re-encodes, and the per-node slicing of a model.
#include "runtime/slicer.h"

#include <cstring>
#include <vector>

#include "tensor/quants.h"

namespace runtime {

plan::ModelShape shape_of(const model::Config& cfg, const model::Weights& w) {
  plan::ModelShape s;
  s.name = cfg.name;
  s.dim = cfg.dim; s.n_layers = cfg.n_layers; s.n_heads = cfg.n_heads;
  s.n_kv_heads = cfg.n_kv_heads; s.head_dim = cfg.head_dim; s.n_ff = cfg.n_ff;
  s.n_vocab = cfg.n_vocab; s.qkv_bias = cfg.qkv_bias; s.qk_norm = cfg.qk_norm;
  s.token_embd = w.token_embd.type;
  s.output = w.output.type;
  bool uniform = true;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const model::LayerWeights& lw = w.layers[l];
    plan::MatrixTypes m;
    m.wq = lw.wq.type; m.wk = lw.wk.type; m.wv = lw.wv.type; m.wo = lw.wo.type;
    m.gate = lw.w_gate.type; m.up = lw.w_up.type; m.down = lw.w_down.type;
    s.layers.push_back(m);
    const plan::MatrixTypes& a = s.layers[0];
    uniform = uniform && m.wq == a.wq && m.wk == a.wk && m.wv == a.wv && m.wo == a.wo && m.gate == a.gate &&
              m.up == a.up && m.down == a.down;
  }
  if (!s.layers.empty()) s.layer = s.layers[0];
  if (uniform) s.layers.clear();
  return s;
}

model::Partition partition_of(const plan::NodeSlice& s) {
  model::Partition p;
  p.head_begin = s.heads.begin;
  p.n_heads = s.heads.size();
  p.kv_begin = s.kv_heads.begin;
  p.n_kv_heads = s.kv_heads.size();
  p.ff_begin = s.ff.begin;
  p.n_ff = s.ff.size();
  p.vocab_begin = s.vocab.begin;
  p.n_vocab = s.vocab.size();
  return p;
}

model::Matrix slice_rows(const model::Matrix& m, int64_t r0, int64_t r1) {
  CHECK(r0 >= 0 && r0 <= r1 && r1 <= m.rows);
  model::Matrix out = m;
  out.rows = r1 - r0;
  out.data = m.data ? m.row(r0) : nullptr;
  return out;
}

model::Matrix slice_columns(const model::Matrix& m, int64_t c0, int64_t c1,
                            std::vector<std::shared_ptr<const std::vector<uint8_t>>>* storage) {
  CHECK(c0 >= 0 && c0 < c1 && c1 <= m.cols);
  const tensor::Type t = plan::slice_type(m.type, c0, c1);
  model::Matrix out;
  out.type = t;
  out.cols = c1 - c0;
  out.rows = m.rows;
  out.row_bytes = tensor::row_bytes(t, out.cols);
  auto buf = std::make_shared<std::vector<uint8_t>>(out.row_bytes * size_t(m.rows));
  if (t == m.type) {
    // Block-aligned: copy the blocks covering [c0, c1) of each row.
    const auto& tr = tensor::traits(t);
    const size_t skip = size_t(c0 / tr.block_size) * tr.block_bytes;
    for (int64_t r = 0; r < m.rows; ++r)
      std::memcpy(buf->data() + size_t(r) * out.row_bytes, m.row(r) + skip, out.row_bytes);
  } else {
    std::vector<float> row(m.cols);  // [cols] one dequantized source row
    for (int64_t r = 0; r < m.rows; ++r) {
      tensor::dequantize_row(m.type, m.row(r), row.data(), m.cols);
      tensor::quantize_row(t, row.data() + c0, buf->data() + size_t(r) * out.row_bytes, out.cols);
    }
  }
  out.data = buf->data();
  storage->push_back(std::move(buf));
  return out;
}

namespace {

model::Vector slice_vector(const model::Vector& v, int64_t b, int64_t e) {
  if (v.empty()) return {};
  return model::Vector(v.begin() + b, v.begin() + e);
}

}  // namespace

NodeModel slice_weights(const model::Config& cfg, const model::Weights& full, const plan::NodeSlice& s) {
  NodeModel nm;
  nm.part = partition_of(s);
  model::Weights& w = nm.weights;
  const int d = cfg.head_dim;
  w.storage = full.storage;  // keep whatever the source points into alive
  if (s.holds_embedding) w.token_embd = full.token_embd;
  w.output_norm = full.output_norm;
  w.output = slice_rows(full.output, s.vocab.begin, s.vocab.end);
  w.rope_freqs = full.rope_freqs;
  w.layers.resize(cfg.n_layers);
  const int64_t q0 = int64_t(s.heads.begin) * d, q1 = int64_t(s.heads.end) * d;
  const int64_t k0 = int64_t(s.kv_heads.begin) * d, k1 = int64_t(s.kv_heads.end) * d;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const model::LayerWeights& f = full.layers[l];
    model::LayerWeights& o = w.layers[l];
    o.attn_norm = f.attn_norm;
    o.ffn_norm = f.ffn_norm;
    o.q_norm = f.q_norm;
    o.k_norm = f.k_norm;
    o.wq = slice_rows(f.wq, q0, q1);
    o.wk = slice_rows(f.wk, k0, k1);
    o.wv = slice_rows(f.wv, k0, k1);
    o.bq = slice_vector(f.bq, q0, q1);
    o.bk = slice_vector(f.bk, k0, k1);
    o.bv = slice_vector(f.bv, k0, k1);
    if (s.exact)
      o.wo = slice_rows(f.wo, s.rows.begin, s.rows.end);
    else
      o.wo = q0 == 0 && q1 == f.wo.cols ? f.wo : slice_columns(f.wo, q0, q1, &w.storage);
    o.w_gate = slice_rows(f.w_gate, s.ff.begin, s.ff.end);
    o.w_up = slice_rows(f.w_up, s.ff.begin, s.ff.end);
    if (s.exact)
      o.w_down = slice_rows(f.w_down, s.rows.begin, s.rows.end);
    else
      o.w_down = s.ff.begin == 0 && s.ff.end == f.w_down.cols
                     ? f.w_down
                     : slice_columns(f.w_down, s.ff.begin, s.ff.end, &w.storage);
  }
  return nm;
}

util::Status visit_tensors(model::Weights& w, int n_layers, const TensorVisitor& v) {
  RETURN_IF_ERROR(v.vector("output_norm.weight", &w.output_norm));
  RETURN_IF_ERROR(v.matrix("output.weight", &w.output));
  RETURN_IF_ERROR(v.vector("rope_freqs.weight", &w.rope_freqs));
  for (int l = 0; l < n_layers; ++l) {
    model::LayerWeights& lw = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    RETURN_IF_ERROR(v.vector(p + "attn_norm.weight", &lw.attn_norm));
    RETURN_IF_ERROR(v.matrix(p + "attn_q.weight", &lw.wq));
    RETURN_IF_ERROR(v.matrix(p + "attn_k.weight", &lw.wk));
    RETURN_IF_ERROR(v.matrix(p + "attn_v.weight", &lw.wv));
    RETURN_IF_ERROR(v.vector(p + "attn_q.bias", &lw.bq));
    RETURN_IF_ERROR(v.vector(p + "attn_k.bias", &lw.bk));
    RETURN_IF_ERROR(v.vector(p + "attn_v.bias", &lw.bv));
    RETURN_IF_ERROR(v.vector(p + "attn_q_norm.weight", &lw.q_norm));
    RETURN_IF_ERROR(v.vector(p + "attn_k_norm.weight", &lw.k_norm));
    RETURN_IF_ERROR(v.matrix(p + "attn_output.weight", &lw.wo));
    RETURN_IF_ERROR(v.vector(p + "ffn_norm.weight", &lw.ffn_norm));
    RETURN_IF_ERROR(v.matrix(p + "ffn_gate.weight", &lw.w_gate));
    RETURN_IF_ERROR(v.matrix(p + "ffn_up.weight", &lw.w_up));
    RETURN_IF_ERROR(v.matrix(p + "ffn_down.weight", &lw.w_down));
  }
  return util::ok_status();
}

}  // namespace runtime
