// vocab_mask.h: constrained decoding's token masks. The vocabulary is kept as a byte trie
// of the tokens' bytes (VocabTrie, built once per model); a mask is one walk of the trie
// from the grammar's state, where a subtree is left as soon as its prefix cannot continue
// the text, so a state that allows a few bytes costs a few nodes and only a state inside a
// string visits most of the trie. Masks are cached by state: text inside one JSON string
// repeats one state, so most tokens of a long value cost a lookup. End-of-generation
// tokens are allowed exactly when the text so far is complete. Control tokens are never
// allowed. Should no token be able to continue the text, end-of-generation is the only
// choice (the reply then ends where the grammar could not go on).
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/sequence.h"
#include "tokenizer/tokenizer.h"

namespace grammar {

class VocabTrie {
 public:
  explicit VocabTrie(const tokenizer::Tokenizer& tok);
  struct Node {
    uint8_t byte = 0;
    uint32_t end = 0;                    // one past the node's subtree (preorder)
    uint32_t ids_begin = 0, ids_end = 0; // the tokens whose bytes end here, in ids
  };
  const tokenizer::Tokenizer& tok;
  int32_t n_vocab = 0;
  std::vector<Node> nodes;  // preorder; nodes[0] is the root (no byte)
  std::vector<int32_t> ids;
  std::vector<int32_t> eog;
  int depth = 0;            // the longest token, in bytes
};

struct MaskStats {
  uint64_t masks = 0, cached = 0;  // masks asked for; of them, found in the cache
  double seconds = 0;              // computing the others
};

class GrammarConstraint : public runtime::TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie);
  const std::vector<uint64_t>& allowed() override;
  void accept(int32_t id) override;
  // Text instead of a token (a triggered grammar's start, trigger.h): false, and only the
  // end remains, when the grammar cannot read it.
  bool accept_text(std::string_view bytes);
  // Whether the grammar could read these bytes next (nothing changes).
  bool would_accept(std::string_view bytes);
  const MaskStats& stats() const { return stats_; }
  bool complete() const { return !broken_ && dfa_[size_t(cur_)].st.complete(); }

 private:
  // The grammar's states met so far, as a lazily built automaton: a state is interned
  // (its stacks copied into dfa_arena_) when first reached, and its transition on a byte
  // is computed once, when a walk or a token first needs it. A walk of the trie is then
  // mostly table lookups. Past kMaxStates the automaton starts again from the current state.
  struct DfaState {
    State st;
    std::vector<int32_t> next;  // per byte: a state, kDead, or kUnknown
  };
  static constexpr int32_t kDead = -1, kUnknown = -2;
  static constexpr size_t kMaxStates = 4096;
  int32_t intern(const State& s);
  int32_t next(int32_t id, uint8_t byte);
  void restart();
  void walk(uint32_t node, int32_t id, std::vector<uint64_t>* bits);
  void allow(std::vector<uint64_t>* bits, int32_t id) const { (*bits)[size_t(id) / 64] |= uint64_t(1) << (id % 64); }

  std::shared_ptr<const VocabTrie> trie_;
  Matcher m_;            // the grammar's stepper (its own state is only the start)
  std::vector<DfaState> dfa_;
  std::unordered_map<std::string, int32_t> dfa_ids_;
  StackArena dfa_arena_, scratch_;
  int32_t cur_ = 0;      // the text so far
  bool broken_ = false;  // a token the grammar could not read was drawn: only the end remains
  std::vector<uint64_t> mask_;
  bool fresh_ = false;   // mask_ is cur_'s
  static constexpr size_t kCache = 64;  // masks kept, by state
  std::list<std::pair<int32_t, std::vector<uint64_t>>> lru_;  // most recent first
  std::unordered_map<int32_t, decltype(lru_)::iterator> cache_;
  MaskStats stats_;
};

}  // namespace grammar
