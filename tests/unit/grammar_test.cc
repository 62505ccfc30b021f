// grammar_test.cc: constrained decoding. The GBNF parser's errors; the recognizer on
// sentences in and out of small grammars; JSON schemas' grammars accepting documents
// the schema accepts and refusing ones it does not; random sentences of the schemas'
// grammars parsing as JSON with the required properties; and the token masks, computed by
// walking the vocabulary trie, equal to checking every token of SmolLM2's vocabulary on
// its own (the brute-force reference), from several states.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/trigger.h"
#include "grammar/vocab_mask.h"
#include "tokenizer/tokenizer.h"

namespace {

using grammar::Grammar;
using grammar::Matcher;

std::shared_ptr<const Grammar> must_parse(const std::string& g) {
  auto r = Grammar::parse(g);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.status().message()) << "\n" << g;
  return r.ok() ? *r : nullptr;
}

// Whether the whole text is a sentence (complete) / a prefix of one (accepted).
struct Fed {
  bool accepted, complete;
};
Fed feed(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  if (!m.accept(text)) return {false, false};
  return {true, m.state().complete()};
}

TEST(Grammar, ParseErrorsNameTheProblem) {
  auto err = [](const std::string& g) {
    auto r = Grammar::parse(g);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(err("root ::= foo").find("'foo' is used but not defined"), std::string::npos);
  EXPECT_NE(err("start ::= \"a\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(err("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= x \"a\"\nx ::= | root").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= \"abc").find("line 1"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"\nx := \"b\"").find("line 2"), std::string::npos);
  EXPECT_NE(err("root ::= [a-").find("not closed"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"{3,2}").find("n < m"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_EQ(err("root ::= (\"a\"\n  | \"b\")  # comment\n"), "ok");
}

TEST(Grammar, RecognizesSentencesAndPrefixes) {
  auto g = must_parse(R"(root ::= "a" [0-9]+ ("x" | "yz")? tail
tail ::= "." | [^a-z\n]{2,3} | "é")");
  ASSERT_TRUE(g);
  EXPECT_FALSE(feed(g, "b").accepted);
  EXPECT_TRUE(feed(g, "a").accepted);
  EXPECT_FALSE(feed(g, "a").complete);
  EXPECT_FALSE(feed(g, "ax").accepted);   // a digit first
  EXPECT_TRUE(feed(g, "a12.").complete);
  EXPECT_TRUE(feed(g, "a1yz.").complete);
  EXPECT_FALSE(feed(g, "a1y.").accepted);
  EXPECT_TRUE(feed(g, "a1x##").complete);
  EXPECT_TRUE(feed(g, "a1x###").complete);
  EXPECT_FALSE(feed(g, "a1x####").accepted);
  EXPECT_FALSE(feed(g, "a1x#").complete);
  EXPECT_FALSE(feed(g, "a1xab").accepted);
  EXPECT_TRUE(feed(g, "a1\xc3\xa9").complete);           // é, two bytes
  EXPECT_TRUE(feed(g, "a1\xc3").accepted);               // half of it: a prefix
  EXPECT_FALSE(feed(g, "a1\xc3").complete);
  EXPECT_FALSE(feed(g, "a1\xff").accepted);              // not UTF-8
  EXPECT_FALSE(feed(g, "a\xe0").accepted);               // a digit's overlong forms start so
  EXPECT_TRUE(feed(g, "a1\xe0").accepted);               // U+0800.. of [^a-z\n] start so
  EXPECT_FALSE(feed(g, "a1x\xc0\xae.").accepted);        // an overlong '.'
  EXPECT_TRUE(feed(g, "a1\xe2\x82\xac\xe2\x82\xac").complete);  // €€: two of [^a-z\n]
  // byte by byte, a multi-byte character split anywhere
  Matcher m(g);
  for (char c : std::string("a9\xc3")) ASSERT_TRUE(m.accept(std::string(1, c)));
  EXPECT_TRUE(m.accept("\xa9"));
  EXPECT_TRUE(m.state().complete());
}

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]})",
    R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}, "required": ["c"], "additionalProperties": false})",
    R"({"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3})",
    R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 5}}, "id": {"type": "string", "format": "uuid"}}, "required": ["id"]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}}, "$ref": "#/$defs/node"})",
    R"({"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}, "kind": {"const": "event"}, "n": {"type": ["integer", "string"]}}, "required": ["when", "kind", "n"]})",
    R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "minLength": 2}], "items": false})",
};

