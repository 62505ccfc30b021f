// cpu_backend.cc: the forward pass's ops on the CPU (see cpu_backend.h); the code of the
// transformer before the backend interface, moved.
#include "model/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "model/logit_rows.h"
#include "tensor/quants.h"

namespace model {

CpuBackend::CpuBackend(const Config& cfg, const Weights& w, util::ThreadPool& pool, const RunConfig& rc,
                       const Partition& part)
    : cfg_(cfg),
      w_(w),
      pool_(pool),
      part_(part),
      kv_(cfg.n_layers, part.n_kv_heads, cfg.head_dim, rc.ctx, rc.kv_type, rc.n_slots,
          kv_layer_ctx(cfg, rc.ctx, std::max(1, rc.max_batch)), rc.kv_blocks),
      q_dim_(part.n_heads * cfg.head_dim),
      kv_dim_(part.n_kv_heads * cfg.head_dim),
      mode_(rc.attention),
      lane_order_(rc.lane_order),
      decode_lanes_(rc.decode_lanes),
      attn_bf16_(rc.attn_bf16) {
  const std::string why = attention_unsupported(cfg, rc.kv_type, rc.attention, rc.attn_bf16);
  CHECK_MSG(why.empty(), why.c_str());
  const int group = cfg.n_heads / cfg.n_kv_heads;
  for (int h = 0; h < part.n_heads; ++h) kv_of_head_.push_back((part.head_begin + h) / group - part.kv_begin);
  const size_t B = std::max(1, rc.max_batch);
  x_.resize(B * cfg.dim);
  xn_.resize(B * cfg.dim);
  q_.resize(B * q_dim_);
  k_.resize(B * kv_dim_);
  v_.resize(B * kv_dim_);
  att_.resize(B * q_dim_);
  const size_t pairs = B * std::max(1, cfg.n_expert_used);  // MLP rows: tokens, or (token, expert) pairs
  gate_.resize(pairs * part.n_ff);
  up_.resize(pairs * part.n_ff);
  if (cfg.moe()) {
    router_.resize(B * cfg.n_expert);
    sel_.resize(pairs);
    wts_.resize(pairs);
    group_.resize(pairs);
    group_at_.resize(cfg.n_expert + 1);
  }
  proj_.resize(B * cfg.dim);
  if (mode_ == AttentionMode::kExact) scores_.resize(size_t(pool.size()) * (rc.ctx + 8));
  rope_.resize(B * cfg.n_rot);
  if (cfg.n_swa > 0) rope_swa_.resize(B * cfg.n_rot);
  row_slot_.resize(B);
  row_pos_.resize(B);
}

std::string cpu_description(int threads) {
  return std::string("cpu (") + kernels::isa_name(kernels::active_isa()) + ", " + std::to_string(threads) +
         (threads == 1 ? " thread)" : " threads)");
}

std::string CpuBackend::describe() const { return cpu_description(int(pool_.size())); }

float* CpuBackend::buf(Act a) {
  switch (a) {
    case Act::kX: return x_.data();
    case Act::kXn: return xn_.data();
    case Act::kQ: return q_.data();
    case Act::kK: return k_.data();
    case Act::kV: return v_.data();
    case Act::kAtt: return att_.data();
    case Act::kGate: return gate_.data();
    case Act::kUp: return up_.data();
    case Act::kProj: return proj_.data();
  }
  return nullptr;
}

void CpuBackend::begin(const Segment* segs, int n_segs, int n, const float* x) {
  const Config& c = cfg_;
  int rows = 0;
  for (int s = 0; s < n_segs; ++s) {
    for (int b = 0; b < segs[s].n; ++b) row_slot_[rows + b] = segs[s].slot, row_pos_[rows + b] = segs[s].pos + b;
    rows += segs[s].n;
  }
  act_src_ = nullptr;
  std::memcpy(x_.data(), x, sizeof(float) * n * c.dim);
  if (c.embed_scale != 1.0f)  // gemma: the embedded rows times sqrt(dim) (ggml_scale)
    for (size_t i = 0; i < size_t(n) * c.dim; ++i) x_[i] *= c.embed_scale;
  plan_runs(segs, n_segs);
  // rope_[b] = (cos, sin) pairs for row b's position
  for (int b = 0; b < n; ++b)
    rope_row(c, w_, row_pos_[b], &rope_[size_t(b) * c.n_rot],
             rope_swa_.empty() ? nullptr : &rope_swa_[size_t(b) * c.n_rot]);
}

void CpuBackend::rmsnorm(Act out, Act in, const Vector& w, int n) {
  const int D = cfg_.dim;
  float *o = buf(out), *x = buf(in);
  for (int b = 0; b < n; ++b) kernels::rmsnorm(o + size_t(b) * D, x + size_t(b) * D, w.data(), D, cfg_.rms_eps);
  wrote(out);
}

void CpuBackend::linear(const Matrix& w, Act in, Act out, int n) {
  wrote(out);
  linear(w, buf(in), n, buf(out), runs_, w.rows);
}

void CpuBackend::glu(Activation act, int n) {
  wrote(Act::kGate);
  if (act == Activation::kGelu)
    kernels::geglu(gate_.data(), gate_.data(), up_.data(), size_t(n) * part_.n_ff);
  else
    kernels::swiglu(gate_.data(), gate_.data(), up_.data(), size_t(n) * part_.n_ff);
}

void CpuBackend::add_bias(Act a, const Vector& b, int n) {
  wrote(a);
  float* x = buf(a);
  const size_t w = b.size();
  for (int r = 0; r < n; ++r) kernels::add(x + r * w, x + r * w, b.data(), int64_t(w));
}

void CpuBackend::residual(int n) {
  wrote(Act::kX);
  kernels::add(x_.data(), x_.data(), proj_.data(), size_t(n) * cfg_.dim);
}

void CpuBackend::plan_runs(const Segment* segs, int n_segs) {
  runs_.clear();
  int row = 0;
  for (int s = 0; s < n_segs; ++s) {
    const kernels::BatchOrder o = lane_ordered(segs[s].n, segs[s].rowwise, lane_order_, decode_lanes_)
                                      ? kernels::BatchOrder::kLanes
                                      : kernels::BatchOrder::kVecDot;
    if (!runs_.empty() && runs_.back().order == o)
      runs_.back().n += segs[s].n;
    else
      runs_.push_back({row, segs[s].n, o});
    row += segs[s].n;
  }
}

const void* CpuBackend::quantized(const float* x, int n, int64_t cols, tensor::Type t) {
  if (act_src_ == x && act_type_ == t) return act_.data();
  const size_t row = kernels::activation_bytes(t, cols);
  if (act_.size() < row * n) act_.resize(row * n);
  uint8_t* dst = act_.data();
  pool_.parallel_for(n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) kernels::quantize_activation(t, x + b * cols, dst + b * row, cols);
  });
  act_src_ = x;
  act_type_ = t;
  return act_.data();
}

