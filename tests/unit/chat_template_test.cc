// chat_template_test.cc: the chat-template interpreter against Python's jinja2. Every
// template x case x add_generation_prompt in tests/data/chat_template_golden.json (made by
// tools/make_chat_template_golden.py) must render byte-identically, or fail where jinja2
// fails; plus refusals of unsupported constructs, malformed templates (always an error,
// never a crash), runtime errors and the built-in templates.
// Deliberately not here: tokenizing the rendered prompt (tokenizer_test.cc).
// GCC 12 at -O1 with the sanitizers (the asan preset) warns -Wmaybe-uninitialized inside
// std::regex's automaton (a std::function moved in bits/regex_automaton.h): a false
// positive in a system header. Silenced for <functional> and <regex> alone, included
// first so that their code is read inside the pragma.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <functional>
#include <regex>
#pragma GCC diagnostic pop

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "tokenizer/chat_template.h"

namespace tokenizer {
namespace {

const std::string kDataDir = std::string(SHARDLM_SOURCE_DIR) + "/tests/data/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::ordered_json read_json(const std::string& path) { return nlohmann::ordered_json::parse(read_file(path)); }

// True when every message has only role and content (so the plain render() API fits).
bool simple_messages(const nlohmann::ordered_json& messages) {
  for (const auto& m : messages) {
    if (m.size() != 2 || !m.contains("role") || !m.contains("content") || !m["content"].is_string()) return false;
  }
  return true;
}

TEST(ChatTemplate, MatchesJinja2Golden) {
  nlohmann::ordered_json spec = read_json(kDataDir + "chat_template_cases.json");
  nlohmann::ordered_json golden = read_json(kDataDir + "chat_template_golden.json");
  std::map<std::string, nlohmann::ordered_json> cases;
  for (const auto& c : spec["cases"]) cases[c["name"].get<std::string>()] = c;
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, info] : spec["templates"].items()) {
    auto t = ChatTemplate::parse(read_file(kDataDir + "chat_templates/" + info["file"].get<std::string>()));
    ASSERT_TRUE(t.ok()) << name << ": " << t.error();
    templates.emplace(name, std::move(t.value()));
  }

  std::map<std::string, std::pair<int, int>> per_template;  // passed, total
  int passed = 0, total = 0;
  for (const auto& r : golden["results"]) {
    const std::string tname = r["template"], cname = r["case"];
    const bool agp = r["add_generation_prompt"];
    SCOPED_TRACE(tname + " x " + cname + (agp ? " (add_generation_prompt)" : ""));
    const auto& info = spec["templates"][tname];
    const auto& c = cases.at(cname);
    const ChatTemplate& t = templates.at(tname);
    std::string bos = info["bos_token"], eos = info["eos_token"];

    util::Expected<std::string> got = std::string();
    if (simple_messages(c["messages"])) {
      std::vector<ChatMessage> messages;
      for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
      nlohmann::json extra = c.contains("extra") ? nlohmann::json::parse(c["extra"].dump()) : nlohmann::json();
      got = t.render(messages, agp, bos, eos, extra);
    } else {
      nlohmann::ordered_json context = {{"messages", c["messages"]},
                                        {"add_generation_prompt", agp},
                                        {"bos_token", bos},
                                        {"eos_token", eos}};
      if (c.contains("extra"))
        for (const auto& [k, v] : c["extra"].items()) context[k] = v;
      got = t.render_context(context);
    }

    // strftime_now is today's date here and 2026-01-01 in the golden (gpt-oss's "Current date:").
    if (got.ok()) {
      static const std::regex kDate("Current date: [0-9]{4}-[0-9]{2}-[0-9]{2}");
      *got = std::regex_replace(*got, kDate, "Current date: 2026-01-01");
    }
    bool ok = false;
    if (r.contains("output")) {
      EXPECT_TRUE(got.ok()) << got.error();
      if (got.ok()) {
        EXPECT_EQ(*got, r["output"].get<std::string>());
        ok = *got == r["output"].get<std::string>();
      }
    } else {
      std::string expected = r["error"];
      EXPECT_FALSE(got.ok()) << "jinja2 failed with " << expected << " but we rendered:\n" << *got;
      if (!got.ok()) {
        ok = true;
        const std::string prefix = "TemplateError: ";  // raise_exception: the message must survive
        if (expected.rfind(prefix, 0) == 0) {
          EXPECT_NE(got.error().find(expected.substr(prefix.size())), std::string::npos) << got.error();
          ok = got.error().find(expected.substr(prefix.size())) != std::string::npos;
        }
      }
    }
    passed += ok;
    ++total;
    per_template[tname].first += ok;
    per_template[tname].second += 1;
  }
  for (const auto& [name, pt] : per_template) std::printf("  %-26s %3d/%3d\n", name.c_str(), pt.first, pt.second);
  std::printf("chat templates: %d/%d renders match jinja2\n", passed, total);
  EXPECT_EQ(passed, total);
  EXPECT_GE(per_template.size(), 8u);
}

