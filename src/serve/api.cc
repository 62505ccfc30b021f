// api.cc: OpenAI request parsing and validation (see api.h); the response objects are
// api_reply.cc's.
#include "serve/api.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "grammar/json_schema.h"

namespace serve {

using nlohmann::json;

json error_json(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError wrong_type(const std::string& param, const std::string& want) {
  return bad_request("'" + param + "' must be " + want, param, "invalid_type");
}

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

ApiError wrong_type(const std::string& param, const char* want, const json& got) {
  return serve::wrong_type(param, std::string(want) + ", not " + type_name(got));
}

// A present, non-null field, or nullptr.
const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> number(const json& body, const char* key, double lo, double hi, float* out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    return bad_request("'" + std::string(key) + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                           ", not " + v->dump(), key, "invalid_value");
  *out = float(x);
  return std::nullopt;
}

std::optional<ApiError> integer(const json& body, const char* key, long long lo, long long hi, long long* out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return wrong_type(key, "an integer", *v);
  // Unsigned values above INT64_MAX are out of range whatever the bounds.
  if (v->is_number_unsigned() && v->get<unsigned long long>() > (unsigned long long)hi)
    return bad_request("'" + std::string(key) + "' must be between " + std::to_string(lo) + " and " +
                           std::to_string(hi) + ", not " + v->dump(), key, "invalid_value");
  const long long x = v->get<long long>();
  if (x < lo || x > hi)
    return bad_request("'" + std::string(key) + "' must be between " + std::to_string(lo) + " and " +
                           std::to_string(hi) + ", not " + v->dump(), key, "invalid_value");
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> boolean(const json& body, const char* key, bool* out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

// Message content: a string, or an array of {"type":"text","text":...} parts.
std::optional<ApiError> content_text(const json& c, const std::string& param, bool null_ok, std::string* out) {
  if (c.is_null() && null_ok) return std::nullopt;
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return wrong_type(param, "a string or an array of text parts", c);
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return wrong_type(p, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || *type != "text")
      return bad_request("'" + p + ".type' must be \"text\": only text content is supported", p + ".type",
                         "invalid_value");
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return bad_request("'" + p + ".text' must be a string", p + ".text");
    if (!out->empty()) *out += "\n";
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments:
// a JSON object's text}}], into out["tool_calls"] with the arguments as an object (what
// the templates expect).
std::optional<ApiError> parse_tool_calls_field(const json& msg, const std::string& p, nlohmann::ordered_json* out) {
  const json* calls = field(msg, "tool_calls");
  if (!calls) return std::nullopt;
  if (!calls->is_array()) return wrong_type(p + ".tool_calls", "an array", *calls);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t j = 0; j < calls->size(); ++j) {
    const json& c = (*calls)[j];
    const std::string q = p + ".tool_calls[" + std::to_string(j) + "]";
    if (!c.is_object()) return wrong_type(q, "an object", c);
    const json* fn = field(c, "function");
    if (!fn || !fn->is_object()) return bad_request("'" + q + ".function' is required: {name, arguments}", q + ".function");
    const json* name = field(*fn, "name");
    if (!name || !name->is_string()) return bad_request("'" + q + ".function.name' must be a string", q + ".function.name");
    const json* args = field(*fn, "arguments");
    if (!args || !args->is_string())
      return bad_request("'" + q + ".function.arguments' must be a string (a JSON object)", q + ".function.arguments");
    auto parsed = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr, false);
    if (!parsed.is_object())
      return bad_request("'" + q + ".function.arguments' is not a JSON object", q + ".function.arguments", "invalid_value");
    nlohmann::ordered_json tc = {{"id", ""}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", parsed}}}};
    if (const json* id = field(c, "id")) {
      if (!id->is_string()) return wrong_type(q + ".id", "a string", *id);
      tc["id"] = *id;
    }
    list.push_back(std::move(tc));
  }
  if (!list.empty()) (*out)["tool_calls"] = std::move(list);  // [] (some clients send it): no calls
  return std::nullopt;
}

// tools: [{type: "function", function: {name, description?, parameters?}}]; tool_choice:
// "auto" | "none" | "required" | {type: "function", function: {name}} naming one of them.
std::optional<ApiError> parse_tools(const json& body, Request* out) {
  if (const json* t = field(body, "tools")) {
    if (!t->is_array()) return wrong_type("tools", "an array", *t);
    for (size_t i = 0; i < t->size(); ++i) {
      const json& tool = (*t)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object()) return wrong_type(p, "an object", tool);
      const json* type = field(tool, "type");
      if (!type || *type != "function")
        return bad_request("'" + p + ".type' must be \"function\"", p + ".type", "invalid_value");
      const json* fn = field(tool, "function");
      if (!fn || !fn->is_object()) return bad_request("'" + p + ".function' is required: {name, parameters}", p + ".function");
      const json* name = field(*fn, "name");
      if (!name || !name->is_string() || name->get<std::string>().empty())
        return bad_request("'" + p + ".function.name' must be a non-empty string", p + ".function.name");
      if (const json* params = field(*fn, "parameters"); params && !params->is_object())
        return wrong_type(p + ".function.parameters", "an object (a JSON schema)", *params);
      const json* desc = field(*fn, "description");
      if (desc && !desc->is_string()) return wrong_type(p + ".function.description", "a string", *desc);
      nlohmann::ordered_json t(tool);
      if (!desc) {
        // OpenAI makes the description optional; templates such as gpt-oss's write
        // "// " + tool.description, so a missing one becomes "" after the name, as
        // llama-server's common_chat_tools_parse_oaicompat does.
        nlohmann::ordered_json f = {{"name", *name}, {"description", ""}};
        for (const auto& [k, v] : t["function"].items())
          if (k != "name" && k != "description") f[k] = v;
        t["function"] = std::move(f);
      }
      out->tools.push_back(std::move(t));
    }
  }
  if (auto e = boolean(body, "parallel_tool_calls", &out->parallel_tool_calls)) return e;
  const json* c = field(body, "tool_choice");
  if (!c) return std::nullopt;
  if (c->is_string()) {
    const std::string v = c->get<std::string>();
    if (v == "auto") out->tool_choice = ToolChoice::kAuto;
    else if (v == "none") out->tool_choice = ToolChoice::kNone;
    else if (v == "required") out->tool_choice = ToolChoice::kRequired;
    else return bad_request("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"function\": "
                            "{\"name\": ...}}, not '" + v + "'", "tool_choice", "invalid_value");
  } else if (c->is_object()) {
    const json* fn = field(*c, "function");
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      return bad_request("'tool_choice.function.name' must name a function", "tool_choice.function.name");
    out->tool_choice = ToolChoice::kNamed;
    out->tool_name = name->get<std::string>();
    bool known = false;
    for (const auto& t : out->tools) known = known || t["function"]["name"] == out->tool_name;
    if (!known)
      return bad_request("'tool_choice' names '" + out->tool_name + "', which is not among 'tools'",
                         "tool_choice.function.name", "invalid_value");
  } else {
    return wrong_type("tool_choice", "a string or an object", *c);
  }
  if (out->tools.empty() && out->tool_choice == ToolChoice::kRequired)
    return bad_request("'tool_choice' is required but 'tools' is empty", "tool_choice", "invalid_value");
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& body, Request* out) {
  const json* m = field(body, "messages");
  if (!m) return bad_request("'messages' is required: a non-empty array of {\"role\", \"content\"}", "messages",
                             "missing_required_parameter");
  if (!m->is_array()) return wrong_type("messages", "an array", *m);
  if (m->empty()) return bad_request("'messages' must contain at least one message", "messages", "empty_array");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return wrong_type(p, "an object", msg);
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string())
      return bad_request("'" + p + ".role' is required and must be a string", p + ".role");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      return bad_request("'" + p + ".role' must be one of system, developer, user, assistant, tool; not '" +
                             role->get<std::string>() + "'", p + ".role", "invalid_value");
    tokenizer::ChatMessage cm{r, ""};
    auto content = msg.find("content");
    if (content == msg.end() && r != "assistant")
      return bad_request("'" + p + ".content' is required", p + ".content", "missing_required_parameter");
    if (content != msg.end())
      if (auto e = content_text(*content, p + ".content", r == "assistant", &cm.content)) return e;
    nlohmann::ordered_json tm = {{"role", r}, {"content", cm.content}};
    if (r == "assistant") {
      if (auto e = parse_tool_calls_field(msg, p, &tm)) return e;
      if (tm.contains("tool_calls") && cm.content.empty()) tm["content"] = nullptr;
    }
    if (r == "tool") {
      if (const json* id = field(msg, "tool_call_id")) {
        if (!id->is_string()) return wrong_type(p + ".tool_call_id", "a string", *id);
        tm["tool_call_id"] = *id;
      }
      if (const json* name = field(msg, "name")) {
        if (!name->is_string()) return wrong_type(p + ".name", "a string", *name);
        tm["name"] = *name;
      }
    }
    out->chat_messages.push_back(std::move(tm));
    out->messages.push_back(std::move(cm));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& body, Request* out) {
  const json* p = field(body, "prompt");
  if (!p) return bad_request("'prompt' is required: a string", "prompt", "missing_required_parameter");
  if (p->is_string()) {
    out->prompt = p->get<std::string>();
    return std::nullopt;
  }
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    out->prompt = (*p)[0].get<std::string>();
    return std::nullopt;
  }
  if (p->is_array())
    return bad_request("'prompt' must be a string or an array of exactly one string (token-id and batched prompts "
                       "are not supported)", "prompt", "invalid_value");
  return wrong_type("prompt", "a string", *p);
}

constexpr long long kMaxChoices = 16, kMaxTopLogprobs = 20, kMaxLogitBias = 1024;

// chat: "logprobs": bool and "top_logprobs": 0..20; completions: "logprobs": 0..20 (the
// number of most likely tokens) and "echo".
std::optional<ApiError> parse_logprobs(const json& body, Endpoint ep, Request* out) {
  long long top = -1;
  if (ep == Endpoint::kChat) {
    bool on = false;
    if (auto e = boolean(body, "logprobs", &on)) return e;
    if (field(body, "top_logprobs")) {
      if (!on) return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
      if (auto e = integer(body, "top_logprobs", 0, kMaxTopLogprobs, &top)) return e;
    } else if (on) {
      top = 0;
    }
    if (const json* v = field(body, "echo"); v && !(v->is_boolean() && !v->get<bool>()))
      return bad_request("'echo' is only for /v1/completions", "echo", "unsupported_parameter");
  } else {
    if (const json* v = field(body, "logprobs"); v && v->is_boolean())
      return bad_request("'logprobs' must be an integer for /v1/completions: how many most likely tokens to list "
                         "(0 to 20)", "logprobs", "invalid_type");
    if (auto e = integer(body, "logprobs", 0, kMaxTopLogprobs, &top)) return e;
    if (auto e = boolean(body, "echo", &out->echo)) return e;
    if (out->echo && top >= 0)
      return bad_request("'echo' with 'logprobs' is not supported: the prompt's tokens are not scored", "echo",
                         "unsupported_parameter");
  }
  out->params.top_logprobs = int(top);
  return std::nullopt;
}

// {"token id": bias in [-100, 100], ...}.
std::optional<ApiError> parse_logit_bias(const json& body, Request* out) {
  const json* b = field(body, "logit_bias");
  if (!b) return std::nullopt;
  if (!b->is_object()) return wrong_type("logit_bias", "an object of token id -> bias", *b);
  if (b->size() > size_t(kMaxLogitBias))
    return bad_request("'logit_bias' may hold at most " + std::to_string(kMaxLogitBias) + " tokens", "logit_bias",
                       "invalid_value");
  sampler::LogitBias bias;
  for (const auto& [key, v] : b->items()) {
    const std::string p = "logit_bias." + key;
    long long id = -1;
    size_t used = 0;
    try {
      id = std::stoll(key, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id > INT32_MAX)
      return bad_request("'logit_bias' keys must be token ids (non-negative integers), not '" + key + "'", p,
                         "invalid_value");
    if (!v.is_number()) return wrong_type(p, "a number", v);
    const double x = v.get<double>();
    if (!(x >= -100 && x <= 100)) return bad_request("'" + p + "' must be between -100 and 100", p, "invalid_value");
    bias.emplace_back(int32_t(id), float(x));
  }
  std::sort(bias.begin(), bias.end());
  for (size_t i = 1; i < bias.size(); ++i)
    if (bias[i].first == bias[i - 1].first)
      return bad_request("'logit_bias' names token " + std::to_string(bias[i].first) + " twice", "logit_bias",
                         "invalid_value");
  out->params.logit_bias = std::move(bias);
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& body, Request* out) {
  const json* s = field(body, "stop");
  if (!s) return std::nullopt;
  std::vector<std::string> stops;
  if (s->is_string()) {
    stops.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > 16) return bad_request("'stop' may hold at most 16 strings", "stop", "invalid_value");
    for (const json& x : *s) {
      if (!x.is_string()) return wrong_type("stop", "a string or an array of strings", x);
      stops.push_back(x.get<std::string>());
    }
  } else {
    return wrong_type("stop", "a string or an array of strings", *s);
  }
  for (const std::string& x : stops) {
    if (x.empty()) return bad_request("'stop' strings must not be empty", "stop", "invalid_value");
    if (x.size() > 1024) return bad_request("'stop' strings must be at most 1024 bytes", "stop", "invalid_value");
  }
  out->stop = std::move(stops);
  return std::nullopt;
}

}  // namespace

