// anthropic.cc: Anthropic's Messages bodies translated into the OpenAI request (see
// anthropic.h); its routes and replies are in anthropic_routes.cc.
#include "serve/anthropic.h"

namespace serve {

using ojson = nlohmann::ordered_json;
using nlohmann::json;

namespace {

// A tool_result's content: a string or text blocks.
std::optional<ApiError> result_text(const ojson& c, const std::string& p, std::string* out) {
  if (c.is_null()) return std::nullopt;
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return wrong_type(p, "a string or an array of text blocks");
  for (size_t i = 0; i < c.size(); ++i) {
    const ojson& b = c[i];
    if (!b.is_object() || !b.contains("type") || b["type"] != "text" || !b.contains("text") || !b["text"].is_string())
      return bad_request("'" + p + "[" + std::to_string(i) + "]' must be a text block {\"type\": \"text\", \"text\"}",
                         p, "invalid_value");
    if (!out->empty()) *out += "\n";
    *out += b["text"].get<std::string>();
  }
  return std::nullopt;
}

// One message's content blocks onto OpenAI messages: text (joined), an assistant's
// tool_use as tool_calls, a user's tool_result as role "tool" messages before its text.
std::optional<ApiError> message(const ojson& m, const std::string& p, ojson* out) {
  if (!m.is_object()) return wrong_type(p, "an object {\"role\", \"content\"}");
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return bad_request("'" + p + ".role' is required: user or assistant", p + ".role");
  const std::string r = role->get<std::string>();
  if (r != "user" && r != "assistant")
    return bad_request("'" + p + ".role' must be user or assistant, not '" + r + "' (the system prompt is the top-level "
                       "'system')", p + ".role", "invalid_value");
  auto content = m.find("content");
  if (content == m.end()) return bad_request("'" + p + ".content' is required", p + ".content");
  if (content->is_string()) {
    out->push_back({{"role", r}, {"content", *content}});
    return std::nullopt;
  }
  if (!content->is_array()) return wrong_type(p + ".content", "a string or an array of content blocks");
  std::string text;
  ojson calls = ojson::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const ojson& b = (*content)[i];
    const std::string q = p + ".content[" + std::to_string(i) + "]";
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return bad_request("'" + q + "' must be a content block with a 'type'", q);
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string()) return wrong_type(q + ".text", "a string");
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "tool_use" && r == "assistant") {
      if (!b.contains("name") || !b["name"].is_string()) return wrong_type(q + ".name", "a string");
      if (!b.contains("input") || !b["input"].is_object()) return wrong_type(q + ".input", "an object");
      if (b.contains("id") && !b["id"].is_string()) return wrong_type(q + ".id", "a string");
      calls.push_back({{"id", b.value("id", "")}, {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", b["input"].dump()}}}});
    } else if (type == "tool_result" && r == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) return wrong_type(q + ".tool_use_id", "a string");
      std::string result;
      if (b.contains("content"))
        if (auto e = result_text(b["content"], q + ".content", &result)) return e;
      if (b.contains("is_error") && !b["is_error"].is_boolean()) return wrong_type(q + ".is_error", "a boolean");
      if (b.value("is_error", false)) result = "Error: " + result;
      out->push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      // earlier turns' reasoning is not shown to the model again
    } else {
      return bad_request("'" + q + ".type' " + type + " is not supported" +
                             (type == "image" || type == "document" ? ": this model reads text only" :
                              type == "tool_use" ? " in a user message" : type == "tool_result" ? " in an assistant message" : ""),
                         q + ".type", "invalid_value");
    }
  }
  if (r == "assistant") {
    ojson a = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) a["tool_calls"] = calls;
    out->push_back(std::move(a));
  } else if (!text.empty() || out->empty() || out->back()["role"] != "tool") {
    out->push_back({{"role", "user"}, {"content", text}});
  }
  return std::nullopt;
}