// Nested ambiguity needs 2^depth parse stacks: past the limits a grammar is refused when its
// start already needs too many, and otherwise cannot read the byte that would (found by the
// fuzzer: one such byte took minutes). Wide but shallow grammars stay within them.
TEST(Grammar, AmbiguityHasABound) {
  auto nested = [](int depth) {
    std::string g = "\"a\"";
    for (int i = 0; i < depth; ++i) g = "(" + g + ")+";
    return g;
  };
  // r_k ::= r_k-1 | r_k-1 "b": 2^13 distinct stacks before the first byte
  std::string start = "root ::= r13\nr0 ::= \"a\"\n";
  for (int k = 1; k <= 13; ++k) {  // (appended piece by piece: "r" + std::string&& trips GCC 12's -Wrestrict)
    const std::string prev = std::to_string(k - 1);
    start += "r";
    start += std::to_string(k) + " ::= r" + prev + " | r" + prev + " \"b\"\n";
  }
  auto refused = Grammar::parse(start);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("too ambiguous"), std::string::npos) << refused.status().message();
  // ((("a")+)+)+...: every level can be in its first copy or in its loop, so the stacks
  // grow with each byte to 2^13; the byte past the limit is refused, quickly
  auto deep = must_parse("root ::= " + nested(13) + " | \"y\"");
  ASSERT_TRUE(deep);
  EXPECT_TRUE(feed(deep, "aa").accepted);
  EXPECT_FALSE(feed(deep, std::string(40, 'a')).accepted);
  EXPECT_TRUE(feed(deep, "y").complete);
  auto shallow = must_parse("root ::= " + nested(3));  // 8 stacks
  ASSERT_TRUE(shallow);
  EXPECT_TRUE(feed(shallow, "aaaaaaaaaaaaaaaaaaaa").complete);
  // an enum of 3000 values with one prefix: 3000 live stacks after it
  std::string alts;
  for (int i = 0; i < 3000; ++i) alts += (i ? " | \"v" : "\"v") + std::to_string(i) + "\"";
  auto wide = must_parse("root ::= " + alts);
  ASSERT_TRUE(wide);
  Matcher m(wide);
  ASSERT_TRUE(m.accept("v"));
  EXPECT_EQ(m.state().stacks.size(), 3000u);
  EXPECT_TRUE(m.accept("2999"));
  EXPECT_TRUE(m.state().complete());
}

