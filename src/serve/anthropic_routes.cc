// anthropic_routes.cc: Anthropic's routes and replies (see anthropic.h): a message with
// text and tool_use blocks, or its server-sent events.
#include <httplib.h>

#include "serve/anthropic.h"
#include "serve/generation.h"

namespace serve {

using nlohmann::json;

namespace {

void send(httplib::Response& res, const ApiError& e) { send_error(res, e, anthropic_error_json(e)); }

// A thought (reasoning.h) as Anthropic's thinking block (no signature: nothing to verify).
json thinking_block(const std::string& thought) {
  return {{"type", "thinking"}, {"thinking", thought}, {"signature", ""}};
}

json tool_use(const ToolCall& c) {
  json input = json::parse(c.arguments, nullptr, false);
  return {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input.is_object() ? input : json::object()}};
}

// stop_reason and stop_sequence of a finished reply; stops: the request's own.
std::pair<std::string, json> stop_of(const Reply& out, const std::vector<std::string>& stops) {
  if (out.finish_reason == "tool_calls") return {"tool_use", nullptr};
  if (out.finish_reason == "length") return {"max_tokens", nullptr};
  for (const std::string& s : stops)
    if (!out.out.stop_string.empty() && s == out.out.stop_string) return {"stop_sequence", s};
  return {"end_turn", nullptr};
}

class Handler {
 public:
  explicit Handler(const Generator& g) : g_(g) {}

  void messages(const httplib::Request& req, httplib::Response& res) const {
    const ServerOptions& o = g_.options();
    Request r;
    if (auto e = parse_anthropic(req.body, false, g_.engine().ctx(), o.defaults, &r)) return send(res, *e);
    const std::vector<std::string> stops = r.stop;  // before a forced call's own
    Job job;
    if (auto e = g_.prepare(r, &job)) return send(res, *e);
    json head = {{"id", random_id("msg_")}, {"type", "message"}, {"role", "assistant"},
                 {"model", r.model.empty() ? o.model_name : r.model}};
    if (!r.stream) {
      Reply out;
      std::string text;
      if (auto e = g_.run_whole(job, req, &out, &text)) return send(res, *e);
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
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    const int prompt_tokens = int(job.gen.prompt.size());
    res.set_chunked_content_provider("text/event-stream", [this, job, head, stops, prompt_tokens](
                                                              size_t, httplib::DataSink& sink) {
      auto event = [&](const char* name, json data) {
        json typed = {{"type", name}};
        typed.update(data);
        const std::string s = std::string("event: ") + name + "\ndata: " + dump(typed) + "\n\n";
        return sink.write(s.data(), s.size());
      };
      json start = head;
      start["content"] = json::array();
      start["stop_reason"] = nullptr;
      start["stop_sequence"] = nullptr;
      start["usage"] = {{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
      event("message_start", {{"message", start}});
      int index = 0;
      bool text_open = false, text_seen = false, thinking_open = false;
      auto close_thinking = [&] {
        if (!thinking_open) return;
        event("content_block_stop", {{"index", index++}});
        thinking_open = false;
      };
      auto thinking = [&](const std::string& t) {
        if (!thinking_open) {
          event("content_block_start", {{"index", index}, {"content_block", thinking_block("")}});
          thinking_open = true;
        }
        return event("content_block_delta", {{"index", index}, {"delta", {{"type", "thinking_delta"}, {"thinking", t}}}});
      };
      auto text = [&](const std::string& t) {
        close_thinking();
        if (!text_open) {
          text_seen = true;
          event("content_block_start", {{"index", index}, {"content_block", {{"type", "text"}, {"text", ""}}}});
          text_open = true;
        }
        return event("content_block_delta", {{"index", index}, {"delta", {{"type", "text_delta"}, {"text", t}}}});
      };
      auto close_text = [&] {
        if (!text_open) return;
        event("content_block_stop", {{"index", index++}});
        text_open = false;
      };
      // Tool calls as they are written: a tool_use block per call, its arguments as
      // input_json_delta fragments (as Anthropic streams them).
      bool call_open = false;
      auto close_call = [&] {
        if (!call_open) return;
        event("content_block_stop", {{"index", index++}});
        call_open = false;
      };
      auto call = [&](const ToolDelta& d) {
        if (d.first) {
          close_thinking();
          close_text();
          close_call();
          json block = {{"type", "tool_use"}, {"id", d.id}, {"name", d.name}, {"input", json::object()}};
          call_open = true;
          return event("content_block_start", {{"index", index}, {"content_block", block}});
        }
        if (d.arguments.empty()) return sink.is_writable();
        return event("content_block_delta",
                     {{"index", index}, {"delta", {{"type", "input_json_delta"}, {"partial_json", d.arguments}}}});
      };
      Reply out = g_.run(job, 0, [&](const std::string& t) { return t.empty() ? sink.is_writable() : text(t); },
                         [&] { return sink.is_writable(); }, {}, thinking, call);
      if (out.cancelled()) return false;
      if (!out.out.status.ok()) {
        event("error", anthropic_error_json(api_error(503, "generation failed: " + out.out.status.message(), "server_error")));
        sink.done();
        return true;
      }
      close_call();
      if (!out.tail.content.empty() || (!text_seen && out.tail.calls.empty() && out.streamed_calls == 0))
        text(out.tail.content);
      close_thinking();
      close_text();
      for (size_t k = out.streamed_calls; k < out.tail.calls.size(); ++k) {  // the calls not streamed: whole
        const ToolCall& c = out.tail.calls[k];
        json block = tool_use(c);
        const std::string args = block["input"].dump();
        block["input"] = json::object();
        event("content_block_start", {{"index", index}, {"content_block", block}});
        event("content_block_delta", {{"index", index}, {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
        event("content_block_stop", {{"index", index++}});
      }
      const auto [reason, seq] = stop_of(out, stops);
      event("message_delta", {{"delta", {{"stop_reason", reason}, {"stop_sequence", seq}}},
                              {"usage", {{"output_tokens", out.out.usage.completion_tokens}}}});
      event("message_stop", json::object());
      sink.done();
      return true;
    });
  }

  void count_tokens(const httplib::Request& req, httplib::Response& res) const {
    Request r;
    if (auto e = parse_anthropic(req.body, true, g_.engine().ctx(), g_.options().defaults, &r)) return send(res, *e);
    Job job;
    if (auto e = g_.render(r, &job)) return send(res, *e);
    res.set_content(dump({{"input_tokens", job.gen.prompt.size()}}), "application/json");
  }

 private:
  const Generator& g_;
};

}  // namespace

void add_anthropic_routes(httplib::Server& svr, const Generator& gen) {
  auto h = std::make_shared<Handler>(gen);
  svr.Post("/v1/messages", [h](const httplib::Request& req, httplib::Response& res) { h->messages(req, res); });
  svr.Post("/v1/messages/count_tokens",
           [h](const httplib::Request& req, httplib::Response& res) { h->count_tokens(req, res); });
}

}  // namespace serve
