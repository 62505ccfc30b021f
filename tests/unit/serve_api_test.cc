// serve_api_test.cc: pieces of serve's other APIs without HTTP or a model: the <think>
// splitter (reasoning.h) on crafted replies cut at every byte, the Responses API's store
// (least recently used dropped) and its body translation onto the chat request, and
// /infill's body.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "../../fuzz/api_entry.h"

#include "grammar/grammar.h"
#include "serve/anthropic.h"
#include "serve/infill.h"
#include "serve/reasoning.h"
#include "serve/responses.h"
#include "serve/tools.h"
#include "tokenizer/chat_template.h"

namespace serve {
namespace {

// The reply pushed in pieces of n bytes (and, n = 0, at every split into two), summed.
ReasoningPiece pushed(const std::string& text, bool open, size_t n, bool harmony = false) {
  ReasoningSplitter s(open, harmony);
  ReasoningPiece sum;
  for (size_t i = 0; i < text.size(); i += n) {
    ReasoningPiece p = s.push(text.substr(i, n));
    sum.reasoning += p.reasoning;
    sum.content += p.content;
  }
  ReasoningPiece p = s.finish();
  sum.reasoning += p.reasoning;
  sum.content += p.content;
  return sum;
}

struct Case {
  std::string text;
  bool open;
  std::string reasoning, content;
};

TEST(Reasoning, SplitsTheFirstThinkBlockAtAnyCut) {
  const std::vector<Case> cases = {
      {"<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.", false, "Let me see: 2+2.", "It is 4."},
      {"  <think>a</think>b", false, "a", "b"},
      {"Plain answer, no thought.", false, "", "Plain answer, no thought."},
      {"  leading space kept", false, "", "  leading space kept"},
      {"<thinking is not a tag", false, "", "<thinking is not a tag"},
      {"<thi", false, "", "<thi"},  // a cut-off prefix is content at the end
      {"Still thinking when max_tokens ran out\n", true, "Still thinking when max_tokens ran out", ""},
      {"<think>never closed </thi", false, "never closed </thi", ""},
      {"forced open\n</think>\nanswer <think>x</think>", true, "forced open", "answer <think>x</think>"},
      {"</think>only content", true, "", "only content"},
      {"<think>a < b and c </ d</think>ok", false, "a < b and c </ d", "ok"},
      {"<think>  \n  </think>  \n  ", false, "", ""},
      {"<think>one\n\ntwo</think>", false, "one\n\ntwo", ""},
      {"", false, "", ""},
  };
  for (const Case& c : cases) {
    const ReasoningPiece whole = split_reasoning(c.text, c.open);
    EXPECT_EQ(whole.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(whole.content, c.content) << c.text;
    for (size_t n = 1; n <= c.text.size(); ++n) {
      const ReasoningPiece p = pushed(c.text, c.open, n);
      EXPECT_EQ(p.reasoning, c.reasoning) << c.text << " in pieces of " << n;
      EXPECT_EQ(p.content, c.content) << c.text << " in pieces of " << n;
    }
  }
}

TEST(Reasoning, ShowsTextAsSoonAsItCannotBeATag) {
  ReasoningSplitter s(false);
  EXPECT_EQ(s.push("<th").content, "");  // may be <think>
  EXPECT_EQ(s.push("ink>I wonder").reasoning, "I wonder");
  ReasoningPiece p = s.push(" more </thi");
  EXPECT_EQ(p.reasoning, " more");  // the space and the partial tag are held
  p = s.push("nk> Done");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "Done");
  ReasoningSplitter plain(false);
  EXPECT_EQ(plain.push("Hello").content, "Hello");
}

// Each piece one token: the tags and the thought count, white space after </think> and the
// answer do not; a thought never closed is all reasoning.
TEST(Reasoning, CountsTheThoughtsTokens) {
  auto count = [](bool open, std::initializer_list<const char*> pieces) {
    ReasoningSplitter s(open);
    for (const char* p : pieces) {
      s.count(1);
      s.push(p);
    }
    s.finish();
    return s.reasoning_tokens();
  };
  EXPECT_EQ(count(false, {"<think>", "I", " wonder", "</think>", "\n\n", "Four"}), 4);
  EXPECT_EQ(count(false, {"\n", "<th", "ink>", "x", "</th", "ink>", "Yes"}), 6);  // white space before <think> too
  EXPECT_EQ(count(false, {"<think>", "</think>", "A"}), 2);
  EXPECT_EQ(count(true, {"I", " wonder", "\n", "</think>", "\n", "Four", "."}), 4);
  EXPECT_EQ(count(true, {"I", " wonder"}), 2);  // never closed
  EXPECT_EQ(count(false, {"Four", "<think>", "."}), 0);  // no thought: a later tag is content
  EXPECT_EQ(count(false, {" ", "Four"}), 0);
  ReasoningSplitter s(true);  // tokens with no text (a stop string's) inside the thought
  s.count(2);
  s.finish();
  EXPECT_EQ(s.reasoning_tokens(), 2);
}

TEST(Reasoning, FormatsAndForcedOpenPrompts) {
  for (const char* name : {"none", "auto", "deepseek", "deepseek-legacy"})
    EXPECT_STREQ(reasoning_format_name(*reasoning_format_from_name(name)), name);
  EXPECT_FALSE(reasoning_format_from_name("r1"));
  EXPECT_FALSE(splits(ReasoningFormat::kNone));
  EXPECT_TRUE(splits(ReasoningFormat::kDeepseekLegacy));
  EXPECT_TRUE(ends_in_open_think("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(ends_in_open_think("<think>"));
  EXPECT_FALSE(ends_in_open_think("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ends_in_open_think("assistant\n"));
}

// gpt-oss harmony replies as our detokenizer writes them (<|end|> dropped, harmony.h); a few
// with <|end|> kept, as llama-server writes them.
TEST(Harmony, SplitsTheChannelsAtAnyCut) {
  const std::string a = "<|channel|>analysis<|message|>", f = "<|channel|>final<|message|>",
                    next = "<|start|>assistant";
  const std::vector<Case> cases = {
      {a + "User asks 2+2. Answer 4." + next + f + "It is 4.", false, "User asks 2+2. Answer 4.", "It is 4."},
      {a + "think<|end|>" + next + f + "done", false, "think", "done"},
      {a + "cut off by max_tokens <|sta", false, "cut off by max_tokens <|sta", ""},
      {a + "a < b, <| not a tag", false, "a < b, <| not a tag", ""},
      {"Plain answer, no channels.", false, "", "Plain answer, no channels."},
      {"<|chan", false, "", "<|chan"},  // a cut-off prefix with nothing before it is content
      {f + "only final", false, "", "only final"},
      {a + "one" + next + a + "two" + next + f + "ans", false, "onetwo", "ans"},
      {"<|channel|>commentary to=assistant" + a + "x" + next + f + "y", false, "x", "y"},  // stray commentary
      {"<|channel|>commentary<|message|>Let me check." + next + a + "t" + next + f + "z", false, "t",
       "Let me check.z"},  // a preamble is content
      {a + "t" + next, false, "t", ""},  // markup left at the end after a message is dropped
      {a + "\n spaced \n" + next + f + " kept ", false, "\n spaced \n", " kept "},
      {f + "answer <|start|>assistant<|channel|>analysis", false, "", "answer <|start|>assistant<|channel|>analysis"},
      {"", false, "", ""},
  };
  for (const Case& c : cases) {
    const ReasoningPiece whole = split_reasoning(c.text, false, true);
    EXPECT_EQ(whole.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(whole.content, c.content) << c.text;
    for (size_t n = 1; n <= c.text.size(); ++n) {
      const ReasoningPiece p = pushed(c.text, false, n, true);
      EXPECT_EQ(p.reasoning, c.reasoning) << c.text << " in pieces of " << n;
      EXPECT_EQ(p.content, c.content) << c.text << " in pieces of " << n;
    }
    for (size_t i = 0; i <= c.text.size(); ++i) {  // every split into two
      ReasoningSplitter s(false, true);
      ReasoningPiece p = s.push(c.text.substr(0, i)), q = s.push(c.text.substr(i)), r = s.finish();
      EXPECT_EQ(p.reasoning + q.reasoning + r.reasoning, c.reasoning) << c.text << " cut at " << i;
      EXPECT_EQ(p.content + q.content + r.content, c.content) << c.text << " cut at " << i;
    }
  }
}

TEST(Harmony, ShowsTheThoughtAsItComes) {
  ReasoningSplitter s(false, true);
  EXPECT_EQ(s.push("<|channel|>").reasoning, "");
  EXPECT_EQ(s.push("analysis<|message|>Hmm").reasoning, "Hmm");
  ReasoningPiece p = s.push(" ok<|st");
  EXPECT_EQ(p.reasoning, " ok");  // a possible <|start|> is held
  p = s.push("art|>assistant<|channel|>final<|message|>Four");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "Four");
  ReasoningSplitter plain(false, true);
  EXPECT_EQ(plain.push("Hello").content, "Hello");
}

// Each piece one token (<|end|> an empty piece): an analysis message's header, text and end
// (through the next <|start|>) count; a final message does not; never ended is all reasoning.
TEST(Harmony, CountsTheAnalysisTokens) {
  auto count = [](std::initializer_list<const char*> pieces) {
    ReasoningSplitter s(false, true);
    for (const char* p : pieces) {
      s.count(1);
      if (*p) s.push(p);  // generation.cc pushes no empty text: its token counts with the next
    }
    s.finish();
    return s.reasoning_tokens();
  };
  EXPECT_EQ(count({"<|channel|>", "analysis", "<|message|>", "Hmm", "", "<|start|>", "assistant", "<|channel|>",
                   "final", "<|message|>", "Four"}),
            6);
  EXPECT_EQ(count({"<|channel|>", "analysis", "<|message|>", "Hmm", " more"}), 5);  // never ended
  EXPECT_EQ(count({"<|channel|>", "final", "<|message|>", "Four"}), 0);
  EXPECT_EQ(count({"Four", "."}), 0);
  EXPECT_TRUE(ends_in_harmony_start("<|end|><|start|>assistant"));
  EXPECT_TRUE(ends_in_harmony_start("<|start|>assistant\n"));
  EXPECT_FALSE(ends_in_harmony_start("<|im_start|>assistant\n"));
}

// Harmony with tools (issue 31): a message to functions.NAME, its recipient in the channel
// header, in the role header or opening the reply, is a call: its body goes out as Hermes
// calls text, whatever the cut; the thought stays reasoning; a recipient that is no
// function, or no tools, leaves the message content.
TEST(HarmonyTools, CallsSplitOffAtAnyCut) {
  const std::string a = "<|channel|>analysis<|message|>", next = "<|start|>assistant";
  const std::string args = R"({"city": "Paris"})";
  auto call = [](const std::string& name, const std::string& body) {
    return harmony_call_open(name) + body + kHarmonyCallClose;
  };
  struct ToolCase {
    std::string text, reasoning, content, calls;
  };
  const std::vector<ToolCase> cases = {
      {a + "weather?" + next + " to=functions.get_weather<|channel|>commentary json<|message|>" + args, "weather?", "",
       call("get_weather", args)},
      {a + "t<|end|>" + next + "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>", "t", "",
       call("f", "{}")},
      {" to=functions.get_weather<|channel|>commentary json<|message|>" + args, "", "", call("get_weather", args)},
      {" to=functions.get_weather <|constrain|>json<|message|>" + args, "", "", call("get_weather", args)},
      {"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa", "", "",
       call("get_weather", "{\"city\": \"Pa")},  // cut by max_tokens: unfinished arguments
      {"<|channel|>commentary to=browser.search<|message|>x" + next + "<|channel|>final<|message|>y", "", "xy", ""},
      {"<|channel|>final<|message|>No call: to=functions.f", "", "No call: to=functions.f", ""},
      {" to be plain", "", " to be plain", ""},
  };
  for (const ToolCase& c : cases) {
    for (size_t i = 0; i <= c.text.size(); ++i) {  // every split into two
      ReasoningSplitter s(false, true, true);
      ReasoningPiece p = s.push(c.text.substr(0, i)), q = s.push(c.text.substr(i)), r = s.finish();
      EXPECT_EQ(p.reasoning + q.reasoning + r.reasoning, c.reasoning) << c.text << " cut at " << i;
      EXPECT_EQ(p.content + q.content + r.content, c.content) << c.text << " cut at " << i;
      EXPECT_EQ(p.calls + q.calls + r.calls, c.calls) << c.text << " cut at " << i;
    }
  }
  // Without tools a message to a function is content, as before.
  EXPECT_EQ(split_reasoning(cases[0].text, false, true).content, args);
  // The calls text parses back as the call.
  const ToolReply r = parse_tool_calls(ToolFormat::kHarmony, call("get_weather", args));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json::parse(args));
  EXPECT_EQ(parse_tool_calls(ToolFormat::kHarmony, call("get_weather", "{\"city\": \"Pa")).calls.size(), 0u);
  EXPECT_EQ(tool_format(*tokenizer::builtin_chat_template("gpt-oss")), ToolFormat::kHarmony);
  EXPECT_EQ(tool_format(*tokenizer::builtin_chat_template("qwen2")), ToolFormat::kHermes);
}

// The harmony call grammar: " to=functions." NAME, a header (the channel when the recipient
// is in the role header, the content type), <|message|>, arguments under the schema; the
// same grammar forced (from the reply's start) and auto (from the trigger).
TEST(HarmonyTools, CallsFollowTheirGrammar) {
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "f"}}])");
  auto accepts = [&](ToolChoice choice, const std::string& text) {
    auto gbnf = tool_call_gbnf(ToolFormat::kHarmony, tools, choice, "get_weather");
    EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
    auto g = grammar::Grammar::parse(*gbnf);
    EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << *gbnf;
    grammar::Matcher m(*g);
    return m.accept(text) && m.state().complete();
  };
  const std::string role = " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}";
  const std::string channel = " to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
  for (ToolChoice c : {ToolChoice::kNamed, ToolChoice::kRequired, ToolChoice::kAuto}) {
    EXPECT_TRUE(accepts(c, role));
    EXPECT_EQ(accepts(c, channel), c == ToolChoice::kAuto);  // forced: the reply opens with the role header
    EXPECT_FALSE(accepts(c, " to=functions.get_weather<|channel|>commentary json<|message|>{}"));  // city required
    EXPECT_FALSE(accepts(c, " to=functions.Paris<|message|>{}"));
    EXPECT_FALSE(accepts(c, "Sure." + role));
  }
  EXPECT_TRUE(accepts(ToolChoice::kRequired, " to=functions.f<|channel|>commentary<|message|>{}"));
  EXPECT_FALSE(accepts(ToolChoice::kNamed, " to=functions.f<|channel|>commentary<|message|>{}"));
  EXPECT_EQ(tool_triggers(ToolFormat::kHarmony, ToolChoice::kAuto).at(0).text, " to=functions.");
  EXPECT_TRUE(tool_triggers(ToolFormat::kHarmony, ToolChoice::kRequired).empty());
  EXPECT_EQ(tool_stop(ToolFormat::kHarmony), "");
  // Streamed: the name first, then the arguments as they come.
  ToolStream s(ToolFormat::kHarmony, "");
  EXPECT_EQ(s.push(harmony_call_open("get_weather") + "{\"ci"), "");
  std::vector<ToolDelta> d = s.deltas();
  ASSERT_GE(d.size(), 1u);
  EXPECT_TRUE(d[0].first);
  EXPECT_EQ(d[0].name, "get_weather");
  std::string streamed;
  for (const ToolDelta& x : d) streamed += x.arguments;
  s.push("ty\": \"Oslo\"}" + std::string(kHarmonyCallClose));
  for (const ToolDelta& x : s.deltas()) streamed += x.arguments;
  EXPECT_EQ(streamed, "{\"city\": \"Oslo\"}");
  const ToolReply r = s.finish();
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].id, d[0].id);
}

