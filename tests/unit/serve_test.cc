// serve_test.cc: the server's pieces without HTTP: OpenAI request parsing / validation
// (accepted fields, every refusal names its parameter), the stop-string matcher on odd
// splits, and KV prefix reuse: on SmolLM2, logits after evaluating a prompt's suffix on
// top of a reused (or overwritten) cache prefix are bit-identical to evaluating the whole
// prompt, and the engine's greedy answer for a prompt does not depend on what ran before.
// Also /tokenize and /detokenize bodies, and a base model (no chat template): completions
// only, chat refused naming --chat-template.
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

class ServeModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(SHARDLM_DEFAULT_MODEL)) GTEST_SKIP() << "model not found: " SHARDLM_DEFAULT_MODEL;
    auto m = model::load_model(SHARDLM_DEFAULT_MODEL);
    ASSERT_TRUE(m.ok()) << m.error();
    m_ = std::move(*m);
    auto t = tokenizer::Tokenizer::from_gguf(*m_->file);
    ASSERT_TRUE(t.ok()) << t.error();
    tok_ = std::move(*t);
  }
  std::unique_ptr<model::LoadedModel> m_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  util::ThreadPool pool_{2};
};

// In vec_dot order (a row's bits do not depend on its segment's length): SmolLM2's Q4_1
// batches of 4+ rows sum in lane order by default since 2026-12-06, so a split at k gives
// rows of other lengths there (see docs/ARCHITECTURE.md on a slot's own cached prefix).
TEST_F(ServeModel, SuffixOnReusedPrefixGivesIdenticalLogits) {
  const shardlm_test::VecDotOrder vec_dot_order;
  const std::vector<int32_t> p = tok_->encode(
      "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
      "movable metal type, oil-based ink and a wooden press adapted from those used for wine.",
      true, true);
  ASSERT_GT(p.size(), 34u);
  const std::vector<int32_t> other = tok_->encode("Completely different text that fills the cache first, "
                                                  "with enough tokens to cover every position we will reuse.",
                                                  true, true);
  const int n = int(p.size()), V = m_->config.n_vocab;
  model::Transformer full(m_->config, m_->weights, pool_, 256);
  std::vector<float> want(V), got(V);
  ASSERT_TRUE(full.forward(p.data(), n, 0, want.data()).ok());
  for (int k : {1, 32, 33, n - 1}) {
    model::Transformer t(m_->config, m_->weights, pool_, 256);
    // Stale rows past k (another prompt's) must not matter: only 0..k are reused.
    ASSERT_TRUE(t.forward(other.data(), int(other.size()), 0, nullptr).ok());
    ASSERT_TRUE(t.forward(p.data(), k, 0, nullptr).ok());
    ASSERT_TRUE(t.forward(p.data() + k, n - k, k, got.data()).ok());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * V), 0) << "reuse point " << k;
  }
}

