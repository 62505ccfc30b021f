// kv_blocks.h: the root's allocation of the paged KV cache (model/kv_cache.h, issue 32).
// One pool of n_blocks blocks of model::kKvBlockRows positions, shared by every slot; each
// slot has a block table. The root decides every allocation here and each step carries,
// per segment, the table entries the nodes do not hold yet (entries()): the blocks the
// segment writes, and from the table's start when it changed (a shared prefix attached,
// a re-forming), so every node's tables are identical by construction.
// Shared prefixes (step 2): a full block is registered under a hash of its tokens and of
// the whole prefix before it (a chain: the block before's hash, then its 64 tokens); a new
// sequence attaches every registered block of its prompt's prefix (attach_prefix), checked
// token for token and parent for parent (block and generation), so a hash collision or a
// reused block cannot share a wrong block. Each block also keeps which of its rows were
// computed in vec_dot order (note_rows): a prefix is shared only when every row is in the
// order the sharing sequence alone would have used (`rowwise`), so its bits are the same.
// Blocks are reference-counted; a registered block no table holds stays cached, and is
// taken back, least recently used first, only when the free list is empty. Writes never go
// into a shared or registered block: a sequence writes from its log's end, blocks are
// registered only once the log has passed them, a log cut short unregisters what it will
// rewrite (truncate; refused for a block another table holds), and a sequence attaching a
// prefix starts at a block boundary (the rest of the prompt goes into fresh blocks).
// The host cache (--cache-ram, step 4): a cached block taken back for another table is
// first saved to host memory (at most host_capacity entries, least recently saved dropped
// first), keyed by its chain hash with its whole prefix's tokens and the order of every
// row of that prefix; a prompt whose prefix continues past the pool's blocks with saved
// ones takes fresh blocks for them and they are restored (attach_prefix with host). Each
// save, restore and drop is a model::KvCopy the next step carries (take_copies) and every
// node does in order before the step's rows, on its own KV heads: every node's pool and
// host cache stay identical in content by construction.
// Deliberately no policy: which slot to release when the pool is short is the scheduler's.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/kv_cache.h"
#include "util/check.h"