void CpuBackend::matmul_runs(const Matrix& w, const void* xq, size_t xq_stride, float* y, int64_t y_stride,
                              const std::vector<Run>& runs) {
  const auto* xb = static_cast<const uint8_t*>(xq);
  for (const Run& r : runs)
    pool_.run([&](int ith, int nth) {
      int64_t r0, r1;
      util::split_range(w.rows, ith, nth, &r0, &r1);
      if (r0 < r1)
        kernels::matmul(w.type, w.cols, w.data, w.row_bytes, r0, r1, xb + size_t(r.row0) * xq_stride, xq_stride,
                        r.n, y + int64_t(r.row0) * y_stride, y_stride, r.order);
    });
}

void CpuBackend::linear(const Matrix& w, const float* x, int n, float* y, const std::vector<Run>& runs,
                         int64_t y_stride) {
  const tensor::Type vt = tensor::traits(w.type).vec_dot_type;
  const void* xq = quantized(x, n, w.cols, vt);
  matmul_runs(w, xq, kernels::activation_bytes(vt, w.cols), y, y_stride, runs);
}

class CpuBackend::Local : public LocalLinear {
 public:
  Local(CpuBackend& t, int n) : t_(t), n_(n) {}
  int rows() const override { return n_; }
  void linear(const Matrix& w, const float* x, float* y, int64_t y_stride) override {
    t_.act_src_ = nullptr;  // x may be a collective's buffer: never a cached source
    t_.linear(w, x, n_, y, t_.runs_, y_stride);
    t_.act_src_ = nullptr;
  }
  void linear_quantized(const Matrix& w, const void* xq, size_t xq_stride, float* y, int64_t y_stride) override {
    t_.matmul_runs(w, xq, xq_stride, y, y_stride, t_.runs_);
  }