TEST_F(ServeModel, GreedyAnswerDoesNotDependOnWhatRanBefore) {
  auto answer = [&](serve::Engine& e, const std::string& text, int n, std::vector<std::string> stop = {}) {
    serve::GenerationRequest g;
    g.prompt = tok_->encode(text, true, true);
    g.params.temperature = 0;
    g.seed_given = true;
    g.max_tokens = n;
    g.stop = std::move(stop);
    std::string out;
    serve::GenerationResult r = e.generate(g, [&](const std::string& t) {
      out += t;
      return true;
    });
    EXPECT_TRUE(r.status.ok()) << r.status.message();
    return std::make_pair(out, r);
  };
  runtime::ClusterOptions o;
  o.run.ctx = 256;
  o.progress = false;
  const std::string a = "The capital of France is Paris. The capital of Germany is";
  std::string alone;
  {
    auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
    ASSERT_TRUE(c.ok()) << c.error();
    serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
    alone = answer(e, a, 10).first;
  }
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
  answer(e, "Once upon a time", 6);
  answer(e, "The capital of France is Paris. The capital of Italy is", 6);  // shares a long prefix
  auto [again, r] = answer(e, a, 10);
  EXPECT_EQ(again, alone);
  // Reuse keeps every row in the order the prompt alone gives it (Scheduler::in_order):
  // alone, this 12-token prompt is one lane-order chunk, so at least kLaneMinBatch rows are
  // evaluated again (fewer would run in vec_dot order).
  EXPECT_GE(r.usage.cached_tokens, 8);
  auto [same, r2] = answer(e, a, 10);  // the whole prompt cached: its last 4 tokens re-evaluated
  EXPECT_EQ(same, alone);
  EXPECT_EQ(r2.usage.cached_tokens, r2.usage.prompt_tokens - int(kernels::kLaneMinBatch));
  // A stop string inside the greedy answer cuts it there.
  ASSERT_GT(alone.size(), 6u);
  const std::string stop = alone.substr(3, 3);
  auto [cut, r3] = answer(e, a, 10, {stop});
  EXPECT_EQ(cut, alone.substr(0, alone.find(stop)));
  EXPECT_EQ(r3.finish_reason, "stop");
  // A client that goes away stops the generation at once.
  serve::GenerationRequest g;
  g.prompt = tok_->encode(a, true, true);
  g.params.temperature = 0;
  g.max_tokens = 200;
  int calls = 0;
  // "" asks whether the client is still there (every 100 ms without text): not a token.
  serve::GenerationResult gone = e.generate(g, [&](const std::string& t) { return (calls += !t.empty()) < 3; });
  EXPECT_EQ(gone.finish_reason, "cancelled");
  EXPECT_GE(gone.usage.completion_tokens, 3);  // the scheduler notices between steps
  EXPECT_LT(gone.usage.completion_tokens, 100);  // not the whole budget (a loaded machine may lag)
  EXPECT_EQ(e.metrics().cancelled, 1u);
}