TEST(ChatTemplate, BuiltinsMatchTestData) {
  const std::pair<const char*, const char*> kFiles[] = {{"chatml", "chatml.jinja"}, {"llama3", "llama3.jinja"},
                                                        {"llama2", "llama2.jinja"}, {"mistral", "mistral-v0.1.jinja"},
                                                        {"qwen2", "qwen2.5.jinja"}, {"gemma", "gemma2.jinja"},
                                                        {"gemma3", "gemma3.jinja"}, {"gpt-oss", "gpt-oss.jinja"}};
  for (const auto& [name, file] : kFiles) {
    auto src = builtin_chat_template(name);
    ASSERT_TRUE(src.has_value()) << name;
    EXPECT_EQ(*src, read_file(kDataDir + "chat_templates/" + file)) << name;
    EXPECT_TRUE(ChatTemplate::parse(*src).ok()) << name;
  }
  EXPECT_FALSE(builtin_chat_template("no-such-template").has_value());
}

TEST(ChatTemplate, RendersChatmlExample) {
  auto t = ChatTemplate::parse(*builtin_chat_template("chatml"));
  ASSERT_TRUE(t.ok());
  auto out = t->render({{"system", "Be brief."}, {"user", "Hi"}}, true, "<s>", "</s>");
  ASSERT_TRUE(out.ok()) << out.error();
  EXPECT_EQ(*out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, RefusesUnsupportedConstructsClearly) {
  const char* kTemplates[] = {
      "{% extends 'base.html' %}",
      "{% include 'header' %}",
      "{% import 'macros' as m %}",
      "{% from 'x' import y %}",
      "{% block content %}x{% endblock %}",
      "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}",
      "{% with a = 1 %}{{ a }}{% endwith %}",
      "{% do x.append(1) %}",
      "{% for m in messages recursive %}{{ loop(m.children) }}{% endfor %}",
      "{{ messages | groupby('role') }}",
      "{{ 'x' | format_me }}",
      "{% if x is prime %}{% endif %}",
  };
  for (const char* src : kTemplates) {
    auto t = ChatTemplate::parse(src);
    ASSERT_FALSE(t.ok()) << "accepted: " << src;
    EXPECT_NE(t.error().find("unsupported"), std::string::npos) << src << " -> " << t.error();
    EXPECT_NE(t.error().find("--chat-template"), std::string::npos) << src << " -> " << t.error();
  }
}

TEST(ChatTemplate, MalformedTemplatesAreErrors) {
  const char* kTemplates[] = {
      "{{ x",
      "{{ x }",
      "{% if x %}",
      "{% if x %}{% endfor %}",
      "{% for x in %}{% endfor %}",
      "{% for in y %}{% endfor %}",
      "{% endif %}",
      "{# unterminated comment",
      "{{ 'unterminated string }}",
      "{{ (1, 2 }}",
      "{{ [1, 2 }}",
      "{{ {'a': 1 }}",
      "{{ 1 + }}",
      "{{ x | }}",
      "{{ x is }}",
      "{% set %}",
      "{% set x %}no end",
      "{% macro m( %}{% endmacro %}",
      "{% raw %}never closed",
      "{{ x[1:2:3:4] }}",
      "{% unknown_tag %}",
      "{{ ) }}",
      "{{ 'a' 'b' c }}",
      "{{ x.1a }}",
      "{% if %}{% endif %}",
      "{% else %}",
  };
  for (const char* src : kTemplates) {
    auto t = ChatTemplate::parse(src);
    EXPECT_FALSE(t.ok()) << "accepted: " << src;
    if (!t.ok()) {
      EXPECT_NE(t.error().find("chat template"), std::string::npos) << t.error();
    }
  }
}

TEST(ChatTemplate, RuntimeErrorsAreReported) {
  const std::pair<const char*, const char*> kCases[] = {
      {"{{ raise_exception('custom failure') }}", "custom failure"},
      {"{{ nothing.attr }}", "'nothing' is undefined"},
      {"{{ 'a' + 1 }}", "concatenate"},
      {"{{ messages.append(1) }}", "unsafe"},
      {"{{ 1 // 0 }}", "zero"},
      {"{{ undefined_thing + 1 }}", "undefined"},
      {"{% set x = 1 %}{% set x.y = 2 %}", "namespace"},
      {"{% for a, b in [1, 2] %}{% endfor %}", "unpack"},
      {"{{ '%s' % 1 }}", "not supported"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "limit"},
      {"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursion"},
      {"{{ 9223372036854775807 + 1 }}", "overflow"},
      {"{{ -9223372036854775807 - 2 }}", "overflow"},
      {"{{ 4294967296 * 4294967296 }}", "overflow"},
      {"{{ 2 ** 63 }}", "overflow"},
      {"{{ (-9223372036854775807 - 1) // -1 }}", "overflow"},  // was SIGFPE
      {"{{ -(-9223372036854775807 - 1) }}", "overflow"},
      {"{{ (-9223372036854775807 - 1)|abs }}", "overflow"},
      {"{{ [9223372036854775807, 1]|sum }}", "overflow"},
      {"{{ 'ab' * 9223372036854775807 }}", "too large"},  // the size check itself overflowed
      // what a template builds is bounded (64 MiB strings, 1M-item lists), whichever way
      {"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "64 MiB"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "1M items"},
      {"{{ [1] * 2000000 }}", "too large"},
      {"{{ ('x' * 10000).replace('x', 'y' * 10000) }}", "64 MiB"},
      {"{{ ('x' * 10000).replace('', 'y' * 10000) }}", "64 MiB"},
      {"{{ range(100000)|join('y' * 1000) }}", "64 MiB"},
      {"{{ [1]|tojson(indent=4294967298) }}", "too large"},  // was cut to int: indent 2
      {"{{ [1]|tojson(indent=2.5) }}", "must be an integer"},
  };
  for (const auto& [src, needle] : kCases) {
    auto t = ChatTemplate::parse(src);
    ASSERT_TRUE(t.ok()) << src << ": " << t.error();
    auto out = t->render({{"user", "hi"}}, false, "", "");
    ASSERT_FALSE(out.ok()) << src << " rendered " << *out;
    EXPECT_NE(out.error().find(needle), std::string::npos) << src << " -> " << out.error();
  }
}

TEST(ChatTemplate, DeepNestingIsAnErrorNotACrash) {
  std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::parse(parens).ok());
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_FALSE(ChatTemplate::parse(nots + "x }}").ok());
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if x %}";
  EXPECT_FALSE(ChatTemplate::parse(ifs).ok());
}

