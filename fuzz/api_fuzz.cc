// api_fuzz.cc: libFuzzer target for the HTTP APIs' body parsers (serve/api.h, ollama.h):
// the first byte picks the entry point (OpenAI chat, completions, Ollama /api/chat,
// /api/generate with and without a chat template, Anthropic's /v1/messages and
// count_tokens, OpenAI's /v1/responses with a store holding one response, llama-server's
// /infill), the rest is the body. Nothing may
// crash, hang or read out of bounds; a body either parses or gets a 4xx with a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/api.h"
#include "serve/anthropic.h"
#include "serve/infill.h"
#include "serve/ollama.h"
#include "serve/responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const sampler::Params defaults;
  serve::Request r;
  std::optional<serve::ApiError> e;
  static serve::ResponseStore* store = [] {  // a previous_response_id "resp_1" to find
    auto* s = new serve::ResponseStore(2);
    nlohmann::ordered_json turn = {{"role", "user"}, {"content", "hi"}};
    s->put("resp_1", {nlohmann::ordered_json::array({turn}), nlohmann::json::object()});
    return s;
  }();
  serve::ResponsesRequest rr;
  serve::InfillRequest ir;
  switch (data[0] % 9) {
    case 0: e = serve::parse_request(body, serve::Endpoint::kChat, 512, defaults, &r); break;
    case 1: e = serve::parse_request(body, serve::Endpoint::kCompletion, 512, defaults, &r); break;
    case 2: e = serve::parse_ollama(body, true, true, 512, defaults, &r); break;
    case 3: e = serve::parse_ollama(body, false, true, 512, defaults, &r); break;
    case 4: e = serve::parse_ollama(body, false, false, 512, defaults, &r); break;
    case 5: e = serve::parse_anthropic(body, false, 512, defaults, &r); break;
    case 6: e = serve::parse_anthropic(body, true, 512, defaults, &r); break;
    case 7: e = serve::parse_responses(body, 512, defaults, *store, &rr); break;
    default: e = serve::parse_infill(body, 512, defaults, &ir); break;
  }
  if (e && (e->status < 400 || e->status > 499 || e->message.empty())) std::abort();
  return 0;
}
