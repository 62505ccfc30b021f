// kv_cache.h: per-layer key and value cache for the KV heads a node owns, F16 by default,
// F32 or Q8_0 (blocks of 32, as ggml) optional, paged (issue 32).
// Layers that keep every position (full attention) store their rows in one pool of
// n_blocks blocks of kKvBlockRows positions each, laid out [layer][kv_head][block][pos][row]
// (a layer's head is one plane of every block, so a sequence whose blocks were taken in
// order reads one contiguous run, as from a slot: [block][layer][head] decoded 10-25 %
// slower at 1k positions on SmolLM2, each 8 KiB tile a jump for the prefetcher);
// each sequence (slot, at most n_slots of them) has a block table: position p of slot s is
// row p % kKvBlockRows of block table(s)[p / kKvBlockRows]. Sliding-window layers keep
// their ring per slot as before ([slot][layer][kv_head][pos % ring][row]): a window is
// small and fixed, so paging it would save nothing.
// Attention reads through the table (kernels::KvHeadView's blocks): a block is a multiple of
// the flash kernel's KV tile, so every tile is one contiguous run of rows and the kernels
// read the same bytes in the same order as from one contiguous slot: a row's result does
// not depend on where its blocks are.
// Who decides the tables: on a cluster the root (runtime/kv_blocks.h), carried in every step
// (set_blocks) so that every node's tables are identical by construction. Used alone (tests,
// tools), a cache whose pool holds n_slots full contexts starts with identity tables (slot s
// owns blocks [s * per_slot, (s + 1) * per_slot)): exactly the old slot layout.
// The host cache (--cache-ram): copies of blocks evicted from the pool, by entry id, saved
// and restored as the root's steps say (KvCopy); each node keeps its own KV heads' share.
// Deliberately dumb storage: attention math lives in the transformer and kernels; which
// positions of a slot are valid is the runtime's sequence bookkeeping.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "util/check.h"
#include "util/fp16.h"
#include "util/zeroed_buffer.h"

