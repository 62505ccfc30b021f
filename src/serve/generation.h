// generation.h: what every HTTP API of `serve` shares once its body is parsed into a
// Request (api.h): the prompt rendered with the chat template (tools shown as tool_choice
// says, a forced call's prefill and stop string), the checks before the engine (context,
// health, a full queue: 429), and the run of one choice: text pieces as they may be shown
// (tool calls held back, tools.h), the reply's calls at the end. OpenAI's handler
// (server.cc), Ollama's (ollama.cc) and Anthropic's (anthropic.cc) only translate their
// formats to a Request and the pieces back.
// Deliberately no HTTP here beyond finding a request's socket (ClientWatch).
#pragma once
#include <chrono>
#include <optional>
#include <string>

#include "serve/api.h"
#include "serve/engine.h"
#include "serve/prompt.h"
#include "serve/reasoning.h"
#include "serve/server.h"
#include "serve/tools.h"

namespace httplib {
struct Request;
struct Response;
}

namespace serve {

// A request ready for the engine.
struct Job {
  GenerationRequest gen;
  ToolFormat format = ToolFormat::kNone;
  bool tools_on = false;
  ReasoningFormat reasoning = ReasoningFormat::kNone;  // chat: the request's, else --reasoning-format
  bool think_open = false;  // the prompt ends in <think>: the reply starts inside the thought
  bool harmony = false;     // the prompt ends in <|start|>assistant: a gpt-oss harmony reply (harmony.h)
  bool harmony_tools = false;  // harmony with tools on: messages to functions are calls
};

// Receives the pieces of the reply's tool calls as they are written (tools.h); false: the
// client is gone.
using CallSink = std::function<bool(const ToolDelta&)>;

// One choice's outcome: finish_reason "tool_calls" when the reply holds calls.
struct Reply {
  GenerationResult out;
  std::string finish_reason;
  ToolReply tail;  // the content not yet handed to the sink, and the calls
  std::string reasoning;  // the thought split off (reasoning.h), all of it
  size_t streamed_calls = 0;  // tail.calls already given piece by piece to the CallSink
  bool cancelled() const { return out.finish_reason == "cancelled"; }
};

class Generator {
 public:
  Generator(Engine& e, const PromptBuilder& p, const ServerOptions& o) : engine_(e), prompts_(p), o_(o) {}
  // Renders r's prompt (chat or completion) and checks it fits, the engine is healthy and
  // the queue has room; the error otherwise (429 for a full queue: send Retry-After).
  std::optional<ApiError> prepare(Request& r, Job* out) const;
  // prepare's first half: the prompt rendered and its tools set up, not yet checked
  // against the context or the queue (Anthropic's count_tokens).
  std::optional<ApiError> render(Request& r, Job* out) const;
  // Choice i (seed + i): shown text to `text` piece by piece, "" while waiting (a chance
  // to say the client left by returning false); the thought's pieces to `reasoning` when
  // given (not with deepseek-legacy, whose thought stays in the text, as llama-server streams it);
  // the tool calls' pieces to `calls` as they come when given (else only in the Reply).
  Reply run(const Job& job, int i, const TextSink& text, const StillWaiting& waiting = {},
            const LogprobSink& logprobs = {}, const TextSink& reasoning = {}, const CallSink& calls = {}) const;

  // Choice 0 answered in one body: *text gets the whole shown text (the sink's pieces and
  // the tail's content), while the client is watched; a client that left (499) or a failed
  // generation (503) is the error returned, for the caller to send in its API's shape.
  std::optional<ApiError> run_whole(const Job& job, const httplib::Request& req, Reply* out,
                                    std::string* text) const;

  // The tool format requests get: the template's own, else kGeneric (tools.h).
  ToolFormat template_tool_format() const;

  Engine& engine() const { return engine_; }
  const PromptBuilder& prompts() const { return prompts_; }
  const ServerOptions& options() const { return o_; }

 private:
  Engine& engine_;
  const PromptBuilder& prompts_;
  const ServerOptions& o_;
};

// A non-streamed request's client, asked (a peek at its socket) at most every 100 ms:
// false once it has hung up.
class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request& req);
  bool still_there();

 private:
  int fd_ = -1;
  std::chrono::steady_clock::time_point asked_;
};

ApiError api_error(int status, std::string message, std::string type, std::string code = "");
// "chatcmpl-" + 16 hex digits, etc.
std::string random_id(const char* prefix);
long long unix_now();

// A JSON body as sent (invalid UTF-8 replaced, never thrown on).
std::string dump(const nlohmann::json& j);
// e as a reply: its status, Retry-After on 429, and body, the error in the API's own shape.
void send_error(httplib::Response& res, const ApiError& e, const nlohmann::json& body);
// The same in OpenAI's shape (error_json): the default of every route that is not another API's.
void send_error(httplib::Response& res, const ApiError& e);

}  // namespace serve