TEST(Grammar, JsonSchemasAcceptTheirDocumentsAndRefuseOthers) {
  struct Case {
    int schema;
    std::string doc;
    bool valid;
  };
  const Case cases[] = {
      {0, R"({"name": "Ann", "age": 31})", true},
      {0, R"({"name":"Ann","age":-4})", true},
      {0, "{\n  \"name\": \"A\\\"n\\u00e9\",\n  \"age\": 0\n}", true},
      {0, R"({"name": "Ann"})", false},                 // age is required
      {0, R"({"age": 31, "name": "Ann"})", false},      // the schema's order
      {0, R"({"name": "Ann", "age": 3.5})", false},
      {0, R"({"name": "Ann", "age": 031})", false},
      {0, R"({"name": "Ann", "age": 1, "x": 2})", false},
      {1, R"({"c": 1.5e3})", true},
      {1, R"({"a": true, "b": null, "c": -0.25})", true},
      {1, R"({"a": true})", false},
      {1, R"({})", false},
      {2, R"(["red"])", true},
      {2, R"(["red", "blue", "green"])", true},
      {2, R"([])", false},
      {2, R"(["red", "red", "red", "red"])", false},
      {2, R"(["pink"])", false},
      {3, R"({"id": "123e4567-e89b-12d3-a456-426614174000"})", true},
      {3, R"({"tags": ["ab", "cdefg"], "id": "123e4567-e89b-12d3-a456-426614174000"})", true},
      {3, R"({"tags": ["abcdef"], "id": "123e4567-e89b-12d3-a456-426614174000"})", false},
      {3, R"({"id": "not-a-uuid"})", false},
      {4, R"({"v": 1, "next": {"v": 2, "next": null}})", true},
      {4, R"({"v": -1, "next": null})", false},
      {5, R"({"when": "2026-12-01T18:21:05Z", "kind": "event", "n": "x"})", true},
      {5, R"({"when": "2026-13-01T18:21:05Z", "kind": "event", "n": 1})", false},
      {5, R"({"when": "2026-12-01T18:21:05+01:00", "kind": "other", "n": 1})", false},
      {6, R"([1, "ab"])", true},
      {6, R"([1, "a"])", false},
      {6, R"([1, "ab", 2])", false},
  };
  std::vector<std::shared_ptr<const Grammar>> gs;
  for (const char* s : kSchemas) {
    auto gbnf = grammar::json_schema_gbnf(nlohmann::ordered_json::parse(s));
    ASSERT_TRUE(gbnf.ok()) << s << ": " << gbnf.status().message();
    gs.push_back(must_parse(*gbnf));
    ASSERT_TRUE(gs.back()) << *gbnf;
  }
  for (const Case& c : cases) EXPECT_EQ(feed(gs[size_t(c.schema)], c.doc).complete, c.valid) << c.schema << ": " << c.doc;
  auto obj = must_parse(grammar::json_object_gbnf());
  EXPECT_TRUE(feed(obj, R"({"a": [1, {"b": null}], "c": "d"})").complete);
  EXPECT_TRUE(feed(obj, "{}").complete);
  EXPECT_FALSE(feed(obj, "[1]").accepted);
  EXPECT_FALSE(feed(obj, R"({"a": 1,})").complete);
}

TEST(Grammar, UnsupportedSchemaKeywordsAreRefusedByName) {
  auto err = [](const char* s) {
    auto r = grammar::json_schema_gbnf(nlohmann::ordered_json::parse(s));
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(err(R"({"type": "string", "pattern": "^a+$"})").find("'pattern' is not supported"), std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {"x": {"type": "integer", "maximum": 3}}})").find("#/properties/x"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "string", "format": "email"})").find("format 'email'"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "#/$defs/missing"})").find("does not name"), std::string::npos);
  EXPECT_NE(err(R"({"type": "frog"})").find("unknown type 'frog'"), std::string::npos);
  EXPECT_EQ(err(R"({"type": "string", "title": "t", "description": "d"})"), "ok");
}

// A random sentence of g: bytes drawn from those the state allows, until complete (or
// the budget runs out); the walk prefers ending once it may, so it terminates.
std::string random_sentence(const std::shared_ptr<const Grammar>& g, std::mt19937& rng, size_t budget) {
  Matcher m(g);
  std::string out;
  grammar::StackArena scratch;
  const std::string alphabet = "{}[]\":, \n-.0123456789abcdefghijklmnopqrstuvwxyzABCDEFTZ+eE\\u";
  while (out.size() < budget) {
    if (m.state().complete() && (rng() % 4 == 0 || out.size() > budget / 2)) return out;
    std::vector<char> ok;
    for (char c : alphabet) {
      grammar::State next;
      if (m.step(m.state(), uint8_t(c), &next, scratch)) ok.push_back(c);
    }
    if (ok.empty()) return out;
    // near the budget, prefer closing characters
    char c = ok[rng() % ok.size()];
    if (out.size() > budget / 2)
      for (char pref : {'"', '}', ']', '0', 'l', 'e', 'u', 'r'})
        if (std::find(ok.begin(), ok.end(), pref) != ok.end() && rng() % 2) {
          c = pref;
          break;
        }
    EXPECT_TRUE(m.accept(std::string(1, c)));
    out += c;
  }
  return out;
}

