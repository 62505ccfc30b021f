// kv_cache.h: per-layer key and value cache for the KV heads a node owns, F16 by default,
// F32 or Q8_0 (blocks of 32, as ggml) optional, in n_slots independent slots of ctx
// positions each (one slot per sequence that runs at once). Layout
// [slot][layer][kv_head][pos][row] so one head's rows of one slot are contiguous (row_bytes
// apart), which is what kernels::KvHeadView reads: a slot is exactly the cache one
// sequence had alone, so attention reads the same bytes whatever else runs.
// Deliberately dumb storage: attention math lives in the transformer and kernels; which
// positions of a slot are valid is the runtime's sequence bookkeeping.
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "util/check.h"
#include "util/fp16.h"

namespace model {

enum class KvType { kF16, kF32, kQ8_0 };

inline const char* kv_type_name(KvType t) {
  return t == KvType::kF16 ? "f16" : t == KvType::kF32 ? "f32" : "q8_0";
}
inline kernels::KvFormat kv_format(KvType t) {
  return t == KvType::kF16 ? kernels::KvFormat::kF16
                           : t == KvType::kF32 ? kernels::KvFormat::kF32 : kernels::KvFormat::kQ8_0;
}

class KvCache {
 public:
  // A Q8_0 cache needs head_dim % 32 == 0 (callers check and report it). layer_ctx (empty:
  // ctx for every layer) gives a layer fewer positions: a sliding-window layer keeps only
  // the last layer_ctx[l] positions, position p in row p % layer_ctx[l] (a ring).
  KvCache(int n_layers, int n_kv_heads, int head_dim, int ctx, KvType type, int n_slots = 1,
          std::vector<int> layer_ctx = {})
      : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), ctx_(ctx), n_slots_(n_slots), type_(type),
        row_bytes_(kernels::kv_row_bytes(kv_format(type), head_dim)), layer_ctx_(std::move(layer_ctx)) {
    CHECK(n_slots >= 1);
    if (layer_ctx_.empty()) layer_ctx_.assign(n_layers, ctx);
    CHECK(int(layer_ctx_.size()) == n_layers);
    for (int c : layer_ctx_) {
      CHECK(c >= 1 && c <= ctx);
      layer_row0_.push_back(slot_rows_);
      slot_rows_ += size_t(n_kv_heads) * c;
    }
    const size_t n = size_t(n_slots) * slot_rows_ * row_bytes_;
    k_.resize(n);
    v_.resize(n);
  }
  int ctx() const { return ctx_; }  // positions per slot
  int layer_ctx(int layer) const { return layer_ctx_[layer]; }  // rows a layer keeps (<= ctx)
  int n_slots() const { return n_slots_; }
  KvType type() const { return type_; }
  size_t row_bytes() const { return row_bytes_; }
  // Bytes of one position of one slot (all layers and local KV heads, K and V).
  static size_t bytes_per_position(int n_layers, int n_kv_heads, int head_dim, KvType type) {
    return size_t(2) * n_layers * n_kv_heads * kernels::kv_row_bytes(kv_format(type), head_dim);
  }
  // Byte offset of (slot, layer, head, pos)'s row.
  size_t offset(int slot, int layer, int head, int pos) const {
    const int c = layer_ctx_[layer];
    return (size_t(slot) * slot_rows_ + layer_row0_[layer] + size_t(head) * c + pos % c) * row_bytes_;
  }
  void store(int slot, int layer, int head, int pos, const float* k, const float* v) {
    CHECK(pos >= 0 && pos < ctx_ && slot >= 0 && slot < n_slots_);
    const size_t o = offset(slot, layer, head, pos);
    if (type_ == KvType::kF16) {  // util's rounding: the exact path's (llama.cpp's) F16 cache
      auto* kd = reinterpret_cast<uint16_t*>(k_.data() + o);
      auto* vd = reinterpret_cast<uint16_t*>(v_.data() + o);
      for (int i = 0; i < head_dim_; ++i) kd[i] = util::f32_to_fp16(k[i]), vd[i] = util::f32_to_fp16(v[i]);
    } else {
      kernels::kv_store_row(kv_format(type_), k, k_.data() + o, head_dim_);
      kernels::kv_store_row(kv_format(type_), v, v_.data() + o, head_dim_);
    }
  }
  // One KV head's rows of a layer in one slot, for kernels::flash_attention (a windowed
  // layer's ring as a ring).
  kernels::KvHeadView view(int slot, int layer, int head) const {
    const size_t o = offset(slot, layer, head, 0);
    const int ring = layer_ctx_[layer] < ctx_ ? layer_ctx_[layer] : 0;
    return {kv_format(type_), k_.data() + o, v_.data() + o, row_bytes_, ring};
  }
  // Element access of the exact (naive) path; o from offset().
  const uint16_t* k16(size_t o) const { return reinterpret_cast<const uint16_t*>(k_.data() + o); }
  const uint16_t* v16(size_t o) const { return reinterpret_cast<const uint16_t*>(v_.data() + o); }
  const float* k32(size_t o) const { return reinterpret_cast<const float*>(k_.data() + o); }
  const float* v32(size_t o) const { return reinterpret_cast<const float*>(v_.data() + o); }
  size_t bytes() const { return k_.size() + v_.size(); }

 private:
  // std::vector<uint8_t> storage from operator new: aligned for floats.
  int n_layers_, n_kv_heads_, head_dim_, ctx_, n_slots_;
  KvType type_;
  size_t row_bytes_;
  std::vector<int> layer_ctx_;     // [layer] rows kept
  std::vector<size_t> layer_row0_;  // [layer] first row of the layer within a slot
  size_t slot_rows_ = 0;           // rows of one slot (all layers and heads)
  std::vector<uint8_t> k_, v_;
};

}  // namespace model
