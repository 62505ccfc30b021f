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
  level_.resize(size_t(trie_->depth) + 2);
}

void GrammarConstraint::walk(uint32_t node, const State& st, int depth, std::vector<uint64_t>* bits) {
  const auto& nodes = trie_->nodes;
  State& next = level_[size_t(depth)];
  for (uint32_t c = node + 1; c < nodes[node].end; c = nodes[c].end) {
    if (!m_.step(st, nodes[c].byte, &next, scratch_)) continue;
    for (uint32_t i = nodes[c].ids_begin; i < nodes[c].ids_end; ++i) allow(bits, trie_->ids[i]);
    if (nodes[c].end > c + 1) walk(c, next, depth + 1, bits);
  }
}

const std::vector<uint64_t>& GrammarConstraint::allowed() {
  if (fresh_) return cur_;
  fresh_ = true;
  stats_.masks++;
  const std::string key = broken_ ? std::string("broken") : m_.state().key();
  if (auto it = cache_.find(key); it != cache_.end()) {
    stats_.cached++;
    lru_.splice(lru_.begin(), lru_, it->second);
    cur_ = it->second->second;
    return cur_;
  }
  util::Timer timer;
  cur_.assign((size_t(trie_->n_vocab) + 63) / 64, 0);
  if (!broken_) {
    walk(0, m_.state(), 0, &cur_);
    scratch_.clear();
  }
  const bool any = std::any_of(cur_.begin(), cur_.end(), [](uint64_t w) { return w != 0; });
  if (broken_ || !any || m_.state().complete())
    for (int32_t id : trie_->eog) allow(&cur_, id);
  if (std::all_of(cur_.begin(), cur_.end(), [](uint64_t w) { return w == 0; }))  // no end token at all
    for (int32_t id = 0; id < trie_->n_vocab; ++id) allow(&cur_, id);
  stats_.seconds += timer.seconds();
  lru_.emplace_front(key, cur_);
  cache_[key] = lru_.begin();
  if (lru_.size() > kCache) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return cur_;
}

void GrammarConstraint::accept(int32_t id) {
  fresh_ = false;
  if (trie_->tok.is_eog(id)) return;
  if (broken_ || trie_->tok.is_control(id) || !m_.accept(trie_->tok.piece(id))) broken_ = true;
}

}  // namespace grammar
