// serve_test.cc: the server's pieces without HTTP: OpenAI request parsing / validation
// (accepted fields, every refusal names its parameter), the stop-string matcher on odd
// splits, /tokenize and /detokenize bodies, and a base model (no chat template): completions
// only, chat refused naming --chat-template. The engine on SmolLM2 is serve_model_test.cc's,
// tool calls serve_tools_test.cc's.
#include <gtest/gtest.h>

#include <chrono>

#include <thread>

#include <atomic>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "grammar/grammar.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "runtime/cluster.h"
#include "serve/api.h"
#include "serve/engine.h"
#include "serve/generation.h"
#include "serve/prompt.h"
#include "serve/stop.h"
#include "serve/tools.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"
#include "scratch.h"
#include "vec_dot_order.h"

namespace {

using serve::Endpoint;
using serve::Request;

std::optional<serve::ApiError> parse(const std::string& body, Endpoint ep = Endpoint::kChat, Request* out = nullptr,
                                     int ctx = 1024) {
  Request r;
  return serve::parse_request(body, ep, ctx, sampler::Params{}, out ? out : &r);
}

TEST(ServeApi, AcceptsAFullChatRequest) {
  Request r;
  auto e = parse(R"({"model":"m","messages":[{"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null},{"role":"user","content":"go"}],
      "temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.1,"max_tokens":7,"stop":"END","seed":42,
      "presence_penalty":0.5,"frequency_penalty":-0.5,"n":1,"stream":true,"stream_options":{"include_usage":true},
      "user":"ignored","logprobs":false,"max_tokens_extra":1})",
                 Endpoint::kChat, &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 20);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

// JSON output cannot be constrained yet: response_format json_object / json_schema is a
// 400 naming the field, never a 200 with unconstrained text; "text" is accepted. So is the
// per-request speculation cap, within 0..32.
TEST(ServeApi, ReadsResponseFormatsAndGrammarsAndSpeculativeNMax) {
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  for (auto [rf, param] : {std::pair{R"({"type":"json_schema","json_schema":{"name":"x"}})", "response_format.json_schema.schema"},
                           {R"({"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"a"}}})",
                            "response_format.json_schema.schema"},
                           {R"({"type":"json_schema"})", "response_format.json_schema"},
                           {R"("json")", "response_format"}, {R"({})", "response_format.type"},
                           {R"({"type":"yaml"})", "response_format.type"}}) {
    auto e = parse("{" + msgs + R"(,"response_format":)" + rf + "}");
    ASSERT_TRUE(e) << rf;
    EXPECT_EQ(e->param, param) << rf;
  }
  for (auto [g, word] : {std::pair{R"("root ::= x")", "'x' is used but not defined"}, {"3", "grammar"},
                         {R"("root ::= [a-")", "not closed"}}) {
    auto e = parse("{" + msgs + R"(,"grammar":)" + g + "}");
    ASSERT_TRUE(e) << g;
    EXPECT_EQ(e->param, "grammar") << g;
    EXPECT_NE(e->message.find(word), std::string::npos) << e->message;
  }
  auto both = parse("{" + msgs + R"(,"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}})");
  ASSERT_TRUE(both);
  EXPECT_NE(both->message.find("not both"), std::string::npos);
  Request r;
  ASSERT_FALSE(parse("{" + msgs + R"(,"response_format":{"type":"text"}})", Endpoint::kChat, &r));
  EXPECT_FALSE(r.grammar);
  ASSERT_FALSE(parse("{" + msgs + R"(,"response_format":{"type":"json_object"}})", Endpoint::kChat, &r));
  EXPECT_TRUE(r.grammar);
  ASSERT_FALSE(parse("{" + msgs +
                         R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object",)"
                         R"("properties":{"b":{"type":"integer"},"a":{"type":"string"}}}}}})",
                     Endpoint::kChat, &r));
  ASSERT_TRUE(r.grammar);
  {  // the properties in the order written, b before a
    grammar::Matcher m(r.grammar);
    EXPECT_TRUE(m.accept(R"({"b": 1, "a": "x"})") && m.state().complete());
    grammar::Matcher n(r.grammar);
    EXPECT_FALSE(n.accept(R"({"a": "x", "b": 1})"));
  }
  ASSERT_FALSE(parse("{" + msgs + R"(,"speculative.n_max":3})", Endpoint::kChat, &r));
  EXPECT_EQ(r.max_guesses, 3);
  for (const char* v : {"-1", "33", "1.5", "\"4\""}) {
    auto e = parse("{" + msgs + R"(,"speculative.n_max":)" + v + "}");
    ASSERT_TRUE(e) << v;
    EXPECT_EQ(e->param, "speculative.n_max") << v;
  }
}

