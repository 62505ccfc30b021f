// generation.cc: a parsed request to the engine and back (see generation.h).
#include "serve/generation.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>

namespace serve {

ApiError api_error(int status, std::string message, std::string type, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, (unsigned long long)rng());
  return buf;
}

long long unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<ApiError> Generator::render(Request& r, Job* job) const {
  const bool chat = r.endpoint == Endpoint::kChat;
  if (chat && !prompts_.has_chat())
    return bad_request(PromptBuilder::no_template_error() + "; then restart the server", "messages", "no_chat_template");
  if (auto e = check_token_ids(r, prompts_.tokenizer().n_vocab())) return e;
  // Tools: shown to the model unless tool_choice is none; required and a named function
  // start the assistant's turn with the call (tools.h) and end it with the call.
  const ToolChoice tool_choice = r.tools.empty() ? ToolChoice::kNone : r.tool_choice;
  Job j;
  j.tools_on = tool_choice != ToolChoice::kNone;
  // A template without a tool syntax gets the generic format (tools.h).
  j.format = template_tool_format();
  if (j.tools_on && r.grammar)
    return bad_request("'response_format' (or 'grammar') cannot be combined with tools: the reply "
                       "would have to be a tool call and JSON at once; send tool_choice none or "
                       "leave the format out", "response_format", "unsupported_parameter");
  if (j.tools_on) {  // a forced call (and the generic format's reply) is decoded under its grammar
    // auto: the calls' grammar from the call's opening marker on (tools.h)
    auto gbnf = tool_call_gbnf(j.format, r.tools, tool_choice, r.tool_name, r.parallel_tool_calls);
    if (!gbnf) return bad_request(gbnf.status().message(), "tools", "unsupported_value");
    if (!gbnf->empty()) {
      auto g = grammar::Grammar::parse(*gbnf);
      if (!g) return api_error(500, "the tool-call grammar does not parse: " + g.status().message(), "server_error");
      r.grammar = std::move(*g);
      j.gen.triggers = tool_triggers(j.format, tool_choice);
    }
    // One call: it ends the reply (parallel: the grammar lets the model go on or end).
    if (!tool_stop(j.format).empty() && r.grammar && !r.parallel_tool_calls) r.stop.push_back(tool_stop(j.format));
  }
  nlohmann::ordered_json messages = r.chat_messages, tools = j.tools_on ? r.tools : nlohmann::ordered_json::array();
  // Generic: the tools in the system turn; the calls and results of a history in text, also
  // when this request sends no tools (a template without a tool syntax cannot render them).
  if (j.format == ToolFormat::kGeneric && (j.tools_on || has_tool_turns(messages))) {
    messages = generic_tool_messages(messages, j.tools_on ? generic_tool_prompt(r.tools, tool_choice) : "");
    tools = nlohmann::ordered_json::array();
  }
  if (j.format == ToolFormat::kHarmony)  // the gpt-oss template reads a null content as text: none
    for (auto& m : messages)
      if (m.contains("tool_calls") && m["content"].is_null()) m.erase("content");
  std::vector<int32_t> tokens;
  if (chat) {
    auto t = prompts_.chat(messages, tools, "");
    if (!t) return bad_request("the chat template refused these messages: " + t.error(), "messages");
    tokens = std::move(*t);
  } else {
    tokens = r.prompt_tokens.empty() ? prompts_.completion(r.prompt) : r.prompt_tokens;
  }
  if (chat) {
    j.reasoning = r.reasoning_format.value_or(o_.reasoning_format);
    const size_t n = std::min<size_t>(tokens.size(), 24);  // a byte-level toy vocab spells the tags out
    // A reply under a format's grammar (response_format, a forced tool call) is that format
    // from its first token, not a thought; a request's own GBNF may write the thought.
    const std::string tail = prompts_.tokenizer().decode({tokens.end() - n, tokens.end()}, true);
    j.think_open = splits(j.reasoning) && (!r.grammar || r.gbnf || !j.gen.triggers.empty()) &&
                   ends_in_open_think(tail);
    // harmony with tools: the reply is always read by its channels, as its calls are
    // messages to functions (the thought then goes to reasoning even with format none).
    j.harmony_tools = j.tools_on && j.format == ToolFormat::kHarmony;
    j.harmony = (splits(j.reasoning) || j.harmony_tools) && ends_in_harmony_start(tail);
  }
  j.gen.prompt = std::move(tokens);
  *job = std::move(j);
  return std::nullopt;
}

std::optional<ApiError> Generator::prepare(Request& r, Job* job) const {
  Job j;
  if (auto e = render(r, &j)) return e;
  const bool chat = r.endpoint == Endpoint::kChat;
  const int ctx = engine_.ctx();
  const int n = int(j.gen.prompt.size());
  if (n == 0) return bad_request("the prompt is empty", chat ? "messages" : "prompt");
  if (n >= ctx || n + r.max_tokens > ctx)
    return bad_request("the prompt is " + std::to_string(n) + " tokens" +
                           (r.max_tokens ? " and max_tokens " + std::to_string(r.max_tokens) : "") +
                           ", but the context is " + std::to_string(ctx) +
                           " tokens; shorten the prompt, lower max_tokens or restart with a larger --ctx",
                       chat ? "messages" : "prompt", "context_length_exceeded");
  if (std::string e = engine_.pool_unfit(n); !e.empty())
    return bad_request(e, chat ? "messages" : "prompt", "context_length_exceeded");
  if (util::Status h = engine_.health(); !h.ok())
    return api_error(503, "the model is unavailable: " + h.message() + "; restart the server", "server_error");
  if (const runtime::SchedulerStats m = engine_.metrics().sched; m.queued >= o_.max_queue)
    return api_error(429, "the server has " + std::to_string(m.queued) + " requests waiting for " +
                              std::to_string(m.slots) + " slots (--max-queue " + std::to_string(o_.max_queue) +
                              "); retry later", "rate_limit_error", "queue_full");
  GenerationRequest& g = j.gen;
  g.params = r.params;
  g.seed_given = r.seed_given;
  g.max_tokens = r.max_tokens ? r.max_tokens : std::min(ctx - n, o_.default_max_tokens);
  g.stop = r.stop;
  g.max_guesses = r.max_guesses;
  g.grammar = r.grammar;
  *job = std::move(j);
  return std::nullopt;
}

