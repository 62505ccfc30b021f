// grammar.h: constrained decoding's language. A Grammar is parsed from GBNF, the grammar
// notation of llama.cpp (`name ::= alternatives`, "literals", [character classes] with
// ranges and ^, `.`, ( groups ), *, +, ?, {m}, {m,}, {m,n}, # comments; the start rule is
// `root`); JSON schemas arrive here translated to GBNF (json_schema.h). A Matcher is a
// pushdown recognizer over it, fed bytes (UTF-8, a character may end in a later token):
// its state is the set of parse stacks that can still continue, each a chain of positions
// in the grammar with shared tails, so advancing a state by a byte allocates only the
// stacks that change. Left recursion is refused at parse time (it would expand forever).
// Deliberately no tokens: vocab_mask.h walks a vocabulary through a Matcher's state.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace grammar {

struct CharClass {
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
  bool matches(uint32_t c) const;
  bool matches_any(uint32_t lo, uint32_t hi) const;   // some code point in [lo, hi]
};

// Rules flattened: every alternative is a run of elements ended by kEnd.
struct Elem {
  enum Kind : uint8_t { kEnd, kChar, kRef };
  Kind kind = kEnd;
  uint32_t arg = 0;  // kChar: index into classes; kRef: rule
};

class Grammar {
 public:
  // Limits of what a request may ask for (a grammar is built per request).
  static constexpr size_t kMaxText = 256 * 1024, kMaxElems = 1 << 20;
  // What one byte may cost the recognizer: rule expansions, and parse stacks left after it.
  // Nested repetitions such as ((x+)+)+ need 2^depth stacks; past these a byte is not
  // read (the text cannot continue there), and parse() refuses a grammar whose start
  // already needs more.
  static constexpr size_t kMaxExpansions = 1 << 14, kMaxStacks = 4096;
  // The error names the line and what is wrong there, or the undefined / left-recursive rule.
  static util::Expected<std::shared_ptr<const Grammar>> parse(std::string_view gbnf);

  std::vector<Elem> elems;
  std::vector<std::vector<uint32_t>> alts;  // per rule: where each alternative starts
  std::vector<CharClass> classes;
  std::vector<std::string> names;           // per rule (generated ones end in "-N")
  uint32_t root = 0;
};

// One parse stack: the element to match next (a kChar) and what follows it.
struct Stack {
  uint32_t pos;
  const Stack* next;  // null: the input may end after pos's alternative
  uint64_t hash;
};

// The stacks a Matcher makes live as long as it does; scratch ones are cleared in bulk.
class StackArena {
 public:
  const Stack* make(uint32_t pos, const Stack* next);
  void clear() { nodes_.clear(); }

 private:
  std::deque<Stack> nodes_;
};

struct State {
  std::vector<const Stack*> stacks;  // distinct; nullptr: a complete parse
  uint32_t partial = 0;              // bits of a UTF-8 character begun but not ended
  int partial_left = 0;              // its continuation bytes still to come
  uint32_t partial_min = 0;          // its smallest code point (shorter forms are refused)
  bool dead() const { return stacks.empty(); }
  bool complete() const;             // the input so far is a sentence of the grammar
  std::string key() const;           // equal for equal states (a cache key)
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);  // dead when the start is too costly
  Matcher(const Matcher&) = delete;  // its state points into its own arena
  Matcher& operator=(const Matcher&) = delete;
  const Grammar& grammar() const { return *g_; }
  const State& state() const { return state_; }
  // Advances by these bytes; false (and no change) when the grammar cannot read them.
  bool accept(std::string_view bytes);

  // out = in advanced by one byte (new stacks in `arena`); false when none survives.
  bool step(const State& in, uint8_t byte, State* out, StackArena& arena) const;

 private:
  struct Expansion;  // the stacks being made, and what is left of the budget (grammar.cc)
  // false when none survives, or the byte would cost more than kMaxExpansions / kMaxStacks
  bool advance(const std::vector<const Stack*>& in, uint32_t c, std::vector<const Stack*>* out,
               StackArena& arena) const;
  void expand(uint32_t pos, const Stack* rest, Expansion* x) const;

  std::shared_ptr<const Grammar> g_;
  StackArena arena_;  // the committed state's stacks
  State state_;
};

}  // namespace grammar
