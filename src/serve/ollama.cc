// ollama.cc: Ollama's request bodies translated into the OpenAI request (see ollama.h);
// its routes and replies are in ollama_routes.cc.
#include "serve/ollama.h"


namespace serve {

using ojson = nlohmann::ordered_json;
using nlohmann::json;

namespace {

// Ollama's name of an OpenAI field (errors say what the client sent).
const std::pair<const char*, const char*> kNames[] = {
    {"max_tokens", "options.num_predict"},  {"temperature", "options.temperature"},
    {"top_p", "options.top_p"},             {"top_k", "options.top_k"},
    {"min_p", "options.min_p"},             {"seed", "options.seed"},
    {"stop", "options.stop"},               {"repeat_penalty", "options.repeat_penalty"},
    {"presence_penalty", "options.presence_penalty"}, {"frequency_penalty", "options.frequency_penalty"},
    {"response_format.json_schema.schema", "format"}, {"response_format", "format"}};

ApiError renamed(ApiError e) {
  for (const auto& [openai, ollama] : kNames) {
    if (e.param.rfind(openai, 0) != 0) continue;
    const std::string from = std::string("'") + openai, to = std::string("'") + ollama;
    for (size_t at = e.message.find(from); at != std::string::npos; at = e.message.find(from, at + to.size()))
      e.message.replace(at, from.size(), to);
    e.param = ollama + e.param.substr(std::string(openai).size());
    break;
  }
  return e;
}

// options: Ollama's sampling fields onto OpenAI's; the rest (num_ctx, num_thread, ...) are
// the server's to choose, ignored as Ollama ignores unknown ones.
std::optional<ApiError> options(const ojson& body, ojson* out) {
  auto it = body.find("options");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return wrong_type("options", "an object");
  for (const char* k : {"temperature", "top_p", "top_k", "min_p", "seed", "stop", "repeat_penalty",
                        "presence_penalty", "frequency_penalty"})
    if (auto v = it->find(k); v != it->end() && !v->is_null()) (*out)[k] = *v;
  if (auto v = it->find("num_predict"); v != it->end() && !v->is_null()) {
    if (!v->is_number_integer()) return wrong_type("options.num_predict", "an integer");
    if (v->get<long long>() > 0) (*out)["max_tokens"] = *v;  // -1 (until done) and -2 (fill the context): none
  }
  return std::nullopt;
}

// format: "" / absent, "json", or a JSON schema object.
std::optional<ApiError> format(const ojson& body, ojson* out) {
  auto it = body.find("format");
  if (it == body.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty())) return std::nullopt;
  if (it->is_string() && *it == "json") (*out)["response_format"] = {{"type", "json_object"}};
  else if (it->is_object())
    (*out)["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "format"}, {"schema", *it}}}};
  else return bad_request("'format' must be \"json\" or a JSON schema object, not " + it->dump(), "format", "invalid_value");
  return std::nullopt;
}

// messages: tool_calls' arguments are objects (OpenAI's are text), images are refused.
std::optional<ApiError> messages(const ojson& body, ojson* out) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array()) return std::nullopt;  // parse_request names it
  ojson list = ojson::array();
  for (size_t i = 0; i < it->size(); ++i) {
    ojson m = (*it)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(p, "an object");
    if (auto im = m.find("images"); im != m.end() && !im->is_null() && !(im->is_array() && im->empty()))
      return bad_request("'" + p + ".images': this model reads text only", p + ".images", "unsupported_parameter");
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) return wrong_type(p + ".tool_calls", "an array");
      ojson calls = ojson::array();
      for (size_t j = 0; j < tc->size(); ++j) {
        const ojson& c = (*tc)[j];
        const std::string q = p + ".tool_calls[" + std::to_string(j) + "].function";
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
          return wrong_type(q, "an object {name, arguments}");
        const ojson& fn = c["function"];
        if (!fn.contains("name") || !fn["name"].is_string()) return wrong_type(q + ".name", "a string");
        if (!fn.contains("arguments") || !fn["arguments"].is_object()) return wrong_type(q + ".arguments", "an object");
        calls.push_back({{"id", "call_" + std::to_string(j)}, {"type", "function"},
                         {"function", {{"name", fn["name"]}, {"arguments", fn["arguments"].dump()}}}});
      }
      m["tool_calls"] = calls;
    }
    if (auto tn = m.find("tool_name"); tn != m.end()) {
      m["name"] = *tn;
      m.erase("tool_name");
    }
    m.erase("thinking");
    list.push_back(std::move(m));
  }
  (*out)["messages"] = std::move(list);
  return std::nullopt;
}

std::optional<ApiError> translate(const ojson& body, bool chat, bool has_chat, ojson* out, Endpoint* ep) {
  ojson& o = *out;
  o = ojson::object();
  if (auto m = body.find("model"); m != body.end()) o["model"] = *m;
  auto stream = body.find("stream");
  if (stream != body.end() && !stream->is_null() && !stream->is_boolean()) return wrong_type("stream", "a boolean");
  o["stream"] = stream == body.end() || stream->is_null() || stream->get<bool>();
  if (chat) {
    *ep = Endpoint::kChat;
    if (auto m = body.find("messages"); m != body.end()) o["messages"] = *m;
    if (auto e = messages(body, &o)) return e;
    if (auto t = body.find("tools"); t != body.end()) o["tools"] = *t;
  } else {
    for (const char* k : {"suffix", "template", "context", "images"})
      if (auto v = body.find(k); v != body.end() && !v->is_null() && !v->empty())
        return bad_request(std::string("'") + k + "' is not supported by this server", k, "unsupported_parameter");
    auto p = body.find("prompt");
    if (p != body.end() && !p->is_string()) return wrong_type("prompt", "a string");
    const std::string prompt = p == body.end() ? "" : p->get<std::string>();
    auto raw = body.find("raw");
    if (raw != body.end() && !raw->is_null() && !raw->is_boolean()) return wrong_type("raw", "a boolean");
    const bool as_is = (raw != body.end() && raw->is_boolean() && raw->get<bool>()) || !has_chat;
    auto sys = body.find("system");
    if (sys != body.end() && !sys->is_null() && !sys->is_string()) return wrong_type("system", "a string");
    if (as_is) {
      *ep = Endpoint::kCompletion;
      o["prompt"] = prompt;
    } else {  // the prompt as the user's turn of the chat template, as Ollama does
      *ep = Endpoint::kChat;
      o["messages"] = ojson::array();
      if (sys != body.end() && sys->is_string()) o["messages"].push_back({{"role", "system"}, {"content", *sys}});
      o["messages"].push_back({{"role", "user"}, {"content", prompt}});
    }
  }
  if (auto e = options(body, &o)) return e;
  return format(body, &o);
}

}  // namespace

json ollama_error_json(const ApiError& e) { return {{"error", e.message}}; }

std::optional<ApiError> parse_ollama(std::string_view body_text, bool chat, bool has_chat, int ctx,
                                     const sampler::Params& defaults, Request* out) {
  ojson body = ojson::parse(body_text, nullptr, false);
  if (body.is_discarded()) return bad_request("the request body is not valid JSON", "", "invalid_json");
  if (!body.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  ojson openai;
  Endpoint ep = Endpoint::kChat;
  if (auto e = translate(body, chat, has_chat, &openai, &ep)) return e;
  if (auto e = parse_request(openai.dump(), ep, ctx, defaults, out)) return renamed(*e);
  return std::nullopt;
}

}  // namespace serve