std::optional<ApiError> Generator::run_whole(const Job& job, const httplib::Request& req, Reply* out,
                                            std::string* text) const {
  ClientWatch client(req);
  text->clear();
  *out = run(job, 0, [&](const std::string& t) {
    *text += t;
    return client.still_there();
  });
  if (out->cancelled()) return api_error(499, "the client went away", "cancelled");
  if (!out->out.status.ok())
    return api_error(503, "generation failed: " + out->out.status.message(), "server_error");
  *text += out->tail.content;
  return std::nullopt;
}

ToolFormat Generator::template_tool_format() const {
  const ToolFormat f = tool_format(prompts_.template_source());
  return f == ToolFormat::kNone ? ToolFormat::kGeneric : f;
}

Reply Generator::run(const Job& job, int i, const TextSink& text, const StillWaiting& waiting,
                     const LogprobSink& logprobs, const TextSink& reasoning, const CallSink& calls) const {
  GenerationRequest g = job.gen;
  g.params.seed += uint64_t(i);
  ToolStream tools(job.format, "");
  // The reply: the thought split off first (reasoning.h), the rest through the tool-call
  // stream; deepseek-legacy splits the thought off only to give it, the text keeps it.
  ReasoningSplitter thought(job.think_open, job.harmony, job.harmony_tools);
  const bool split = splits(job.reasoning) || (job.harmony && job.harmony_tools),
             legacy = job.reasoning == ReasoningFormat::kDeepseekLegacy;
  Reply r;
  auto give_calls = [&] {
    if (!calls) return true;
    for (const ToolDelta& d : tools.deltas()) {
      r.streamed_calls = size_t(d.index) + 1;
      if (!calls(d)) return false;
    }
    return true;
  };
  auto content = [&](const std::string& t) {
    if (!job.tools_on || t.empty()) return text(t);
    const std::string shown = tools.push(t);
    return text(shown) && give_calls();
  };
  // A harmony reply's calls (harmony.h), as Hermes text: never shown, read for calls.
  auto call_text = [&](const std::string& t) {
    if (t.empty()) return true;
    tools.push(t);
    return give_calls();
  };
  r.out = engine_.generate(
      g,
      [&](const std::string& t) {
        if (t.empty() || !split) return content(t);
        const ReasoningPiece p = thought.push(t);
        r.reasoning += p.reasoning;
        if (legacy) return content(t);
        if (!p.reasoning.empty() && reasoning && !reasoning(p.reasoning)) return false;
        return content(p.content) && call_text(p.calls);
      },
      waiting, logprobs, [&](int n) { thought.count(n); });
  r.finish_reason = r.out.finish_reason;
  const ReasoningPiece last = split ? thought.finish() : ReasoningPiece{};
  if (split) r.out.usage.reasoning_tokens = thought.reasoning_tokens();
  r.reasoning += last.reasoning;
  if (!last.reasoning.empty() && reasoning && !legacy) reasoning(last.reasoning);
  const std::string held = legacy ? "" : last.content;
  if (job.tools_on) {
    if (!held.empty()) r.tail.content = tools.push(held);
    if (!last.calls.empty()) tools.push(last.calls);
    give_calls();
    ToolReply rest = tools.finish();
    r.tail.content += rest.content;
    r.tail.calls = std::move(rest.calls);
    // A cut call's reply stays "length"; a further call cut off was dropped (tools.h).
    if (!r.tail.calls.empty() && !rest.cut && (r.finish_reason == "stop" || r.finish_reason == "length"))
      r.finish_reason = "tool_calls";
  } else {
    r.tail.content = held;
  }
  return r;
}

namespace {

// The socket of a request, found by its peer address (cpp-httplib 0.11 does not hand it to
// handlers), or -1.
int client_socket(const httplib::Request& req) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(e.path().filename().c_str());
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    char host[INET6_ADDRSTRLEN] = "";
    int port = -1;
    if (ss.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    if (port == req.remote_port && req.remote_addr == host) return fd;
  }
  return -1;
}

// False once the peer has closed its side (a read would return end of file) or reset.
bool peer_connected(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

}  // namespace

ClientWatch::ClientWatch(const httplib::Request& req)
    : fd_(client_socket(req)), asked_(std::chrono::steady_clock::now()) {}

bool ClientWatch::still_there() {
  const auto now = std::chrono::steady_clock::now();
  if (fd_ < 0 || now - asked_ < std::chrono::milliseconds(100)) return true;
  asked_ = now;
  return peer_connected(fd_);
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_error(httplib::Response& res, const ApiError& e, const nlohmann::json& body) {
  res.status = e.status;
  if (e.status == 429) res.set_header("Retry-After", "1");
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_error(res, e, error_json(e)); }

}  // namespace serve
