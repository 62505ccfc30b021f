// grammar.cc: the GBNF parser (repetitions lowered to right-recursive rules) and the
// pushdown recognizer (see grammar.h).
#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace grammar {

using util::Status;

bool CharClass::matches(uint32_t c) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges)
    if (c >= lo && c <= hi) {
      in = true;
      break;
    }
  return in != negated;
}

bool CharClass::matches_any(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  for (const auto& [a, b] : ranges)  // negated: false only when one range covers [lo, hi]
    if (a <= lo && b >= hi) return false;
  return true;
}

namespace {

// --- Parsing ----------------------------------------------------------------------------

struct Sym {
  bool ref = false;
  uint32_t arg = 0;  // class or rule
};
using Seq = std::vector<Sym>;

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  util::Expected<std::shared_ptr<const Grammar>> run() {
    space(true);
    while (i_ < s_.size()) {
      RETURN_IF_ERROR(rule());
      space(true);
    }
    return finish();
  }

 private:
  Status fail(const std::string& what) const {
    const size_t line = 1 + size_t(std::count(s_.begin(), s_.begin() + std::min(i_, s_.size()), '\n'));
    return Status::error("grammar line " + std::to_string(line) + ": " + what);
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  // Skips blanks and # comments; newlines only when allowed (a rule ends at its line's
  // end unless inside parentheses).
  void space(bool newlines) {
    while (!at_end()) {
      const char c = s_[i_];
      if (c == '#') {
        while (!at_end() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }
  uint32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t id = uint32_t(rules_.size());
    ids_[name] = id;
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    return id;
  }
  uint32_t fresh_rule(const std::string& base) { return rule_id(base + "-" + std::to_string(++generated_)); }
  uint32_t add_class(CharClass c) {
    classes_.push_back(std::move(c));
    return uint32_t(classes_.size() - 1);
  }
  Sym char_sym(uint32_t c) { return {false, add_class({false, {{c, c}}})}; }

  Status rule() {
    const size_t start = i_;
    while (!at_end() && name_char(s_[i_])) ++i_;
    if (i_ == start) return fail("expected a rule name, found '" + std::string(1, peek()) + "'");
    const std::string name(s_.substr(start, i_ - start));
    space(false);
    if (s_.substr(i_, 3) != "::=") return fail("expected '::=' after '" + name + "'");
    i_ += 3;
    space(true);
    const uint32_t id = rule_id(name);
    if (defined_[id]) return fail("rule '" + name + "' is defined twice");
    defined_[id] = true;
    std::vector<Seq> alts;
    RETURN_IF_ERROR(alternates(name, false, &alts));
    rules_[id] = std::move(alts);
    space(false);
    if (!at_end() && peek() != '\n') return fail("unexpected '" + std::string(1, peek()) + "'");
    return util::ok_status();
  }

  Status alternates(const std::string& name, bool nested, std::vector<Seq>* out) {
    Seq seq;
    RETURN_IF_ERROR(sequence(name, nested, &seq));
    out->push_back(std::move(seq));
    while (peek() == '|') {
      ++i_;
      space(true);
      RETURN_IF_ERROR(sequence(name, nested, &seq));
      out->push_back(std::move(seq));
    }
    return util::ok_status();
  }

  // Decodes one (possibly escaped) character of a literal or class.
  Status character(uint32_t* c) {
    if (at_end()) return fail("unexpected end inside a literal or class");
    const uint8_t b = uint8_t(s_[i_]);
    if (b == '\\') {
      ++i_;
      if (at_end()) return fail("a '\\' at the end");
      const char e = s_[i_++];
      int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (hex) {
        uint32_t v = 0;
        for (; hex > 0; --hex, ++i_) {
          const char h = peek();
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return fail("a bad hexadecimal escape");
          v = v * 16 + uint32_t(d);
        }
        *c = v;
        return util::ok_status();
      }
      *c = e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e == '0' ? 0 : uint32_t(uint8_t(e));
      return util::ok_status();
    }
    // UTF-8
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + size_t(n) > s_.size()) return fail("invalid UTF-8");
    uint32_t v = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const uint8_t cb = uint8_t(s_[i_ + size_t(k)]);
      if ((cb & 0xC0) != 0x80) return fail("invalid UTF-8");
      v = (v << 6) | (cb & 0x3F);
    }
    i_ += size_t(n);
    *c = v;
    return util::ok_status();
  }

  Status sequence(const std::string& name, bool nested, Seq* out) {
    out->clear();
    size_t atom = 0;  // where the last primary's symbols start
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        ++i_;
        atom = out->size();
        while (peek() != '"') {
          if (at_end() || peek() == '\n') return fail("a literal is not closed");
          uint32_t ch = 0;
          RETURN_IF_ERROR(character(&ch));
          out->push_back(char_sym(ch));
        }
        ++i_;
      } else if (c == '[') {
        ++i_;
        CharClass cc;
        if (peek() == '^') {
          cc.negated = true;
          ++i_;
        }
        while (peek() != ']') {
          if (at_end()) return fail("a character class is not closed");
          uint32_t lo = 0, hi = 0;
          RETURN_IF_ERROR(character(&lo));
          hi = lo;
          if (peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
            ++i_;
            RETURN_IF_ERROR(character(&hi));
            if (hi < lo) return fail("a character range runs backwards");
          }
          cc.ranges.push_back({lo, hi});
        }
        ++i_;
        atom = out->size();
        out->push_back({false, add_class(std::move(cc))});
      } else if (c == '.') {
        ++i_;
        atom = out->size();
        out->push_back({false, add_class({true, {}})});
      } else if (name_char(c)) {
        const size_t start = i_;
        while (!at_end() && name_char(s_[i_])) ++i_;
        const std::string ref(s_.substr(start, i_ - start));
        const size_t save = i_;
        space(false);
        if (s_.substr(i_, 3) == "::=") return fail("expected a newline before rule '" + ref + "'");
        i_ = save;
        atom = out->size();
        out->push_back({true, rule_id(ref)});
      } else if (c == '(') {
        if (++depth_ > 64) return fail("parentheses nest more than 64 deep");
        ++i_;
        space(true);
        const uint32_t sub = fresh_rule(name);
        std::vector<Seq> alts;
        RETURN_IF_ERROR(alternates(name, true, &alts));
        if (peek() != ')') return fail("expected ')'");
        ++i_;
        --depth_;
        rules_[sub] = std::move(alts);
        defined_[sub] = true;
        atom = out->size();
        out->push_back({true, sub});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (atom >= out->size()) return fail(std::string("'") + c + "' follows nothing");
        int lo = 0, hi = -1;  // hi -1: unbounded
        ++i_;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') {
          space(false);
          RETURN_IF_ERROR(number(&lo));
          space(false);
          hi = lo;
          if (peek() == ',') {
            ++i_;
            space(false);
            hi = -1;
            if (peek() != '}') RETURN_IF_ERROR(number(&hi));
            space(false);
          }
          if (peek() != '}') return fail("expected '}'");
          ++i_;
          if (hi >= 0 && hi < lo) return fail("a repetition {m,n} with n < m");
        }
        Seq x(out->begin() + ptrdiff_t(atom), out->end());
        out->resize(atom);
        repeat(name, x, lo, hi, out);
      } else {
        break;
      }
      space(nested);
    }
    return util::ok_status();
  }

  Status number(int* v) {
    const size_t start = i_;
    int64_t n = 0;
    while (peek() >= '0' && peek() <= '9') {
      n = n * 10 + (peek() - '0');
      if (n > 10000) return fail("a repetition count above 10000");
      ++i_;
    }
    if (i_ == start) return fail("expected a number");
    *v = int(n);
    return util::ok_status();
  }

  // x{lo,hi}: lo copies, then x* (hi < 0) or hi - lo nested optionals.
  void repeat(const std::string& name, Seq x, int lo, int hi, Seq* out) {
    if (x.size() > 1) {  // one symbol to copy
      const uint32_t r = fresh_rule(name);
      rules_[r] = {x};
      defined_[r] = true;
      x = {{true, r}};
    }
    for (int k = 0; k < lo; ++k) out->insert(out->end(), x.begin(), x.end());
    if (hi < 0) {  // R ::= x R |
      const uint32_t r = fresh_rule(name);
      Seq loop = x;
      loop.push_back({true, r});
      rules_[r] = {loop, {}};
      defined_[r] = true;
      out->push_back({true, r});
      return;
    }
    uint32_t tail = 0;
    bool have_tail = false;
    for (int k = lo; k < hi; ++k) {  // R_k ::= x R_{k-1} |
      const uint32_t r = fresh_rule(name);
      Seq s = x;
      if (have_tail) s.push_back({true, tail});
      rules_[r] = {s, {}};
      defined_[r] = true;
      tail = r;
      have_tail = true;
    }
    if (have_tail) out->push_back({true, tail});
  }

  util::Expected<std::shared_ptr<const Grammar>> finish() {
    auto root = ids_.find("root");
    if (root == ids_.end() || !defined_[root->second]) return Status::error("the grammar has no 'root' rule");
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) return Status::error("grammar rule '" + names_[r] + "' is used but not defined");
    RETURN_IF_ERROR(check_left_recursion());
    auto g = std::make_shared<Grammar>();
    g->names = names_;
    g->root = root->second;
    g->classes = std::move(classes_);
    g->alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Seq& s : rules_[r]) {
        g->alts[r].push_back(uint32_t(g->elems.size()));
        for (const Sym& y : s) g->elems.push_back({y.ref ? Elem::kRef : Elem::kChar, y.arg});
        g->elems.push_back({Elem::kEnd, 0});
        if (g->elems.size() > Grammar::kMaxElems) return Status::error("the grammar is too large");
      }
    return std::shared_ptr<const Grammar>(std::move(g));
  }

  Status check_left_recursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& s : rules_[r])
          if (std::all_of(s.begin(), s.end(), [&](const Sym& y) { return y.ref && nullable[y.arg]; })) {
            nullable[r] = changed = true;
            break;
          }
      }
    }
    // r -> r' when r' can come first in r; a cycle is left recursion.
    auto edges = [&](uint32_t r) {
      std::vector<uint32_t> e;
      for (const Seq& s : rules_[r])
        for (const Sym& y : s) {
          if (!y.ref) break;
          e.push_back(y.arg);
          if (!nullable[y.arg]) break;
        }
      return e;
    };
    std::vector<int> color(n, 0);  // 1: on the DFS path, 2: done
    for (size_t start = 0; start < n; ++start) {
      if (color[start]) continue;
      std::vector<std::pair<uint32_t, std::vector<uint32_t>>> st;
      st.push_back({uint32_t(start), edges(uint32_t(start))});
      color[start] = 1;
      while (!st.empty()) {
        auto& [r, e] = st.back();
        if (e.empty()) {
          color[r] = 2;
          st.pop_back();
          continue;
        }
        const uint32_t nx = e.back();
        e.pop_back();
        if (color[nx] == 1) return Status::error("grammar rule '" + names_[nx] + "' is left-recursive: rewrite it "
                                                 "to recurse on the right (x ::= y x | y)");
        if (color[nx] == 0) {
          color[nx] = 1;
          st.push_back({nx, edges(nx)});
          // the recognizer opens such a chain recursively
          if (st.size() > 1000) return Status::error("grammar rule '" + names_[nx] + "' starts a chain of more than "
                                                     "1000 rules, each the first of the one before");
        }
      }
    }
    return util::ok_status();
  }

  std::string_view s_;
  size_t i_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
  std::vector<CharClass> classes_;
  int generated_ = 0;
  int depth_ = 0;  // of parentheses
};

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