namespace {

std::optional<ApiError> parse_object(std::string_view body_text, json* body) {
  try {
    *body = json::parse(body_text);
  } catch (const json::exception& e) {
    return bad_request(std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!body->is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_tokenize(std::string_view body_text, TokenizeRequest* out) {
  json body;
  if (auto e = parse_object(body_text, &body)) return e;
  const json* c = field(body, "content");
  if (!c) return bad_request("'content' is required: the text to tokenize", "content", "missing_field");
  if (!c->is_string()) return wrong_type("content", "a string", *c);
  TokenizeRequest r;
  r.content = c->get<std::string>();
  if (auto e = boolean(body, "add_special", &r.add_special)) return e;
  if (auto e = boolean(body, "parse_special", &r.parse_special)) return e;
  if (auto e = boolean(body, "with_pieces", &r.with_pieces)) return e;
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> parse_detokenize(std::string_view body_text, int32_t n_vocab, std::vector<int32_t>* out) {
  json body;
  if (auto e = parse_object(body_text, &body)) return e;
  const json* t = field(body, "tokens");
  if (!t) return bad_request("'tokens' is required: an array of token ids", "tokens", "missing_field");
  if (!t->is_array()) return wrong_type("tokens", "an array of token ids", *t);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->size(); ++i) {
    const json& v = (*t)[i];
    const std::string p = "tokens[" + std::to_string(i) + "]";
    if (!v.is_number_integer()) return wrong_type(p, "an integer", v);
    if (v.is_number_unsigned() ? v.get<unsigned long long>() >= (unsigned long long)n_vocab
                               : (v.get<long long>() < 0 || v.get<long long>() >= n_vocab))
      return bad_request("'" + p + "' is " + v.dump() + ", but token ids are 0 to " + std::to_string(n_vocab - 1), p,
                         "invalid_value");
    ids.push_back(int32_t(v.get<long long>()));
  }
  *out = std::move(ids);
  return std::nullopt;
}

// response_format (text, json_object, json_schema) or llama.cpp's "grammar" (GBNF), as
// one compiled grammar (grammar/).
std::optional<ApiError> parse_constraint(const json& body, std::string_view body_text, Request* out) {
  const json* rf = field(body, "response_format");
  const json* gr = field(body, "grammar");
  std::string gbnf, param;
  if (rf) {
    if (!rf->is_object()) return wrong_type("response_format", "an object", *rf);
    const json* type = field(*rf, "type");
    if (!type || !type->is_string())
      return bad_request("'response_format' needs a 'type': text, json_object or json_schema", "response_format.type");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      gbnf = grammar::json_object_gbnf();
      param = "response_format";
    } else if (t == "json_schema") {
      const json* js = field(*rf, "json_schema");
      if (!js || !js->is_object())
        return bad_request("'response_format.json_schema' must be an object {\"name\", \"schema\", \"strict\"}",
                           "response_format.json_schema");
      const json* schema = field(*js, "schema");
      if (!schema) return bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
      // again, with the properties in the order written (they are generated in that order)
      const auto ordered = nlohmann::ordered_json::parse(body_text)["response_format"]["json_schema"]["schema"];
      auto g = grammar::json_schema_gbnf(ordered);
      if (!g) return bad_request(g.status().message(), "response_format.json_schema.schema", "unsupported_value");
      gbnf = std::move(*g);
      param = "response_format.json_schema.schema";
    } else if (t != "text") {
      return bad_request("'response_format.type' must be text, json_object or json_schema, not '" + t + "'",
                         "response_format.type", "invalid_value");
    }
  }
  if (gr && !gr->is_null()) {
    if (!gr->is_string()) return wrong_type("grammar", "a string (GBNF)", *gr);
    if (!gbnf.empty()) return bad_request("give 'grammar' or a JSON 'response_format', not both", "grammar");
    gbnf = gr->get<std::string>();
    param = "grammar";
  }
  if (gbnf.empty()) return std::nullopt;
  auto g = grammar::Grammar::parse(gbnf);
  if (!g) return bad_request(g.status().message(), param, "invalid_value");
  out->grammar = std::move(*g);
  out->gbnf = param == "grammar";
  return std::nullopt;
}

std::optional<ApiError> parse_request(std::string_view body_text, Endpoint ep, int ctx,
                                      const sampler::Params& defaults, Request* out) {
  json body;
  if (auto e = parse_object(body_text, &body)) return e;
  Request r;
  r.endpoint = ep;
  r.params = defaults;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) return wrong_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  if (auto e = ep == Endpoint::kChat ? parse_messages(body, &r) : parse_prompt(body, &r)) return e;

  long long n = 1;
  if (auto e = integer(body, "n", 1, kMaxChoices, &n)) return e;
  r.n = int(n);
  if (auto e = parse_logprobs(body, ep, &r)) return e;
  if (auto e = parse_logit_bias(body, &r)) return e;
  if (ep == Endpoint::kChat)
    if (auto e = parse_tools(body, &r)) return e;
  for (const char* unsupported : {"functions", "suffix"}) {
    const json* v = field(body, unsupported);
    if (v && !(v->is_boolean() && !v->get<bool>()) && !(v->is_array() && v->empty()))
      return bad_request(std::string("'") + unsupported + "' is not supported by this server", unsupported,
                         "unsupported_parameter");
  }
  if (const json* b = field(body, "best_of"); b && !(b->is_number_integer() && b->get<long long>() == 1))
    return bad_request("'best_of' must be 1", "best_of", "unsupported_parameter");

  if (auto e = number(body, "temperature", 0, 2, &r.params.temperature)) return e;
  if (auto e = number(body, "top_p", 0, 1, &r.params.top_p)) return e;
  if (auto e = number(body, "min_p", 0, 1, &r.params.min_p)) return e;
  if (auto e = number(body, "presence_penalty", -2, 2, &r.params.presence_penalty)) return e;
  if (auto e = number(body, "frequency_penalty", -2, 2, &r.params.frequency_penalty)) return e;
  if (auto e = number(body, "repeat_penalty", 0.01, 10, &r.params.repeat_penalty)) return e;
  long long v = 0;
  if (field(body, "top_k")) {
    if (auto e = integer(body, "top_k", 0, 1 << 30, &v)) return e;
    r.params.top_k = int(v);
  }
  if (field(body, "seed")) {
    if (auto e = integer(body, "seed", LLONG_MIN, LLONG_MAX, &v)) return e;
    r.params.seed = uint64_t(v);
    r.seed_given = true;
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!field(body, key)) continue;
    if (auto e = integer(body, key, 1, LLONG_MAX, &v)) return e;
    if (v >= ctx)
      return bad_request("'" + std::string(key) + "' is " + std::to_string(v) + " but the context is " +
                             std::to_string(ctx) + " tokens (prompt included); ask for fewer tokens or start the "
                             "server with a larger --ctx", key, "context_length_exceeded");
    r.max_tokens = int(v);
  }
  if (auto e = parse_constraint(body, body_text, &r)) return e;
  if (field(body, "speculative.n_max")) {  // llama.cpp's name; 0: no speculation for this request
    if (auto e = integer(body, "speculative.n_max", 0, 32, &v)) return e;
    r.max_guesses = int(v);
  }
  if (auto e = parse_stop(body, &r)) return e;
  if (const json* f = field(body, "reasoning_format")) {
    auto fmt = f->is_string() ? reasoning_format_from_name(f->get<std::string>()) : std::nullopt;
    if (!fmt)
      return bad_request("'reasoning_format' must be none, auto, deepseek or deepseek-legacy, not " + f->dump(),
                         "reasoning_format", "invalid_value");
    r.reasoning_format = fmt;
  }
  if (auto e = boolean(body, "stream", &r.stream)) return e;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    if (!r.stream) return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (auto e = boolean(*so, "include_usage", &r.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> check_token_ids(const Request& r, int32_t n_vocab) {
  for (const auto& [id, bias] : r.params.logit_bias)
    if (id >= n_vocab)
      return bad_request("'logit_bias' names token " + std::to_string(id) + ", but token ids are 0 to " +
                             std::to_string(n_vocab - 1), "logit_bias." + std::to_string(id), "invalid_value");
  return std::nullopt;
}

}  // namespace serve
