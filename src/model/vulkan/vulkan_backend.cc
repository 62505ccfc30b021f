// vulkan_backend.cc: the forward pass's ops on a Vulkan device (see vulkan_backend.h).
#include "model/vulkan/vulkan_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/vulkan/vulkan.h"
#include "model/logit_rows.h"
#include "tensor/quants.h"

namespace model {
namespace vk = kernels::vulkan;

namespace {

// The matrices and vectors a node's forward pass reads (the token embedding stays on the
// host: rows are embedded there).
template <typename F>
void for_each_matrix(const Weights& w, F f) {
  for (const LayerWeights& lw : w.layers)
    for (const Matrix* m : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) f(*m);
  f(w.output);
}

template <typename F>
void for_each_norm(const Weights& w, F f) {
  for (const LayerWeights& lw : w.layers)
    for (const Vector* v : {&lw.attn_norm, &lw.q_norm, &lw.k_norm, &lw.attn_post_norm, &lw.ffn_norm,
                            &lw.ffn_post_norm})
      f(*v);
  f(w.output_norm);
}

template <typename F>
void for_each_bias(const Weights& w, F f) {
  for (const LayerWeights& lw : w.layers)
    for (const Vector* v : {&lw.bq, &lw.bk, &lw.bv}) f(*v);
}

int max_batch(const RunConfig& rc) { return std::max(1, rc.max_batch); }

}  // namespace

std::string vulkan_unsupported(const Config& cfg, const Weights& w, const RunConfig& rc, const Partition& part) {
  // Every model feature the shaders lack, named at once (gpt-oss: four of them).
  std::vector<std::string> lack;
  if (cfg.moe()) lack.push_back("mixture of experts");
  if (!w.layers.empty() && !w.layers[0].sinks.empty()) lack.push_back("attention sinks");
  if (!w.layers.empty() && !w.layers[0].bo.empty()) lack.push_back("an output-projection bias");
  if (!lack.empty()) {
    std::string list;
    for (size_t i = 0; i < lack.size(); ++i)
      list += (i == 0 ? "" : i + 1 == lack.size() ? " and " : ", ") + lack[i];
    return cfg.arch_name + " needs " + list + ", which the Vulkan backend does not run: use --device cpu";
  }
  if (rc.attn_bf16)
    return "--attn-bf16 is a CPU option (AVX512_BF16 tiles); the Vulkan shaders attend in F16/F32: drop "
           "--attn-bf16 (or use --device cpu)";
  if (rc.attention != AttentionMode::kFlash)
    return "the Vulkan backend runs flash attention only: use --flash-attn on (or --device cpu)";
  if (rc.kv_type != KvType::kF16)
    return std::string("the Vulkan backend keeps an f16 KV cache, not ") + kv_type_name(rc.kv_type) +
           ": use --kv-type f16 (or --device cpu)";
  if (cfg.head_dim % 2 != 0 || cfg.head_dim > vk::kMaxHeadDim)
    return "head_dim " + std::to_string(cfg.head_dim) + " is beyond the Vulkan attention kernels (even, <= " +
           std::to_string(vk::kMaxHeadDim) + "): use --device cpu";
  std::string bad;
  for_each_matrix(w, [&](const Matrix& m) {
    if (bad.empty() && m.rows > 0 && (!vk::supports_weight_type(m.type) || m.cols % 32 != 0))
      bad = std::string("a ") + tensor::type_name(m.type) + " matrix of " + std::to_string(m.cols) +
            " columns is not supported by the Vulkan kernels: use --device cpu";
  });
  return bad;
}

class VulkanBackend : public Backend {
 public:
  VulkanBackend(std::unique_ptr<vk::Device> dev, const Config& cfg, const Weights& w, const RunConfig& rc,
                const Partition& part)
      : dev_(std::move(dev)), cfg_(cfg), w_(w), rc_(rc), part_(part), cmd_(*dev_),
        q_dim_(part.n_heads * cfg.head_dim), kv_dim_(part.n_kv_heads * cfg.head_dim) {}

  // Uploads the weights and allocates the cache and the activations.
  util::Status init();