TEST(ResponseStore, DropsTheLeastRecentlyUsed) {
  ResponseStore s(2);
  auto entry = [](const char* text) {
    nlohmann::ordered_json m = {{"role", "user"}, {"content", text}};
    return ResponseStore::Entry{nlohmann::ordered_json::array({m}), nlohmann::json::object()};
  };
  s.put("a", entry("1"));
  s.put("b", entry("2"));
  ASSERT_TRUE(s.get("a"));  // a used: b is now the least recent
  s.put("c", entry("3"));
  EXPECT_EQ(s.size(), 2u);
  EXPECT_FALSE(s.get("b"));
  EXPECT_EQ(s.get("a")->messages[0]["content"], "1");
  EXPECT_TRUE(s.erase("c"));
  EXPECT_FALSE(s.erase("c"));
  ResponseStore none(0);
  none.put("a", entry("1"));
  EXPECT_FALSE(none.get("a"));
}

TEST(Responses, TranslatesItemsOntoTheChatRequest) {
  ResponseStore store(4);
  nlohmann::ordered_json turn = {{"role", "user"}, {"content", "earlier"}};
  store.put("resp_1", {nlohmann::ordered_json::array({turn}), nlohmann::json::object()});
  ResponsesRequest r;
  const std::string body = R"({"model": "m", "instructions": "be terse", "previous_response_id": "resp_1",
    "input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}"},
              {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]},
              {"role": "developer", "content": "and?"}],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "f"}, "max_output_tokens": 7, "store": false})";
  ASSERT_FALSE(parse_responses(body, 512, sampler::Params{}, store, &r));
  const auto& m = r.chat.chat_messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[1]["content"], "earlier");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"]["a"], 1);
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["content"], "ok");
  EXPECT_EQ(m[4]["role"], "system");  // developer
  EXPECT_EQ(r.history.size(), 4u);    // the instructions are not carried over
  EXPECT_EQ(r.chat.max_tokens, 7);
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::kNamed);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");

  auto refused = [&](const std::string& b, const std::string& param, int status = 400) {
    ResponsesRequest x;
    auto e = parse_responses(b, 512, sampler::Params{}, store, &x);
    ASSERT_TRUE(e) << b;
    EXPECT_EQ(e->param, param) << b;
    EXPECT_EQ(e->status, status) << b;
  };
  refused(R"({"input": "x", "previous_response_id": "resp_2"})", "previous_response_id");
  refused(R"({"input": "x", "max_output_tokens": 100000})", "max_output_tokens");
  refused(R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "string", "pattern": "^a+$"}}}})",
          "text.format.schema");
  refused(R"({"input": [{"role": "tool", "content": "x"}]})", "input[0].role");
  refused(R"({"input": [{"type": "function_call_output", "output": "x"}]})", "input[0].call_id");
  // fields of the wrong JSON type: a 400 that names them, never an exception (found by fuzz_api)
  refused(R"({"input": "x", "tool_choice": {"type": 5, "name": "f"}})", "tool_choice");
  refused(R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}, "name": 3}}})",
          "text.format.name");
}