namespace model {

enum class KvType { kF16, kF32, kQ8_0 };

// Positions per KV block: one flash-attention KV tile (kernels/attention.cc's kKvTile); see
// docs/ARCHITECTURE.md for the measurement that chose it.
constexpr int kKvBlockRows = 64;
inline int kv_blocks_for(int positions) { return (positions + kKvBlockRows - 1) / kKvBlockRows; }

inline const char* kv_type_name(KvType t) {
  return t == KvType::kF16 ? "f16" : t == KvType::kF32 ? "f32" : "q8_0";
}
inline kernels::KvFormat kv_format(KvType t) {
  return t == KvType::kF16 ? kernels::KvFormat::kF16
                           : t == KvType::kF32 ? kernels::KvFormat::kF32 : kernels::KvFormat::kQ8_0;
}

// A copy between the pool and this node's host cache (--cache-ram, issue 32 step 4), in
// a step's order, before its rows: save block's rows (every full layer and local KV head, K
// and V) as host entry `entry`; restore entry into block (the entry then goes); forget entry.
struct KvCopy {
  enum class Kind : uint8_t { kSave = 0, kRestore = 1, kForget = 2 };
  Kind kind = Kind::kSave;
  int32_t block = 0;  // kSave, kRestore
  int32_t entry = 0;  // >= 0
  bool operator==(const KvCopy&) const = default;
};

class KvCache {
 public:
  // A Q8_0 cache needs head_dim % 32 == 0 (callers check and report it). layer_ctx (empty:
  // ctx for every layer) gives a layer fewer positions: a sliding-window layer keeps only
  // the last layer_ctx[l] positions, position p in row p % layer_ctx[l] (a ring, per slot).
  // n_blocks: the pool's blocks; 0: n_slots full contexts (identity tables).
  KvCache(int n_layers, int n_kv_heads, int head_dim, int ctx, KvType type, int n_slots = 1,
          std::vector<int> layer_ctx = {}, int n_blocks = 0)
      : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), ctx_(ctx), n_slots_(n_slots), type_(type),
        row_bytes_(kernels::kv_row_bytes(kv_format(type), head_dim)), layer_ctx_(std::move(layer_ctx)) {
    CHECK(n_slots >= 1 && n_blocks >= 0);
    if (layer_ctx_.empty()) layer_ctx_.assign(n_layers, ctx);
    CHECK(int(layer_ctx_.size()) == n_layers);
    for (int c : layer_ctx_) {
      CHECK(c >= 1 && c <= ctx);
      if (c == ctx) {
        layer_row0_.push_back(block_rows_);
        block_rows_ += size_t(n_kv_heads) * kKvBlockRows;
      } else {
        layer_row0_.push_back(ring_rows_);
        ring_rows_ += size_t(n_kv_heads) * c;
      }
    }
    const int per_slot = kv_blocks_for(ctx);
    n_blocks_ = n_blocks > 0 ? n_blocks : n_slots * per_slot;
    tables_.resize(size_t(n_slots));
    if (n_blocks_ >= n_slots * per_slot)
      for (int s = 0; s < n_slots; ++s)
        for (int b = 0; b < per_slot; ++b) tables_[size_t(s)].push_back(s * per_slot + b);
    pool_rows_ = size_t(n_blocks_) * block_rows_;
    const size_t n = (pool_rows_ + size_t(n_slots) * ring_rows_) * row_bytes_;
    k_ = util::ZeroedBuffer(n);  // zeros, committed only where written (util/zeroed_buffer.h)
    v_ = util::ZeroedBuffer(n);
  }
  int ctx() const { return ctx_; }  // positions per slot
  int layer_ctx(int layer) const { return layer_ctx_[layer]; }  // rows a layer keeps (<= ctx)
  int n_slots() const { return n_slots_; }
  int n_blocks() const { return n_blocks_; }
  KvType type() const { return type_; }
  size_t row_bytes() const { return row_bytes_; }
  // Bytes of one position of one slot (all layers and local KV heads, K and V).
  static size_t bytes_per_position(int n_layers, int n_kv_heads, int head_dim, KvType type) {
    return size_t(2) * n_layers * n_kv_heads * kernels::kv_row_bytes(kv_format(type), head_dim);
  }
  // Bytes a cache of these arguments holds (the constructor's allocation).
  static size_t bytes_for(int n_kv_heads, int head_dim, int ctx, KvType type, int n_slots,
                          const std::vector<int>& layer_ctx, int n_blocks) {
    if (n_blocks <= 0) n_blocks = n_slots * kv_blocks_for(ctx);
    size_t block = 0, ring = 0;
    for (int c : layer_ctx) (c >= ctx ? block : ring) += size_t(n_kv_heads) * (c >= ctx ? kKvBlockRows : c);
    return 2 * (size_t(n_blocks) * block + size_t(n_slots) * ring) * kernels::kv_row_bytes(kv_format(type), head_dim);
  }
  // Bytes of one block (its rows of every full layer and local KV head, K and V).
  size_t block_bytes() const { return 2 * block_rows_ * row_bytes_; }