serve::Choice choice(std::string text, std::string finish, nlohmann::json logprobs) {
  serve::Choice c;
  c.text = std::move(text);
  c.finish_reason = std::move(finish);
  c.logprobs = std::move(logprobs);
  return c;
}

TEST(ServeApi, LogprobsLogitBiasAndChoices) {
  Request r;
  auto e = parse(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":4,"n":3,
                     "logit_bias":{"50":-100,"7":2.5}})", Endpoint::kChat, &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.params.top_logprobs, 4);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.params.logit_bias, (sampler::LogitBias{{7, 2.5f}, {50, -100.0f}}));  // sorted by id
  EXPECT_FALSE(serve::check_token_ids(r, 51));
  auto far = serve::check_token_ids(r, 50);
  ASSERT_TRUE(far);
  EXPECT_EQ(far->param, "logit_bias.50");
  ASSERT_FALSE(parse(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})", Endpoint::kChat, &r));
  EXPECT_EQ(r.params.top_logprobs, 0);
  ASSERT_FALSE(parse(R"({"messages":[{"role":"user","content":"x"}],"logprobs":false})", Endpoint::kChat, &r));
  EXPECT_EQ(r.params.top_logprobs, -1);
}

TEST(ServeApi, LogprobsInBothFormats) {
  std::vector<serve::TokenLogprobs> t = {{"He", -0.5f, {{"He", -0.5f}, {"Hi", -1.25f}}}, {"llo", -0.25f, {}}};
  auto chat = serve::logprobs_json(Endpoint::kChat, t);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "He");
  EXPECT_EQ(chat["content"][0]["bytes"], nlohmann::json::array({72, 101}));
  EXPECT_FLOAT_EQ(chat["content"][0]["top_logprobs"][1]["logprob"].get<float>(), -1.25f);
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "Hi");
  auto cmpl = serve::logprobs_json(Endpoint::kCompletion, t, 3);
  EXPECT_EQ(cmpl["tokens"], nlohmann::json::array({"He", "llo"}));
  EXPECT_EQ(cmpl["text_offset"], nlohmann::json::array({3, 5}));
  EXPECT_FLOAT_EQ(cmpl["top_logprobs"][0]["Hi"].get<float>(), -1.25f);
  serve::ResponseIds ids{"cmpl-1", 5, "m"};
  auto full = serve::response_json(Endpoint::kCompletion, ids, {choice("a", "stop", cmpl), choice("b", "length", nullptr)}, {});
  ASSERT_EQ(full["choices"].size(), 2u);
  EXPECT_EQ(full["choices"][1]["index"], 1);
  EXPECT_EQ(full["choices"][1]["text"], "b");
  EXPECT_EQ(full["choices"][0]["logprobs"]["tokens"][1], "llo");
  EXPECT_EQ(serve::chunk_json(Endpoint::kChat, ids, "x", "", false, 2)["choices"][0]["index"], 2);
}