std::optional<ApiError> tools(const ojson& body, ojson* o) {
  auto t = body.find("tools");
  if (t != body.end() && !t->is_null()) {
    if (!t->is_array()) return wrong_type("tools", "an array");
    ojson list = ojson::array();
    for (size_t i = 0; i < t->size(); ++i) {
      const ojson& x = (*t)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!x.is_object()) return wrong_type(p, "an object {name, description, input_schema}");
      if (x.contains("type") && x["type"] != "custom")
        return bad_request("'" + p + ".type' " + x["type"].dump() + ": only client tools {name, input_schema} are "
                           "supported", p + ".type", "invalid_value");
      if (!x.contains("name") || !x["name"].is_string()) return wrong_type(p + ".name", "a string");
      if (!x.contains("input_schema") || !x["input_schema"].is_object())
        return bad_request("'" + p + ".input_schema' is required: the tool's arguments as a JSON schema object",
                           p + ".input_schema");
      ojson fn = {{"name", x["name"]}, {"parameters", x["input_schema"]}};
      if (x.contains("description")) fn["description"] = x["description"];
      list.push_back({{"type", "function"}, {"function", fn}});
    }
    (*o)["tools"] = list;
  }
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return std::nullopt;
  if (!c->is_object() || !c->contains("type") || !(*c)["type"].is_string())
    return bad_request("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice");
  const std::string type = (*c)["type"].get<std::string>();
  if (type == "auto" || type == "none") (*o)["tool_choice"] = type;
  else if (type == "any") (*o)["tool_choice"] = "required";
  else if (type == "tool" && c->contains("name") && (*c)["name"].is_string())
    (*o)["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
  else return bad_request("'tool_choice.type' must be auto, any, none or tool (with a 'name')", "tool_choice.type",
                          "invalid_value");
  if (c->contains("disable_parallel_tool_use") && !(*c)["disable_parallel_tool_use"].is_boolean())
    return wrong_type("tool_choice.disable_parallel_tool_use", "a boolean");
  if (c->value("disable_parallel_tool_use", false)) (*o)["parallel_tool_calls"] = false;
  return std::nullopt;
}

std::optional<ApiError> translate(const ojson& body, bool count, ojson* out) {
  ojson& o = *out;
  o = ojson::object();
  auto model = body.find("model");
  if (model == body.end() || !model->is_string()) return bad_request("'model' is required: a string", "model");
  o["model"] = *model;
  auto mt = body.find("max_tokens");
  if (!count && (mt == body.end() || mt->is_null()))
    return bad_request("'max_tokens' is required: the most tokens to generate", "max_tokens");
  if (!count) o["max_tokens"] = *mt;
  ojson msgs = ojson::array();
  if (auto s = body.find("system"); s != body.end() && !s->is_null()) {
    std::string text;
    if (auto e = result_text(*s, "system", &text)) return e;
    msgs.push_back({{"role", "system"}, {"content", text}});
  }
  auto m = body.find("messages");
  if (m == body.end() || !m->is_array() || m->empty())
    return bad_request("'messages' is required: a non-empty array of {\"role\", \"content\"}", "messages");
  for (size_t i = 0; i < m->size(); ++i)
    if (auto e = message((*m)[i], "messages[" + std::to_string(i) + "]", &msgs)) return e;
  o["messages"] = msgs;
  if (auto t = body.find("temperature"); t != body.end() && !t->is_null()) {
    if (!t->is_number()) return wrong_type("temperature", "a number");
    if (t->get<double>() < 0 || t->get<double>() > 1)
      return bad_request("'temperature' must be between 0 and 1, not " + t->dump(), "temperature", "invalid_value");
    o["temperature"] = *t;
  }
  for (const char* k : {"top_p", "top_k", "stream"})
    if (auto v = body.find(k); v != body.end()) o[k] = *v;
  if (auto s = body.find("stop_sequences"); s != body.end() && !s->is_null()) {
    if (!s->is_array()) return wrong_type("stop_sequences", "an array of strings");
    o["stop"] = *s;
  }
  return tools(body, &o);
}

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

}  // namespace

json anthropic_error_json(const ApiError& e) {
  return {{"type", "error"}, {"error", {{"type", error_type(e.status)}, {"message", e.message}}}};
}

std::optional<ApiError> parse_anthropic(std::string_view body_text, bool count, int ctx,
                                        const sampler::Params& defaults, Request* out) {
  ojson body = ojson::parse(body_text, nullptr, false);
  if (body.is_discarded()) return bad_request("the request body is not valid JSON", "", "invalid_json");
  if (!body.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  ojson openai;
  if (auto e = translate(body, count, &openai)) return e;
  auto e = parse_request(openai.dump(), Endpoint::kChat, ctx, defaults, out);
  if (e && e->param.rfind("stop", 0) == 0) {  // OpenAI's name back to Anthropic's
    for (size_t at = e->message.find("'stop'"); at != std::string::npos; at = e->message.find("'stop'", at + 1))
      e->message.replace(at, 6, "'stop_sequences'");
    e->param = "stop_sequences";
  }
  return e;
}

}  // namespace serve
