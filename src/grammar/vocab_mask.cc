// vocab_mask.cc: the vocabulary trie and the masks (see vocab_mask.h).
#include "grammar/vocab_mask.h"

#include <algorithm>

#include "util/timer.h"

namespace grammar {

VocabTrie::VocabTrie(const tokenizer::Tokenizer& t) : tok(t), n_vocab(t.n_vocab()) {
  std::vector<std::pair<std::string_view, int32_t>> all;
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (t.is_eog(id)) {
      eog.push_back(id);
      continue;
    }
    if (t.is_control(id)) continue;
    const std::string& p = t.piece(id);
    if (!p.empty()) all.emplace_back(p, id);
  }
  std::sort(all.begin(), all.end());
  nodes.push_back({});
  std::vector<uint32_t> path = {0};  // the previous token's nodes, root first
  std::string_view prev;
  for (const auto& [s, id] : all) {
    size_t l = 0;
    while (l < prev.size() && l < s.size() && prev[l] == s[l]) ++l;
    while (path.size() - 1 > l) {
      nodes[path.back()].end = uint32_t(nodes.size());
      path.pop_back();
    }
    for (size_t k = l; k < s.size(); ++k) {
      path.push_back(uint32_t(nodes.size()));
      nodes.push_back({uint8_t(s[k]), 0, uint32_t(ids.size()), uint32_t(ids.size())});
    }
    ids.push_back(id);
    nodes[path.back()].ids_end = uint32_t(ids.size());
    depth = std::max(depth, int(s.size()));
    prev = s;
  }
  for (; !path.empty(); path.pop_back()) nodes[path.back()].end = uint32_t(nodes.size());
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie)
    : trie_(std::move(trie)), m_(std::move(g)) {
  cur_ = intern(m_.state());
}

namespace {

const Stack* copy_stack(const Stack* s, StackArena& to) { return s ? to.make(s->pos, copy_stack(s->next, to)) : nullptr; }

}  // namespace

int32_t GrammarConstraint::intern(const State& s) {
  std::string key = s.key();
  if (auto it = dfa_ids_.find(key); it != dfa_ids_.end()) return it->second;
  DfaState d;
  d.st.partial = s.partial;
  d.st.partial_left = s.partial_left;
  d.st.partial_min = s.partial_min;
  for (const Stack* st : s.stacks) d.st.stacks.push_back(copy_stack(st, dfa_arena_));
  d.next.assign(256, kUnknown);
  dfa_.push_back(std::move(d));
  const int32_t id = int32_t(dfa_.size() - 1);
  dfa_ids_.emplace(std::move(key), id);
  return id;
}

int32_t GrammarConstraint::next(int32_t id, uint8_t byte) {
  int32_t t = dfa_[size_t(id)].next[byte];
  if (t != kUnknown) return t;
  State out;
  t = m_.step(dfa_[size_t(id)].st, byte, &out, scratch_) ? intern(out) : kDead;
  dfa_[size_t(id)].next[byte] = t;
  return t;
}

// Past kMaxStates: only the current state is kept (copied first: the arena goes).
void GrammarConstraint::restart() {
  StackArena keep;
  State cur = dfa_[size_t(cur_)].st;
  for (const Stack*& st : cur.stacks) st = copy_stack(st, keep);
  dfa_.clear();
  dfa_ids_.clear();
  lru_.clear();
  cache_.clear();
  dfa_arena_.clear();
  cur_ = intern(cur);  // copies into dfa_arena_; keep's nodes are dropped with it
}

void GrammarConstraint::walk(uint32_t node, int32_t id, std::vector<uint64_t>* bits) {
  const auto& nodes = trie_->nodes;
  for (uint32_t c = node + 1; c < nodes[node].end; c = nodes[c].end) {
    const int32_t t = next(id, nodes[c].byte);
    if (t == kDead) continue;
    for (uint32_t i = nodes[c].ids_begin; i < nodes[c].ids_end; ++i) allow(bits, trie_->ids[i]);
    if (nodes[c].end > c + 1) walk(c, t, bits);
  }
}

const std::vector<uint64_t>& GrammarConstraint::allowed() {
  if (fresh_) return mask_;
  fresh_ = true;
  stats_.masks++;
  const int32_t key = broken_ ? kDead : cur_;
  if (auto it = cache_.find(key); it != cache_.end()) {
    stats_.cached++;
    lru_.splice(lru_.begin(), lru_, it->second);
    mask_ = it->second->second;
    return mask_;
  }
  util::Timer timer;
  mask_.assign((size_t(trie_->n_vocab) + 63) / 64, 0);
  if (!broken_) walk(0, cur_, &mask_);
  scratch_.clear();
  const bool any = std::any_of(mask_.begin(), mask_.end(), [](uint64_t w) { return w != 0; });
  if (broken_ || !any || complete())
    for (int32_t id : trie_->eog) allow(&mask_, id);
  if (std::all_of(mask_.begin(), mask_.end(), [](uint64_t w) { return w == 0; }))  // no end token at all
    for (int32_t id = 0; id < trie_->n_vocab; ++id) allow(&mask_, id);
  stats_.seconds += timer.seconds();
  lru_.emplace_front(key, mask_);
  cache_[key] = lru_.begin();
  if (lru_.size() > kCache) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return mask_;
}

void GrammarConstraint::accept(int32_t id) {
  fresh_ = false;
  if (trie_->tok.is_eog(id) || broken_) return;
  if (trie_->tok.is_control(id)) {
    broken_ = true;
    return;
  }
  accept_text(trie_->tok.piece(id));
}

bool GrammarConstraint::accept_text(std::string_view bytes) {
  fresh_ = false;
  if (broken_) return false;
  int32_t s = cur_;
  for (char ch : bytes)
    if ((s = next(s, uint8_t(ch))) == kDead) break;
  scratch_.clear();
  if (s == kDead) {
    broken_ = true;
    return false;
  }
  cur_ = s;
  if (dfa_.size() > kMaxStates) restart();
  return true;
}

bool GrammarConstraint::would_accept(std::string_view bytes) {
  if (broken_) return false;
  int32_t s = cur_;
  for (char ch : bytes)
    if ((s = next(s, uint8_t(ch))) == kDead) break;
  scratch_.clear();
  if (dfa_.size() > kMaxStates) restart();  // keeps cur_ (fresh_ too: the mask is cur_'s)
  return s != kDead;
}

}  // namespace grammar
