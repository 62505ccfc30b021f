// serve_tools_test.cc: tool calls without HTTP: replies cut into content and calls in each
// format, forced calls following their grammar, streamed calls as OpenAI's deltas, and the
// Llama 3 and Mistral formats round-tripping through their templates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "grammar/grammar.h"
#include "serve/api.h"
#include "serve/tools.h"
#include "tokenizer/chat_template.h"

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Hermes-format tool calls: content before the first call, calls as {name, arguments}
// JSON (arguments back as a JSON object's text), anything else all content; a stream holds
// the text from a <tool_call> (or a possible start of one) on.
TEST(ServeTools, RepliesCutIntoContentAndCalls) {
  const auto H = serve::ToolFormat::kHermes;
  auto r = serve::parse_tool_calls(H,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(r.content, "Let me look.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // Unclosed (a stop at </tool_call>): still a call.
  auto named = serve::parse_tool_calls(H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n");
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_EQ(named.calls[0].name, "f");
  EXPECT_TRUE(named.content.empty());
  for (const std::string bad : {"<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_call>not json</tool_call>",
                                "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
                                "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> and more"}) {
    auto b = serve::parse_tool_calls(H, bad);
    EXPECT_TRUE(b.calls.empty()) << bad;
    EXPECT_EQ(b.content, bad);
  }
  EXPECT_EQ(serve::tool_stop(H), "</tool_call>");
  EXPECT_EQ(serve::tool_format(*tokenizer::builtin_chat_template("qwen2")), H);
  EXPECT_EQ(serve::tool_format(*tokenizer::builtin_chat_template("chatml")), serve::ToolFormat::kNone);
}

// Tools get_weather(city: string, required) and f() with no parameters.
nlohmann::ordered_json two_tools() {
  return nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "f"}}])");
}

// Whether the forced call's grammar (named: get_weather) accepts the whole text.
bool call_grammar_accepts(serve::ToolFormat f, serve::ToolChoice choice, const std::string& text,
                          bool parallel = false) {
  auto gbnf = serve::tool_call_gbnf(f, two_tools(), choice, "get_weather", parallel);
  if (!gbnf) return false;
  auto g = grammar::Grammar::parse(*gbnf);
  if (!g) return false;
  grammar::Matcher m(*g);
  return m.accept(text) && m.state().complete();
}

