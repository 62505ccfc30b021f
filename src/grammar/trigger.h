// trigger.h: a grammar that starts where the text reaches a trigger (llama.cpp's lazy
// grammars): tool_choice "auto" lets the model write text or open a call, and a call it
// opens (Hermes' "<tool_call>", Mistral's "[TOOL_CALLS]", a Llama 3 reply's first "{") is
// decoded under the forced call's grammar from the trigger's first byte on. Before the
// trigger every token is allowed except those that would complete it with text the
// grammar cannot read (a token "<tool_call>\n\n" when the grammar wants "<tool_call>\n{"),
// so a started call always parses. After it, the grammar's masks (vocab_mask.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/vocab_mask.h"

namespace grammar {

struct Trigger {
  std::string text;       // the grammar's first bytes
  bool at_start = false;  // only as the reply's first text (after whitespace)
};

class TriggeredConstraint : public runtime::TokenConstraint {
 public:
  TriggeredConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie,
                      std::vector<Trigger> triggers);
  const std::vector<uint64_t>& allowed() override;
  void accept(int32_t id) override;
  bool triggered() const { return on_; }
  const MaskStats& stats() const { return inner_.stats(); }

 private:
  // Where a trigger starts in text_ + piece (one that ends past text_), or npos.
  size_t trigger_at(const std::string& text) const;
  // The tokens that could complete a trigger after text_.
  void candidates(std::vector<int32_t>* out) const;
  void subtree(const std::string& prefix, std::vector<int32_t>* out) const;

  std::shared_ptr<const VocabTrie> trie_;
  GrammarConstraint inner_;
  std::vector<Trigger> triggers_;
  std::vector<int32_t> whole_;  // tokens holding a whole (not at_start) trigger
  std::string text_;            // the text so far, until triggered (a tail of it past the start)
  bool blank_ = true;           // text_ is only whitespace (at_start triggers still possible)
  bool on_ = false;
  std::vector<uint64_t> mask_;
  bool fresh_ = false;
};

}  // namespace grammar