 private:
  CpuBackend& t_;
  int n_;
};

// logits = norm(x) Wout for the rows the segments ask for, packed in segment order. A
// segment's last row alone is one matrix x vector row; every row of a long segment keeps
// the segment's order.
util::Status CpuBackend::end_batch(const Segment* segs, int n_segs, float* logits) {
  if (!logits) return util::ok_status();
  const Config& c = cfg_;
  const int D = c.dim;
  std::vector<Run> out_runs;
  int rows = 0, row = 0;
  for (int s = 0; s < n_segs; ++s) {
    const Segment& g = segs[s];
    const auto [first, k] = logit_rows(g);
    for (int b = 0; b < k; ++b)
      kernels::rmsnorm(&xn_[size_t(rows + b) * D], &x_[size_t(row + first + b) * D], w_.output_norm.data(), D,
                       c.rms_eps);
    if (k > 0) {
      const kernels::BatchOrder o = lane_ordered(k, g.rowwise, lane_order_, decode_lanes_)
                                        ? kernels::BatchOrder::kLanes
                                        : kernels::BatchOrder::kVecDot;
      if (!out_runs.empty() && out_runs.back().order == o)
        out_runs.back().n += k;
      else
        out_runs.push_back({rows, k, o});
    }
    rows += k;
    row += g.n;
  }
  if (rows == 0) return util::ok_status();
  act_src_ = nullptr;
  linear(w_.output, xn_.data(), rows, logits, out_runs, w_.output.rows);
  act_src_ = nullptr;
  if (c.logit_softcap > 0) {  // cap * tanh(logits / cap), as ggml_scale, ggml_tanh, ggml_scale
    const float inv = 1.0f / c.logit_softcap;
    for (size_t i = 0; i < size_t(rows) * w_.output.rows; ++i)
      logits[i] = std::tanh(logits[i] * inv) * c.logit_softcap;
  }
  return util::ok_status();
}