TEST(Anthropic, TranslatesAndNamesFieldsOfTheWrongType) {
  Request r;
  const std::string body = R"({"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "be terse"}],
    "messages": [
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": [{"type": "text", "text": "no"}]},
        {"type": "text", "text": "and?"}]}],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true}})";
  ASSERT_FALSE(parse_anthropic(body, false, 512, sampler::Params{}, &r));
  const auto& m = r.chat_messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["content"], "be terse");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[2]["content"], "Error: no");
  EXPECT_EQ(m[3]["content"], "and?");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.parallel_tool_calls);

  const std::string user = R"({"role": "user", "content": "hi"})";
  for (const auto& [b, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"max_tokens": 1, "messages": [)" + user + "]}", "model"},
           {R"({"model": "m", "max_tokens": 1, "system": [{"type": 1}], "messages": [)" + user + "]}", "system"},
           {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_result",
              "tool_use_id": "t", "is_error": "yes"}]}]})", "messages[0].content[0].is_error"},
           {R"({"model": "m", "max_tokens": 1, "messages": [)" + user +
                R"(], "tool_choice": {"type": "auto", "disable_parallel_tool_use": 3}})",
            "tool_choice.disable_parallel_tool_use"}}) {
    Request x;
    auto e = parse_anthropic(b, false, 512, sampler::Params{}, &x);
    ASSERT_TRUE(e) << b;
    EXPECT_EQ(e->param, param) << b;
    EXPECT_EQ(e->status, 400) << b;
  }
}

