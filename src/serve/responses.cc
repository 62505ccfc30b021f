// responses.cc: Responses bodies translated into the OpenAI chat request, the store of
// responses and the response object (see responses.h); routes and events are in
// responses_routes.cc.
#include "serve/responses.h"

namespace serve {

using ojson = nlohmann::ordered_json;
using nlohmann::json;

void ResponseStore::put(const std::string& id, Entry e) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(id, std::move(e));
  index_[id] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

namespace {

bool is_string(const ojson& o, const char* key) { return o.contains(key) && o[key].is_string(); }

// A message's content: a string, or parts input_text / output_text (text), refusal.
std::optional<ApiError> content_text(const ojson& c, const std::string& p, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return wrong_type(p, "a string or an array of content parts");
  for (size_t i = 0; i < c.size(); ++i) {
    const ojson& part = c[i];
    const std::string q = p + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !is_string(part, "type")) return bad_request("'" + q + "' must be a part with a 'type'", q);
    const std::string type = part["type"].get<std::string>();
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type == "input_text" || type == "output_text" || type == "text" || type == "refusal") {
      if (!is_string(part, key)) return wrong_type(q + "." + key, "a string");
      if (!out->empty()) *out += "\n";
      *out += part[key].get<std::string>();
    } else {
      return bad_request("'" + q + ".type' " + type + " is not supported" +
                             (type == "input_image" || type == "input_file" || type == "input_audio"
                                  ? ": this model reads text only" : ": use input_text"),
                         q + ".type", "invalid_value");
    }
  }
  return std::nullopt;
}

// One input item onto chat messages: a message, a function_call (an assistant's tool call,
// joined to the assistant message before it), a function_call_output (a "tool" message);
// reasoning items are not shown to the model again.
std::optional<ApiError> item(const ojson& it, const std::string& p, ojson* msgs) {
  if (!it.is_object()) return wrong_type(p, "an object (a message or a function_call / function_call_output item)");
  if (it.contains("type") && !it["type"].is_string()) return wrong_type(p + ".type", "a string");
  const std::string type = it.value("type", "message");
  if (type == "message") {
    if (!is_string(it, "role"))
      return bad_request("'" + p + ".role' is required: user, assistant, system or developer", p + ".role");
    const std::string role = it["role"].get<std::string>();
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      return bad_request("'" + p + ".role' must be user, assistant, system or developer, not '" + role + "'",
                         p + ".role", "invalid_value");
    if (!it.contains("content")) return bad_request("'" + p + ".content' is required", p + ".content");
    std::string text;
    if (auto e = content_text(it["content"], p + ".content", &text)) return e;
    msgs->push_back({{"role", role}, {"content", text}});
    return std::nullopt;
  }
  if (type == "function_call") {
    for (const char* k : {"call_id", "name", "arguments"})
      if (!is_string(it, k)) return wrong_type(p + "." + k, "a string");
    if (!ojson::parse(it["arguments"].get<std::string>(), nullptr, false).is_object())
      return bad_request("'" + p + ".arguments' is not a JSON object", p + ".arguments", "invalid_value");
    ojson call = {{"id", it["call_id"]}, {"type", "function"},
                  {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}};
    if (msgs->empty() || msgs->back()["role"] != "assistant") msgs->push_back({{"role", "assistant"}, {"content", ""}});
    ojson& a = msgs->back();
    if (!a.contains("tool_calls")) a["tool_calls"] = ojson::array();
    a["tool_calls"].push_back(std::move(call));
    return std::nullopt;
  }
  if (type == "function_call_output") {
    if (!is_string(it, "call_id")) return wrong_type(p + ".call_id", "a string");
    if (!it.contains("output")) return bad_request("'" + p + ".output' is required", p + ".output");
    std::string out;
    if (auto e = content_text(it["output"], p + ".output", &out)) return e;
    msgs->push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", out}});
    return std::nullopt;
  }
  if (type == "reasoning") return std::nullopt;
  return bad_request("'" + p + ".type' " + type + " is not supported: message, function_call, "
                     "function_call_output or reasoning", p + ".type", "invalid_value");
}