TEST(ServeTools, ForcedCallsFollowTheirGrammar) {
  using serve::ToolChoice;
  using serve::ToolFormat;
  const ToolFormat H = ToolFormat::kHermes, G = ToolFormat::kGeneric;
  const std::string call = R"({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}})";
  EXPECT_TRUE(call_grammar_accepts(H, ToolChoice::kNamed, "<tool_call>\n" + call + "\n</tool_call>"));
  EXPECT_TRUE(call_grammar_accepts(H, ToolChoice::kRequired, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"));
  // named: no other function; required: no unknown one; arguments under the schema
  EXPECT_FALSE(call_grammar_accepts(H, ToolChoice::kNamed, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(call_grammar_accepts(H, ToolChoice::kRequired, "<tool_call>\n{\"name\": \"Paris\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(call_grammar_accepts(H, ToolChoice::kNamed, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(call_grammar_accepts(H, ToolChoice::kNamed, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>"));
  EXPECT_FALSE(call_grammar_accepts(H, ToolChoice::kNamed, "Sure. <tool_call>\n" + call + "\n</tool_call>"));
  // generic: the call wrapped, or (auto) a text response
  EXPECT_TRUE(call_grammar_accepts(G, ToolChoice::kNamed, "{\"tool_call\": " + call + "}"));
  EXPECT_FALSE(call_grammar_accepts(G, ToolChoice::kNamed, "{\"response\": \"hi\"}"));
  EXPECT_TRUE(call_grammar_accepts(G, ToolChoice::kAuto, "{\"response\": \"hi\"}"));
  // auto: the calls' grammar, from the opening marker on; none: no grammar
  EXPECT_TRUE(call_grammar_accepts(H, ToolChoice::kAuto, "<tool_call>\n" + call + "\n</tool_call>"));
  EXPECT_EQ(serve::tool_triggers(H, ToolChoice::kAuto).at(0).text, "<tool_call>");
  EXPECT_TRUE(serve::tool_triggers(H, ToolChoice::kRequired).empty());
  EXPECT_TRUE(serve::tool_triggers(G, ToolChoice::kAuto).empty());  // the generic reply's grammar holds from its start
  auto unconstrained = serve::tool_call_gbnf(H, two_tools(), ToolChoice::kNone, "");
  ASSERT_TRUE(unconstrained.ok());
  EXPECT_EQ(*unconstrained, "");
  // parallel: several calls (up to kMaxParallelCalls); not parallel: exactly one
  const std::string two = "<tool_call>\n" + call + "\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(call_grammar_accepts(H, ToolChoice::kRequired, two, true));
  EXPECT_FALSE(call_grammar_accepts(H, ToolChoice::kRequired, two, false));
  std::string many = "<tool_call>\n" + call + "\n</tool_call>";
  for (int k = 1; k < serve::kMaxParallelCalls; ++k) many += "\n<tool_call>\n" + call + "\n</tool_call>";
  EXPECT_TRUE(call_grammar_accepts(H, ToolChoice::kRequired, many, true));
  EXPECT_FALSE(call_grammar_accepts(H, ToolChoice::kRequired, many + "\n<tool_call>\n" + call + "\n</tool_call>", true));
  EXPECT_TRUE(call_grammar_accepts(G, ToolChoice::kRequired, "{\"tool_calls\": [" + call + ", " + call + "]}", true));
  EXPECT_FALSE(call_grammar_accepts(G, ToolChoice::kRequired, "{\"tool_calls\": [" + call + ", " + call + "]}", false));
  EXPECT_EQ(serve::parse_tool_calls(H, two).calls.size(), 2u);
  // a schema constrained decoding cannot enforce is refused naming the tool
  auto bad = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "g",
      "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}}}}])");
  auto e = serve::tool_call_gbnf(H, bad, ToolChoice::kRequired, "");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("tools[0].function.parameters"), std::string::npos) << e.status().message();
  // generic replies parse back; streamed, nothing shows before the end
  auto r = serve::parse_tool_calls(G, "{\"tool_call\": " + call + "}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json({{"city", "Paris"}, {"days", 2}}));
  serve::ToolStream s(G, "");
  EXPECT_EQ(s.push("{\"response\": \"it is "), "");
  EXPECT_EQ(s.push("sunny\"}"), "");
  auto sr = s.finish();
  EXPECT_TRUE(sr.calls.empty());
  EXPECT_EQ(sr.content, "it is sunny");
  // the generic history: the tools in the system turn, calls and results as text turns
  auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "18 C"}])");
  auto h = serve::generic_tool_messages(msgs, serve::generic_tool_prompt(two_tools(), ToolChoice::kAuto));
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0]["role"], "system");
  EXPECT_NE(h[0]["content"].get<std::string>().find("get_weather"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(h[2]["content"].get<std::string>())["tool_call"]["name"], "get_weather");
  EXPECT_EQ(h[3]["role"], "user");
  EXPECT_NE(h[3]["content"].get<std::string>().find("18 C"), std::string::npos);
  // a request without tools that continues that history: the turns in text, no system turn
  EXPECT_TRUE(serve::has_tool_turns(msgs));
  EXPECT_FALSE(serve::has_tool_turns(nlohmann::ordered_json::array({msgs[0]})));
  auto none = nlohmann::ordered_json::parse(R"([{"role": "assistant", "content": "hi", "tool_calls": []}])");
  EXPECT_FALSE(serve::has_tool_turns(none));
  EXPECT_EQ(serve::generic_tool_messages(none, ""), none);
  auto plain = serve::generic_tool_messages(msgs, "");
  ASSERT_EQ(plain.size(), 3u);
  EXPECT_EQ(plain[0], msgs[0]);
  EXPECT_EQ(plain[1]["content"], h[2]["content"]);
  EXPECT_FALSE(plain[1].contains("tool_calls"));
  EXPECT_EQ(plain[2], h[3]);
}