bool same(const Stack* a, const Stack* b) {
  for (; a && b; a = a->next, b = b->next) {
    if (a == b) return true;
    if (a->pos != b->pos || a->hash != b->hash) return false;
  }
  return a == b;
}

struct StackHash {
  size_t operator()(const Stack* s) const { return s ? s->hash : 0; }
};
struct StackEq {
  bool operator()(const Stack* a, const Stack* b) const { return a == b || (a && b && a->hash == b->hash && same(a, b)); }
};

}  // namespace

util::Expected<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view gbnf) {
  if (gbnf.size() > kMaxText) return Status::error("the grammar is longer than " + std::to_string(kMaxText) + " bytes");
  auto g = Parser(gbnf).run();
  if (g.ok() && Matcher(*g).state().dead())
    return Status::error("the grammar is too ambiguous to follow: its start needs more than " +
                         std::to_string(kMaxStacks) + " parse stacks or " + std::to_string(kMaxExpansions) +
                         " rule expansions (nested repetitions such as ((x+)+)+?)");
  return g;
}

// --- Recognizing --------------------------------------------------------------------------

const Stack* StackArena::make(uint32_t pos, const Stack* next) {
  nodes_.push_back({pos, next, mix(uint64_t(pos) * 0x9E3779B97F4A7C15ULL + (next ? next->hash : 0x1234567))});
  return &nodes_.back();
}

