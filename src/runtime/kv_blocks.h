// kv_blocks.h: the root's allocation of the paged KV cache (model/kv_cache.h, issue 32).
// One pool of n_blocks blocks of model::kKvBlockRows positions, shared by every slot; each
// slot has a block table that only grows (positions past a truncation keep their blocks,
// which the next rows overwrite) until the slot is released. The root decides every
// allocation here and each step carries, per segment, the table entries of the blocks the
// segment writes (entries()), so every node's tables are identical by construction and a
// replay (recovery) rebuilds them with the rows.
// Deliberately no policy: which slot to release when the pool is short is the scheduler's.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/kv_cache.h"
#include "util/check.h"

namespace runtime {

class BlockPool {
 public:
  BlockPool(int n_blocks, int n_slots) : n_blocks_(n_blocks), tables_(size_t(n_slots)) {
    CHECK(n_blocks >= 1 && n_slots >= 1);
    for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 first
  }
  int n_blocks() const { return n_blocks_; }
  int free_blocks() const { return int(free_.size()); }
  int used_blocks() const { return n_blocks_ - free_blocks(); }
  int held(int slot) const { return int(tables_[size_t(slot)].size()); }
  // New blocks slot needs so that its table covers positions [0, end).
  int needed(int slot, int end) const { return std::max(0, model::kv_blocks_for(end) - held(slot)); }
  // Grows slot's table to cover [0, end); false (nothing taken) when the pool is short.
  bool reserve(int slot, int end) {
    const int need = needed(slot, end);
    if (need > free_blocks()) return false;
    for (int i = 0; i < need; ++i) {
      tables_[size_t(slot)].push_back(free_.back());
      free_.pop_back();
    }
    return true;
  }
  // Every block of slot back to the pool.
  void release(int slot) {
    std::vector<int32_t>& t = tables_[size_t(slot)];
    for (auto it = t.rbegin(); it != t.rend(); ++it) free_.push_back(*it);
    t.clear();
  }
  // The entries a segment at positions [pos, pos + n) carries: from = pos / kKvBlockRows,
  // up to the block of its last row (the table must cover it).
  int entries(int slot, int pos, int n, std::vector<int32_t>* out) const {
    const int from = pos / model::kKvBlockRows, end = model::kv_blocks_for(pos + n);
    const std::vector<int32_t>& t = tables_[size_t(slot)];
    CHECK(end <= int(t.size()));
    out->assign(t.begin() + from, t.begin() + end);
    return from;
  }

 private:
  int n_blocks_;
  std::vector<int32_t> free_;                 // a stack: the last freed is taken first
  std::vector<std::vector<int32_t>> tables_;  // [slot]
};

}  // namespace runtime