TEST(Infill, ReadsLlamaServersFields) {
  InfillRequest r;
  ASSERT_FALSE(parse_infill(R"({"input_prefix": "a", "input_suffix": "b", "prompt": "c", "n_predict": 5,
    "input_extra": [{"filename": "f.py", "text": "x"}, {"text": "y"}], "temperature": 0, "stop": ["\n"]})",
                            512, sampler::Params{}, &r));
  EXPECT_EQ(r.prefix, "a");
  EXPECT_EQ(r.suffix, "b");
  EXPECT_EQ(r.prompt, "c");
  ASSERT_EQ(r.extra.size(), 2u);
  EXPECT_EQ(r.extra[1].first, "tmp");  // llama-server's default filename
  EXPECT_EQ(r.completion.max_tokens, 5);
  EXPECT_EQ(r.completion.stop, std::vector<std::string>{"\n"});
  InfillRequest unlimited;
  ASSERT_FALSE(parse_infill(R"({"input_prefix": "", "input_suffix": "", "n_predict": -1})", 512, sampler::Params{},
                            &unlimited));
  EXPECT_EQ(unlimited.completion.max_tokens, 0);
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input_suffix": ""})", "input_prefix"},
           {R"({"input_prefix": "", "input_suffix": [1]})", "input_suffix"},
           {R"({"input_prefix": "", "input_suffix": "", "input_extra": [{"text": 1}]})", "input_extra[0]"},
           {R"({"input_prefix": "", "input_suffix": "", "n_predict": 9999})", "n_predict"}}) {
    InfillRequest x;
    auto e = parse_infill(body, 512, sampler::Params{}, &x);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->param, param) << body;
    EXPECT_EQ(infill_error_json(*e)["error"]["code"], 400);
  }
}