// A streamed call goes out as OpenAI streams them: its id and name once both are written,
// then the arguments' text in fragments, whatever the pieces' cuts; the final calls keep
// the streamed ids.
TEST(ServeTools, StreamedCallsComeAsDeltas) {
  const std::string reply = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P{a}\\\"ris\", "
                            "\"days\": [1, {\"x\": 2}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  for (size_t cut : {1, 2, 3, 7, 1000}) {
    SCOPED_TRACE(cut);
    serve::ToolStream s(serve::ToolFormat::kHermes, "");
    std::string shown;
    std::vector<serve::ToolDelta> ds;
    for (size_t i = 0; i < reply.size(); i += cut) {
      shown += s.push(reply.substr(i, cut));
      for (auto& d : s.deltas()) ds.push_back(d);
    }
    auto r = s.finish();
    ASSERT_EQ(r.calls.size(), 2u);
    std::vector<std::string> args(2);
    std::vector<std::string> ids;
    for (const auto& d : ds) {
      if (d.first) {
        ASSERT_EQ(int(ids.size()), d.index);
        ids.push_back(d.id);
        EXPECT_EQ(d.name, d.index == 0 ? "get_weather" : "f");
        EXPECT_TRUE(d.arguments.empty());
      } else {
        ASSERT_LT(size_t(d.index), ids.size());
        args[size_t(d.index)] += d.arguments;
      }
    }
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(ids[0], r.calls[0].id);
    EXPECT_EQ(ids[1], r.calls[1].id);
    EXPECT_EQ(args[0], "{\"city\": \"P{a}\\\"ris\", \"days\": [1, {\"x\": 2}]}");
    EXPECT_EQ(args[1], "{}");
    EXPECT_EQ(nlohmann::json::parse(args[0]), nlohmann::json::parse(r.calls[0].arguments));
  }
  // cut (max_tokens) inside a further call: it never shows, the calls before it are the
  // reply; inside the first call: that call, cut
  const std::string one = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n";
  serve::ToolStream further(serve::ToolFormat::kHermes, "");
  further.push(one + "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"b\": ");
  for (const auto& d : further.deltas()) EXPECT_EQ(d.index, 0);
  auto fr = further.finish();
  ASSERT_EQ(fr.calls.size(), 1u);
  EXPECT_FALSE(fr.cut);
  EXPECT_EQ(fr.calls[0].arguments, "{\"a\":1}");
  serve::ToolStream first(serve::ToolFormat::kHermes, "");
  first.push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ");
  auto cr = first.finish();
  ASSERT_EQ(cr.calls.size(), 1u);
  EXPECT_TRUE(cr.cut);
  EXPECT_EQ(cr.calls[0].arguments, "{\"a\": ");
  EXPECT_TRUE(cr.content.empty());
  // the generic format's call, and its text reply (no deltas)
  serve::ToolStream g(serve::ToolFormat::kGeneric, "");
  g.push("{\"tool_call\": {\"name\": \"add\", \"arguments\": {\"a\": 1}}}");
  auto gd = g.deltas();
  ASSERT_EQ(gd.size(), 2u);
  EXPECT_EQ(gd[0].name, "add");
  EXPECT_EQ(gd[1].arguments, "{\"a\": 1}");
  EXPECT_EQ(g.finish().calls.at(0).id, gd[0].id);
  serve::ToolStream t(serve::ToolFormat::kGeneric, "");
  t.push("{\"response\": \"say \\\"name\\\": \\\"x\\\"\"}");
  EXPECT_TRUE(t.deltas().empty());
}

TEST(ServeTools, StreamHoldsTheCalls) {
  serve::ToolStream s(serve::ToolFormat::kHermes, "");
  EXPECT_EQ(s.push("Sure. <to"), "Sure. ");  // "<to" may start a call
  EXPECT_EQ(s.push("ol_call>\n{\"name\": \"f\", "), "");
  EXPECT_EQ(s.push("\"arguments\": {}}\n</tool_call>"), "");
  auto r = s.finish();
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_TRUE(r.content.empty());  // "Sure." went out already
  serve::ToolStream plain(serve::ToolFormat::kHermes, "");
  EXPECT_EQ(plain.push("a <b"), "a <b");
  EXPECT_EQ(plain.push(" c <"), " c ");
  auto p = plain.finish();
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "<");  // the held tail, as content
}

