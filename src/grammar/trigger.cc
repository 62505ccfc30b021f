// trigger.cc: a grammar started by a trigger in the text (see trigger.h).
#include "grammar/trigger.h"

#include <algorithm>

namespace grammar {

namespace {

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace

TriggeredConstraint::TriggeredConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie,
                                         std::vector<Trigger> triggers)
    : trie_(trie), inner_(std::move(g), std::move(trie)), triggers_(std::move(triggers)) {
  for (int32_t id : trie_->ids) {
    const std::string& p = trie_->tok.piece(id);
    for (const Trigger& t : triggers_)
      if (!t.at_start && p.find(t.text) != std::string::npos) {
        whole_.push_back(id);
        break;
      }
  }
}

size_t TriggeredConstraint::trigger_at(const std::string& s) const {
  size_t at = std::string::npos;
  for (const Trigger& t : triggers_) {
    size_t p = std::string::npos;
    if (!t.at_start) {
      p = s.find(t.text);
    } else if (blank_) {
      const size_t a = s.find_first_not_of(" \t\r\n");
      if (a != std::string::npos && s.compare(a, t.text.size(), t.text) == 0) p = a;
    }
    at = std::min(at, p);
  }
  return at;
}

// The tokens under prefix's node of the trie (those whose text starts with prefix).
void TriggeredConstraint::subtree(const std::string& prefix, std::vector<int32_t>* out) const {
  const auto& nodes = trie_->nodes;
  uint32_t node = 0;
  for (char ch : prefix) {
    uint32_t c = node + 1;
    while (c < nodes[node].end && nodes[c].byte != uint8_t(ch)) c = nodes[c].end;
    if (c >= nodes[node].end) return;
    node = c;
  }
  for (uint32_t n = node; n < nodes[node].end; ++n)
    out->insert(out->end(), trie_->ids.begin() + nodes[n].ids_begin, trie_->ids.begin() + nodes[n].ids_end);
}

void TriggeredConstraint::candidates(std::vector<int32_t>* out) const {
  *out = whole_;
  for (const Trigger& t : triggers_) {
    if (t.at_start) {
      if (!blank_) continue;  // (a trigger begun by an earlier token is not checked ahead)
      for (int32_t id : trie_->ids) {
        const std::string& p = trie_->tok.piece(id);
        const size_t a = p.find_first_not_of(" \t\r\n");
        if (a != std::string::npos && p.compare(a, t.text.size(), t.text) == 0) out->push_back(id);
      }
      continue;
    }
    // text_ ends with the trigger's first k bytes: tokens starting with the rest.
    for (size_t k = std::min(t.text.size() - 1, text_.size()); k > 0; --k)
      if (text_.compare(text_.size() - k, k, t.text, 0, k) == 0) subtree(t.text.substr(k), out);
  }
}

const std::vector<uint64_t>& TriggeredConstraint::allowed() {
  if (on_) return inner_.allowed();
  if (fresh_) return mask_;
  fresh_ = true;
  const size_t n = size_t(trie_->n_vocab);
  mask_.assign((n + 63) / 64, ~uint64_t(0));
  if (n % 64) mask_.back() = (uint64_t(1) << (n % 64)) - 1;
  std::vector<int32_t> ids;
  candidates(&ids);
  for (int32_t id : ids) {
    const std::string s = text_ + trie_->tok.piece(id);
    const size_t at = trigger_at(s);
    if (at != std::string::npos && !inner_.would_accept(std::string_view(s).substr(at)))
      mask_[size_t(id) / 64] &= ~(uint64_t(1) << (id % 64));
  }
  return mask_;
}

void TriggeredConstraint::accept(int32_t id) {
  fresh_ = false;
  if (on_) return inner_.accept(id);
  if (trie_->tok.is_eog(id) || trie_->tok.is_control(id)) return;
  const std::string s = text_ + trie_->tok.piece(id);
  if (const size_t at = trigger_at(s); at != std::string::npos) {
    on_ = true;
    text_.clear();
    inner_.accept_text(std::string_view(s).substr(at));
    return;
  }
  blank_ = blank_ && blank(s);
  // Only a tail shorter than the longest trigger can still begin one.
  size_t keep = 0;
  for (const Trigger& t : triggers_) keep = std::max(keep, t.text.size() - 1);
  text_ = s.size() > keep ? s.substr(s.size() - keep) : s;
}

}  // namespace grammar
