// transformer.cc: llama-family forward pass (see transformer.h): the layer loop, calling a Backend.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/backend.h"
#include "model/cpu_backend.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "tensor/quants.h"
#include "util/swa_ring.h"

namespace model {

Transformer::Transformer(const Config& cfg, const Weights& w, util::ThreadPool& pool, int ctx,
                         KvType kv_type, int max_batch, AttentionMode attention)
    : Transformer(cfg, w, pool, ctx, kv_type, max_batch, Partition::whole(cfg), nullptr, attention) {}

std::string attention_unsupported(const Config& cfg, KvType kv_type, AttentionMode mode, bool attn_bf16) {
  // --attn-bf16 is refused, not dropped, where it cannot run: it changes the numbers, so a
  // node quietly without it would part from the others (and from the user's choice).
  if (attn_bf16 && !kernels::attention_bf16_available())
    return "--attn-bf16 needs a CPU with AVX512_BF16 (and SHARDLM_ISA avx512 or amx); this one lacks it: "
           "drop --attn-bf16";
  if (attn_bf16 && (mode != AttentionMode::kFlash || kv_type != KvType::kF16))
    return "--attn-bf16 needs --flash-attn on and --kv-type f16";
  if (attn_bf16 && !kernels::attention_bf16_head_dim_ok(cfg.head_dim))
    return "--attn-bf16 needs head_dim to be a multiple of 32 up to 256 (this model's is " +
           std::to_string(cfg.head_dim) + "): drop --attn-bf16";
  if (kv_type == KvType::kQ8_0 && mode != AttentionMode::kFlash)
    return "a q8_0 KV cache needs flash attention (--flash-attn on), as in llama.cpp";
  if (kv_type == KvType::kQ8_0 && cfg.head_dim % 32 != 0)
    return "a q8_0 KV cache needs head_dim to be a multiple of 32 (this model's is " +
           std::to_string(cfg.head_dim) + "): use --kv-type f16";
  return "";
}

// Rows each layer's cache keeps: ctx, or a windowed layer's ring (util/swa_ring.h).
std::vector<int> kv_layer_ctx(const Config& c, int ctx, int max_batch) {
  std::vector<int> r(c.n_layers, ctx);
  for (int l = 0; l < c.n_layers; ++l)
    if (c.is_swa(l)) r[l] = util::swa_ring_rows(c.n_swa, ctx, max_batch);
  return r;
}

void rope_row(const Config& c, const Weights& w, int pos, float* row, float* row_swa) {
  const float* factors = w.rope_freqs.empty() ? nullptr : w.rope_freqs.data();
  kernels::rope_cache_yarn(row, pos, c.n_rot, c.rope_base, c.rope_freq_scale, factors, c.yarn);
  if (row_swa)  // the windowed layers' own base (Gemma 3)
    kernels::rope_cache_yarn(row_swa, pos, c.n_rot, c.rope_base_swa, c.rope_freq_scale, factors, c.yarn);
}

namespace {
RunConfig run_config(int ctx, KvType kv_type, int max_batch, AttentionMode attention) {
  RunConfig rc;
  rc.ctx = ctx;
  rc.kv_type = kv_type;
  rc.max_batch = max_batch;
  rc.attention = attention;
  return rc;
}
}  // namespace

Transformer::Transformer(const Config& cfg, const Weights& w, util::ThreadPool& pool, int ctx,
                         KvType kv_type, int max_batch, const Partition& part, Collective* comm,
                         AttentionMode attention)
    : Transformer(cfg, w, pool, run_config(ctx, kv_type, max_batch, attention), part, comm) {}

Transformer::Transformer(const Config& cfg, const Weights& w, util::ThreadPool& pool, const RunConfig& rc,
                         const Partition& part, Collective* comm)
    : Transformer(cfg, w, std::make_unique<CpuBackend>(cfg, w, pool, rc, part), rc, part, comm) {}

Transformer::Transformer(const Config& cfg, const Weights& w, std::unique_ptr<Backend> backend, const RunConfig& rc,
                         const Partition& part, Collective* comm)
    : cfg_(cfg),
      w_(w),
      part_(part),
      comm_(comm),
      rc_(rc),
      max_batch_(std::max(1, rc.max_batch)),
      layer_ctx_(kv_layer_ctx(cfg, rc.ctx, std::max(1, rc.max_batch))),
      ring_hi_(rc.n_slots, -1),
      be_(std::move(backend)) {}

Transformer::~Transformer() = default;

void Transformer::embed(int32_t token, float* x) const {
  CHECK(w_.token_embd.data != nullptr);
  CHECK(token >= 0 && token < cfg_.n_vocab);
  tensor::dequantize_row(w_.token_embd.type, w_.token_embd.row(token), x, cfg_.dim);
}

util::Status Transformer::forward(const int32_t* tokens, int n, int pos, float* logits, bool all_logits) {
  CHECK(n >= 1 && pos >= 0 && pos + n <= ctx());
  std::vector<float> x(size_t(std::min(n, max_batch_)) * cfg_.dim);
  for (int i = 0; i < n; i += max_batch_) {
    const int nb = std::min(max_batch_, n - i);
    for (int b = 0; b < nb; ++b) embed(tokens[i + b], &x[size_t(b) * cfg_.dim]);
    RETURN_IF_ERROR(forward_chunk(x.data(), nb, pos + i, logits, all_logits, i, n));
  }
  return util::ok_status();
}

util::Status Transformer::forward_embedded(const float* x, int n, int pos, float* logits, bool all_logits) {
  CHECK(n >= 1 && pos >= 0 && pos + n <= ctx());
  for (int i = 0; i < n; i += max_batch_) {
    const int nb = std::min(max_batch_, n - i);
    RETURN_IF_ERROR(forward_chunk(x + size_t(i) * cfg_.dim, nb, pos + i, logits, all_logits, i, n));
  }
  return util::ok_status();
}

// One batch of the single-sequence calls above: rows [i, i + nb) of n.
util::Status Transformer::forward_chunk(const float* x, int nb, int pos, float* logits, bool all_logits, int i,
                                        int n) {
  Segment seg{0, pos, nb, Logits::kNone};
  float* out = nullptr;
  if (logits && all_logits) out = logits + size_t(i) * part_.n_vocab, seg.logits = Logits::kAll;
  if (logits && !all_logits && i + nb == n) out = logits, seg.logits = Logits::kLast;
  return forward_batch(&seg, 1, x, out);
}

util::Status Transformer::forward_batch(const Segment* segs, int n_segs, const float* x, float* logits) {
  int rows = 0;
  for (int s = 0; s < n_segs; ++s) {
    const Segment& g = segs[s];
    CHECK(g.n >= 1 && g.pos >= 0 && g.pos + g.n <= ctx() && g.slot >= 0 && g.slot < n_slots());
    for (int t = 0; t < s; ++t) CHECK_MSG(segs[t].slot != g.slot, "a slot appears twice in one batch");
    rows += g.n;
    CHECK(rows <= max_batch_);
  }
  CHECK(rows >= 1);
  for (int s = 0; s < n_segs; ++s) {
    const Segment& g = segs[s];
    if (g.blocks_from >= 0) be_->set_blocks(g.slot, g.blocks_from, g.blocks);
    if (!be_->kv_covers(g.slot, g.pos + g.n))
      return util::Status::error("KV slot " + std::to_string(g.slot) + " has no KV blocks for positions up to " +
                                 std::to_string(g.pos + g.n - 1));
  }
  RETURN_IF_ERROR(check_rings(segs, n_segs));
  be_->begin(segs, n_segs, rows, x);
  return step(segs, n_segs, logits);
}

util::Status Transformer::kv_copies(std::span<const KvCopy> copies) {
  for (const KvCopy& c : copies)
    if (!be_->kv_copy(c))
      return util::Status::error("the host KV cache cannot " +
                                 std::string(c.kind == KvCopy::Kind::kSave      ? "save block " + std::to_string(c.block) + " as"
                                             : c.kind == KvCopy::Kind::kRestore ? "restore into block " + std::to_string(c.block) + " its"
                                                                                : "forget its") +
                                 " entry " + std::to_string(c.entry) + " (" + be_->describe() + ")");
  return util::ok_status();
}

util::Status Transformer::check_rings(const Segment* segs, int n_segs) {
  if (cfg_.n_swa <= 0) return util::ok_status();
  int ring = ctx();
  for (int l = 0; l < cfg_.n_layers; ++l) ring = std::min(ring, layer_ctx_[l]);
  for (int s = 0; s < n_segs; ++s) {
    const Segment& g = segs[s];
    int& hi = ring_hi_[g.slot];
    // Rows of positions <= hi - ring are overwritten; the segment's first row needs
    // max(0, pos - n_swa + 1) .. pos - 1 (none at position 0).
    if (ring < ctx() && g.pos > 0 && std::max(0, g.pos - cfg_.n_swa + 1) <= hi - ring)
      return util::Status::error("KV slot " + std::to_string(g.slot) + " rewound from position " + std::to_string(hi) +
                                 " to " + std::to_string(g.pos) + ": its sliding-window layers keep only " +
                                 std::to_string(ring) + " rows; evaluate the sequence from position 0");
    hi = g.pos + g.n - 1;
  }
  return util::ok_status();
}

util::Status Transformer::project(ReducePoint at, const Matrix& w, Act in, int n, int col0, int cols, bool experts) {
  if (!comm_ && !experts) {
    be_->linear(w, in, Act::kProj, n);
    return util::ok_status();
  }
  auto side = be_->reduce_begin(in, n, cols, experts);
  if (!side) return side.status();
  util::Status st = util::ok_status();
  if (comm_)
    st = comm_->reduce(at, w, side->x, col0, cols, side->y, *side->local);
  else
    side->local->linear(w, side->x, side->y, w.rows);
  util::Status end = be_->reduce_end();
  return st.ok() ? end : st;
}

void Transformer::post_norm(const Vector& w, int n) {
  if (!w.empty()) be_->rmsnorm(Act::kProj, Act::kProj, w, n);
}

void Transformer::attention(int l, const Segment* segs, int n_segs, int n) {
  const Config& c = cfg_;
  const LayerWeights& lw = w_.layers[l];
  Backend& be = *be_;
  if (!lw.bq.empty()) be.add_bias(Act::kQ, lw.bq, n);  // qwen2, gpt-oss
  if (!lw.bk.empty()) be.add_bias(Act::kK, lw.bk, n);
  if (!lw.bv.empty()) be.add_bias(Act::kV, lw.bv, n);
  if (!lw.q_norm.empty()) be.head_norm(Act::kQ, lw.q_norm, n);  // qwen3, gemma 3
  if (!lw.k_norm.empty()) be.head_norm(Act::kK, lw.k_norm, n);
  be.rope(Act::kQ, l, n);
  be.rope(Act::kK, l, n);
  if (c.q_scale > 0) be.scale_queries(c.q_scale, n);  // gemma: q scaled before attention (ggml_scale)
  be.kv_store(l, segs, n_segs);
  be.attention(l, segs, n_segs);
}

util::Status Transformer::step(const Segment* segs, int n_segs, float* logits) {
  const Config& c = cfg_;
  int n = 0;  // rows
  for (int s = 0; s < n_segs; ++s) n += segs[s].n;
  const int q_dim = part_.n_heads * c.head_dim;
  Backend& be = *be_;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w_.layers[l];
    // --- attention block: xn = norm(x); q, k, v = xn W; att = softmax(q k^T / sqrt(d)) v
    be.rmsnorm(Act::kXn, Act::kX, lw.attn_norm, n);
    be.linear(lw.wq, Act::kXn, Act::kQ, n);
    be.linear(lw.wk, Act::kXn, Act::kK, n);
    be.linear(lw.wv, Act::kXn, Act::kV, n);
    if (part_.n_heads > 0)  // a node without query heads (more nodes than heads): no attention here
      attention(l, segs, n_segs, n);
    // x += att Wo, summed over the nodes (the first reduce point)
    RETURN_IF_ERROR(project(ReducePoint::kAttention, lw.wo, Act::kAtt, n, part_.head_begin * c.head_dim, q_dim));
    if (!lw.bo.empty()) be.add_bias(Act::kProj, lw.bo, n);  // gpt-oss: once, on the whole output
    if (c.post_norms) post_norm(lw.attn_post_norm, n);
    be.residual(n);

    // --- MLP block: x += (act(xn Wg) * (xn Wu)) Wd, act silu (SwiGLU) or gelu (GeGLU)
    // (gpt-oss names the MLP's input norm post_attention_norm)
    be.rmsnorm(Act::kXn, Act::kX, c.gpt_oss ? lw.attn_post_norm : lw.ffn_norm, n);
    if (c.moe()) {  // the same with the router's experts; the reduce point's weight has one expert's shape
      RETURN_IF_ERROR(be.moe(l, n));
      RETURN_IF_ERROR(project(ReducePoint::kMlp, expert(lw.down_exps, 0, c.n_expert), Act::kGate, n, part_.ff_begin,
                              part_.n_ff, true));
      be.residual(n);
      continue;
    }
    be.linear(lw.w_gate, Act::kXn, Act::kGate, n);
    be.linear(lw.w_up, Act::kXn, Act::kUp, n);
    be.glu(c.act, n);
    // x += mlp Wd, summed over the nodes (the second reduce point)
    RETURN_IF_ERROR(project(ReducePoint::kMlp, lw.w_down, Act::kGate, n, part_.ff_begin, part_.n_ff));
    post_norm(lw.ffn_post_norm, n);
    be.residual(n);
  }
  return be.end_batch(segs, n_segs, logits);
}

}  // namespace model