  std::string describe() const override { return vk::describe(dev_->info()); }
  void begin(const Segment* segs, int n_segs, int n, const float* x) override;
  void rmsnorm(Act out, Act in, const Vector& w, int n) override {
    cmd_.rmsnorm(buf(out), buf(in), vec(w), n, cfg_.dim, cfg_.rms_eps);
  }
  void linear(const Matrix& w, Act in, Act out, int n) override {
    cmd_.matmul(w.type, mat(w), w.rows, w.cols, buf(in), n, buf(out));
  }
  void head_norm(Act a, const Vector& w, int n) override {
    cmd_.rmsnorm(buf(a), buf(a), vec(w), int64_t(n) * heads(a), cfg_.head_dim, cfg_.rms_eps);
  }
  void rope(Act a, int layer, int n) override {
    cmd_.rope(buf(a), cfg_.is_swa(layer) ? rope_swa_ : rope_, n, heads(a), cfg_.head_dim, cfg_.n_rot, cfg_.rope_neox);
  }
  // Folded into attention's scale (AttentionShape::scale = q_scale): the same bits as the
  // CPU's scaled q for a power-of-two scale.
  void scale_queries(float, int) override {}
  void set_blocks(int slot, int from, std::span<const int32_t> blocks) override;
  bool kv_covers(int slot, int end) const override {
    return int64_t(tables_[size_t(slot)].size()) * kKvBlockRows >= end;
  }
  bool kv_copy(const KvCopy& c) override;
  void kv_store(int layer, const Segment* segs, int n_segs) override;
  void attention(int layer, const Segment* segs, int n_segs) override;
  void glu(Activation act, int n) override {
    if (act == Activation::kGelu)
      cmd_.geglu(gate_, gate_, up_, int64_t(n) * part_.n_ff);
    else
      cmd_.swiglu(gate_, gate_, up_, int64_t(n) * part_.n_ff);
  }
  void residual(int n) override { cmd_.add(x_, x_, proj_, int64_t(n) * cfg_.dim); }
  // The q, k, v biases (qwen2); only gpt-oss has an output-projection bias, and
  // vulkan_unsupported refuses it.
  void add_bias(Act a, const Vector& b, int n) override {
    CHECK_MSG(a == Act::kQ || a == Act::kK || a == Act::kV, "the Vulkan backend adds biases to q, k and v only");
    cmd_.add(buf(a), buf(a), vec(b), int64_t(n) * int64_t(b.size()));
  }
  util::Status moe(int layer, int n) override {
    return util::Status::error("mixture of experts is not supported by the Vulkan backend");  // refused at creation
  }
  util::Expected<ReduceSide> reduce_begin(Act in, int n, int cols, bool experts) override;
  util::Status reduce_end() override;
  util::Status end_batch(const Segment* segs, int n_segs, float* logits) override;

 private:
  class Local;  // LocalLinear on the device
  util::Status upload_weights();
  bool paged(int layer) const { return !cfg_.is_swa(layer); }
  // Layer l's K or V cache for slot, and the paging it is read through (null: a window
  // layer's contiguous per-slot cache).
  vk::Buffer& cache(bool v, int slot, int l) {
    std::vector<vk::Buffer>& c = v ? v_cache_ : k_cache_;
    return paged(l) ? c[size_t(l)] : c[size_t(cfg_.n_layers) * (1 + slot) + l];
  }
  const vk::KvPages* pages(int slot, int l) {
    if (!paged(l)) return nullptr;
    pages_.table = &table_dev_;
    pages_.table0 = slot * per_slot_;
    pages_.block_rows = kKvBlockRows;
    pages_.n_rows = n_blocks_ * kKvBlockRows;
    return &pages_;
  }
  vk::Buffer& buf(Act a);
  int heads(Act a) const { return a == Act::kQ ? part_.n_heads : part_.n_kv_heads; }  // of kQ or kK
  const vk::Buffer& mat(const Matrix& m) const { return weights_.at(m.data); }
  const vk::Buffer& vec(const Vector& v) const { return weights_.at(v.data()); }
  util::Status alloc(vk::Buffer* b, size_t bytes, const std::string& what) {
    auto r = dev_->alloc(bytes, what);
    if (!r) return r.status();
    *b = std::move(*r);
    return util::ok_status();
  }
  // y[b][w.rows] = W x[b] for n host rows x (w.cols floats each), on the device.
  util::Status host_linear(const Matrix& w, const float* x, int n, float* y, int64_t y_stride);