namespace runtime {

class BlockPool {
 public:
  static constexpr int B = model::kKvBlockRows;
  BlockPool(int n_blocks, int n_slots)
      : n_blocks_(n_blocks), info_(size_t(n_blocks)), tables_(size_t(n_slots)), chain_(size_t(n_slots)),
        synced_(size_t(n_slots), 0) {
    CHECK(n_blocks >= 1 && n_slots >= 1);
    for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 first
  }
  int n_blocks() const { return n_blocks_; }
  // Blocks a table may take: free, or cached (registered, held by no table).
  int free_blocks() const { return int(free_.size() + lru_.size()); }
  int used_blocks() const { return n_blocks_ - free_blocks(); }  // held by a table
  int cached_blocks() const { return int(lru_.size()); }
  int shared_blocks() const { return shared_; }  // held by more than one table
  int held(int slot) const { return int(tables_[size_t(slot)].size()); }
  const std::vector<int32_t>& table(int slot) const { return tables_[size_t(slot)]; }
  int refs(int32_t block) const { return info_[size_t(block)].refs; }
  uint64_t prefix_hits() const { return hits_; }          // attach_prefix calls that shared a block
  uint64_t prefix_tokens() const { return hit_tokens_; }  // positions they did not evaluate
  int host_blocks() const { return int(host_.size()); }   // blocks the host cache holds
  uint64_t host_saves() const { return saves_; }
  uint64_t host_restores() const { return restores_; }
  int host_capacity() const { return host_cap_; }
  // The host cache keeps at most n blocks (0: none; the ones past n are dropped).
  void set_host_capacity(int n) {
    host_cap_ = std::max(0, n);
    while (int(host_.size()) > host_cap_ && !host_lru_.empty()) drop_host(host_lru_.front());
  }
  // The copies the next step carries (model::KvCopy), in the order they were decided.
  void take_copies(std::vector<model::KvCopy>* out) {
    out->swap(copies_);
    copies_.clear();
  }
  // New blocks slot needs so that its table covers positions [0, end).
  int needed(int slot, int end) const { return std::max(0, model::kv_blocks_for(end) - held(slot)); }
  // Grows slot's table to cover [0, end); false (nothing taken) when the pool is short.
  bool reserve(int slot, int end) {
    const int need = needed(slot, end);
    if (need > free_blocks()) return false;
    for (int i = 0; i < need; ++i) tables_[size_t(slot)].push_back(take());
    return true;
  }
  // Every block of slot let go (registered ones stay cached, its tail first in line).
  void release(int slot) {
    std::vector<int32_t>& t = tables_[size_t(slot)];
    for (auto it = t.rbegin(); it != t.rend(); ++it) drop(*it);
    t.clear();
    chain_[size_t(slot)].clear();
    synced_[size_t(slot)] = 0;
  }
  // Positions >= pos of slot are to be written again (a log cut short): the blocks wholly
  // past pos leave the table (registered ones stay cached), the block pos lies in (pos not
  // a block boundary) stays and is unregistered, its rows from pos on will change; false,
  // nothing changed, when another table holds that block too (then release the slot and
  // attach_prefix, or cut at the block boundary).
  bool truncate(int slot, int pos) {
    std::vector<int32_t>& t = tables_[size_t(slot)];
    const size_t k0 = size_t(pos / B), keep = std::min(t.size(), k0 + (pos % B != 0));
    if (keep > k0 && info_[size_t(t[k0])].refs > 1) return false;
    if (keep > k0) unregister(t[k0]);
    for (size_t k = t.size(); k-- > keep;) drop(t[k]);
    t.resize(keep);
    std::vector<uint64_t>& ch = chain_[size_t(slot)];
    ch.resize(std::min(ch.size(), k0));
    synced_[size_t(slot)] = std::min(synced_[size_t(slot)], int(keep));
    return true;
  }
  // Positions of slot's full blocks that are registered (or twins of registered ones): its
  // log must not be cut below this without truncate.
  int registered(int slot) const { return int(chain_[size_t(slot)].size()) * B; }
  // Slot's rows [pos, pos + n) were just computed, in vec_dot order or not (rowwise).
  void note_rows(int slot, int pos, int n, bool rowwise) {
    const std::vector<int32_t>& t = tables_[size_t(slot)];
    for (int p = pos; p < pos + n; ++p) {
      uint64_t& m = info_[size_t(t[size_t(p / B)])].rowwise;
      const uint64_t bit = uint64_t(1) << (p % B);
      m = rowwise ? (m | bit) : (m & ~bit);
    }
  }
  // How many registered blocks of tokens' prefix attach_prefix would take (at most
  // max_blocks): each one's tokens equal, and every row in one order (rowwise: all in
  // vec_dot order, else all in lane order).
  // host: then the host cache's blocks that continue it, as many as the pool has blocks
  // to take for them (any_room: all of them, however many blocks the pool has).
  int prefix_blocks(std::span<const int32_t> tokens, int max_blocks, bool rowwise, bool host = false,
                    bool any_room = false) const {
    uint64_t h = kSeed;
    int idle = 0;  // the pool's blocks it takes that no table holds (not free for the host's)
    const int k = walk(tokens, max_blocks, rowwise, [&](int32_t b, uint64_t hk) {
      idle += info_[size_t(b)].refs == 0;
      h = hk;
    });
    if (!host) return k;
    const int room = any_room ? max_blocks - k : std::min(max_blocks - k, free_blocks() - idle);
    return k + host_walk(tokens, k, room, rowwise, h, [](const HostEntry&) {});
  }
  // An empty slot takes the blocks prefix_blocks counts (at most max_blocks); returns how many.
  // host: and the host cache's blocks prefix_blocks counts, restored into fresh blocks.
  int attach_prefix(int slot, std::span<const int32_t> tokens, int max_blocks, bool rowwise, bool host = false) {
    CHECK(tables_[size_t(slot)].empty());
    std::vector<int32_t>& t = tables_[size_t(slot)];
    std::vector<uint64_t>& ch = chain_[size_t(slot)];
    int k = walk(tokens, max_blocks, rowwise, [&](int32_t b, uint64_t h) {
      hold(b);
      t.push_back(b);
      ch.push_back(h);
    });
    if (host) {
      // Pinned first (out of the host's LRU order), so that saving the blocks their
      // restores take back from the pool cannot drop them.
      std::vector<uint64_t> keys;
      host_walk(tokens, k, std::min(max_blocks - k, free_blocks()), rowwise, ch.empty() ? kSeed : ch.back(),
                [&](const HostEntry& e) { keys.push_back(e.hash); });
      for (uint64_t hk : keys) host_lru_.erase(host_.at(hk).lru);
      for (uint64_t hk : keys) {
        const int32_t b = take();  // (may save the block it takes back: host_ grows)
        HostEntry& e = host_.at(hk);
        Info& i = info_[size_t(b)];
        i.hash = hk;
        i.parent = t.empty() ? -1 : t.back();
        i.parent_gen = t.empty() ? 0 : info_[size_t(t.back())].gen;
        i.tokens = std::move(e.tokens);
        i.rowwise = e.rowwise;
        i.order = e.order;
        map_[hk] = b;
        copies_.push_back({model::KvCopy::Kind::kRestore, b, e.id});
        host_.erase(hk);
        ++restores_;
        t.push_back(b);
        ch.push_back(hk);
        ++k;
      }
    }
    synced_[size_t(slot)] = 0;
    if (k > 0) ++hits_, hit_tokens_ += uint64_t(k) * B;
    return k;
  }
  // Registers slot's full blocks that its log (tokens: positions 0..) has passed.
  void register_full(int slot, std::span<const int32_t> tokens) {
    std::vector<uint64_t>& ch = chain_[size_t(slot)];
    const std::vector<int32_t>& t = tables_[size_t(slot)];
    const size_t full = std::min(tokens.size() / B, t.size());
    while (ch.size() < full) {
      const size_t k = ch.size();
      const std::span<const int32_t> part = tokens.subspan(k * B, B);
      const uint64_t hk = chain(k ? ch.back() : kSeed, part);
      ch.push_back(hk);
      Info& b = info_[size_t(t[k])];
      // Its rows' order, and its prefix's: one order for all, or mixed (-1).
      const int8_t own = b.rowwise == ~uint64_t(0) ? 1 : b.rowwise == 0 ? 0 : -1;
      if (b.hash == 0) b.order = k == 0 || info_[size_t(t[k - 1])].order == own ? own : -1;
      if (b.hash != 0 || map_.count(hk)) continue;  // registered already (shared), or a twin
      if (host_.count(hk)) drop_host(hk);           // computed again: the pool's copy now
      b.hash = hk;
      b.parent = k ? t[k - 1] : -1;
      b.parent_gen = k ? info_[size_t(t[k - 1])].gen : 0;
      b.tokens.assign(tokens.begin(), tokens.begin() + int64_t((k + 1) * B));
      map_[hk] = t[k];
    }
  }
  // The entries a segment at positions [pos, pos + n) carries (the table must cover it):
  // from the block of pos, or from the first entry the nodes do not hold.
  int entries(int slot, int pos, int n, std::vector<int32_t>* out) {
    const int from = std::min(pos / B, synced_[size_t(slot)]), end = model::kv_blocks_for(pos + n);
    const std::vector<int32_t>& t = tables_[size_t(slot)];
    CHECK(end <= int(t.size()));
    out->assign(t.begin() + from, t.begin() + end);
    synced_[size_t(slot)] = std::max(synced_[size_t(slot)], end);
    return from;
  }
  // The nodes hold no table (a re-forming): the next segments carry them from the start.
  void unsync() { std::fill(synced_.begin(), synced_.end(), 0); }
  // The cached blocks (registered, held by no table) are forgotten: free again; and the
  // host cache (the nodes' new sessions hold none), with the copies not sent.
  void drop_cache() {
    for (int32_t b : lru_) {
      unregister(b);
      free_.push_back(b);
    }
    lru_.clear();
    host_.clear();
    host_lru_.clear();
    copies_.clear();
  }