TEST(Grammar, RandomSentencesOfSchemasAreJsonWithTheRequiredProperties) {
  std::mt19937 rng(7);
  for (int si : {0, 1, 3, 4, 5}) {
    auto gbnf = grammar::json_schema_gbnf(nlohmann::ordered_json::parse(kSchemas[si]));
    ASSERT_TRUE(gbnf.ok());
    auto g = must_parse(*gbnf);
    const auto schema = nlohmann::json::parse(kSchemas[si]);
    const nlohmann::json& obj = schema.contains("$ref") ? schema["$defs"]["node"] : schema;
    int complete = 0;
    for (int k = 0; k < 40; ++k) {
      const std::string s = random_sentence(g, rng, 400);
      if (!feed(g, s).complete) continue;
      ++complete;
      auto doc = nlohmann::json::parse(s, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << s;
      ASSERT_TRUE(doc.is_object()) << s;
      for (const auto& r : obj["required"]) EXPECT_TRUE(doc.contains(r.get<std::string>())) << s;
      for (const auto& [key, v] : doc.items()) EXPECT_TRUE(obj["properties"].contains(key)) << s;
    }
    EXPECT_GT(complete, 10) << kSchemas[si];
  }
}

const tokenizer::Tokenizer* smollm2() {
  static std::unique_ptr<gguf::File> f;
  static std::unique_ptr<tokenizer::Tokenizer> tok;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const char* env = std::getenv("SHARDLM_MODEL");
    const std::string path = env ? env : SHARDLM_DEFAULT_MODEL;
    if (!std::filesystem::exists(path)) return nullptr;
    auto file = gguf::File::open(path);
    if (!file.ok()) return nullptr;
    auto t = tokenizer::Tokenizer::from_gguf(**file);
    if (!t.ok()) return nullptr;
    f = std::move(file).value();
    tok = std::move(t).value();
  }
  return tok.get();
}

TEST(Grammar, TokenMasksEqualCheckingEveryToken) {
  const tokenizer::Tokenizer* tok = smollm2();
  if (!tok) GTEST_SKIP() << "SmolLM2 not found (make deps)";
  auto trie = std::make_shared<const grammar::VocabTrie>(*tok);
  auto gbnf = grammar::json_schema_gbnf(nlohmann::ordered_json::parse(kSchemas[0]));
  ASSERT_TRUE(gbnf.ok());
  auto g = must_parse(*gbnf);
  // a token of the single byte 0xC3 (the first half of é)
  int32_t half = -1;
  for (int32_t id = 0; id < tok->n_vocab() && half < 0; ++id)
    if (tok->piece(id) == "\xc3") half = id;
  ASSERT_GE(half, 0);
  // states: the start, after "{", inside a key, inside a string value, half a character
  // into it, after the number, and complete
  for (const std::string prefix : {"", "{", "{\"na", "{\"name\": \"A", "{\"name\": \"A\xc3",
                                   "{\"name\": \"Ann\", \"age\": 3", "{\"name\": \"Ann\", \"age\": 3}"}) {
    grammar::GrammarConstraint c(g, trie);
    std::vector<int32_t> ids = tok->encode(prefix.back() == '\xc3' ? prefix.substr(0, prefix.size() - 1) : prefix,
                                           false, false);
    if (prefix.back() == '\xc3') ids.push_back(half);
    std::string text;
    for (int32_t id : ids) text += tok->piece(id);
    ASSERT_EQ(text, prefix);
    Matcher ref(g);
    ASSERT_TRUE(ref.accept(prefix));
    // feed the prefix through the constraint token by token, as decoding does
    for (int32_t id : ids) {
      ASSERT_TRUE((c.allowed()[size_t(id) / 64] >> (id % 64)) & 1) << "prefix " << prefix << " token " << id;
      c.accept(id);
    }
    const std::vector<uint64_t> mask = c.allowed();
    int allowed = 0, mismatches = 0;
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
      const bool bit = (mask[size_t(id) / 64] >> (id % 64)) & 1;
      bool want;
      if (tok->is_eog(id)) {
        want = ref.state().complete();
      } else if (tok->is_control(id) || tok->piece(id).empty()) {
        want = false;
      } else {
        grammar::State st = ref.state(), next;
        grammar::StackArena scratch;
        want = true;
        for (char ch : tok->piece(id)) {
          if (!ref.step(st, uint8_t(ch), &next, scratch)) {
            want = false;
            break;
          }
          std::swap(st, next);
        }
      }
      allowed += bit;
      if (bit && prefix.empty() && !tok->is_eog(id)) {  // the start: "{" (no lead bytes of overlong forms)
        EXPECT_EQ(tok->piece(id)[0], '{') << id;
      }
      mismatches += bit != want;
      if (bit != want && mismatches < 5) ADD_FAILURE() << "prefix '" << prefix << "' token " << id << " '" << tok->piece(id) << "'";
    }
    EXPECT_EQ(mismatches, 0) << prefix;
    EXPECT_GT(allowed, 0) << prefix;
    std::printf("[ grammar ] after '%s': %d of %d tokens allowed\n", prefix.c_str(), allowed, tok->n_vocab());
  }
}

}  // namespace