// Continuous batching: six requests (greedy and seeded sampling, a stop string, different
// lengths) sent at once to an engine with 4 slots (two wait for a slot) give each exactly
// the text it gets alone on a fresh engine; while they run, steps carry several sequences.
TEST_F(ServeModel, ConcurrentRequestsEqualEachAlone) {
  struct Case {
    std::string text;
    int n;
    float temp;
    std::vector<std::string> stop;
  };
  const std::vector<Case> cases = {{"The capital of France is", 12, 0, {}},
                                   {"Once upon a time", 9, 0.8f, {}},
                                   {"def fibonacci(n):", 14, 0, {"\n\n"}},
                                   {"1, 2, 3, 4, 5,", 6, 0, {}},
                                   {"My favourite colour is", 11, 1.0f, {}},
                                   {"The quick brown fox jumps over the lazy dog. The quick brown fox", 8, 0, {}}};
  auto request = [&](const Case& k) {
    serve::GenerationRequest g;
    g.prompt = tok_->encode(k.text, true, true);
    g.params.temperature = k.temp;
    g.params.seed = 1234;
    g.seed_given = true;
    g.max_tokens = k.n;
    g.stop = k.stop;
    return g;
  };
  auto answer = [&](serve::Engine& e, const Case& k) {
    std::string out;
    serve::GenerationResult r = e.generate(request(k), [&](const std::string& t) {
      out += t;
      return true;
    });
    EXPECT_TRUE(r.status.ok()) << r.status.message();
    return out + "|" + r.finish_reason;
  };
  runtime::ClusterOptions o;
  o.run.ctx = 128;
  o.progress = false;
  std::vector<std::string> alone;
  for (const Case& k : cases) {
    auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
    ASSERT_TRUE(c.ok()) << c.error();
    serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
    alone.push_back(answer(e, k));
  }
  o.run.n_slots = 4;
  o.run.max_batch = 64 + o.run.n_slots;
  // Paged KV (issue 32): the default pool (4 contexts), then one of 2 blocks of 64
  // positions for the 4 slots (each request needs one): requests wait for blocks and idle
  // slots' cached rows are released, and every text is still the one alone.
  for (int kv_blocks : {0, 2}) {
  o.run.kv_blocks = kv_blocks;
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, 64);
  std::vector<std::string> together(cases.size());
  std::atomic<bool> running{true};
  int peak_seqs = 0;
  std::thread watch([&] {
    while (running) {
      peak_seqs = std::max(peak_seqs, e.metrics().sched.last_batch_seqs);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> clients;
  for (size_t i = 0; i < cases.size(); ++i) clients.emplace_back([&, i] { together[i] = answer(e, cases[i]); });
  for (auto& t : clients) t.join();
  running = false;
  watch.join();
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(together[i], alone[i]) << cases[i].text << " kv_blocks " << kv_blocks;
  EXPECT_GT(peak_seqs, 1);
  const serve::EngineMetrics m = e.metrics();
  EXPECT_EQ(m.sched.slots_in_use, 0);
  EXPECT_EQ(m.sched.queued, 0);
  EXPECT_EQ(m.sched.slots, 4);
  EXPECT_EQ(m.generations, cases.size());
  EXPECT_EQ(m.sched.kv_blocks, kv_blocks ? kv_blocks : 8);
  EXPECT_EQ(m.sched.kv_full_ends, 0u);
  EXPECT_LE(m.sched.kv_blocks_idle, m.sched.kv_blocks);
  }
}

// Shared prefixes (issue 32 step 2): a finished request's full KV blocks stay registered
// (cached) after another conversation took its slot; a later request whose prompt starts
// with the same 64-token blocks takes them instead of evaluating them (cached_tokens), and
// its text is the one alone.
TEST_F(ServeModel, SharedPrefixBlocksGiveTheTextAlone) {
  std::string system;
  for (int i = 0; i < 16; ++i) system += "The assistant answers questions about geography briefly. ";
  const std::vector<std::string> prompts = {system + "Q: the capital of France? A:", system + "Q: the capital of Spain? A:",
                                            system + "Q: the capital of Italy? A:"};
  auto answer = [&](serve::Engine& e, const std::string& p) {
    serve::GenerationRequest g;
    g.prompt = tok_->encode(p, true, true);
    g.params.temperature = 0;
    g.max_tokens = 6;
    std::string out;
    serve::GenerationResult r = e.generate(g, [&](const std::string& t) {
      out += t;
      return true;
    });
    EXPECT_TRUE(r.status.ok()) << r.status.message();
    return std::make_pair(out, r);
  };
  runtime::ClusterOptions o;
  o.run.ctx = 256;
  o.progress = false;
  std::vector<std::string> alone;
  for (const std::string& p : prompts) {
    auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
    ASSERT_TRUE(c.ok()) << c.error();
    serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
    alone.push_back(answer(e, p).first);
  }
  ASSERT_GT(tok_->encode(system, true, true).size(), 128u);
  o.run.max_batch = 64 + o.run.n_slots;
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, 64);
  EXPECT_EQ(answer(e, prompts[0]).first, alone[0]);
  answer(e, "Once upon a time");  // the slot's next conversation: prompt 0's blocks stay cached
  for (int i : {1, 2}) {
    auto [text, r] = answer(e, prompts[size_t(i)]);
    EXPECT_EQ(text, alone[size_t(i)]) << i;
    EXPECT_GE(r.usage.cached_tokens, 128) << i;
    answer(e, "Once upon a time");
  }
  const serve::EngineMetrics m = e.metrics();
  EXPECT_EQ(m.sched.kv_prefix_hits, 2u);
  EXPECT_GE(m.sched.kv_prefix_tokens, 256u);
}

// A prompt longer than the whole KV pool (a pool smaller than --ctx: the runtime allows it,
// serve's --kv-memory does not) is a 400 giving both sizes and --kv-memory, before the
// engine; one that fits passes.
TEST_F(ServeModel, PromptLongerThanTheKvPoolIs400) {
  runtime::ClusterOptions o;
  o.run.ctx = 256;
  o.run.kv_blocks = 2;
  o.progress = false;
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
  auto prompts = serve::PromptBuilder::create(*m_->file, *tok_, "");
  ASSERT_TRUE(prompts.ok()) << prompts.error();
  serve::ServerOptions so;
  serve::Generator g(e, *prompts, so);
  serve::Request r;
  r.endpoint = serve::Endpoint::kCompletion;
  r.max_tokens = 4;
  r.prompt_tokens.assign(129, 28);
  serve::Job job;
  const std::optional<serve::ApiError> err = g.prepare(r, &job);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->code, "context_length_exceeded");
  EXPECT_EQ(err->param, "prompt");
  for (const char* part : {"129 tokens", "128 positions", "--kv-memory"})
    EXPECT_NE(err->message.find(part), std::string::npos) << part << " in " << err->message;
  r.prompt_tokens.assign(128, 28);
  EXPECT_FALSE(g.prepare(r, &job).has_value());
}

}  // namespace

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
