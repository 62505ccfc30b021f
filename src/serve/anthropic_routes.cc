// anthropic_routes.cc: Anthropic's routes and replies (see anthropic.h): a message with
// text and tool_use blocks, or its server-sent events.
#include <httplib.h>

#include "serve/anthropic.h"
#include "serve/generation.h"

namespace serve {

using nlohmann::json;

namespace {

void send_anthropic(httplib::Response& res, const ApiError& e) { send_error(res, e, anthropic_error_json(e)); }

// A thought (reasoning.h) as Anthropic's thinking block (no signature: nothing to verify).
json thinking_block(const std::string& thought) {
  return {{"type", "thinking"}, {"thinking", thought}, {"signature", ""}};
}

// A call's id as Anthropic writes them ("toolu_..."): the parsers' "call_" prefix (OpenAI's)
// swapped; a client sends it back in tool_use / tool_result, which take any string.
std::string tool_use_id(const std::string& id) {
  return id.rfind("call_", 0) == 0 ? "toolu_" + id.substr(5) : id;
}

json tool_use(const ToolCall& c) {
  json input = json::parse(c.arguments, nullptr, false);
  return {{"type", "tool_use"},
          {"id", tool_use_id(c.id)},
          {"name", c.name},
          {"input", input.is_object() ? input : json::object()}};
}

// stop_reason and stop_sequence of a finished reply; stops: the request's own.
std::pair<std::string, json> stop_of(const Reply& out, const std::vector<std::string>& stops) {
  if (out.finish_reason == "tool_calls") return {"tool_use", nullptr};
  if (out.finish_reason == "length") return {"max_tokens", nullptr};
  for (const std::string& s : stops)
    if (!out.out.stop_string.empty() && s == out.out.stop_string) return {"stop_sequence", s};
  return {"end_turn", nullptr};
}

// One streamed message's server-sent events and its content blocks as they open and
// close: the thought (thinking), the text, the calls (tool_use).
class MessageStream {
 public:
  explicit MessageStream(httplib::DataSink& sink) : sink_(sink) {}

  bool event(const char* name, json data) {
    json typed = {{"type", name}};
    typed.update(data);
    const std::string s = std::string("event: ") + name + "\ndata: " + dump(typed) + "\n\n";
    return sink_.write(s.data(), s.size());
  }

  bool thinking(const std::string& t) {
    if (!thinking_open_) {
      event("content_block_start", {{"index", index_}, {"content_block", thinking_block("")}});
      thinking_open_ = true;
    }
    return event("content_block_delta", {{"index", index_}, {"delta", {{"type", "thinking_delta"}, {"thinking", t}}}});
  }

  bool text(const std::string& t) {
    close_thinking();
    if (!text_open_) {
      text_seen_ = true;
      event("content_block_start", {{"index", index_}, {"content_block", {{"type", "text"}, {"text", ""}}}});
      text_open_ = true;
    }
    return event("content_block_delta", {{"index", index_}, {"delta", {{"type", "text_delta"}, {"text", t}}}});
  }