bool State::complete() const {
  return partial_left == 0 && std::find(stacks.begin(), stacks.end(), nullptr) != stacks.end();
}

std::string State::key() const {
  std::vector<std::vector<uint32_t>> v;
  for (const Stack* s : stacks) {
    v.emplace_back();
    for (; s; s = s->next) v.back().push_back(s->pos);
  }
  std::sort(v.begin(), v.end());
  std::string k;
  auto put = [&](uint32_t x) { k.append(reinterpret_cast<const char*>(&x), 4); };
  put(partial);
  put(uint32_t(partial_left));
  put(partial_min);
  for (const auto& s : v) {
    put(uint32_t(s.size()));
    for (uint32_t p : s) put(p);
  }
  return k;
}

struct Matcher::Expansion {
  Expansion(std::vector<const Stack*>* o, StackArena& a) : out(o), arena(a) {}
  std::vector<const Stack*>* out;
  StackArena& arena;
  size_t budget = Grammar::kMaxExpansions;
  std::unordered_set<const Stack*, StackHash, StackEq> seen;  // used once out is long

  bool over() const { return budget == 0 || out->size() > Grammar::kMaxStacks; }
  void push(const Stack* s) {  // unless an equal stack is there
    if (out->size() < 16) {
      for (const Stack* o : *out)
        if (StackEq()(o, s)) return;
    } else {
      if (seen.empty()) seen.insert(out->begin(), out->end());
      if (!seen.insert(s).second) return;
    }
    out->push_back(s);
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  Expansion x(&state_.stacks, arena_);
  for (uint32_t a : g_->alts[g_->root]) expand(a, nullptr, &x);
  if (x.over()) state_.stacks.clear();
}

// Stacks for matching at pos with `rest` after it: rule references are opened until each
// stack's top is a character class (or the parse is complete: nullptr).
void Matcher::expand(uint32_t pos, const Stack* rest, Expansion* x) const {
  if (x->over()) return;
  --x->budget;
  const Elem& e = g_->elems[pos];
  switch (e.kind) {
    case Elem::kChar:
      x->push(x->arena.make(pos, rest));
      return;
    case Elem::kEnd:
      if (!rest) x->push(nullptr);
      else if (g_->elems[rest->pos].kind == Elem::kChar) x->push(rest);
      else expand(rest->pos, rest->next, x);
      return;
    case Elem::kRef: {
      const Stack* after = g_->elems[pos + 1].kind == Elem::kEnd ? rest : x->arena.make(pos + 1, rest);
      for (uint32_t a : g_->alts[e.arg]) expand(a, after, x);
      return;
    }
  }
}

bool Matcher::advance(const std::vector<const Stack*>& in, uint32_t c, std::vector<const Stack*>* out,
                      StackArena& arena) const {
  out->clear();
  Expansion x(out, arena);
  for (const Stack* s : in)
    if (s && g_->classes[g_->elems[s->pos].arg].matches(c)) expand(s->pos + 1, s->next, &x);
  if (x.over()) out->clear();
  return !out->empty();
}

bool Matcher::step(const State& in, uint8_t b, State* out, StackArena& arena) const {
  out->partial = 0;
  out->partial_left = 0;
  out->partial_min = 0;
  if (in.partial_left == 0) {
    if (b < 0x80) {
      return advance(in.stacks, b, &out->stacks, arena);
    }
    const int left = (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : 0;
    if (left == 0) return out->stacks.clear(), false;
    out->partial = b & (0x3F >> left);
    out->partial_left = left;
    out->partial_min = left == 1 ? 0x80 : left == 2 ? 0x800 : 0x10000;
  } else {
    if ((b & 0xC0) != 0x80) return out->stacks.clear(), false;
    out->partial = (in.partial << 6) | (b & 0x3F);
    out->partial_left = in.partial_left - 1;
    out->partial_min = in.partial_min;
    if (out->partial_left == 0) {
      const uint32_t c = out->partial;
      out->partial = out->partial_min = 0;
      out->stacks.clear();
      if (c < in.partial_min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;  // overlong, not Unicode
      return advance(in.stacks, c, &out->stacks, arena);
    }
  }
  // inside a character: keep the stacks that can take some character with this prefix
  const uint32_t lo = std::max(out->partial << (6 * out->partial_left), out->partial_min),
                 hi = std::min((out->partial << (6 * out->partial_left)) | ((1u << (6 * out->partial_left)) - 1), 0x10FFFFu);
  out->stacks.clear();
  if (lo > hi) return false;
  for (const Stack* s : in.stacks)
    if (s && g_->classes[g_->elems[s->pos].arg].matches_any(lo, hi)) out->stacks.push_back(s);
  return !out->stacks.empty();
}

bool Matcher::accept(std::string_view bytes) {
  State cur = state_, next;
  for (char ch : bytes) {
    if (!step(cur, uint8_t(ch), &next, arena_)) return false;
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return true;
}

}  // namespace grammar