// Mixture of experts, as llama.cpp's build_moe_ffn for qwen3moe: probabilities =
// softmax(router logits); the k most probable experts (ties: the lower index first; ggml's
// argsort leaves them unspecified); their probabilities divided by their sum (clamped to at
// least 2^-14) when expert_norm, times expert_scale when it is neither 0 nor 1; each picked
// expert's SwiGLU MLP; the outputs times their weights, added in pick order. Every expert
// product is in vec_dot order (as ggml's mul_mat_id; a pair's bits then depend only on its
// own row, however the batch's pairs group), and only the picked experts are read.
void CpuBackend::route(const LayerWeights& lw, int n) {
  const int E = cfg_.n_expert, k = cfg_.n_expert_used;
  std::vector<int> idx(E);
  std::fill(group_at_.begin(), group_at_.end(), 0);
  for (int t = 0; t < n; ++t) {
    float* p = &router_[size_t(t) * E];
    if (!lw.router_b.empty()) kernels::add(p, p, lw.router_b.data(), E);  // gpt-oss: ggml_add of the bias
    if (!cfg_.gpt_oss) kernels::softmax(p, E);  // ggml_soft_max (gpt-oss: the top k's logits, below)
    for (int e = 0; e < E; ++e) idx[e] = e;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [p](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    int* sel = &sel_[size_t(t) * k];
    float* w = &wts_[size_t(t) * k];
    double sum = 0;  // ggml_sum_rows: in double
    for (int i = 0; i < k; ++i) sel[i] = idx[i], w[i] = p[idx[i]], sum += w[i];
    if (cfg_.gpt_oss) kernels::softmax(w, k);  // SOFTMAX_WEIGHT gating: ggml_soft_max of the picked logits
    if (cfg_.expert_norm) {
      const float s = std::max(float(sum), 6.103515625e-5f);  // ggml_clamp to the smallest normal F16
      for (int i = 0; i < k; ++i) w[i] /= s;
    }
    if (cfg_.expert_scale != 0.0f && cfg_.expert_scale != 1.0f)
      for (int i = 0; i < k; ++i) w[i] *= cfg_.expert_scale;
    for (int i = 0; i < k; ++i) ++group_at_[sel[i] + 1];
  }
  for (int e = 0; e < E; ++e) group_at_[e + 1] += group_at_[e];
  std::vector<int> at(group_at_.begin(), group_at_.end() - 1);
  for (int q = 0; q < n * k; ++q) group_[at[sel_[q]]++] = q;
}

void CpuBackend::expert_matmul(const Matrix& stack, const uint8_t* xq, size_t xq_stride, int div, float* y) {
  const int E = cfg_.n_expert;
  const int64_t R = stack.rows / E;
  const int pairs = group_at_[E];
  if (pack_.size() < size_t(pairs) * xq_stride) pack_.resize(size_t(pairs) * xq_stride);
  for (int j = 0; j < pairs; ++j)
    std::memcpy(pack_.data() + size_t(j) * xq_stride, xq + size_t(group_[j] / div) * xq_stride, xq_stride);
  if (exp_out_.size() < size_t(pairs) * R) exp_out_.resize(size_t(pairs) * R);
  pool_.run([&](int ith, int nth) {
    int64_t r0, r1;
    util::split_range(R, ith, nth, &r0, &r1);
    if (r0 >= r1) return;
    for (int e = 0; e < E; ++e) {
      const int at = group_at_[e], cnt = group_at_[e + 1] - at;
      if (cnt == 0) continue;
      const Matrix m = expert(stack, e, E);
      kernels::matmul(m.type, m.cols, m.data, m.row_bytes, r0, r1, pack_.data() + size_t(at) * xq_stride, xq_stride,
                      cnt, exp_out_.data() + size_t(at) * R, R, kernels::BatchOrder::kVecDot);
    }
  });
  for (int j = 0; j < pairs; ++j)
    std::memcpy(y + size_t(group_[j]) * R, exp_out_.data() + size_t(j) * R, sizeof(float) * R);
}

// The experts' down projections of the batch's pairs, weighted and summed per token.
class CpuBackend::MoeDown : public LocalLinear {
 public:
  MoeDown(CpuBackend& t, int n, const Matrix& stack, const Vector& bias)
      : t_(t), n_(n), stack_(stack), bias_(bias) {}
  int rows() const override { return n_ * t_.cfg_.n_expert_used; }
  int out_rows() const override { return n_; }
  void linear(const Matrix& w, const float* x, float* y, int64_t y_stride) override {
    const tensor::Type vt = tensor::traits(w.type).vec_dot_type;
    const size_t row = kernels::activation_bytes(vt, w.cols);
    if (t_.pair_act_.size() < row * rows()) t_.pair_act_.resize(row * rows());
    uint8_t* dst = t_.pair_act_.data();
    t_.pool_.parallel_for(rows(), 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) kernels::quantize_activation(vt, x + b * w.cols, dst + b * row, w.cols);
    });
    linear_quantized(w, dst, row, y, y_stride);
  }
  void linear_quantized(const Matrix& w, const void* xq, size_t xq_stride, float* y, int64_t y_stride) override {
    const int k = t_.cfg_.n_expert_used;
    const int64_t R = w.rows;
    CHECK(stack_.rows == R * t_.cfg_.n_expert && stack_.cols == w.cols);
    std::vector<float> out(size_t(rows()) * R);  // [pair][R]
    t_.expert_matmul(stack_, static_cast<const uint8_t*>(xq), xq_stride, 1, out.data());
    // gpt-oss: each pair's expert bias (ggml_add_id), its rows of w (Cut::kOutRows)
    if (!bias_.empty()) {
      CHECK(bias_.size() == size_t(R) * t_.cfg_.n_expert);
      for (int q = 0; q < rows(); ++q)
        kernels::add(&out[size_t(q) * R], &out[size_t(q) * R], bias_.data() + size_t(t_.sel_[q]) * R, R);
    }
    // ggml_mul by the weights, then ggml_add of the k products in pick order (this file is
    // built without FMA, so each product is rounded before the add, as in ggml).
    for (int t = 0; t < n_; ++t) {
      const float* w_t = &t_.wts_[size_t(t) * k];
      float* yt = y + int64_t(t) * y_stride;
      for (int64_t r = 0; r < R; ++r) yt[r] = out[(size_t(t) * k) * R + r] * w_t[0];
      for (int i = 1; i < k; ++i) {
        const float* o = &out[(size_t(t) * k + i) * R];
        for (int64_t r = 0; r < R; ++r) yt[r] = yt[r] + o[r] * w_t[i];
      }
    }
  }

 private:
  CpuBackend& t_;
  int n_;
  const Matrix& stack_;
  const Vector& bias_;
};