  std::unique_ptr<vk::Device> dev_;  // first: freed after every Buffer below
  const Config& cfg_;
  const Weights& w_;
  RunConfig rc_;
  Partition part_;
  vk::Commands cmd_;
  int q_dim_, kv_dim_;
  std::unordered_map<const void*, vk::Buffer> weights_;  // by the host data they copy
  // The KV cache, F16 (model/kv_cache.h's paged layout, issue 32): a full-attention layer l's
  // rows in [l]: [n_kv_heads][n_blocks * kKvBlockRows][head_dim], position p of a slot at row
  // table[p / kKvBlockRows] * kKvBlockRows + p % kKvBlockRows; a sliding-window layer keeps
  // a whole context per slot in [(1 + slot) * n_layers + l]: [n_kv_heads][ctx][head_dim].
  std::vector<vk::Buffer> k_cache_, v_cache_;
  int n_blocks_ = 0, per_slot_ = 0;          // the pool's blocks; table entries per slot
  std::vector<std::vector<int32_t>> tables_;  // [slot] block ids (the root's, set_blocks)
  std::vector<int32_t> table_host_;           // [slot][per_slot_] as uploaded to table_dev_
  vk::Buffer table_dev_;
  bool tables_dirty_ = true;
  vk::KvPages pages_;
  std::unordered_map<int32_t, std::vector<uint8_t>> host_;  // the host cache's entries (kv_copy)
  // Activations, B = max_batch rows.
  vk::Buffer x_, xn_, proj_;          // [B][dim]
  vk::Buffer q_, att_, seg_q_, seg_out_;  // [B][q_dim]; seg_*: one segment's rows (batches of several)
  vk::Buffer k_, v_, seg_k_, seg_v_;  // [B][kv_dim]
  vk::Buffer gate_, up_;              // [B][n_ff]
  vk::Buffer rope_, rope_swa_;        // [B][n_rot] (cos, sin) per row's position (windowed layers' base)
  vk::Buffer decode_scratch_;         // flash_decode's partial results
  vk::Buffer red_in_, red_out_;       // [B][widest reduce input], [B][dim]: Collective products
  vk::Buffer logits_in_, logits_out_;  // [B][dim] the rows asked for, [B][local n_vocab]
  std::vector<float> host_in_, host_out_, host_tmp_;  // reduce points: rows in host memory
  std::unique_ptr<LocalLinear> local_;                // an open reduce point's products (a Local)
  util::Status upload_st_;  // begin()'s uploads
};

util::Status VulkanBackend::init() {
  const size_t B = max_batch(rc_), D = cfg_.dim, F = std::max(1, part_.n_ff), f = sizeof(float);
  RETURN_IF_ERROR(upload_weights());
  // The pool and identity tables as model::KvCache's (slot s owns blocks [s * per_slot,
  // (s + 1) * per_slot) when the pool holds every slot's whole context).
  per_slot_ = kv_blocks_for(rc_.ctx);
  n_blocks_ = rc_.kv_blocks > 0 ? rc_.kv_blocks : rc_.n_slots * per_slot_;
  tables_.resize(size_t(rc_.n_slots));
  if (n_blocks_ >= rc_.n_slots * per_slot_)
    for (int s = 0; s < rc_.n_slots; ++s)
      for (int b = 0; b < per_slot_; ++b) tables_[size_t(s)].push_back(s * per_slot_ + b);
  table_host_.assign(size_t(rc_.n_slots) * per_slot_, 0);
  RETURN_IF_ERROR(alloc(&table_dev_, table_host_.size() * sizeof(int32_t), "KV block tables"));
  const size_t row_bytes = size_t(cfg_.head_dim) * 2, heads = size_t(std::max(1, part_.n_kv_heads));
  k_cache_.resize(size_t(cfg_.n_layers) * (1 + rc_.n_slots));
  v_cache_.resize(k_cache_.size());
  for (int l = 0; l < cfg_.n_layers; ++l)
    for (int s = 0; s < (paged(l) ? 1 : rc_.n_slots); ++s) {
      const size_t bytes = heads * row_bytes * (paged(l) ? size_t(n_blocks_) * kKvBlockRows : size_t(rc_.ctx));
      RETURN_IF_ERROR(alloc(&cache(false, s, l), bytes, "KV cache"));
      RETURN_IF_ERROR(alloc(&cache(true, s, l), bytes, "KV cache"));
    }
  const size_t qd = std::max(1, q_dim_), kd = std::max(1, kv_dim_);
  for (vk::Buffer* b : {&x_, &xn_, &proj_, &red_out_, &logits_in_}) RETURN_IF_ERROR(alloc(b, B * D * f, "activations"));
  for (vk::Buffer* b : {&q_, &att_, &seg_q_, &seg_out_}) RETURN_IF_ERROR(alloc(b, B * qd * f, "activations"));
  for (vk::Buffer* b : {&k_, &v_, &seg_k_, &seg_v_}) RETURN_IF_ERROR(alloc(b, B * kd * f, "activations"));
  for (vk::Buffer* b : {&gate_, &up_}) RETURN_IF_ERROR(alloc(b, B * F * f, "activations"));
  RETURN_IF_ERROR(alloc(&rope_, B * std::max(2, cfg_.n_rot) * f, "activations"));
  if (cfg_.n_swa > 0) RETURN_IF_ERROR(alloc(&rope_swa_, B * std::max(2, cfg_.n_rot) * f, "activations"));
  vk::AttentionShape a;
  a.n_heads = std::max(1, part_.n_heads);
  a.n_ctx = rc_.ctx;
  a.head_dim = cfg_.head_dim;
  RETURN_IF_ERROR(alloc(&decode_scratch_, vk::flash_decode_scratch_bytes(a), "attention scratch"));
  // A reduce point's input: this node's columns, or every node's (exact sync's gathers).
  const size_t widest = std::max<size_t>({size_t(cfg_.n_heads) * cfg_.head_dim, size_t(cfg_.n_ff), D});
  RETURN_IF_ERROR(alloc(&red_in_, B * widest * f, "activations"));
  RETURN_IF_ERROR(alloc(&logits_out_, B * std::max<size_t>(1, w_.output.rows) * f, "logits"));
  return util::ok_status();
}

util::Status VulkanBackend::upload_weights() {
  util::Status st;
  auto put = [&](const void* key, const void* data, size_t bytes, const std::string& what) {
    if (!st.ok() || bytes == 0 || weights_.count(key)) return;
    vk::Buffer b;
    st = alloc(&b, bytes, what);
    if (st.ok()) st = dev_->upload(b, data, bytes);
    if (st.ok()) weights_.emplace(key, std::move(b));
  };
  for_each_matrix(w_, [&](const Matrix& m) {
    put(m.data, m.data, m.bytes(), "a " + std::to_string(m.rows) + " x " + std::to_string(m.cols) + " weight");
  });
  for_each_norm(w_, [&](const Vector& v) { put(v.data(), v.data(), v.size() * sizeof(float), "a norm"); });
  const size_t B = max_batch(rc_);
  for_each_bias(w_, [&](const Vector& v) {  // tiled: one copy per batch row, for add()
    std::vector<float> tiled(B * v.size());
    for (size_t b = 0; b < B; ++b) std::copy(v.begin(), v.end(), tiled.begin() + b * v.size());
    put(v.data(), tiled.data(), tiled.size() * sizeof(float), "a bias");
  });
  return st;
}

vk::Buffer& VulkanBackend::buf(Act a) {
  switch (a) {
    case Act::kX: return x_;
    case Act::kXn: return xn_;
    case Act::kQ: return q_;
    case Act::kK: return k_;
    case Act::kV: return v_;
    case Act::kAtt: return att_;
    case Act::kGate: return gate_;
    case Act::kUp: return up_;
    case Act::kProj: return proj_;
  }
  return x_;
}

void VulkanBackend::begin(const Segment* segs, int n_segs, int n, const float* x) {
  const Config& c = cfg_;
  std::vector<float> rope(size_t(n) * c.n_rot), rope_swa(c.n_swa > 0 ? rope.size() : 0);
  for (int s = 0, b = 0; s < n_segs; ++s)  // the host's tables, as the CPU's (YaRN)
    for (int t = 0; t < segs[s].n; ++t, ++b)
      rope_row(c, w_, segs[s].pos + t, &rope[size_t(b) * c.n_rot],
               rope_swa.empty() ? nullptr : &rope_swa[size_t(b) * c.n_rot]);
  // gemma: the embedded rows times sqrt(dim), on the host as the CPU backend does.
  std::vector<float> scaled;
  if (c.embed_scale != 1.0f) {
    scaled.assign(x, x + size_t(n) * c.dim);
    for (float& v : scaled) v *= c.embed_scale;
    x = scaled.data();
  }
  // Nothing is in flight between batches (end_batch waits), so these copies are safe; a
  // failure is returned by the batch's next reduce point or end_batch.
  upload_st_ = dev_->upload(x_, x, sizeof(float) * n * c.dim);
  if (upload_st_.ok() && tables_dirty_) {  // the block tables, when set_blocks changed one
    for (size_t s = 0; s < tables_.size(); ++s) {
      const std::vector<int32_t>& t = tables_[s];
      std::copy(t.begin(), t.begin() + std::min<size_t>(t.size(), size_t(per_slot_)),
                table_host_.begin() + s * per_slot_);
    }
    upload_st_ = dev_->upload(table_dev_, table_host_.data(), sizeof(int32_t) * table_host_.size());
    tables_dirty_ = !upload_st_.ok();
  }
  if (upload_st_.ok()) upload_st_ = dev_->upload(rope_, rope.data(), sizeof(float) * rope.size());
  if (upload_st_.ok() && !rope_swa.empty())
    upload_st_ = dev_->upload(rope_swa_, rope_swa.data(), sizeof(float) * rope_swa.size());
}

void VulkanBackend::kv_store(int l, const Segment* segs, int n_segs) {
  const Config& c = cfg_;
  const int hd = c.head_dim, nkv = part_.n_kv_heads;
  const size_t kb = sizeof(float) * kv_dim_;
  for (int s = 0, row = 0; s < n_segs; row += segs[s].n, ++s) {
    const Segment& g = segs[s];
    // The kernels read rows from offset 0: a batch of several segments copies each one's.
    const bool alone = n_segs == 1;
    vk::Buffer &k = alone ? k_ : seg_k_, &v = alone ? v_ : seg_v_;
    if (!alone) {
      cmd_.copy(seg_k_, 0, k_, row * kb, g.n * kb);
      cmd_.copy(seg_v_, 0, v_, row * kb, g.n * kb);
    }
    cmd_.kv_store(cache(false, g.slot, l), k, g.n, g.pos, nkv, hd, rc_.ctx, pages(g.slot, l));
    cmd_.kv_store(cache(true, g.slot, l), v, g.n, g.pos, nkv, hd, rc_.ctx, pages(g.slot, l));
  }
}

void VulkanBackend::attention(int l, const Segment* segs, int n_segs) {
  const Config& c = cfg_;
  const int hd = c.head_dim, nh = part_.n_heads, nkv = part_.n_kv_heads;
  const size_t qb = sizeof(float) * q_dim_;
  for (int s = 0, row = 0; s < n_segs; row += segs[s].n, ++s) {
    const Segment& g = segs[s];
    // The kernels read rows from offset 0: a batch of several segments copies each one's.
    const bool alone = n_segs == 1;
    vk::Buffer& q = alone ? q_ : seg_q_;
    vk::Buffer& out = alone ? att_ : seg_out_;
    if (!alone) cmd_.copy(seg_q_, 0, q_, row * qb, g.n * qb);
    vk::Buffer& kc = cache(false, g.slot, l);
    vk::Buffer& vc = cache(true, g.slot, l);
    vk::AttentionShape a;
    a.n_q = g.n;
    a.pos0 = g.pos;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.n_ctx = rc_.ctx;
    // Gemma 3's query scale on the scores (scale_queries: the CPU scales q before its F16
    // rounding, the same bits for its power-of-two scales), else llama.cpp's kq_scale.
    a.scale = c.q_scale > 0 ? c.q_scale : 1.0f / std::sqrt(float(hd));
    a.window = c.is_swa(l) ? c.n_swa : 0;  // the full per-slot cache, masked to the window
    a.group = c.n_heads / c.n_kv_heads;  // a slice may start or end inside a KV group
    a.head_offset = part_.head_begin - part_.kv_begin * a.group;
    if (g.n == 1)
      cmd_.flash_decode(a, q, kc, vc, decode_scratch_, out, pages(g.slot, l));
    else
      cmd_.flash_attention(a, q, kc, vc, out, pages(g.slot, l));
    if (!alone) cmd_.copy(att_, row * qb, seg_out_, 0, g.n * qb);
  }
}

void VulkanBackend::set_blocks(int slot, int from, std::span<const int32_t> blocks) {
  CHECK(slot >= 0 && slot < rc_.n_slots && from >= 0);
  std::vector<int32_t>& t = tables_[size_t(slot)];
  t.resize(size_t(from), 0);
  for (int32_t b : blocks) {
    CHECK(b >= 0 && b < n_blocks_);
    t.push_back(b);
  }
  tables_dirty_ = true;  // (entries past ctx / 64 are never read: begin uploads per_slot_ of each)
}

// As KvCache::copy: an entry holds the block's run of each full layer's KV head plane, K
// then V, copied between the device and host memory (nothing is in flight between steps).
bool VulkanBackend::kv_copy(const KvCopy& c) {
  const size_t run = size_t(kKvBlockRows) * cfg_.head_dim * 2, heads = size_t(std::max(1, part_.n_kv_heads));
  size_t n = 0;
  for (int l = 0; l < cfg_.n_layers; ++l) n += paged(l) ? heads * run : 0;
  auto it = host_.find(c.entry);
  // Each (layer, head) run of the block: fn(K or V buffer, its offset, the entry's offset).
  const auto each_run = [&](auto&& fn) {
    util::Status st = util::ok_status();
    size_t e = 0;
    for (int l = 0; l < cfg_.n_layers && st.ok(); ++l) {
      if (!paged(l)) continue;
      for (size_t h = 0; h < heads && st.ok(); ++h, e += run) {
        const size_t o = (h * size_t(n_blocks_) + size_t(c.block)) * run;
        st = fn(k_cache_[size_t(l)], o, e);
        if (st.ok()) st = fn(v_cache_[size_t(l)], o, n + e);
      }
    }
    return st.ok();
  };
  switch (c.kind) {
    case KvCopy::Kind::kSave: {
      if (it != host_.end() || c.block < 0 || c.block >= n_blocks_) return false;
      std::vector<uint8_t>& entry = host_[c.entry];
      entry.resize(2 * n);
      return each_run([&](vk::Buffer& b, size_t o, size_t at) { return dev_->download(b, entry.data() + at, run, o); });
    }
    case KvCopy::Kind::kRestore: {
      if (it == host_.end() || c.block < 0 || c.block >= n_blocks_) return false;
      const bool ok = each_run(
          [&](vk::Buffer& b, size_t o, size_t at) { return dev_->upload(b, it->second.data() + at, run, o); });
      host_.erase(it);
      return ok;
    }
    case KvCopy::Kind::kForget:
      if (it == host_.end()) return false;
      host_.erase(it);
      return true;
  }
  return false;
}

// The Collective's products of this node: x and y in host memory, the product on the device.
class VulkanBackend::Local : public LocalLinear {
 public:
  Local(VulkanBackend& be, int n) : be_(be), n_(n) {}
  int rows() const override { return n_; }
  void linear(const Matrix& w, const float* x, float* y, int64_t y_stride) override {
    if (st_.ok()) st_ = be_.host_linear(w, x, n_, y, y_stride);
  }
  // The gathered activations in w's vec_dot_type, decoded to F32 (the device multiplies F32).
  void linear_quantized(const Matrix& w, const void* xq, size_t xq_stride, float* y, int64_t y_stride) override {
    const tensor::Type vt = tensor::traits(w.type).vec_dot_type;
    std::vector<float> x(size_t(n_) * w.cols);
    for (int b = 0; b < n_; ++b)
      tensor::dequantize_row(vt, static_cast<const uint8_t*>(xq) + b * xq_stride, &x[size_t(b) * w.cols], w.cols);
    linear(w, x.data(), y, y_stride);
  }
  const util::Status& status() const { return st_; }

