// kv_cache.h: per-layer key and value cache for the KV heads a node owns, F16 by default
// (F32 optional). Layout [layer][kv_head][pos][head_dim] so one head's keys are contiguous.
// Deliberately dumb storage: attention math lives in the transformer and kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "util/check.h"
#include "util/fp16.h"

namespace model {

enum class KvType { kF16, kF32 };

class KvCache {
 public:
  KvCache(int n_layers, int n_kv_heads, int head_dim, int ctx, KvType type)
      : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), ctx_(ctx), type_(type) {
    const size_t n = size_t(n_layers) * n_kv_heads * ctx * head_dim;
    if (type == KvType::kF16) {
      k16_.resize(n);
      v16_.resize(n);
    } else {
      k32_.resize(n);
      v32_.resize(n);
    }
  }
  int ctx() const { return ctx_; }
  KvType type() const { return type_; }
  size_t offset(int layer, int head, int pos) const {
    return ((size_t(layer) * n_kv_heads_ + head) * ctx_ + pos) * head_dim_;
  }
  void store(int layer, int head, int pos, const float* k, const float* v) {
    CHECK(pos >= 0 && pos < ctx_);
    const size_t o = offset(layer, head, pos);
    for (int i = 0; i < head_dim_; ++i) {
      if (type_ == KvType::kF16) {
        k16_[o + i] = util::f32_to_fp16(k[i]);
        v16_[o + i] = util::f32_to_fp16(v[i]);
      } else {
        k32_[o + i] = k[i];
        v32_[o + i] = v[i];
      }
    }
  }
  const uint16_t* k16(size_t o) const { return k16_.data() + o; }
  const uint16_t* v16(size_t o) const { return v16_.data() + o; }
  const float* k32(size_t o) const { return k32_.data() + o; }
  const float* v32(size_t o) const { return v32_.data() + o; }
  size_t bytes() const { return (k16_.size() + v16_.size()) * 2 + (k32_.size() + v32_.size()) * 4; }

 private:
  int n_layers_, n_kv_heads_, head_dim_, ctx_;
  KvType type_;
  std::vector<uint16_t> k16_, v16_;
  std::vector<float> k32_, v32_;
};

}  // namespace model