util::Status CpuBackend::moe(int l, int n) {
  const LayerWeights& lw = w_.layers[l];
  const int E = cfg_.n_expert, k = cfg_.n_expert_used, D = cfg_.dim, F = part_.n_ff;
  act_src_ = nullptr;
  // Replicated: every node picks the same experts. An F32 router (make-model's, the
  // published files') as llama.cpp's decode multiplies it, ggml_vec_dot_f32 per row.
  if (lw.router.type == tensor::Type::F32) {
    pool_.parallel_for(int64_t(n) * E, 16, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j)
        router_[j] = kernels::dot_f32(reinterpret_cast<const float*>(lw.router.row(j % E)), &xn_[size_t(j / E) * D], D);
    });
  } else {
    linear(lw.router, xn_.data(), n, router_.data(), runs_, lw.router.rows);
  }
  route(lw, n);
  for (const auto& [stack, out] : {std::pair{&lw.gate_exps, &gate_}, std::pair{&lw.up_exps, &up_}}) {
    const tensor::Type vt = tensor::traits(stack->type).vec_dot_type;
    const void* xq = quantized(xn_.data(), n, D, vt);
    expert_matmul(*stack, static_cast<const uint8_t*>(xq), kernels::activation_bytes(vt, D), k, out->data());
  }
  if (cfg_.gpt_oss) {  // ggml_add_id of each pair's expert bias, then ggml_swiglu_oai
    for (const auto& [b, out] : {std::pair{&lw.gate_exps_b, &gate_}, std::pair{&lw.up_exps_b, &up_}})
      for (int q = 0; q < n * k && !b->empty(); ++q)
        kernels::add(out->data() + size_t(q) * F, out->data() + size_t(q) * F, b->data() + size_t(sel_[q]) * F, F);
    kernels::swiglu_oai(gate_.data(), gate_.data(), up_.data(), size_t(n) * k * F, Config::kOaiAlpha,
                        Config::kOaiLimit);
  } else {
    kernels::swiglu(gate_.data(), gate_.data(), up_.data(), size_t(n) * k * F);
  }
  act_src_ = nullptr;
  moe_layer_ = l;  // the down projection: reduce_begin(kGate, experts)
  return util::ok_status();
}

// A reduce point's local side: the rows stay in this node's buffers; the products are the
// batch's runs (Local) or the picked experts' down projections (MoeDown).
util::Expected<Backend::ReduceSide> CpuBackend::reduce_begin(Act in, int n, int cols, bool experts) {
  act_src_ = nullptr;  // x may be a collective's buffer: never a cached source
  if (experts) {
    CHECK(cfg_.moe() && in == Act::kGate && moe_layer_ >= 0);
    const LayerWeights& lw = w_.layers[moe_layer_];
    local_ = std::make_unique<MoeDown>(*this, n, lw.down_exps, lw.down_exps_b);
  } else {
    local_ = std::make_unique<Local>(*this, n);
  }
  return ReduceSide{buf(in), proj_.data(), local_.get()};
}

util::Status CpuBackend::reduce_end() {
  act_src_ = nullptr;
  local_.reset();
  return util::ok_status();
}