  // Tool calls as they are written: a tool_use block per call, its arguments as
  // input_json_delta fragments (as Anthropic streams them).
  bool call(const ToolDelta& d) {
    if (d.first) {
      close_thinking();
      close_text();
      close_call();
      json block = {{"type", "tool_use"}, {"id", tool_use_id(d.id)}, {"name", d.name}, {"input", json::object()}};
      call_open_ = true;
      return event("content_block_start", {{"index", index_}, {"content_block", block}});
    }
    if (d.arguments.empty()) return sink_.is_writable();
    return event("content_block_delta",
                 {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", d.arguments}}}});
  }

  // After a finished reply: the rest of its text, every block closed, the calls not
  // streamed sent whole.
  void finish(const Reply& out) {
    close_call();
    if (!out.tail.content.empty() || (!text_seen_ && out.tail.calls.empty() && out.streamed_calls == 0))
      text(out.tail.content);
    close_thinking();
    close_text();
    for (size_t k = out.streamed_calls; k < out.tail.calls.size(); ++k) {  // the calls not streamed: whole
      json block = tool_use(out.tail.calls[k]);
      const std::string args = block["input"].dump();
      block["input"] = json::object();
      event("content_block_start", {{"index", index_}, {"content_block", block}});
      event("content_block_delta", {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
      event("content_block_stop", {{"index", index_++}});
    }
  }

 private:
  // Closes the open block of its kind, if one is open.
  void close(bool& open) {
    if (!open) return;
    event("content_block_stop", {{"index", index_++}});
    open = false;
  }
  void close_thinking() { close(thinking_open_); }
  void close_text() { close(text_open_); }
  void close_call() { close(call_open_); }

  httplib::DataSink& sink_;
  int index_ = 0;
  bool text_open_ = false, text_seen_ = false, thinking_open_ = false, call_open_ = false;
};

class AnthropicHandler {
 public:
  explicit AnthropicHandler(const Generator& g) : g_(g) {}

  void messages(const httplib::Request& req, httplib::Response& res) const {
    const ServerOptions& o = g_.options();
    Request r;
    if (auto e = parse_anthropic(req.body, false, g_.engine().ctx(), o.defaults, &r)) return send_anthropic(res, *e);
    const std::vector<std::string> stops = r.stop;  // before a forced call's own
    Job job;
    if (auto e = g_.prepare(r, &job)) return send_anthropic(res, *e);
    json head = {{"id", random_id("msg_")}, {"type", "message"}, {"role", "assistant"},
                 {"model", r.model.empty() ? o.model_name : r.model}};
    if (!r.stream) return whole(req, res, job, head, stops);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream", [this, job, head, stops](size_t, httplib::DataSink& sink) {
      return stream(job, head, stops, sink);
    });
  }

  // The message in one body; head: its id, type, role and model.
  void whole(const httplib::Request& req, httplib::Response& res, const Job& job, const json& head,
             const std::vector<std::string>& stops) const {
    Reply out;
    std::string text;
    if (auto e = g_.run_whole(job, req, &out, &text)) return send_anthropic(res, *e);
    json content = json::array();
    if (!out.reasoning.empty()) content.push_back(thinking_block(out.reasoning));
    if (!text.empty() || out.tail.calls.empty()) content.push_back({{"type", "text"}, {"text", text}});
    for (const ToolCall& c : out.tail.calls) content.push_back(tool_use(c));
    const auto [reason, seq] = stop_of(out, stops);
    json m = head;
    m["content"] = content;
    m["stop_reason"] = reason;
    m["stop_sequence"] = seq;
    m["usage"] = {{"input_tokens", out.out.usage.prompt_tokens}, {"output_tokens", out.out.usage.completion_tokens}};
    res.set_content(dump(m), "application/json");
  }

  // The message's events: message_start, the blocks as written, message_delta and
  // message_stop; false when the client went away.
  bool stream(const Job& job, const json& head, const std::vector<std::string>& stops,
              httplib::DataSink& sink) const {
    MessageStream s(sink);
    json start = head;
    start["content"] = json::array();
    start["stop_reason"] = nullptr;
    start["stop_sequence"] = nullptr;
    start["usage"] = {{"input_tokens", int(job.gen.prompt.size())}, {"output_tokens", 0}};
    s.event("message_start", {{"message", start}});
    Reply out = g_.run(
        job, 0, [&](const std::string& t) { return t.empty() ? sink.is_writable() : s.text(t); },
        [&] { return sink.is_writable(); }, {}, [&](const std::string& t) { return s.thinking(t); },
        [&](const ToolDelta& d) { return s.call(d); });
    if (out.cancelled()) return false;
    if (!out.out.status.ok()) {
      s.event("error", anthropic_error_json(api_error(503, "generation failed: " + out.out.status.message(), "server_error")));
      sink.done();
      return true;
    }
    s.finish(out);
    const auto [reason, seq] = stop_of(out, stops);
    s.event("message_delta", {{"delta", {{"stop_reason", reason}, {"stop_sequence", seq}}},
                              {"usage", {{"output_tokens", out.out.usage.completion_tokens}}}});
    s.event("message_stop", json::object());
    sink.done();
    return true;
  }

  void count_tokens(const httplib::Request& req, httplib::Response& res) const {
    Request r;
    if (auto e = parse_anthropic(req.body, true, g_.engine().ctx(), g_.options().defaults, &r)) return send_anthropic(res, *e);
    Job job;
    if (auto e = g_.render(r, &job)) return send_anthropic(res, *e);
    res.set_content(dump({{"input_tokens", job.gen.prompt.size()}}), "application/json");
  }

 private:
  const Generator& g_;
};

}  // namespace

void add_anthropic_routes(httplib::Server& svr, const Generator& gen) {
  auto h = std::make_shared<AnthropicHandler>(gen);
  svr.Post("/v1/messages", [h](const httplib::Request& req, httplib::Response& res) { h->messages(req, res); });
  svr.Post("/v1/messages/count_tokens",
           [h](const httplib::Request& req, httplib::Response& res) { h->count_tokens(req, res); });
}

}  // namespace serve