TEST(ServeApi, NullMeansAbsentAndDefaultsStay) {
  Request r;
  auto e = parse(R"({"messages":[{"role":"user","content":"x"}],"temperature":null,"stop":null,"max_tokens":null})",
                 Endpoint::kChat, &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_FLOAT_EQ(r.params.temperature, sampler::Params{}.temperature);
  EXPECT_EQ(r.max_tokens, 0);
  EXPECT_FALSE(r.seed_given);
  // "tool_calls": [] (some clients send it on every assistant turn) is no call: the content stays
  Request t;
  e = parse(R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"hi","tool_calls":[]},
      {"role":"user","content":"y"}]})", Endpoint::kChat, &t);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(t.chat_messages[1], nlohmann::ordered_json({{"role", "assistant"}, {"content", "hi"}}));
}

TEST(ServeApi, CompletionPrompts) {
  Request r;
  ASSERT_FALSE(parse(R"({"prompt":"abc"})", Endpoint::kCompletion, &r));
  EXPECT_EQ(r.prompt, "abc");
  ASSERT_FALSE(parse(R"({"prompt":["xyz"],"max_completion_tokens":3})", Endpoint::kCompletion, &r));
  EXPECT_EQ(r.prompt, "xyz");
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_EQ(parse(R"({"prompt":[1,2]})", Endpoint::kCompletion)->param, "prompt");
  EXPECT_EQ(parse(R"({"prompt":["a","b"]})", Endpoint::kCompletion)->param, "prompt");
  EXPECT_EQ(parse(R"({"prompt":5})", Endpoint::kCompletion)->param, "prompt");
  ASSERT_FALSE(parse(R"({"prompt":"a","echo":true,"n":3})", Endpoint::kCompletion, &r));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.params.top_logprobs, -1);
  ASSERT_FALSE(parse(R"({"prompt":"a","logprobs":3})", Endpoint::kCompletion, &r));
  EXPECT_EQ(r.params.top_logprobs, 3);
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(parse(R"({"prompt":"a","echo":true,"logprobs":0})", Endpoint::kCompletion)->param, "echo");
  EXPECT_EQ(parse(R"({"prompt":"a","logprobs":true})", Endpoint::kCompletion)->param, "logprobs");
  EXPECT_EQ(parse(R"({"prompt":"a","logprobs":21})", Endpoint::kCompletion)->param, "logprobs");
  EXPECT_EQ(parse(R"({"prompt":"a","best_of":2})", Endpoint::kCompletion)->param, "best_of");
}