void CpuBackend::head_norm(Act a, const Vector& w, int n) {
  wrote(a);
  const int hd = cfg_.head_dim, heads = a == Act::kQ ? part_.n_heads : part_.n_kv_heads;
  const size_t stride = a == Act::kQ ? q_dim_ : kv_dim_;
  float* x = buf(a);
  for (int b = 0; b < n; ++b)
    for (int h = 0; h < heads; ++h) {
      float* head = x + size_t(b) * stride + size_t(h) * hd;
      kernels::rmsnorm(head, head, w.data(), hd, cfg_.rms_eps);
    }
}

void CpuBackend::rope(Act a, int l, int n) {
  wrote(a);
  const Config& c = cfg_;
  const int hd = c.head_dim, heads = a == Act::kQ ? part_.n_heads : part_.n_kv_heads;
  const size_t stride = a == Act::kQ ? q_dim_ : kv_dim_;
  const float* table = (c.is_swa(l) ? rope_swa_ : rope_).data();
  float* x = buf(a);
  for (int b = 0; b < n; ++b)
    for (int h = 0; h < heads; ++h)
      kernels::rope_apply(x + size_t(b) * stride + size_t(h) * hd, table + size_t(b) * c.n_rot, c.n_rot, c.rope_neox);
}

void CpuBackend::scale_queries(float s, int n) {
  wrote(Act::kQ);
  for (size_t i = 0; i < size_t(n) * q_dim_; ++i) q_[i] *= s;
}

void CpuBackend::kv_store(int l, const Segment* segs, int n_segs) {
  const int hd = cfg_.head_dim;
  int n = 0;  // rows
  for (int s = 0; s < n_segs; ++s) n += segs[s].n;
  for (int b = 0; b < n; ++b)
    for (int g = 0; g < part_.n_kv_heads; ++g)
      kv_.store(row_slot_[b], l, g, row_pos_[b], &k_[size_t(b) * kv_dim_ + size_t(g) * hd],
                &v_[size_t(b) * kv_dim_ + size_t(g) * hd]);
}

