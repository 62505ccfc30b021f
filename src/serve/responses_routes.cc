// responses_routes.cc: the Responses API's routes and replies (see responses.h): a
// response object with message and function_call items, or its server-sent events, and
// the stored responses by id.
// GCC 12 at -O1 with the sanitizers (the asan preset) warns -Wmaybe-uninitialized inside
// std::regex's automaton (a std::function moved in bits/regex_automaton.h): a false
// positive in a system header. Silenced for <functional> and <regex> alone, included
// first so that their code is read inside the pragma.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <functional>
#include <regex>
#pragma GCC diagnostic pop

#include <httplib.h>

#include "serve/generation.h"
#include "serve/responses.h"

namespace serve {

using nlohmann::json;

namespace {

// A finished reply's output items (the thought, the message when there is text or no
// call, the calls) and the conversation to store: history, then the assistant's turn as a
// chat message (without the thought, as chat shows earlier turns).
struct Outcome {
  json output = json::array();
  nlohmann::ordered_json turn;
};

Outcome outcome(const std::string& rs_id, const std::string& thought, const std::string& msg_id,
                const std::string& text, const std::vector<ToolCall>& calls, const std::vector<std::string>& call_ids) {
  Outcome o;
  if (!thought.empty()) o.output.push_back(reasoning_item(rs_id, thought, "completed"));
  if (!text.empty() || calls.empty()) o.output.push_back(message_item(msg_id, text, "completed"));
  nlohmann::ordered_json tcs = nlohmann::ordered_json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    o.output.push_back(function_call_item(call_ids[k], calls[k], "completed"));
    tcs.push_back({{"id", calls[k].id}, {"type", "function"},
                   {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}});
  }
  o.turn = {{"role", "assistant"}, {"content", text}};
  if (!calls.empty()) o.turn["tool_calls"] = std::move(tcs);
  return o;
}

std::vector<std::string> item_ids(size_t n) {
  std::vector<std::string> ids;
  for (size_t k = 0; k < n; ++k) ids.push_back(random_id("fc_"));
  return ids;
}

// A response's id and creation time, and its reasoning and message items' ids.
struct ResponseNames {
  std::string id = random_id("resp_"), msg_id = random_id("msg_"), rs_id = random_id("rs_");
  long long created = unix_now();
};

// One streamed response's server-sent events, numbered, and its output items as they
// open and close: the thought (a reasoning item), the text (a message item), the calls
// (function_call items).
class ResponseStream {
 public:
  ResponseStream(httplib::DataSink& sink, const ResponseNames& names) : sink_(sink), n_(names) {}

  bool event(const char* name, json data) {
    json typed = {{"type", name}, {"sequence_number", seq_++}};
    typed.update(data);
    const std::string s = std::string("event: ") + name + "\ndata: " + dump(typed) + "\n\n";
    return sink_.write(s.data(), s.size());
  }

  // The thought, streamed as a reasoning item's reasoning_text deltas, closed by the text.
  bool think(const std::string& t) {
    if (!thinking_) {
      event("response.output_item.added", {{"output_index", index_}, {"item", reasoning_item(n_.rs_id, "", "in_progress")}});
      thinking_ = true;
    }
    thought_ += t;
    json w = at_thought();
    w["delta"] = t;
    return event("response.reasoning_text.delta", w);
  }

  bool text(const std::string& t) {
    open_text();
    text_ += t;
    json w = at_text();
    w["delta"] = t;
    w["logprobs"] = json::array();
    return event("response.output_text.delta", w);
  }

  // Tool calls as they are written: a function_call item per call, its arguments as
  // response.function_call_arguments.delta events (as the Responses API streams them);
  // done once the next call starts or the reply ends (finish).
  bool call(const ToolDelta& d) {
    if (d.first) {
      close_thought();
      close_text(message_item(n_.msg_id, text_, "completed"));
      close_call();
      call_ids_.push_back(item_ids(1)[0]);
      open_ = {d.id, d.name, ""};
      call_open_ = true;
      return event("response.output_item.added",
                   {{"output_index", index_}, {"item", function_call_item(call_ids_.back(), open_, "in_progress")}});
    }
    if (d.arguments.empty()) return sink_.is_writable();
    open_.arguments += d.arguments;
    json w = at_call();
    w["delta"] = d.arguments;
    return event("response.function_call_arguments.delta", w);
  }