TEST(ServeApi, RefusalsNameTheParameter) {
  const std::string m = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""},
      {"{", ""},
      {"[]", ""},
      {"null", ""},
      {"\"str\"", ""},
      {"{}", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":{}})", "messages"},
      {R"({"messages":["hi"]})", "messages[0]"},
      {R"({"messages":[{"content":"hi"}]})", "messages[0].role"},
      {R"({"messages":[{"role":5,"content":"hi"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"root","content":"hi"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":null}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type"},
      {R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text"},
      {"{" + m + R"(,"model":3})", "model"},
      {"{" + m + R"(,"parallel_tool_calls":"no"})", "parallel_tool_calls"},
      {"{" + m + R"(,"temperature":"0"})", "temperature"},
      {"{" + m + R"(,"temperature":-0.1})", "temperature"},
      {"{" + m + R"(,"temperature":2.5})", "temperature"},
      {"{" + m + R"(,"top_p":1.5})", "top_p"},
      {"{" + m + R"(,"top_k":1.5})", "top_k"},
      {"{" + m + R"(,"top_k":-1})", "top_k"},
      {"{" + m + R"(,"min_p":true})", "min_p"},
      {"{" + m + R"(,"presence_penalty":3})", "presence_penalty"},
      {"{" + m + R"(,"frequency_penalty":[]})", "frequency_penalty"},
      {"{" + m + R"(,"max_tokens":0})", "max_tokens"},
      {"{" + m + R"(,"max_tokens":-5})", "max_tokens"},
      {"{" + m + R"(,"max_tokens":1024})", "max_tokens"},
      {"{" + m + R"(,"max_tokens":18446744073709551615})", "max_tokens"},
      {"{" + m + R"(,"max_tokens":1e300})", "max_tokens"},
      {"{" + m + R"(,"max_completion_tokens":"9"})", "max_completion_tokens"},
      {"{" + m + R"(,"n":17})", "n"},
      {"{" + m + R"(,"top_logprobs":2})", "top_logprobs"},
      {"{" + m + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {"{" + m + R"(,"logprobs":1})", "logprobs"},
      {"{" + m + R"(,"echo":true})", "echo"},
      {"{" + m + R"(,"logit_bias":[1]})", "logit_bias"},
      {"{" + m + R"(,"logit_bias":{"x":1}})", "logit_bias.x"},
      {"{" + m + R"(,"logit_bias":{"-1":1}})", "logit_bias.-1"},
      {"{" + m + R"(,"logit_bias":{"5":101}})", "logit_bias.5"},
      {"{" + m + R"(,"logit_bias":{"5":"1"}})", "logit_bias.5"},
      {"{" + m + R"(,"logit_bias":{"5":1,"05":2}})", "logit_bias"},
      {"{" + m + R"(,"n":0})", "n"},
      {"{" + m + R"(,"n":"1"})", "n"},
      {"{" + m + R"(,"seed":"7"})", "seed"},
      {"{" + m + R"(,"stop":7})", "stop"},
      {"{" + m + R"(,"stop":[""]})", "stop"},
      {"{" + m + R"(,"stop":["a",1]})", "stop"},
      {"{" + m + R"(,"stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})", "stop"},
      {"{" + m + R"(,"stream":1})", "stream"},
      {"{" + m + R"(,"stream_options":{"include_usage":true}})", "stream_options"},
      {"{" + m + R"(,"stream":true,"stream_options":{"include_usage":"yes"}})", "stream_options.include_usage"},
      {"{" + m + R"(,"tools":[{"type":"function"}]})", "tools[0].function"},
      {"{" + m + R"(,"tools":{}})", "tools"},
      {"{" + m + R"(,"tools":[{"type":"code","function":{"name":"f"}}]})", "tools[0].type"},
      {"{" + m + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":3}}]})", "tools[0].function.parameters"},
      {"{" + m + R"(,"tools":[{"type":"function","function":{"name":"f","description":7}}]})", "tools[0].function.description"},
      {"{" + m + R"(,"tool_choice":"sometimes"})", "tool_choice"},
      {"{" + m + R"(,"tool_choice":"required"})", "tool_choice"},
      {"{" + m + R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})", "tool_choice.function.name"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"[1]"}}]}]})", "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"arguments":"{}"}}]}]})", "messages[0].tool_calls[0].function.name"},
      {R"({"messages":[{"role":"tool","content":"x","tool_call_id":5}]})", "messages[0].tool_call_id"},
  };
  for (const auto& [body, param] : cases) {
    auto e = parse(body);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400) << body;
    EXPECT_EQ(e->param, param) << body << " -> " << e->message;
    EXPECT_FALSE(e->message.empty());
    const nlohmann::json j = serve::error_json(*e);
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(param.empty() ? j["error"]["param"].is_null() : j["error"]["param"] == param);
  }
}

// OpenAI tools may leave out the description; gpt-oss's template writes "// " +
// tool.description, which failed the render (a 400). Now "" after the name, as llama-server.
TEST(ServeApi, ToolsWithoutDescriptionRenderUnderGptOss) {
  Request r;
  auto e = parse(R"({"messages":[{"role":"user","content":"hi"}],"tools":[
      {"type":"function","function":{"parameters":{"type":"object"},"name":"ping"}},
      {"type":"function","function":{"name":"pong","description":null}},
      {"type":"function","function":{"description":"Says hi","name":"hello"}}]})",
                 Endpoint::kChat, &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.tools.size(), 3u);
  EXPECT_EQ(r.tools[0]["function"].dump(), R"({"name":"ping","description":"","parameters":{"type":"object"}})");
  EXPECT_EQ(r.tools[1]["function"].dump(), R"({"name":"pong","description":""})");
  EXPECT_EQ(r.tools[2]["function"].dump(), R"({"description":"Says hi","name":"hello"})");  // as given
  auto t = tokenizer::ChatTemplate::parse(*tokenizer::builtin_chat_template("gpt-oss"));
  ASSERT_TRUE(t.ok()) << t.error();
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                {"tools", r.tools},
                                {"add_generation_prompt", true}};
  auto out = t->render_context(ctx);
  ASSERT_TRUE(out.ok()) << out.error();
  EXPECT_NE(out->find("// \ntype ping = () => any;"), std::string::npos) << *out;
  EXPECT_NE(out->find("// \ntype pong = () => any;"), std::string::npos) << *out;
  EXPECT_NE(out->find("// Says hi\ntype hello = () => any;"), std::string::npos) << *out;
}