// Llama 3.1 and Mistral v3 (their real templates): the format is recognised, a reply in it
// (streamed or whole, forced or not) becomes calls, and the calls render back through the
// template as the assistant's turn of the next request (Mistral demands 9-character ids).
TEST(ServeTools, Llama3AndMistralFormatsRoundTripThroughTheirTemplates) {
  struct Case {
    const char* file;
    serve::ToolFormat format;
    std::string reply, content;
    const char* shown_in_history;  // what the rendered history shows of the call
  };
  const std::vector<Case> cases = {
      {"llama3.1.jinja", serve::ToolFormat::kLlama3,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", "get_weather"},
      {"llama3.1.jinja", serve::ToolFormat::kLlama3,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", "get_weather"},
      {"mistral-v3.jinja", serve::ToolFormat::kMistral,
       "Checking. [TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", "Checking.",
       "[TOOL_CALLS]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.file) + ": " + c.reply);
    const std::string source = read_text(std::string(SHARDLM_SOURCE_DIR) + "/tests/data/chat_templates/" + c.file);
    ASSERT_EQ(serve::tool_format(source), c.format);
    auto r = serve::parse_tool_calls(c.format, c.reply);
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.content, c.content);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json({{"city", "Paris"}}));
    serve::ToolStream st(c.format, "");
    std::string shown;
    for (size_t i = 0; i < c.reply.size(); i += 3) shown += st.push(c.reply.substr(i, 3));
    auto sr = st.finish();
    ASSERT_EQ(sr.calls.size(), 1u);
    const std::string all = shown + sr.content;
    EXPECT_EQ(all.substr(0, all.find_last_not_of(' ') + 1), c.content);
    // Forced: what the call's grammar accepts parses to the named call.
    const std::string forced = c.format == serve::ToolFormat::kMistral
        ? "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"
        : "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    EXPECT_TRUE(call_grammar_accepts(c.format, serve::ToolChoice::kNamed, forced));
    auto fr = serve::parse_tool_calls(c.format, forced);
    ASSERT_EQ(fr.calls.size(), 1u) << forced;
    EXPECT_EQ(fr.calls[0].name, "get_weather");
    auto t = tokenizer::ChatTemplate::parse(source);
    ASSERT_TRUE(t.ok()) << t.error();
    nlohmann::ordered_json call = {{"id", r.calls[0].id}, {"type", "function"},
                                   {"function", {{"name", r.calls[0].name},
                                                 {"arguments", nlohmann::ordered_json::parse(r.calls[0].arguments)}}}};
    nlohmann::ordered_json ctx = {
        {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}},
                      {{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}},
                      {{"role", "tool"}, {"tool_call_id", r.calls[0].id}, {"content", "18 C"}}}},
        {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"description", "weather"},
                                                        {"parameters", {{"type", "object"}}}}}}}},
        {"add_generation_prompt", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
    auto out = t->render_context(ctx);
    ASSERT_TRUE(out.ok()) << out.error();
    EXPECT_NE(out->find(c.shown_in_history), std::string::npos) << *out;
    EXPECT_NE(out->find("18 C"), std::string::npos) << *out;
  }
  // A Llama 3 reply that is text is content, streamed at once after its first character.
  serve::ToolStream text(serve::ToolFormat::kLlama3, "");
  EXPECT_EQ(text.push("  "), "");
  EXPECT_EQ(text.push("It is"), "  It is");
  EXPECT_EQ(text.push(" {sunny}"), " {sunny}");
  EXPECT_TRUE(text.finish().calls.empty());
  EXPECT_TRUE(serve::parse_tool_calls(serve::ToolFormat::kLlama3, "It is {\"name\": 1}").calls.empty());
  EXPECT_EQ(serve::tool_stop(serve::ToolFormat::kMistral), "");
}