// Flat function tools {type: "function", name, description, parameters, strict} as chat
// tools; tool_choice auto / none / required / {type: "function", name}.
std::optional<ApiError> tools(const ojson& body, ojson* o) {
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) return wrong_type("tools", "an array");
    ojson list = ojson::array();
    for (size_t i = 0; i < t->size(); ++i) {
      const ojson& x = (*t)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!x.is_object()) return wrong_type(p, "an object {type: \"function\", name, parameters}");
      if (!is_string(x, "type")) return bad_request("'" + p + ".type' is required: \"function\"", p + ".type");
      if (x["type"] != "function")
        return bad_request("'" + p + ".type' " + x["type"].get<std::string>() + " is not supported: only function "
                           "tools {type: \"function\", name, parameters} (the client runs them)", p + ".type",
                           "invalid_value");
      if (!is_string(x, "name")) return wrong_type(p + ".name", "a string");
      if (!x.contains("parameters") || !x["parameters"].is_object())
        return bad_request("'" + p + ".parameters' is required: the function's arguments as a JSON schema object "
                           "(for none, {\"type\": \"object\", \"properties\": {}})", p + ".parameters");
      ojson fn = {{"name", x["name"]}, {"parameters", x["parameters"]}};
      if (x.contains("description")) fn["description"] = x["description"];
      list.push_back({{"type", "function"}, {"function", fn}});
    }
    (*o)["tools"] = list;
  }
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return std::nullopt;
  if (c->is_string()) {
    (*o)["tool_choice"] = *c;  // parse_request names a wrong one
  } else if (c->is_object() && is_string(*c, "type") && (*c)["type"] == "function" && is_string(*c, "name")) {
    (*o)["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
  } else {
    return bad_request("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}",
                       "tool_choice", "invalid_value");
  }
  return std::nullopt;
}

// text.format: text, json_object, or json_schema {name, schema, strict} -> response_format.
std::optional<ApiError> text_format(const ojson& body, ojson* o) {
  auto t = body.find("text");
  if (t == body.end() || t->is_null()) return std::nullopt;
  if (!t->is_object()) return wrong_type("text", "an object {\"format\": {...}}");
  auto f = t->find("format");
  if (f == t->end() || f->is_null()) return std::nullopt;
  if (!f->is_object() || !is_string(*f, "type"))
    return bad_request("'text.format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}", "text.format");
  const std::string type = (*f)["type"].get<std::string>();
  if (type == "json_schema") {
    if (!f->contains("schema") || !(*f)["schema"].is_object())
      return bad_request("'text.format.schema' is required: a JSON schema object", "text.format.schema");
    if (f->contains("name") && !is_string(*f, "name")) return wrong_type("text.format.name", "a string");
    ojson js = {{"name", f->value("name", "response")}, {"schema", (*f)["schema"]}};
    (*o)["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
  } else {
    (*o)["response_format"] = {{"type", type}};  // text, json_object; parse_request names others
  }
  return std::nullopt;
}

std::optional<ApiError> translate(const ojson& body, ResponseStore& store, ojson* out, ResponsesRequest* r) {
  ojson& o = *out;
  o = ojson::object();
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) o["model"] = *m;
  ojson history = ojson::array();
  if (auto p = body.find("previous_response_id"); p != body.end() && !p->is_null()) {
    if (!p->is_string()) return wrong_type("previous_response_id", "a string");
    r->previous_response_id = p->get<std::string>();
    auto prev = store.get(r->previous_response_id);
    if (!prev)
      return bad_request("Previous response with id '" + r->previous_response_id + "' not found (it was not stored, "
                         "was deleted, or was dropped from the server's store of recent responses)",
                         "previous_response_id", "previous_response_not_found");
    history = prev->messages;
  }
  auto in = body.find("input");
  if (in == body.end() || in->is_null())
    return bad_request("'input' is required: a string or an array of input items", "input");
  if (in->is_string()) {
    history.push_back({{"role", "user"}, {"content", *in}});
  } else if (in->is_array()) {
    for (size_t i = 0; i < in->size(); ++i)
      if (auto e = item((*in)[i], "input[" + std::to_string(i) + "]", &history)) return e;
  } else {
    return wrong_type("input", "a string or an array of input items");
  }
  if (history.empty()) return bad_request("'input' must hold at least one item", "input");
  ojson msgs = ojson::array();
  if (auto s = body.find("instructions"); s != body.end() && !s->is_null()) {
    if (!s->is_string()) return wrong_type("instructions", "a string");
    msgs.push_back({{"role", "system"}, {"content", *s}});
  }
  msgs.insert(msgs.end(), history.begin(), history.end());
  o["messages"] = std::move(msgs);
  r->history = std::move(history);
  if (auto mt = body.find("max_output_tokens"); mt != body.end()) o["max_tokens"] = *mt;
  for (const char* k : {"temperature", "top_p", "stream", "parallel_tool_calls", "seed"})
    if (auto v = body.find(k); v != body.end()) o[k] = *v;
  if (auto s = body.find("store"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return wrong_type("store", "a boolean");
    r->store = s->get<bool>();
  }
  if (auto e = tools(body, &o)) return e;
  return text_format(body, &o);
}

// An error of parse_request in the Responses API's own names.
void rename(ApiError* e) {
  static const std::pair<std::string, std::string> kNames[] = {
      {"response_format.json_schema.schema", "text.format.schema"}, {"response_format.type", "text.format.type"},
      {"response_format", "text.format"}, {"max_tokens", "max_output_tokens"}, {"tool_choice.function.name", "tool_choice.name"},
      {"messages", "input"}};
  for (const auto& [from, to] : kNames) {
    if (e->param.rfind(from, 0) == 0) e->param = to + e->param.substr(from.size());
    for (size_t at = e->message.find("'" + from); at != std::string::npos; at = e->message.find("'" + from, at + 1))
      e->message.replace(at + 1, from.size(), to);
  }
}

}  // namespace

