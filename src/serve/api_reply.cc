// api_reply.cc: the OpenAI response objects and streamed chunks (see api.h); the requests
// are read in api.cc.
#include "serve/api.h"

namespace serve {

using nlohmann::json;

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}, {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

namespace {
json finish(const std::string& f) { return f.empty() ? json(nullptr) : json(f); }
json head(Endpoint ep, const ResponseIds& ids, bool chunk) {
  const char* object = ep == Endpoint::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return json{{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
}

json bytes_of(const std::string& t) {
  json b = json::array();
  for (unsigned char c : t) b.push_back(int(c));
  return b;
}
}  // namespace

json logprobs_json(Endpoint ep, const std::vector<TokenLogprobs>& toks, size_t text_offset0) {
  if (ep == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprobs& t : toks) {
      json top = json::array();
      for (const auto& [tok, lp] : t.top) top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
      content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t off = text_offset0;
  for (const TokenLogprobs& t : toks) {
    tokens.push_back(t.token);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [tok, lp] : t.top) top[tok] = lp;
    tops.push_back(top);
    offsets.push_back(off);
    off += t.token.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json response_json(Endpoint ep, const ResponseIds& ids, const std::vector<Choice>& choices, const Usage& u) {
  json r = head(ep, ids, false);
  r["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", finish(c.finish_reason)}, {"logprobs", c.logprobs}};
    if (ep == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        json calls = json::array();
        for (const ToolCall& t : c.tool_calls)
          calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        choice["message"]["tool_calls"] = calls;
      }
    }
    else
      choice["text"] = c.text;
    r["choices"].push_back(choice);
  }
  r["usage"] = usage_json(u);
  return r;
}

json chunk_json(Endpoint ep, const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                bool first, int index, const json& logprobs) {
  json r = head(ep, ids, true);
  json choice = {{"index", index}, {"finish_reason", finish(finish_reason)}, {"logprobs", logprobs}};
  if (ep == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  r["choices"] = json::array({choice});
  return r;
}

json tool_call_chunk_json(const ResponseIds& ids, int index, int call_index, const ToolCall& call, bool first) {
  json r = head(Endpoint::kChat, ids, true);
  json tc = {{"index", call_index}, {"id", call.id}, {"type", "function"},
             {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  json delta = {{"tool_calls", json::array({tc})}};
  if (first) delta["role"] = "assistant";
  r["choices"] = json::array({{{"index", index}, {"delta", delta}, {"finish_reason", nullptr}, {"logprobs", nullptr}}});
  return r;
}

json tool_delta_chunk_json(const ResponseIds& ids, int index, const ToolDelta& d, bool first) {
  json r = head(Endpoint::kChat, ids, true);
  json tc = d.first ? json{{"index", d.index}, {"id", d.id}, {"type", "function"},
                           {"function", {{"name", d.name}, {"arguments", ""}}}}
                    : json{{"index", d.index}, {"function", {{"arguments", d.arguments}}}};
  json delta = {{"tool_calls", json::array({tc})}};
  if (first) delta["role"] = "assistant";
  r["choices"] = json::array({{{"index", index}, {"delta", delta}, {"finish_reason", nullptr}, {"logprobs", nullptr}}});
  return r;
}

json reasoning_chunk_json(const ResponseIds& ids, int index, const std::string& text, bool first) {
  json r = head(Endpoint::kChat, ids, true);
  json delta = {{"reasoning_content", text}};
  if (first) delta["role"] = "assistant";
  r["choices"] = json::array({{{"index", index}, {"delta", delta}, {"finish_reason", nullptr}, {"logprobs", nullptr}}});
  return r;
}

json usage_chunk_json(Endpoint ep, const ResponseIds& ids, const Usage& u) {
  json r = head(ep, ids, true);
  r["choices"] = json::array();
  r["usage"] = usage_json(u);
  return r;
}

}  // namespace serve