TEST(ServeApi, ChunksAndResponses) {
  serve::ResponseIds ids{"chatcmpl-1", 5, "m"};
  auto first = serve::chunk_json(Endpoint::kChat, ids, "He", "", true);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "He");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  auto last = serve::chunk_json(Endpoint::kChat, ids, "", "stop", false);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  serve::Usage u{3, 4, 1};
  auto usage = serve::usage_chunk_json(Endpoint::kCompletion, ids, u);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  auto full = serve::response_json(Endpoint::kCompletion, ids, {choice("x", "length", nullptr)}, u);
  EXPECT_EQ(full["object"], "text_completion");
  EXPECT_EQ(full["choices"][0]["text"], "x");
}

TEST(ServeApi, TokenizeAndDetokenizeBodies) {
  serve::TokenizeRequest t;
  ASSERT_FALSE(serve::parse_tokenize(R"({"content": "hi"})", &t).has_value());
  EXPECT_EQ(t.content, "hi");
  EXPECT_FALSE(t.add_special);
  EXPECT_TRUE(t.parse_special);
  EXPECT_FALSE(t.with_pieces);
  ASSERT_FALSE(serve::parse_tokenize(R"({"content": "", "add_special": true, "parse_special": false,
                                        "with_pieces": true})", &t).has_value());
  EXPECT_TRUE(t.add_special && !t.parse_special && t.with_pieces && t.content.empty());
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {"{}", "content"}, {R"({"content": 1})", "content"}, {R"({"content": "x", "add_special": 1})", "add_special"},
           {"[1]", ""}, {"{", ""}}) {
    auto e = serve::parse_tokenize(body, &t);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, param) << body << " -> " << e->message;
  }
  std::vector<int32_t> ids;
  ASSERT_FALSE(serve::parse_detokenize(R"({"tokens": [0, 5, 9]})", 10, &ids).has_value());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 5, 9}));
  ASSERT_FALSE(serve::parse_detokenize(R"({"tokens": []})", 10, &ids).has_value());
  EXPECT_TRUE(ids.empty());
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"tokens": [10]})", "tokens[0]"}, {R"({"tokens": [1, -1]})", "tokens[1]"},
           {R"({"tokens": [1, 18446744073709551615]})", "tokens[1]"}, {R"({"tokens": [0.5]})", "tokens[0]"},
           {R"({"tokens": "0"})", "tokens"}, {"{}", "tokens"}}) {
    auto e = serve::parse_detokenize(body, 10, &ids);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->param, param) << body << " -> " << e->message;
  }
}