// Inside an unbounded string every character leaves the same state, so the masks after
// the first come from the cache (a bounded one, char{0,n}, changes state every character).
TEST(Grammar, MasksInsideAStringComeFromTheCache) {
  const tokenizer::Tokenizer* tok = smollm2();
  if (!tok) GTEST_SKIP() << "SmolLM2 not found (make deps)";
  auto trie = std::make_shared<const grammar::VocabTrie>(*tok);
  auto gbnf = grammar::json_schema_gbnf(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"a": {"type": "string"}}})"));
  ASSERT_TRUE(gbnf.ok());
  grammar::GrammarConstraint c(must_parse(*gbnf), trie);
  for (int32_t id : tok->encode("{\"a\": \"the cat sat on the mat and looked", false, false)) {
    ASSERT_TRUE((c.allowed()[size_t(id) / 64] >> (id % 64)) & 1);
    c.accept(id);
  }
  EXPECT_GE(c.stats().cached, 5u) << c.stats().masks;
  EXPECT_LT(c.stats().masks - c.stats().cached, 8u);
}

// Past its state limit the constraint's automaton starts again from the current state and
// goes on as before.
TEST(Grammar, ConstraintGoesOnPastItsStateLimit) {
  const tokenizer::Tokenizer* tok = smollm2();
  if (!tok) GTEST_SKIP() << "SmolLM2 not found (make deps)";
  auto trie = std::make_shared<const grammar::VocabTrie>(*tok);
  grammar::GrammarConstraint c(must_parse(R"(root ::= "a"{0,6000} "b")"), trie);
  const int32_t a = *tok->find_token("a"), b = *tok->find_token("b"), x = *tok->find_token("x");
  auto ok = [&](int32_t id) { return bool((c.allowed()[size_t(id) / 64] >> (id % 64)) & 1); };
  for (int i = 0; i < 5000; ++i) {  // every "a" is a new state: the automaton restarts once
    if (i % 1000 == 999) {
      EXPECT_TRUE(ok(a) && ok(b) && !ok(x)) << i;
    }
    c.accept(a);
  }
  EXPECT_TRUE(ok(a) && ok(b) && !ok(x));
  EXPECT_FALSE(c.complete());
  c.accept(b);
  EXPECT_TRUE(c.complete());
  EXPECT_FALSE(ok(a));
  EXPECT_TRUE(ok(tok->eos()) || !tok->is_eog(tok->eos()));
}

