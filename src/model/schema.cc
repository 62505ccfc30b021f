// schema.cc: the layer tensor tables of llama, qwen2, qwen3, qwen3moe, gemma3 and gpt-oss.
#include "model/schema.h"

namespace model {

int64_t dim_of(Dim d, const Config& c) {
  switch (d) {
    case Dim::kDim: return c.dim;
    case Dim::kQ: return c.q_dim();
    case Dim::kKv: return c.kv_dim();
    case Dim::kFf: return c.n_ff;
    case Dim::kHead: return c.head_dim;
    case Dim::kExperts: return c.n_expert;
    case Dim::kHeads: return c.n_heads;
  }
  return 0;
}

namespace {

bool always(const Config&) { return true; }
bool qkv_bias(const Config& c) { return c.qkv_bias; }
bool qk_norm(const Config& c) { return c.qk_norm; }
bool post_norms(const Config& c) { return c.post_norms; }
bool attn_post_norm(const Config& c) { return c.post_norms || c.gpt_oss; }  // gpt-oss: the MLP's input norm
bool ffn_norm(const Config& c) { return !c.gpt_oss; }
bool gpt_oss(const Config& c) { return c.gpt_oss; }
bool dense(const Config& c) { return !c.moe(); }
bool moe(const Config& c) { return c.moe(); }

using L = LayerWeights;
constexpr LayerTensor mat(const char* n, Dim r, Dim c, Cut cut, bool (*needed)(const Config&), Matrix L::*m) {
  return {n, true, r, c, cut, false, needed, m, nullptr};
}
constexpr LayerTensor exps(const char* n, Dim r, Dim c, Cut cut, Matrix L::*m) {
  return {n, true, r, c, cut, true, moe, m, nullptr};
}
constexpr LayerTensor vec(const char* n, Dim r, Cut cut, bool (*needed)(const Config&), Vector L::*v) {
  return {n, false, r, Dim::kDim, cut, false, needed, nullptr, v};
}
constexpr LayerTensor exps_bias(const char* n, Dim r, Cut cut, Vector L::*v) {
  return {n, false, r, Dim::kDim, cut, true, gpt_oss, nullptr, v};
}

// One table serves every family: the rows an architecture does not need are skipped when
// absent (qwen2's biases, qwen3's and gemma3's per-head norms, gemma3's post-norms, the
// dense MLP of an MoE model and the experts of a dense one). An MoE layer's router
// (ffn_gate_inp) is whole on every node; each expert's gate and up rows and down columns are
// cut as the dense MLP's are (every node holds its share of every expert). gpt-oss: biases
// on Q, K, V (qwen2's rows) and the output projection (whole: added once after the reduce),
// a sink per query head, the router's bias and every expert's biases (cut as its rows), and
// post_attention_norm as the MLP's input norm (no ffn_norm).
constexpr LayerTensor kLayer[] = {
    vec("attn_norm.weight", Dim::kDim, Cut::kWhole, always, &L::attn_norm),
    mat("attn_q.weight", Dim::kQ, Dim::kDim, Cut::kHeadRows, always, &L::wq),
    mat("attn_k.weight", Dim::kKv, Dim::kDim, Cut::kKvRows, always, &L::wk),
    mat("attn_v.weight", Dim::kKv, Dim::kDim, Cut::kKvRows, always, &L::wv),
    vec("attn_q.bias", Dim::kQ, Cut::kHeadRows, qkv_bias, &L::bq),
    vec("attn_k.bias", Dim::kKv, Cut::kKvRows, qkv_bias, &L::bk),
    vec("attn_v.bias", Dim::kKv, Cut::kKvRows, qkv_bias, &L::bv),
    vec("attn_q_norm.weight", Dim::kHead, Cut::kWhole, qk_norm, &L::q_norm),
    vec("attn_k_norm.weight", Dim::kHead, Cut::kWhole, qk_norm, &L::k_norm),
    mat("attn_output.weight", Dim::kDim, Dim::kQ, Cut::kHeadCols, always, &L::wo),
    vec("attn_output.bias", Dim::kDim, Cut::kWhole, gpt_oss, &L::bo),
    vec("attn_sinks.weight", Dim::kHeads, Cut::kHeadVals, gpt_oss, &L::sinks),
    vec("post_attention_norm.weight", Dim::kDim, Cut::kWhole, attn_post_norm, &L::attn_post_norm),
    vec("ffn_norm.weight", Dim::kDim, Cut::kWhole, ffn_norm, &L::ffn_norm),
    mat("ffn_gate.weight", Dim::kFf, Dim::kDim, Cut::kFfRows, dense, &L::w_gate),
    mat("ffn_up.weight", Dim::kFf, Dim::kDim, Cut::kFfRows, dense, &L::w_up),
    mat("ffn_down.weight", Dim::kDim, Dim::kFf, Cut::kFfCols, dense, &L::w_down),
    mat("ffn_gate_inp.weight", Dim::kExperts, Dim::kDim, Cut::kWhole, moe, &L::router),
    exps("ffn_gate_exps.weight", Dim::kFf, Dim::kDim, Cut::kFfRows, &L::gate_exps),
    exps("ffn_up_exps.weight", Dim::kFf, Dim::kDim, Cut::kFfRows, &L::up_exps),
    exps("ffn_down_exps.weight", Dim::kDim, Dim::kFf, Cut::kFfCols, &L::down_exps),
    vec("ffn_gate_inp.bias", Dim::kExperts, Cut::kWhole, gpt_oss, &L::router_b),
    exps_bias("ffn_gate_exps.bias", Dim::kFf, Cut::kFfRows, &L::gate_exps_b),
    exps_bias("ffn_up_exps.bias", Dim::kFf, Cut::kFfRows, &L::up_exps_b),
    exps_bias("ffn_down_exps.bias", Dim::kDim, Cut::kOutRows, &L::down_exps_b),
    vec("post_ffw_norm.weight", Dim::kDim, Cut::kWhole, post_norms, &L::ffn_post_norm),
};

}  // namespace

std::span<const LayerTensor> layer_schema() { return kLayer; }

}  // namespace model
