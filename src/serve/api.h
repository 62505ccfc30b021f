// api.h: the OpenAI-compatible request and response formats (and the bodies of
// llama-server's /tokenize and /detokenize). parse_request() reads a
// /v1/chat/completions or /v1/completions body and checks every field it knows (types,
// ranges, roles, n, logprobs, logit_bias, tools and tool_choice, response_format and
// grammar (compiled here, so a bad schema is a 400), max_tokens within the
// context, stop strings), answering a
// malformed request with an ApiError that becomes {"error":{"message","type","param",
// "code"}} and an HTTP 4xx. Fields we do not know are ignored, as OpenAI's clients send
// extras. Deliberately no tokenization here (the prompt's length is checked by the server
// once the chat template has been rendered).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "sampler/sampler.h"
#include "serve/reasoning.h"
#include "serve/tools.h"
#include "tokenizer/chat_template.h"

namespace httplib {
class Server;
}

namespace serve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};
nlohmann::json error_json(const ApiError& e);
ApiError bad_request(std::string message, std::string param = "", std::string code = "");
// A 400 "'param' must be WANT" with code invalid_type.
ApiError wrong_type(const std::string& param, const std::string& want);

enum class Endpoint { kChat, kCompletion };

struct Request {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  std::vector<tokenizer::ChatMessage> messages;  // chat
  // chat: the messages as the template sees them: {role, content} plus an assistant's
  // tool_calls ({id, type, function: {name, arguments: OBJECT}}) and a tool's tool_call_id.
  nlohmann::ordered_json chat_messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // [{type, function}], [] none
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  // kNamed
  bool parallel_tool_calls = true;  // several calls in one reply (false: exactly one)
  std::string prompt;                            // completions
  std::vector<int32_t> prompt_tokens;            // completions: the prompt as tokens instead (/infill)
  sampler::Params params;
  bool seed_given = false;
  int max_tokens = 0;  // 0: until the context is full
  int max_guesses = -1;  // "speculative.n_max": guesses per step at most (-1: the server's)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  int n = 1;          // choices, drawn one after another with seeds seed, seed + 1, ...
  bool echo = false;  // completions: the prompt's text before each choice's
  // response_format json_object / json_schema, or "grammar" (GBNF): the output is a
  // sentence of it (grammar/); null: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  bool gbnf = false;  // the grammar is the request's own GBNF ("grammar"), not a format's
  // llama-server's "reasoning_format" (none, auto, deepseek, deepseek-legacy); unset: the
  // server's --reasoning-format.
  std::optional<ReasoningFormat> reasoning_format;
  // params.logit_bias (ids checked against the vocabulary by check_token_ids) and
  // params.top_logprobs: chat's logprobs + top_logprobs, completions' logprobs.
};
// The request's token ids (logit_bias keys) are below n_vocab.
std::optional<ApiError> check_token_ids(const Request& r, int32_t n_vocab);

// Parses and validates a request body; ctx is the server's context length (max_tokens
// beyond it is refused). defaults: sampling parameters for fields the request omits.
std::optional<ApiError> parse_request(std::string_view body, Endpoint ep, int ctx, const sampler::Params& defaults,
                                      Request* out);

// /tokenize and /detokenize, in llama-server's formats: {"content": TEXT, "add_special":
// false, "parse_special": true, "with_pieces": false} and {"tokens": [ID, ...]}, each id
// below n_vocab.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;   // BOS (and EOS) as the vocabulary asks
  bool parse_special = true;  // "<|im_start|>" in the text is the special token
  bool with_pieces = false;   // [{"id": ID, "piece": TEXT}] instead of [ID]
};
std::optional<ApiError> parse_tokenize(std::string_view body, TokenizeRequest* out);
std::optional<ApiError> parse_detokenize(std::string_view body, int32_t n_vocab, std::vector<int32_t>* out);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from the previous request
  int reasoning_tokens = 0;  // of completion_tokens, those of the thought (Generator::run)
};
nlohmann::json usage_json(const Usage& u);

// The non-streamed response and the streamed chunks (one JSON object each, sent as
// "data: ...\n\n"). text/finish_reason: the choice; finish_reason "" -> null.
struct ResponseIds {
  std::string id;  // chatcmpl-... / cmpl-...
  long long created = 0;
  std::string model;
};
// A generated token's log-probabilities with the tokens' text (sampler::Logprobs, whose
// doc says what they are of).
struct TokenLogprobs {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // best first
};

struct Choice {
  std::string text;
  std::vector<ToolCall> tool_calls;  // chat: content is then text, or null when text is empty
  std::string reasoning;             // chat: message.reasoning_content when not empty
  std::string finish_reason;
  nlohmann::json logprobs;  // null, or logprobs_json's
};
nlohmann::json response_json(Endpoint ep, const ResponseIds& ids, const std::vector<Choice>& choices, const Usage& u);
// One choice's chunk (index: which).
nlohmann::json chunk_json(Endpoint ep, const ResponseIds& ids, const std::string& text,
                          const std::string& finish_reason, bool first, int index = 0,
                          const nlohmann::json& logprobs = nullptr);
// A choice's "logprobs" in the endpoint's format: chat {"content": [{token, logprob, bytes,
// top_logprobs}]}, completions {tokens, token_logprobs, top_logprobs, text_offset} with the
// offsets counted from text_offset0.
nlohmann::json logprobs_json(Endpoint ep, const std::vector<TokenLogprobs>& t, size_t text_offset0 = 0);
// A streamed choice's tool call, whole: {"tool_calls": [{index, id, type, function}]}
// (and the role when it is the choice's first chunk).
nlohmann::json tool_call_chunk_json(const ResponseIds& ids, int index, int call_index, const ToolCall& call,
                                    bool first);
// A piece of a streamed choice's tool call, as OpenAI sends them: the call's first
// {"tool_calls": [{index, id, type, function: {name, arguments: ""}}]}, then
// {"tool_calls": [{index, function: {arguments: FRAGMENT}}]}.
nlohmann::json tool_delta_chunk_json(const ResponseIds& ids, int index, const ToolDelta& d, bool first);
nlohmann::json usage_chunk_json(Endpoint ep, const ResponseIds& ids, const Usage& u);
// A streamed chat choice's piece of thought: {"delta": {"reasoning_content": TEXT}}.
nlohmann::json reasoning_chunk_json(const ResponseIds& ids, int index, const std::string& text, bool first);

class Generator;
// POST /v1/chat/completions, /v1/completions, /tokenize and /detokenize, GET /props
// (openai_routes.cc).
void add_openai_routes(httplib::Server& svr, const Generator& gen);

}  // namespace serve