// Every value's place in j (the root excepted), depth first.
void places(const nlohmann::ordered_json& j, const nlohmann::ordered_json::json_pointer& at,
            std::vector<nlohmann::ordered_json::json_pointer>* out) {
  if (!at.empty()) out->push_back(at);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) places(v, at / k, out);
  else if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) places(j[i], at / i, out);
}

// Each field of each seed body of fuzz_api (tests/data/api_seeds: the entry point's number,
// then the body) removed, and replaced by a value of each JSON type: the body parses or
// gets a 4xx with a message, never an exception (which the server would answer with a 500).
// What fuzz_api finds by chance in CI, searched through here field by field.
TEST(ApiBodies, AnyFieldOfAnyTypeOrMissingGetsA4xx) {
  using ojson = nlohmann::ordered_json;
  const ojson values = ojson::parse(R"([null, true, false, 0, -1, 1.5, 1e300, 18446744073709551615,
    -9223372036854775808, "", "x", [], [1], ["x"], {}, {"a": 1}, {"type": "text", "text": "x"}])");
  std::vector<std::string> failures;
  std::set<int> accepted;  // entry points with a seed they accept whole: the sweep gets past the first check
  size_t bodies = 0;
  auto check = [&](const std::string& seed, int entry, const ojson& body, const std::string& what) {
    ++bodies;
    std::optional<ApiError> e;
    try {
      e = parse_api_entry(entry, body.dump());
    } catch (const std::exception& x) {
      failures.push_back(seed + ", " + what + ": " + x.what());
      return;
    }
    if (e && (e->status < 400 || e->status > 499 || e->message.empty()))
      failures.push_back(seed + ", " + what + ": status " + std::to_string(e->status) + " '" + e->message + "'");
  };
  for (const auto& f : std::filesystem::directory_iterator(SHARDLM_SOURCE_DIR "/tests/data/api_seeds")) {
    std::ifstream in(f.path(), std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(data.size(), 1u) << f.path();
    const int entry = static_cast<unsigned char>(data[0]) % kApiEntries;
    const std::string seed = f.path().filename().string();
    const ojson body = ojson::parse(data.substr(1));
    if (!parse_api_entry(entry, body.dump())) accepted.insert(entry);
    std::vector<ojson::json_pointer> at;
    places(body, ojson::json_pointer(), &at);
    for (const auto& p : at) {
      ojson b = body;
      const ojson::json_pointer parent = p.parent_pointer();
      if (b[parent].is_object()) b[parent].erase(p.back());
      else b[parent].erase(std::stoul(p.back()));
      check(seed, entry, b, p.to_string() + " removed");
      for (const ojson& v : values) {
        b = body;
        b[p] = v;
        check(seed, entry, b, p.to_string() + " = " + v.dump());
      }
    }
  }
  EXPECT_EQ(accepted.size(), static_cast<size_t>(kApiEntries)) << "a valid seed for every entry point";
  EXPECT_GT(bodies, 1000u);
  for (size_t i = 0; i < failures.size() && i < 30; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " bodies of " << bodies << " failed";
}

}  // namespace
}  // namespace serve