// Every prefix and many byte mutations of the real templates must parse or fail cleanly,
// and whatever parses must render or fail cleanly.
TEST(ChatTemplate, TruncatedAndMutatedTemplatesNeverCrash) {
  nlohmann::ordered_json spec = read_json(kDataDir + "chat_template_cases.json");
  std::mt19937 rng(1234);
  const std::string kBytes = "{}%#-+()[]'\"|.,:= \nxa1";
  int parsed = 0, rejected = 0;
  for (const auto& [name, info] : spec["templates"].items()) {
    std::string src = read_file(kDataDir + "chat_templates/" + info["file"].get<std::string>());
    std::vector<std::string> variants;
    for (size_t n = 0; n < src.size(); n += 7) variants.push_back(src.substr(0, n));
    for (int i = 0; i < 300; ++i) {
      std::string m = src;
      for (int k = 0; k < 3; ++k) m[rng() % m.size()] = kBytes[rng() % kBytes.size()];
      variants.push_back(m);
    }
    for (const auto& v : variants) {
      auto t = ChatTemplate::parse(v);
      if (!t.ok()) {
        ++rejected;
        continue;
      }
      ++parsed;
      auto out = t->render({{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u2"}}, true, "<s>", "</s>");
      if (!out.ok()) {
        EXPECT_FALSE(out.error().empty());
      }
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

// Each template, rendered with no messages, gives its expected text.
template <size_t N>
void expect_renders(const std::pair<const char*, const char*> (&cases)[N]) {
  for (const auto& [src, want] : cases) {
    auto t = ChatTemplate::parse(src);
    ASSERT_TRUE(t.ok()) << src << ": " << t.error();
    auto out = t->render({}, false, "", "");
    ASSERT_TRUE(out.ok()) << src << ": " << out.error();
    EXPECT_EQ(*out, want) << src;
  }
}

// tojson's indent as Hugging Face's filter passes it to Python's json.dumps (expected values
// from Python 3.11): 0 and below give newlines only, true is 1.
TEST(ChatTemplate, TojsonIndentAsPythonJson) {
  const std::pair<const char*, const char*> kCases[] = {
      {"{{ [1, {'a': 2}]|tojson(indent=-1) }}", "[\n1,\n{\n\"a\": 2\n}\n]"},
      {"{{ [1, {'a': 2}]|tojson(indent=0) }}", "[\n1,\n{\n\"a\": 2\n}\n]"},
      {"{{ [1, {'a': 2}]|tojson(indent=true) }}", "[\n 1,\n {\n  \"a\": 2\n }\n]"},
      {"{{ [1, {'a': 2}]|tojson }}", "[1, {\"a\": 2}]"},
  };
  expect_renders(kCases);
}

TEST(ChatTemplate, WhitespaceControlMatchesJinja2) {
  // Expected values from jinja2 3.1 with trim_blocks=True, lstrip_blocks=True.
  const std::pair<const char*, const char*> kCases[] = {
      {"a\n  {% if true %}\n  b\n  {% endif %}\nc\n", "a\n  b\nc"},
      {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
      {"a\n  {%+ if true %}b{% endif %}", "a\n  b"},
      {"{% if true +%}\nb{% endif %}", "\nb"},
      {"x {# c #}\ny", "x y"},
      {"  {# c #}\ny", "y"},
      {"{{ 'a' }}\n{{ 'b' -}}\n  c", "a\nbc"},
      {"line\r\nnext\r\n", "line\nnext"},
  };
  expect_renders(kCases);
}

// Integers at the edges of int64, as jinja2 3.1 renders them.
TEST(ChatTemplate, IntegerArithmeticAtTheEdges) {
  const std::pair<const char*, const char*> kCases[] = {
      {"{{ 2 ** 62 }}", "4611686018427387904"}, {"{{ (-1) ** 101 }}", "-1"}, {"{{ (-1) ** 100 }}", "1"},
      {"{{ 1 ** 1000 }}", "1"},                 {"{{ 0 ** 0 }}", "1"},        {"{{ 0 ** 5 }}", "0"},
      {"{{ (-9223372036854775807 - 1) % -1 }}", "0"}, {"{{ 7 // -1 }}", "-7"}, {"{{ -7 // 2 }}", "-4"},
      {"{{ 9223372036854775806 + 1 }}", "9223372036854775807"}, {"{{ (-9007199254740993)|abs }}", "9007199254740993"},
      {"{{ [9007199254740993, 1]|sum }}", "9007199254740994"}, {"{{ [1, 2.5]|sum }}", "3.5"}, {"{{ -(3) }}", "-3"},
      {"{{ true + true }}", "2"},
      // a step that leaves int64 ends the slice or range (it was a wrap, then a read out of bounds)
      {"{{ 'abc'[1::9223372036854775807] }}", "b"}, {"{{ [1, 2, 3][1::9223372036854775807] }}", "[2]"},
      {"{{ range(9223372036854775806, 9223372036854775807, 10)|list }}", "[9223372036854775806]"},
      {"{{ range(-9223372036854775807, -9223372036854775807 - 1, -5)|list }}", "[-9223372036854775807]"},
      // an empty sequence repeated 2^63 - 1 times is empty at once (it looped 2^63 times)
      {"{{ ('' * 9223372036854775807)|length }}", "0"}, {"{{ ([] * 9223372036854775807)|length }}", "0"},
      // |int of a float outside int64 (or a string that reads as one): Python's int is
      // unbounded, ours clamps, so comparisons keep jinja2's answers (no out-of-range cast)
      {"{{ (1e300)|int > 9223372036854775806 }}", "True"}, {"{{ ('1e300')|int > 0 }}", "True"},
      {"{{ (-1e300)|int < 0 }}", "True"},                  {"{{ ('-1e300')|int < 0 }}", "True"},
      {"{{ (1.9e18)|int }}", "1900000000000000000"},       {"{{ ('2.5')|int }}", "2"},
  };
  expect_renders(kCases);
}

}  // namespace
}  // namespace tokenizer