  // After a finished reply: the rest of its text, every item closed, the calls not
  // streamed sent whole; the output as streamed (the thought and text as sent).
  Outcome finish(const Reply& out) {
    close_call();
    const bool streamed = out.streamed_calls > 0;
    if (!out.tail.content.empty() && !streamed) text(out.tail.content);  // (after a streamed call: dropped)
    if (!text_open_ && out.tail.calls.empty()) open_text();
    close_thought();
    call_ids_.resize(std::min(call_ids_.size(), out.tail.calls.size()));
    for (const std::string& k : item_ids(out.tail.calls.size() - call_ids_.size())) call_ids_.push_back(k);
    Outcome oc = outcome(n_.rs_id, thought_, n_.msg_id, text_, out.tail.calls, call_ids_);
    if (text_open_) close_text(oc.output[thought_.empty() ? 0 : 1]);
    for (size_t k = out.streamed_calls; k < out.tail.calls.size(); ++k, ++index_) whole_call(out.tail.calls[k], k);
    return oc;
  }

 private:
  json at_thought() const { return json{{"item_id", n_.rs_id}, {"output_index", index_}, {"content_index", 0}}; }
  json at_text() const { return json{{"item_id", n_.msg_id}, {"output_index", index_}, {"content_index", 0}}; }
  json at_call() const { return json{{"item_id", call_ids_.back()}, {"output_index", index_}}; }

  void close_thought() {
    if (!thinking_) return;
    json w = at_thought();
    w["text"] = thought_;
    event("response.reasoning_text.done", w);
    event("response.output_item.done", {{"output_index", index_++}, {"item", reasoning_item(n_.rs_id, thought_, "completed")}});
    thinking_ = false;
  }

  void open_text() {
    close_thought();
    if (text_open_) return;
    event("response.output_item.added", {{"output_index", index_}, {"item", message_item(n_.msg_id, "", "in_progress")}});
    json w = at_text();
    w["part"] = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
    event("response.content_part.added", w);
    text_open_ = true;
  }

  // The message item done (its text as streamed), before a call's item or at the end.
  void close_text(const json& item) {
    if (!text_open_) return;
    json w = at_text();
    w["text"] = text_;
    w["logprobs"] = json::array();
    event("response.output_text.done", w);
    w = at_text();
    w["part"] = item["content"][0];
    event("response.content_part.done", w);
    event("response.output_item.done", {{"output_index", index_}, {"item", item}});
    ++index_;
    text_open_ = false;
  }

  void close_call() {
    if (!call_open_) return;
    json d = at_call();
    d["name"] = open_.name;
    d["arguments"] = open_.arguments;
    event("response.function_call_arguments.done", d);
    event("response.output_item.done",
          {{"output_index", index_++}, {"item", function_call_item(call_ids_.back(), open_, "completed")}});
    call_open_ = false;
  }

  // A call not streamed (k: its place in the reply's calls), sent whole.
  void whole_call(const ToolCall& c, size_t k) {
    const json at = {{"item_id", call_ids_[k]}, {"output_index", index_}};
    event("response.output_item.added", {{"output_index", index_}, {"item", function_call_item(call_ids_[k], c, "in_progress")}});
    json d = at;
    d["delta"] = c.arguments;
    event("response.function_call_arguments.delta", d);
    d = at;
    d["name"] = c.name;
    d["arguments"] = c.arguments;
    event("response.function_call_arguments.done", d);
    event("response.output_item.done", {{"output_index", index_}, {"item", function_call_item(call_ids_[k], c, "completed")}});
  }

  httplib::DataSink& sink_;
  const ResponseNames& n_;
  int seq_ = 0;
  int index_ = 0;  // the next output item's
  bool text_open_ = false, thinking_ = false;
  std::string text_, thought_;
  std::vector<std::string> call_ids_;
  ToolCall open_;  // the call being streamed: its arguments as far as written
  bool call_open_ = false;
};

class ResponsesHandler {
 public:
  ResponsesHandler(const Generator& g, size_t capacity) : g_(g), store_(capacity) {}