 private:
  struct Info {
    int refs = 0;
    uint32_t gen = 0;       // times the block was taken (a registered parent is this one)
    uint64_t hash = 0;      // 0: not registered
    uint64_t rowwise = 0;   // bit r: row r computed in vec_dot order
    int8_t order = -1;      // its rows and its prefix's before it: all lane (0), all vec_dot (1), mixed (-1)
    int32_t parent = -1;    // registered: the block before it (-1: the first), and its gen
    uint32_t parent_gen = 0;
    std::vector<int32_t> tokens;  // registered: its prefix's tokens, its own B last
    std::list<int32_t>::iterator lru;
  };
  struct HostEntry {  // a block saved in the host cache
    int32_t id = 0;   // the nodes' entry (model::KvCopy)
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // its prefix's, its own B last
    uint64_t rowwise = 0;
    int8_t order = -1;
    std::list<uint64_t>::iterator lru;
  };
  static constexpr uint64_t kSeed = 0x9e3779b97f4a7c15ull;
  static uint64_t chain(uint64_t h, std::span<const int32_t> part) {
    for (int32_t t : part) {  // splitmix64 of the running value and each token
      h ^= uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
      h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
      h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
      h ^= h >> 31;
    }
    return h ? h : 1;
  }
  // The registered blocks of tokens' prefix, in order, to fn(block, chain hash); how many.
  template <class Fn>
  int walk(std::span<const int32_t> tokens, int max_blocks, bool rowwise, Fn&& fn) const {
    const uint64_t want = rowwise ? ~uint64_t(0) : 0;
    uint64_t h = kSeed;
    int32_t parent = -1;
    int k = 0;
    for (; k < max_blocks && size_t(k + 1) * B <= tokens.size(); ++k) {
      const std::span<const int32_t> part = tokens.subspan(size_t(k) * B, B);
      const uint64_t hk = chain(h, part);
      auto it = map_.find(hk);
      if (it == map_.end()) break;
      const Info& b = info_[size_t(it->second)];
      if (b.parent != parent || (parent >= 0 && b.parent_gen != info_[size_t(parent)].gen) || b.rowwise != want ||
          !std::equal(part.begin(), part.end(), b.tokens.end() - B))
        break;
      fn(it->second, hk);
      parent = it->second;
      h = hk;
    }
    return k;
  }
  // The host cache's entries that continue tokens' prefix after its first k blocks (chain
  // hash h), at most max of them, in order, to fn: each one's whole prefix equal, and every
  // row of it in the order wanted. Returns how many.
  template <class Fn>
  int host_walk(std::span<const int32_t> tokens, int k, int max, bool rowwise, uint64_t h, Fn&& fn) const {
    int n = 0;
    for (; n < max && size_t(k + n + 1) * B <= tokens.size(); ++n) {
      const size_t end = size_t(k + n + 1) * B;
      h = chain(h, tokens.subspan(end - B, B));
      auto it = host_.find(h);
      if (it == host_.end() || it->second.order != (rowwise ? 1 : 0) ||
          !std::equal(tokens.begin(), tokens.begin() + int64_t(end), it->second.tokens.begin(), it->second.tokens.end()))
        break;
      fn(it->second);
    }
    return n;
  }
  // A cached block about to be taken back: into the host cache, when it keeps blocks and
  // the block's prefix is in one order (a mixed one is never shared).
  void save(int32_t block) {
    Info& i = info_[size_t(block)];
    if (host_cap_ == 0 || i.order < 0) return;
    while (int(host_.size()) >= host_cap_ && !host_lru_.empty()) drop_host(host_lru_.front());
    if (int(host_.size()) >= host_cap_) return;  // all pinned by the attach taking this block
    CHECK(!host_.count(i.hash));  // a chain hash is registered in the pool or saved, not both
    HostEntry& e = host_[i.hash];
    e.id = next_entry_;
    next_entry_ = next_entry_ == INT32_MAX ? 0 : next_entry_ + 1;
    e.hash = i.hash;
    e.tokens = std::move(i.tokens);
    e.rowwise = i.rowwise;
    e.order = i.order;
    host_lru_.push_back(i.hash);
    e.lru = std::prev(host_lru_.end());
    copies_.push_back({model::KvCopy::Kind::kSave, block, e.id});
    ++saves_;
  }
  void drop_host(uint64_t hash) {  // (not pinned)
    auto it = host_.find(hash);
    copies_.push_back({model::KvCopy::Kind::kForget, 0, it->second.id});
    host_lru_.erase(it->second.lru);
    host_.erase(it);
  }
  void unregister(int32_t block) {
    Info& i = info_[size_t(block)];
    if (i.hash == 0) return;
    map_.erase(i.hash);
    i.hash = 0;
    i.parent = -1;
    i.tokens.clear();
  }
  // A block for a table: a free one, else the least recently cached.
  int32_t take() {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      CHECK(!lru_.empty());
      b = lru_.front();
      lru_.pop_front();
      save(b);
      unregister(b);
    }
    Info& i = info_[size_t(b)];
    i.refs = 1;
    i.gen++;
    return b;
  }
  void hold(int32_t b) {
    Info& i = info_[size_t(b)];
    if (i.refs == 0) lru_.erase(i.lru);
    if (++i.refs == 2) ++shared_;
  }
  void drop(int32_t b) {
    Info& i = info_[size_t(b)];
    CHECK(i.refs > 0);
    if (i.refs-- == 2) --shared_;
    if (i.refs > 0) return;
    if (i.hash == 0) {
      free_.push_back(b);
    } else {
      lru_.push_back(b);
      i.lru = std::prev(lru_.end());
    }
  }

  int n_blocks_;
  std::vector<Info> info_;                    // [block]
  std::vector<int32_t> free_;                 // unregistered, held by no table (a stack)
  std::list<int32_t> lru_;                    // registered, held by no table: oldest first
  std::unordered_map<uint64_t, int32_t> map_; // chain hash -> registered block
  std::vector<std::vector<int32_t>> tables_;  // [slot]
  std::vector<std::vector<uint64_t>> chain_;  // [slot] chain hashes of its registered prefix
  std::vector<int> synced_;                   // [slot] table entries every node holds
  int shared_ = 0;
  uint64_t hits_ = 0, hit_tokens_ = 0;
  // The host cache: chain hash -> entry; the unpinned ones' hashes, oldest first.
  std::unordered_map<uint64_t, HostEntry> host_;
  std::list<uint64_t> host_lru_;
  int host_cap_ = 0;
  int32_t next_entry_ = 0;
  std::vector<model::KvCopy> copies_;  // not sent yet
  uint64_t saves_ = 0, restores_ = 0;
};

}  // namespace runtime