TEST(ServePrompt, BaseModelCompletesButRefusesChatNamingTheOption) {
  const std::string path = shardlm_test::scratch_path("base.gguf");
  ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), tensor::Type::Q4_0, 3).ok());
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.error();
  auto tok = tokenizer::Tokenizer::from_gguf(*(*m)->file);
  ASSERT_TRUE(tok.ok()) << tok.error();
  auto base = serve::PromptBuilder::create(*(*m)->file, **tok, "");
  ASSERT_TRUE(base.ok()) << base.error();
  EXPECT_FALSE(base->has_chat());
  EXPECT_EQ(base->template_source(), "");
  EXPECT_FALSE(base->completion("abc").empty());
  auto chat = base->chat({{"user", "hi"}});
  ASSERT_FALSE(chat.ok());
  EXPECT_NE(chat.error().find("--chat-template"), std::string::npos) << chat.error();
  EXPECT_EQ(chat.error(), serve::PromptBuilder::no_template_error());
  auto chosen = serve::PromptBuilder::create(*(*m)->file, **tok, "llama3");
  ASSERT_TRUE(chosen.ok()) << chosen.error();
  EXPECT_TRUE(chosen->has_chat());
  EXPECT_NE(chosen->template_source().find("start_header_id"), std::string::npos);
  EXPECT_TRUE(chosen->chat({{"user", "hi"}}).ok());
  EXPECT_FALSE(serve::PromptBuilder::create(*(*m)->file, **tok, "no-such-template").ok());
}

// Pushes pieces and returns everything released (push + flush).
std::string run_stop(std::vector<std::string> stops, const std::vector<std::string>& pieces, bool* stopped = nullptr) {
  serve::StopMatcher m(std::move(stops));
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  if (stopped) *stopped = m.stopped();
  out += m.flush();
  return out;
}

TEST(ServeStop, MatchesAcrossPiecesAndNeverShowsTheStop) {
  bool stopped = false;
  EXPECT_EQ(run_stop({"END"}, {"ab", "cE", "N", "Dxyz"}, &stopped), "abc");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run_stop({"END"}, {"E", "N", "D"}, &stopped), "");
  EXPECT_TRUE(stopped);
  // Overlapping prefix: "aab" inside "aaab" split byte by byte.
  EXPECT_EQ(run_stop({"aab"}, {"a", "a", "a", "b", "c"}, &stopped), "a");
  EXPECT_TRUE(stopped);
  // "abac" after a false start "abab".
  EXPECT_EQ(run_stop({"abac"}, {"ab", "ab", "ac", "!"}, &stopped), "ab");
  // A held prefix that turns out not to be a stop is released.
  EXPECT_EQ(run_stop({"END"}, {"xE", "Nd", "y"}, &stopped), "xENdy");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(run_stop({"END"}, {"abcEN"}, &stopped), "abcEN");  // flushed at the end
  EXPECT_FALSE(stopped);
  // The earliest of several stops wins, wherever it is in the list.
  EXPECT_EQ(run_stop({"zz", "b c"}, {"a b", " czz"}, &stopped), "a ");
  EXPECT_EQ(run_stop({"\n\n", "User:"}, {"hi\n", "\nUser:"}, &stopped), "hi");
  // Nothing after a stop, even more stops.
  EXPECT_EQ(run_stop({"."}, {"one.", "two.", "three"}, &stopped), "one");
  // No stops: text passes straight through.
  serve::StopMatcher none({});
  EXPECT_EQ(none.push("abc"), "abc");
  EXPECT_EQ(none.flush(), "");
  // Multi-byte UTF-8: a stop of "é!" (c3 a9 21); what is released is whole characters.
  EXPECT_EQ(run_stop({"\xc3\xa9!"}, {"caf\xc3\xa9", " \xc3\xa9", "!"}, &stopped), "caf\xc3\xa9 ");
  serve::StopMatcher m({"\xc3\xa9!"});
  EXPECT_EQ(m.push("\xc3\xa9"), "");  // held: could start the stop
  EXPECT_EQ(m.push("x"), "\xc3\xa9x");
  // Empty stop strings are ignored (the parser refuses them anyway).
  EXPECT_EQ(run_stop({""}, {"a", "b"}, &stopped), "ab");
  // matched(): the stop string that ended it (Anthropic's stop_sequence), the earliest one.
  serve::StopMatcher w({"zz", "b c", "a"});
  EXPECT_EQ(w.matched(), "");
  EXPECT_EQ(w.push("xb"), "x");
  EXPECT_EQ(w.push(" czz a"), "");
  EXPECT_EQ(w.matched(), "b c");
}

}  // namespace