  void create(const httplib::Request& req, httplib::Response& res) {
    const ServerOptions& o = g_.options();
    ResponsesRequest r;
    if (auto e = parse_responses(req.body, g_.engine().ctx(), o.defaults, store_, &r)) return send_error(res, *e);
    if (r.chat.model.empty()) r.chat.model = o.model_name;
    Job job;
    if (auto e = g_.prepare(r.chat, &job)) return send_error(res, *e);
    const ResponseNames names;
    if (!r.chat.stream) {
      Reply out;
      std::string text;
      if (auto e = g_.run_whole(job, req, &out, &text)) return send_error(res, *e);
      Outcome oc = outcome(names.rs_id, out.reasoning, names.msg_id, text, out.tail.calls,
                           item_ids(out.tail.calls.size()));
      json resp = response_object(r, names.id, names.created, status_of(out), oc.output, out.out.usage);
      keep(r, names.id, oc, resp);
      res.set_content(dump(resp), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream", [this, job, r, names](size_t, httplib::DataSink& sink) {
      return stream(job, r, names, sink);
    });
  }

  // The response's events: created, the items as written, completed (or incomplete);
  // false when the client went away.
  bool stream(const Job& job, const ResponsesRequest& r, const ResponseNames& names, httplib::DataSink& sink) {
    ResponseStream s(sink, names);
    const json started = response_object(r, names.id, names.created, "in_progress", json::array(), Usage{});
    s.event("response.created", {{"response", started}});
    s.event("response.in_progress", {{"response", started}});
    Reply out = g_.run(
        job, 0, [&](const std::string& t) { return t.empty() ? sink.is_writable() : s.text(t); },
        [&] { return sink.is_writable(); }, {}, [&](const std::string& t) { return s.think(t); },
        [&](const ToolDelta& d) { return s.call(d); });
    if (out.cancelled()) return false;
    if (!out.out.status.ok()) {
      s.event("error", {{"code", "server_error"}, {"message", "generation failed: " + out.out.status.message()},
                        {"param", nullptr}});
      sink.done();
      return true;
    }
    Outcome oc = s.finish(out);  // the thought as streamed
    const std::string status = status_of(out);
    json resp = response_object(r, names.id, names.created, status, oc.output, out.out.usage);
    keep(r, names.id, oc, resp);
    s.event(status == "completed" ? "response.completed" : "response.incomplete", {{"response", resp}});
    sink.done();
    return true;
  }

  void retrieve(const std::string& id, httplib::Response& res) {
    if (auto e = store_.get(id)) return res.set_content(dump(e->response), "application/json");
    send_error(res, not_found(id));
  }

  void remove(const std::string& id, httplib::Response& res) {
    if (!store_.erase(id)) return send_error(res, not_found(id));
    res.set_content(dump({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}), "application/json");
  }

 private:
  static std::string status_of(const Reply& out) { return out.finish_reason == "length" ? "incomplete" : "completed"; }
  static ApiError not_found(const std::string& id) {
    return api_error(404, "Response with id '" + id + "' not found (not stored, deleted, or dropped from the server's "
                     "store of recent responses)", "invalid_request_error", "not_found");
  }

  void keep(const ResponsesRequest& r, const std::string& id, const Outcome& oc, const json& resp) {
    if (!r.store) return;
    ResponseStore::Entry e{r.history, resp};
    e.messages.push_back(oc.turn);
    store_.put(id, std::move(e));
  }

  const Generator& g_;
  ResponseStore store_;
};

}  // namespace

RouteHook add_responses_routes(httplib::Server& svr, const Generator& gen, size_t store_capacity) {
  auto h = std::make_shared<ResponsesHandler>(gen, store_capacity);
  svr.Post("/v1/responses", [h](const httplib::Request& req, httplib::Response& res) { h->create(req, res); });
  const char* by_id = R"(/v1/responses/([A-Za-z0-9_-]+))";
  svr.Get(by_id, [h](const httplib::Request& req, httplib::Response& res) { h->retrieve(req.matches[1], res); });
  svr.Delete(by_id, [h](const httplib::Request& req, httplib::Response& res) { h->remove(req.matches[1], res); });
  return [h, re = std::regex(by_id)](const httplib::Request& req, httplib::Response& res) {
    std::smatch m;
    if (req.method != "DELETE" || !std::regex_match(req.path, m, re)) return false;
    h->remove(m[1], res);
    return true;
  };
}

}  // namespace serve