 private:
  VulkanBackend& be_;
  int n_;
  util::Status st_;
};

util::Status VulkanBackend::host_linear(const Matrix& w, const float* x, int n, float* y, int64_t y_stride) {
  RETURN_IF_ERROR(dev_->upload(red_in_, x, sizeof(float) * n * w.cols));
  cmd_.matmul(w.type, mat(w), w.rows, w.cols, red_in_, n, red_out_);
  RETURN_IF_ERROR(cmd_.submit_and_wait());
  host_tmp_.resize(size_t(n) * w.rows);
  RETURN_IF_ERROR(dev_->download(red_out_, host_tmp_.data(), sizeof(float) * host_tmp_.size()));
  for (int b = 0; b < n; ++b)
    std::memcpy(y + b * y_stride, &host_tmp_[size_t(b) * w.rows], sizeof(float) * w.rows);
  return util::ok_status();
}

util::Expected<Backend::ReduceSide> VulkanBackend::reduce_begin(Act in, int n, int cols, bool experts) {
  if (experts) return util::Status::error("mixture of experts is not supported by the Vulkan backend");
  RETURN_IF_ERROR(upload_st_);
  RETURN_IF_ERROR(cmd_.submit_and_wait());
  host_in_.resize(size_t(n) * std::max(1, cols));
  host_out_.resize(size_t(n) * cfg_.dim);
  if (cols > 0) RETURN_IF_ERROR(dev_->download(buf(in), host_in_.data(), sizeof(float) * n * cols));
  local_ = std::make_unique<Local>(*this, n);
  return ReduceSide{host_in_.data(), host_out_.data(), local_.get()};
}

util::Status VulkanBackend::reduce_end() {
  const util::Status st = local_ ? static_cast<Local&>(*local_).status() : util::ok_status();
  local_.reset();
  RETURN_IF_ERROR(st);
  return dev_->upload(proj_, host_out_.data(), sizeof(float) * host_out_.size());
}

util::Status VulkanBackend::end_batch(const Segment* segs, int n_segs, float* logits) {
  RETURN_IF_ERROR(upload_st_);
  if (!logits) return cmd_.submit_and_wait();
  const size_t rb = sizeof(float) * cfg_.dim;
  int rows = 0, row = 0;
  for (int s = 0; s < n_segs; row += segs[s].n, ++s) {  // the rows asked for, packed
    const Segment& g = segs[s];
    const auto [first, k] = logit_rows(g);
    cmd_.copy(logits_in_, rows * rb, x_, (row + first) * rb, k * rb);
    rows += k;
  }
  if (rows == 0) return cmd_.submit_and_wait();
  const Matrix& out = w_.output;
  cmd_.rmsnorm(logits_in_, logits_in_, vec(w_.output_norm), rows, cfg_.dim, cfg_.rms_eps);
  cmd_.matmul(out.type, mat(out), out.rows, out.cols, logits_in_, rows, logits_out_);
  RETURN_IF_ERROR(cmd_.submit_and_wait());
  RETURN_IF_ERROR(dev_->download(logits_out_, logits, sizeof(float) * rows * out.rows));
  if (cfg_.logit_softcap > 0) {  // cap * tanh(logits / cap), on the host as the CPU backend
    const float inv = 1.0f / cfg_.logit_softcap;
    for (size_t i = 0; i < size_t(rows) * out.rows; ++i) logits[i] = std::tanh(logits[i] * inv) * cfg_.logit_softcap;
  }
  return util::ok_status();
}

util::Expected<std::unique_ptr<Backend>> make_vulkan_backend(int index, const Config& cfg, const Weights& w,
                                                             const RunConfig& rc, const Partition& part) {
  auto dev = vk::Device::open(index);
  if (!dev) return dev.status();
  if (std::string why = vulkan_unsupported(cfg, w, rc, part); !why.empty())
    return util::Status::error("Vulkan device " + std::to_string(index) + " (" + (*dev)->info().name + "): " + why);
  // Everything the backend allocates: the weights it reads, the KV cache and the batch's
  // buffers (the widest ones: activations of every kind, logits).
  uint64_t weights = 0;
  for_each_matrix(w, [&](const Matrix& m) { weights += m.bytes(); });
  // The KV cache: the pool's blocks of the full-attention layers, a whole context per slot
  // of the sliding-window ones (VulkanBackend::k_cache_).
  const int n_blocks = rc.kv_blocks > 0 ? rc.kv_blocks : rc.n_slots * kv_blocks_for(rc.ctx);
  uint64_t kv = 0;
  for (int l = 0; l < cfg.n_layers; ++l)
    kv += uint64_t(KvCache::bytes_per_position(1, part.n_kv_heads, cfg.head_dim, KvType::kF16)) *
          (cfg.is_swa(l) ? uint64_t(rc.ctx) * rc.n_slots : uint64_t(n_blocks) * kKvBlockRows);
  const uint64_t acts = uint64_t(max_batch(rc)) * sizeof(float) *
                        (8 * uint64_t(cfg.dim) + 4 * uint64_t(cfg.n_heads) * cfg.head_dim + 2 * uint64_t(cfg.n_ff) +
                         uint64_t(w.output.rows));
  RETURN_IF_ERROR((*dev)->check_fits(weights + kv + acts, "the model (" + std::to_string(weights >> 20) +
                                                             " MiB of weights, " + std::to_string(kv >> 20) +
                                                             " MiB of KV cache and the activations)"));
  auto be = std::make_unique<VulkanBackend>(std::move(*dev), cfg, w, rc, part);
  RETURN_IF_ERROR(be->init());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace model