  // Slot's block table from entry `from` on: entries [from, from + blocks.size()) set, the
  // table cut after them (a gap before `from` reads block 0). Block ids are < n_blocks()
  // (the step's parser checks it).
  void set_blocks(int slot, int from, std::span<const int32_t> blocks) {
    CHECK(slot >= 0 && slot < n_slots_ && from >= 0);
    std::vector<int32_t>& t = tables_[size_t(slot)];
    t.resize(size_t(from), 0);
    for (int32_t b : blocks) {
      CHECK(b >= 0 && b < n_blocks_);
      t.push_back(b);
    }
  }
  const std::vector<int32_t>& table(int slot) const { return tables_[size_t(slot)]; }
  // The host cache (KvCopy): false when an entry to restore or forget is not here, or one
  // to save is (the root's bookkeeping and this node's disagree: the step fails).
  // An entry holds the block's run of each full layer's head plane, K then V.
  bool copy(const KvCopy& c) {
    const size_t run = size_t(kKvBlockRows) * row_bytes_, n = block_rows_ * row_bytes_;
    auto it = host_.find(c.entry);
    // Each (layer, head) plane's run of the block, in the entry at e (K) and e + n (V).
    const auto each_run = [&](auto&& fn) {
      size_t e = 0;
      for (size_t l = 0; l < layer_ctx_.size(); ++l) {
        if (layer_ctx_[l] < ctx_) continue;
        for (int h = 0; h < n_kv_heads_; ++h, e += run)
          fn((layer_row0_[l] * size_t(n_blocks_) + (size_t(h) * n_blocks_ + size_t(c.block)) * kKvBlockRows) *
                 row_bytes_, e);
      }
    };
    switch (c.kind) {
      case KvCopy::Kind::kSave: {
        if (it != host_.end() || c.block < 0 || c.block >= n_blocks_) return false;
        std::vector<uint8_t>& e = host_[c.entry];
        e.resize(2 * n);
        each_run([&](size_t o, size_t at) {
          std::memcpy(e.data() + at, k_.data() + o, run);
          std::memcpy(e.data() + n + at, v_.data() + o, run);
        });
        return true;
      }
      case KvCopy::Kind::kRestore:
        if (it == host_.end() || c.block < 0 || c.block >= n_blocks_) return false;
        each_run([&](size_t o, size_t at) {
          std::memcpy(k_.data() + o, it->second.data() + at, run);
          std::memcpy(v_.data() + o, it->second.data() + n + at, run);
        });
        host_.erase(it);
        return true;
      case KvCopy::Kind::kForget:
        if (it == host_.end()) return false;
        host_.erase(it);
        return true;
    }
    return false;
  }
  size_t host_entries() const { return host_.size(); }
  // Whether slot's table covers positions [0, end) (forward_batch's check).
  bool covers(int slot, int end) const { return int64_t(tables_[size_t(slot)].size()) * kKvBlockRows >= end; }

  // Byte offset of (slot, layer, head, pos)'s row; a full layer's pos must be covered.
  size_t offset(int slot, int layer, int head, int pos) const {
    const int c = layer_ctx_[layer];
    if (c < ctx_)
      return (pool_rows_ + size_t(slot) * ring_rows_ + layer_row0_[layer] + size_t(head) * c + pos % c) * row_bytes_;
    const size_t blk = size_t(tables_[size_t(slot)][size_t(pos / kKvBlockRows)]);
    return (layer_row0_[layer] * size_t(n_blocks_) + (size_t(head) * n_blocks_ + blk) * kKvBlockRows +
            pos % kKvBlockRows) * row_bytes_;
  }
  void store(int slot, int layer, int head, int pos, const float* k, const float* v) {
    CHECK(pos >= 0 && pos < ctx_ && slot >= 0 && slot < n_slots_);
    CHECK(layer_ctx_[layer] < ctx_ || covers(slot, pos + 1));
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
  // One KV head's rows of a layer in one slot, for kernels::flash_attention: a windowed
  // layer's ring as a ring, a full layer's rows through the slot's block table (valid until
  // the table next changes).
  kernels::KvHeadView view(int slot, int layer, int head) const {
    if (layer_ctx_[layer] < ctx_) {
      const size_t o = offset(slot, layer, head, 0);
      return {kv_format(type_), k_.data() + o, v_.data() + o, row_bytes_, layer_ctx_[layer]};
    }
    const size_t o = (layer_row0_[layer] * size_t(n_blocks_) + size_t(head) * n_blocks_ * kKvBlockRows) * row_bytes_;
    kernels::KvHeadView v{kv_format(type_), k_.data() + o, v_.data() + o, row_bytes_};
    v.blocks = tables_[size_t(slot)].data();
    v.block_rows = kKvBlockRows;
    v.block_stride = size_t(kKvBlockRows) * row_bytes_;
    return v;
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
  std::vector<int> layer_ctx_;      // [layer] rows kept
  std::vector<size_t> layer_row0_;  // [layer] first row: per block (full: the pool's rows are
                                    // layer_row0_ * n_blocks on) or within a slot's rings
  size_t block_rows_ = 0;           // rows of one block (all full layers and heads)
  size_t ring_rows_ = 0;            // rows of one slot's rings (all window layers and heads)
  int n_blocks_ = 0;
  size_t pool_rows_ = 0;            // n_blocks * block_rows_; the rings follow
  std::vector<std::vector<int32_t>> tables_;  // [slot] block ids
  util::ZeroedBuffer k_, v_;
  std::unordered_map<int32_t, std::vector<uint8_t>> host_;  // host cache entries: K rows, then V
};

}  // namespace model