std::optional<ApiError> parse_responses(std::string_view body_text, int ctx, const sampler::Params& defaults,
                                        ResponseStore& store, ResponsesRequest* out) {
  ojson body = ojson::parse(body_text, nullptr, false);
  if (body.is_discarded()) return bad_request("the request body is not valid JSON", "", "invalid_json");
  if (!body.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  ResponsesRequest r;
  ojson chat;
  if (auto e = translate(body, store, &chat, &r)) return e;
  if (auto e = parse_request(chat.dump(), Endpoint::kChat, ctx, defaults, &r.chat)) {
    rename(&*e);
    return e;
  }
  json echo = {{"instructions", nullptr}, {"max_output_tokens", nullptr}, {"temperature", nullptr},
               {"top_p", nullptr}, {"tools", json::array()}, {"tool_choice", "auto"},
               {"parallel_tool_calls", true}, {"text", {{"format", {{"type", "text"}}}}}, {"metadata", json::object()}};
  for (auto& [k, v] : echo.items())
    if (auto f = body.find(k); f != body.end() && !f->is_null()) v = json(*f);
  echo["previous_response_id"] = r.previous_response_id.empty() ? json(nullptr) : json(r.previous_response_id);
  echo["store"] = r.store;
  r.echo = std::move(echo);
  *out = std::move(r);
  return std::nullopt;
}

json message_item(const std::string& id, const std::string& text, const std::string& status) {
  json content = json::array();
  if (status == "completed")
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}});
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

json reasoning_item(const std::string& id, const std::string& text, const std::string& status) {
  json content = json::array();
  if (status == "completed") content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", content}, {"status", status}};
}

json function_call_item(const std::string& id, const ToolCall& c, const std::string& status) {
  return {{"type", "function_call"}, {"id", id}, {"call_id", c.id}, {"name", c.name},
          {"arguments", status == "completed" ? c.arguments : ""}, {"status", status}};
}

json response_object(const ResponsesRequest& r, const std::string& id, long long created, const std::string& status,
                     const json& output, const Usage& u) {
  json o = {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status}, {"error", nullptr},
            {"incomplete_details", nullptr}, {"model", r.chat.model}, {"output", output}, {"truncation", "disabled"},
            {"usage", nullptr}};
  o.update(r.echo);
  if (status == "incomplete") o["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (status == "completed" || status == "incomplete")
    o["usage"] = {{"input_tokens", u.prompt_tokens}, {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                  {"output_tokens", u.completion_tokens}, {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
                  {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  return o;
}

}  // namespace serve
