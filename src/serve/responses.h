// responses.h: OpenAI's Responses API on `serve` (what the Agents SDK, Codex and
// client.responses speak): POST /v1/responses (one response object, or the server-sent
// events response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta / .done,
// response.function_call_arguments.delta / .done, response.output_item.done,
// response.completed or response.incomplete), GET and DELETE /v1/responses/{id}.
// A body is translated into an OpenAI chat body (instructions -> a system turn; input as a
// string or items: messages of any role, function_call items -> an assistant's
// tool_calls, function_call_output items -> role "tool" messages; flat function tools ->
// chat tools; text.format -> response_format; max_output_tokens -> max_tokens) and
// validated by api.h's parse_request, so each check is the one place's; errors are
// OpenAI's {"error": {message, type, param, code}}.
// previous_response_id continues a stored conversation: a response is kept (unless
// "store": false) in a ResponseStore, an in-memory LRU of a bounded number of responses
// (--responses-store, default 256; the least recently used is dropped first), each holding
// its conversation as chat messages (instructions are not carried over, as OpenAI's are
// not) and its response object. An unknown or dropped id is a 400
// previous_response_not_found (GET: 404).
#pragma once
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "serve/api.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace serve {

class Generator;

// Stored responses, least recently used dropped beyond capacity (0: nothing is kept).
class ResponseStore {
 public:
  struct Entry {
    nlohmann::ordered_json messages;  // the conversation as OpenAI chat messages, the reply's included
    nlohmann::json response;          // the response object as sent
  };
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  void put(const std::string& id, Entry e);
  std::optional<Entry> get(const std::string& id);  // and marks it used
  bool erase(const std::string& id);
  size_t size() const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, Entry>> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<std::pair<std::string, Entry>>::iterator> index_;
};

struct ResponsesRequest {
  Request chat;                      // the translated request, as parse_request checked it
  nlohmann::ordered_json history;    // the conversation's messages without the instructions
  std::string previous_response_id;  // "" none
  bool store = true;
  nlohmann::json echo;  // what the response object repeats: instructions, tools, text, ...
};

std::optional<ApiError> parse_responses(std::string_view body, int ctx, const sampler::Params& defaults,
                                        ResponseStore& store, ResponsesRequest* out);

// The response object: status completed, or incomplete (finish_reason "length") with
// incomplete_details; output: its items (reasoning, message, function_call).
nlohmann::json response_object(const ResponsesRequest& r, const std::string& id, long long created,
                               const std::string& status, const nlohmann::json& output, const Usage& u);
nlohmann::json message_item(const std::string& id, const std::string& text, const std::string& status);
nlohmann::json function_call_item(const std::string& id, const ToolCall& c, const std::string& status);
// A thought (reasoning.h): {type: "reasoning", summary: [], content: [reasoning_text]}.
nlohmann::json reasoning_item(const std::string& id, const std::string& text, const std::string& status);

// Answers a request the server's router cannot (true): DELETE /v1/responses/{id} without
// a body length, which cpp-httplib would otherwise read a body for until the client closes.
using RouteHook = std::function<bool(const httplib::Request&, httplib::Response&)>;
RouteHook add_responses_routes(httplib::Server& svr, const Generator& gen, size_t store_capacity);

}  // namespace serve