// A triggered grammar (tool_choice auto): text is free until the trigger; a token that
// would complete the trigger is allowed exactly when the grammar reads the text from the
// trigger on; past the trigger the grammar's masks hold and the text ends complete.
TEST(Grammar, TriggeredGrammarStartsAtItsTrigger) {
  const tokenizer::Tokenizer* tok = smollm2();
  if (!tok) GTEST_SKIP() << "SmolLM2 not found (make deps)";
  auto trie = std::make_shared<const grammar::VocabTrie>(*tok);
  auto g = must_parse("root ::= \"<tool_call>\\n{\" [a-z]+ \"}\\n</tool_call>\"");
  grammar::TriggeredConstraint c(g, trie, {{"<tool_call>", false}});
  auto ok = [&](int32_t id) { return bool((c.allowed()[size_t(id) / 64] >> (id % 64)) & 1); };
  auto reads = [&](const std::string& text) {  // the grammar reads text (a prefix of a sentence)
    Matcher m(g);
    return m.accept(text);
  };
  std::string text;
  for (int32_t id : tok->encode("Let me check <tool_call", false, false)) {
    EXPECT_TRUE(ok(id)) << tok->piece(id);
    c.accept(id);
    text += tok->piece(id);
  }
  ASSERT_EQ(text, "Let me check <tool_call");
  EXPECT_FALSE(c.triggered());
  // every token: allowed unless it completes the trigger with text the grammar cannot read
  int masked = 0, completing = 0;
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    const std::string s = text + tok->piece(id);
    const size_t at = tok->is_control(id) || tok->is_eog(id) ? std::string::npos : s.find("<tool_call>");
    const bool want = at == std::string::npos || reads(s.substr(at));
    completing += at != std::string::npos;
    masked += !ok(id);
    EXPECT_EQ(ok(id), want) << id << " '" << tok->piece(id) << "'";
  }
  EXPECT_GT(completing, 0);
  std::printf("[ grammar ] after '%s': %d tokens complete the trigger, %d of them masked\n", text.c_str(), completing,
              masked);
  for (int32_t id : tok->encode(">\n{ab", false, false)) {
    ASSERT_TRUE(ok(id)) << tok->piece(id);
    c.accept(id);
  }
  EXPECT_TRUE(c.triggered());
  EXPECT_FALSE(ok(*tok->find_token("1")));  // the grammar's mask now
  EXPECT_FALSE(ok(tok->eos()));
  for (int32_t id : tok->encode("}\n</tool_call>", false, false)) {
    ASSERT_TRUE(ok(id)) << tok->piece(id);
    c.accept(id);
  }
  EXPECT_TRUE(ok(tok->eos()));
  // text with no trigger stays free; an at_start trigger only counts at the reply's start
  grammar::TriggeredConstraint free(g, trie, {{"<tool_call>", false}});
  for (int32_t id : tok->encode("no call here </tool_call> {x}", false, false)) free.accept(id);
  EXPECT_FALSE(free.triggered());
  auto obj = must_parse("root ::= \"{\" [a-z]+ \"}\"");
  grammar::TriggeredConstraint late(obj, trie, {{"{", true}});
  for (int32_t id : tok->encode("It is {x}", false, false)) late.accept(id);
  EXPECT_FALSE(late.triggered());
  grammar::TriggeredConstraint early(obj, trie, {{"{", true}});
  const std::vector<uint64_t> m = early.allowed();
  const int32_t open_digit = tok->find_token("{1").value_or(-1), open_letter = tok->find_token("{a").value_or(-1);
  if (open_digit >= 0) {
    EXPECT_FALSE((m[size_t(open_digit) / 64] >> (open_digit % 64)) & 1);
  }
  if (open_letter >= 0) {
    EXPECT_TRUE((m[size_t(open_letter) / 64] >> (open_letter % 64)) & 1);
  }
  for (int32_t id : tok->encode(" {ab", false, false)) early.accept(id);
  EXPECT_TRUE(early.triggered());
}
