// infill.cc: /infill bodies and llama-server's error shape (see infill.h); the FIM tokens,
// the prompt layout and the route are in infill_routes.cc.
#include "serve/infill.h"

namespace serve {

using nlohmann::json;

json infill_error_json(const ApiError& e) {
  std::string type = e.type;
  if (e.status == 401) type = "authentication_error";
  if (e.status == 404) type = "not_found_error";
  return {{"error", {{"code", e.status}, {"message", e.message}, {"type", type}}}};
}

std::optional<ApiError> parse_infill(std::string_view body_text, int ctx, const sampler::Params& defaults,
                                     InfillRequest* out) {
  json body = json::parse(body_text, nullptr, false);
  if (body.is_discarded()) return bad_request("the request body is not valid JSON", "", "invalid_json");
  if (!body.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  InfillRequest r;
  for (auto [key, into] : {std::pair{"input_prefix", &r.prefix}, std::pair{"input_suffix", &r.suffix}}) {
    auto v = body.find(key);
    if (v == body.end()) return bad_request(std::string("\"") + key + "\" is required: a string", key);
    if (!v->is_string()) return wrong_type(key, "a string");
    *into = v->get<std::string>();
  }
  if (auto p = body.find("prompt"); p != body.end() && !p->is_null()) {
    if (!p->is_string()) return wrong_type("prompt", "a string");
    r.prompt = p->get<std::string>();
  }
  if (auto x = body.find("input_extra"); x != body.end() && !x->is_null()) {
    if (!x->is_array()) return wrong_type("input_extra", "an array of {\"filename\": string, \"text\": string}");
    for (size_t i = 0; i < x->size(); ++i) {
      const json& c = (*x)[i];
      const std::string p = "input_extra[" + std::to_string(i) + "]";
      if (!c.is_object() || !c.contains("text") || !c["text"].is_string())
        return bad_request("\"" + p + "\" must be an object with a \"text\" string", p, "invalid_value");
      if (c.contains("filename") && !c["filename"].is_string()) return wrong_type(p + ".filename", "a string");
      r.extra.emplace_back(c.value("filename", "tmp"), c["text"].get<std::string>());
    }
  }
  // /completion's fields onto a /v1/completions body (n_predict -1: until the context is full).
  json c = {{"prompt", ""}};
  if (auto n = body.find("n_predict"); n != body.end() && !n->is_null()) {
    if (!n->is_number_integer()) return wrong_type("n_predict", "an integer");
    if (n->get<long long>() > 0) c["max_tokens"] = *n;
    else if (n->get<long long>() != -1 && n->get<long long>() != -2)
      return bad_request("\"n_predict\" must be positive, or -1 for no limit", "n_predict", "invalid_value");
  }
  for (const char* k : {"temperature", "top_k", "top_p", "min_p", "seed", "stop", "stream", "repeat_penalty",
                        "repeat_last_n", "presence_penalty", "frequency_penalty", "grammar"})
    if (auto v = body.find(k); v != body.end()) c[k] = *v;
  if (auto e = parse_request(c.dump(), Endpoint::kCompletion, ctx, defaults, &r.completion)) {
    if (e->param == "max_tokens") e->param = "n_predict";
    for (size_t at = e->message.find("'max_tokens'"); at != std::string::npos; at = e->message.find("'max_tokens'"))
      e->message.replace(at, 12, "'n_predict'");
    return e;
  }
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace serve