void CpuBackend::attention(int l, const Segment* segs, int n_segs) {
  const Config& c = cfg_;
  const LayerWeights& lw = w_.layers[l];
  const int hd = c.head_dim;
  const int n_heads = part_.n_heads, n_kv = part_.n_kv_heads;
  if (n_heads == 0) return;  // a node without query heads (more nodes than heads): no attention here
  int n = 0;  // rows
  for (int s = 0; s < n_segs; ++s) n += segs[s].n;
  const float scale = c.q_scale > 0 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(hd));
  if (mode_ == AttentionMode::kFlash) {
    // Tiled over each slot's cache at absolute positions, online softmax, fixed reduction
    // order: a row's output is independent of the batch split, the threads and the other
    // segments.
    std::vector<kernels::KvHeadView> views(size_t(n_segs) * n_kv);
    std::vector<kernels::AttentionArgs> args(n_segs);
    int row = 0;
    for (int s = 0; s < n_segs; ++s) {
      for (int g = 0; g < n_kv; ++g) views[size_t(s) * n_kv + g] = kv_.view(segs[s].slot, l, g);
      kernels::AttentionArgs& a = args[s];
      a.n_q = segs[s].n;
      a.pos0 = segs[s].pos;
      a.n_heads = n_heads;
      a.n_kv_heads = n_kv;
      a.kv_of_head = kv_of_head_.data();
      a.head_dim = hd;
      a.scale = scale;
      a.q = q_.data() + size_t(row) * q_dim_;
      a.q_stride = q_dim_;
      a.out = att_.data() + size_t(row) * q_dim_;
      a.out_stride = q_dim_;
      a.kv = views.data() + size_t(s) * n_kv;
      a.sinks = lw.sinks.empty() ? nullptr : lw.sinks.data();
      a.window = c.is_swa(l) ? c.n_swa : 0;  // the ring of a windowed layer is in its views
      a.bf16 = attn_bf16_;
      row += segs[s].n;
    }
    if (n_segs == 1)
      kernels::flash_attention(args[0], pool_);
    else
      kernels::flash_attention_batch(args.data(), n_segs, pool_);
    return;
  }
  // Exact path: causal attention per (token, head). With the F16 cache this follows llama.cpp's
  // non-flash CPU path operation for operation: q rounded to F16, k.q in ggml's F16 dot
  // order, softmax of the scaled scores, probabilities rounded to F16, then V summed in
  // ggml's order (kernels::dot_f16 / weighted_sum_f16), so results match bit for bit.
  const bool f16 = kv_.type() == KvType::kF16;
  const int64_t jobs = int64_t(n) * n_heads;
  const int window = c.is_swa(l) ? c.n_swa : 0;  // a windowed layer: the last n_swa positions
  const int ring = kv_.layer_ctx(l);             // rows its cache keeps (position p in p % ring)
  pool_.run([&](int ith, int nth) {
    int64_t j0, j1;
    util::split_range(jobs, ith, nth, &j0, &j1);
    float* s = &scores_[size_t(ith) * (kv_.ctx() + 8)];
    std::vector<uint16_t> q16(hd), p16(kv_.ctx()), vrows;
    for (int64_t j = j0; j < j1; ++j) {
      const int b = static_cast<int>(j / n_heads), h = static_cast<int>(j % n_heads);
      // A window's positions are lo .. p (llama.cpp masks p - t >= n_swa). The scores and the
      // V sum run over first .. p, first = lo rounded down to a multiple of 32, with the
      // positions before lo masked: the groups of 8 (softmax) and lanes of 32 (V) before
      // first hold only zeros in llama.cpp's row of every position, so its sums are ours.
      const int g = kv_of_head_[h], p = row_pos_[b], slot = row_slot_[b];
      const int lo = window > 0 ? std::max(0, p - window + 1) : 0;
      const int first = lo / 32 * 32, n_ctx = p + 1 - first;
      const float* q = &q_[size_t(b) * q_dim_ + size_t(h) * hd];
      float* out = &att_[size_t(b) * q_dim_ + size_t(h) * hd];
      if (f16) {
        for (int i = 0; i < hd; ++i) q16[i] = util::f32_to_fp16(q[i]);
        for (int t = 0; t < n_ctx; ++t)
          s[t] = first + t < lo ? -INFINITY
                                : kernels::dot_f16(kv_.k16(kv_.offset(slot, l, g, first + t)), q16.data(), hd) * scale;
      } else {
        for (int t = 0; t < n_ctx; ++t) {
          const float* kr = kv_.k32(kv_.offset(slot, l, g, first + t));
          float dot = 0;
          for (int i = 0; i < hd; ++i) dot += q[i] * kr[i];
          s[t] = first + t < lo ? -INFINITY : dot * scale;
        }
      }
      const int n_pad = (n_ctx + 7) / 8 * 8;  // llama.cpp's row is padded with masked (-inf) cells
      for (int t = n_ctx; t < n_pad; ++t) s[t] = -INFINITY;
      kernels::softmax(s, n_pad, lw.sinks.empty() ? nullptr : &lw.sinks[h]);  // gpt-oss: the head's sink
      if (f16) {
        for (int t = 0; t < n_ctx; ++t) p16[t] = util::f32_to_fp16(s[t]);
        // The rows of first .. p lie in the ring (or one KV block) as one run, or wrap around
        // the ring (span blocks): then they are copied into one run, so the sum keeps its order.
        const uint16_t* v = kv_.v16(kv_.offset(slot, l, g, first));
        if (ring < kv_.ctx() ? first % ring + n_ctx > ring : first / kKvBlockRows != p / kKvBlockRows) {
          vrows.resize(size_t(n_ctx) * hd);
          for (int t = 0; t < n_ctx; ++t)
            std::memcpy(&vrows[size_t(t) * hd], kv_.v16(kv_.offset(slot, l, g, first + t)), sizeof(uint16_t) * hd);
          v = vrows.data();
        }
        kernels::weighted_sum_f16(v, hd, p16.data(), n_ctx, hd, out);
      } else {
        std::fill(out, out + hd, 0.0f);
        for (int t = 0; t < n_ctx; ++t) {
          const float* vr = kv_.v32(kv_.offset(slot, l, g, first + t));
          for (int i = 0; i < hd; ++i) out[i] += s[t] * vr[i];
        }
      }
    }
  });
}

}  // namespace model
