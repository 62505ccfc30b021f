// slicer.cc: row views, column copies / re-encodes, and the per-node slicing of a model.
#include "runtime/slicer.h"

#include <cstring>
#include <functional>
#include <vector>

#include "model/schema.h"
#include "tensor/quants.h"

namespace runtime {

plan::ModelShape shape_of(const model::Config& cfg, const model::Weights& w) {
  plan::ModelShape s;
  s.name = cfg.name;
  s.dim = cfg.dim; s.n_layers = cfg.n_layers; s.n_heads = cfg.n_heads;
  s.n_kv_heads = cfg.n_kv_heads; s.head_dim = cfg.head_dim; s.n_ff = cfg.n_ff;
  s.n_vocab = cfg.n_vocab; s.qkv_bias = cfg.qkv_bias; s.qk_norm = cfg.qk_norm;
  s.n_swa = cfg.n_swa;
  s.n_expert = cfg.n_expert;
  s.n_expert_used = cfg.n_expert_used;
  for (int l = 0; l < cfg.n_layers; ++l) s.n_swa_layers += cfg.is_swa(l);
  s.token_embd = w.token_embd.type;
  s.output = w.output.type;
  bool uniform = true;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const model::LayerWeights& lw = w.layers[l];
    plan::MatrixTypes m;
    m.wq = lw.wq.type; m.wk = lw.wk.type; m.wv = lw.wv.type; m.wo = lw.wo.type;
    const bool moe = cfg.moe();
    m.gate = (moe ? lw.gate_exps : lw.w_gate).type;
    m.up = (moe ? lw.up_exps : lw.w_up).type;
    m.down = (moe ? lw.down_exps : lw.w_down).type;
    if (moe) s.router = lw.router.type;
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

model::Matrix slice_columns(const model::Matrix& m, int64_t c0, int64_t c1, model::Storage* storage) {
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

// A reduce point's input columns of a node without any (no query heads): m.rows rows of
// no bytes; the node's partial there is zero (runtime/reduce.cc).
model::Matrix no_columns(const model::Matrix& m) {
  model::Matrix out = m;
  out.cols = 0;
  out.row_bytes = 0;
  return out;
}

// Cut::kOutRows (model/schema.h): exact mode's output rows; else all of dim on the node
// holding the first MLP rows, none elsewhere.
std::pair<int64_t, int64_t> out_rows(const model::Config& cfg, const plan::NodeSlice& s) {
  if (s.exact) return {s.rows.begin, s.rows.end};
  return s.ff.begin == 0 && s.ff.end > 0 ? std::pair<int64_t, int64_t>{0, cfg.dim} : std::pair<int64_t, int64_t>{0, 0};
}

model::Vector slice_vector(const model::Vector& v, int64_t b, int64_t e) {
  if (v.empty()) return {};
  return model::Vector(v.begin() + b, v.begin() + e);
}

// The cut f of each of n stacked experts of m, stacked again (the node's experts stay one
// contiguous matrix, as the weight stream sends and a worker rebuilds it): m itself when f
// keeps every expert whole, else a copy in new storage.
model::Matrix per_expert(const model::Matrix& m, int n,
                         const std::function<model::Matrix(const model::Matrix&, model::Storage*)>& f,
                         model::Storage* storage) {
  model::Storage scratch;
  model::Matrix out;
  std::shared_ptr<std::vector<uint8_t>> buf;
  for (int e = 0; e < n; ++e) {
    const model::Matrix one = model::expert(m, e, n);
    const model::Matrix x = f(one, &scratch);
    if (e == 0) {
      if (x.data == one.data && x.rows == one.rows && x.cols == one.cols) return m;  // uncut
      out = x;
      out.rows = x.rows * n;
      buf = std::make_shared<std::vector<uint8_t>>(out.bytes());
      out.data = buf->data();
    }
    std::memcpy(buf->data() + size_t(e) * x.bytes(), x.data, x.bytes());
    scratch.clear();
  }
  storage->push_back(std::move(buf));
  return out;
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
  // The node's range of each cut, in rows (or columns) of the tensor.
  const auto range = [&](model::Cut c) -> std::pair<int64_t, int64_t> {
    switch (c) {
      case model::Cut::kHeadRows:
      case model::Cut::kHeadCols: return {int64_t(s.heads.begin) * d, int64_t(s.heads.end) * d};
      case model::Cut::kKvRows: return {int64_t(s.kv_heads.begin) * d, int64_t(s.kv_heads.end) * d};
      case model::Cut::kFfRows:
      case model::Cut::kFfCols: return {s.ff.begin, s.ff.end};
      case model::Cut::kHeadVals: return {s.heads.begin, s.heads.end};
      case model::Cut::kOutRows: return out_rows(cfg, s);
      case model::Cut::kWhole: break;
    }
    return {0, 0};
  };
  for (int l = 0; l < cfg.n_layers; ++l) {
    const model::LayerWeights& f = full.layers[l];
    model::LayerWeights& o = w.layers[l];
    for (const model::LayerTensor& t : model::layer_schema()) {
      const auto [b, e] = range(t.cut);
      if (!t.matrix) {
        const model::Vector& v = f.*t.v;
        if (t.cut == model::Cut::kWhole || v.empty()) {
          o.*t.v = v;
        } else if (t.experts) {  // each expert's values cut alike
          const int64_t R = model::dim_of(t.rows, cfg);
          model::Vector& out = o.*t.v;
          out.clear();
          for (int x = 0; x < cfg.n_expert; ++x) out.insert(out.end(), v.begin() + x * R + b, v.begin() + x * R + e);
        } else {
          o.*t.v = slice_vector(v, b, e);
        }
        continue;
      }
      const model::Matrix& m = f.*t.m;
      model::Matrix& out = o.*t.m;
      if (!m.data) {  // absent (the dense MLP of an MoE model, the experts of a dense one)
        out = m;
        continue;
      }
      const bool reduce_input = t.cut == model::Cut::kHeadCols || t.cut == model::Cut::kFfCols;
      const auto cut = [&](const model::Matrix& x, model::Storage* st) -> model::Matrix {
        // A reduce point's input columns; in exact mode its output rows.
        if (reduce_input && s.exact) return slice_rows(x, s.rows.begin, s.rows.end);
        if (reduce_input && b == e) return no_columns(x);
        if (reduce_input) return b == 0 && e == x.cols ? x : slice_columns(x, b, e, st);
        return t.cut == model::Cut::kWhole ? x : slice_rows(x, b, e);
      };
      out = t.experts ? per_expert(m, cfg.n_expert, cut, &w.storage) : cut(m, &w.storage);
    }
  }
  return nm;
}

util::Status check_slice(const model::Config& cfg, const plan::NodeSlice& s, const model::Weights& w) {
  const int64_t d = cfg.head_dim;
  const auto local = [&](model::Dim dim, model::Cut cut, bool rows) -> int64_t {
    const bool reduce_input = cut == model::Cut::kHeadCols || cut == model::Cut::kFfCols;
    if (reduce_input && s.exact) return rows ? s.rows.size() : model::dim_of(dim, cfg);
    if (cut == model::Cut::kHeadVals) return s.heads.size();
    if (cut == model::Cut::kOutRows) {
      const auto [b, e] = out_rows(cfg, s);
      return e - b;
    }
    if (rows == reduce_input) return model::dim_of(dim, cfg);  // the uncut side
    switch (cut) {
      case model::Cut::kHeadRows:
      case model::Cut::kHeadCols: return s.heads.size() * d;
      case model::Cut::kKvRows: return s.kv_heads.size() * d;
      case model::Cut::kFfRows:
      case model::Cut::kFfCols: return s.ff.size();
      case model::Cut::kWhole:
      case model::Cut::kHeadVals:
      case model::Cut::kOutRows: break;
    }
    return model::dim_of(dim, cfg);
  };
  if (int(w.layers.size()) != cfg.n_layers) return util::Status::error("the slice has the wrong number of layers");
  for (int l = 0; l < cfg.n_layers; ++l)
    for (const model::LayerTensor& t : model::layer_schema()) {
      const std::string name = model::layer_prefix(l) + t.name;
      const int64_t rows = local(t.rows, t.cut, true);
      if (t.matrix) {
        const model::Matrix& m = w.layers[l].*t.m;
        const int64_t cols = local(t.cols, t.cut, false);
        const int64_t n_stack = t.experts ? cfg.n_expert : 1;
        if (!t.needed(cfg) && m.rows == 0) continue;  // absent
        if (m.rows != rows * n_stack || m.cols != cols)
          return util::Status::error("tensor '" + name + "' of the slice is [" + std::to_string(m.cols) + ", " +
                                     std::to_string(m.rows) + "], expected [" + std::to_string(cols) + ", " +
                                     std::to_string(rows * n_stack) + "]");
      } else {
        const size_t n = (w.layers[l].*t.v).size();
        const size_t want = size_t(rows) * (t.experts ? cfg.n_expert : 1);
        if (n != want && (n != 0 || (t.needed(cfg) && want != 0)))
          return util::Status::error("tensor '" + name + "' of the slice has " + std::to_string(n) + " values, expected " +
                                     std::to_string(want));
      }
    }
  if (w.output.rows != s.vocab.size() || w.output.cols != cfg.dim || w.output_norm.size() != size_t(cfg.dim))
    return util::Status::error("the output slice's shape does not match its setup");
  return util::ok_status();
}

util::Status visit_tensors(model::Weights& w, int n_layers, const TensorVisitor& v) {
  RETURN_IF_ERROR(v.vector(model::kOutputNormName, &w.output_norm));
  RETURN_IF_ERROR(v.matrix(model::kOutputName, &w.output));
  RETURN_IF_ERROR(v.vector(model::kRopeFreqsName, &w.rope_freqs));
  for (int l = 0; l < n_layers; ++l) {
    model::LayerWeights& lw = w.layers[l];
    const std::string p = model::layer_prefix(l);
    for (const model::LayerTensor& t : model::layer_schema())
      RETURN_IF_ERROR(t.matrix ? v.matrix(p + t.name, &(lw.*t.m)) : v.vector(p + t.name, &(lw.*t.v)));
  }
  return util::ok_status();
}

}  // namespace runtime
