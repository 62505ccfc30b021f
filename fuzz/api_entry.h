// api_entry.h: the HTTP APIs' body parsers by number, for fuzz_api (its first byte) and
// serve_api_test's sweep of tests/data/api_seeds (whose first byte is the same number):
// 0 OpenAI chat, 1 completions, 2 Ollama /api/chat, 3-4 /api/generate with and without a
// chat template, 5-6 Anthropic's /v1/messages and count_tokens, 7 OpenAI's /v1/responses
// with a store holding one response ("resp_1"), 8 llama-server's /infill, 9 /tokenize,
// 10 /detokenize (a vocabulary of 1000).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "serve/anthropic.h"
#include "serve/api.h"
#include "serve/infill.h"
#include "serve/ollama.h"
#include "serve/responses.h"

namespace serve {

inline constexpr int kApiEntries = 11;

inline std::optional<ApiError> parse_api_entry(int entry, std::string_view body) {
  static ResponseStore* store = [] {  // a previous_response_id "resp_1" to find
    auto* s = new ResponseStore(2);
    nlohmann::ordered_json turn = {{"role", "user"}, {"content", "hi"}};
    s->put("resp_1", {nlohmann::ordered_json::array({turn}), nlohmann::json::object()});
    return s;
  }();
  const sampler::Params defaults;
  Request r;
  switch (entry % kApiEntries) {
    case 0: return parse_request(body, Endpoint::kChat, 512, defaults, &r);
    case 1: return parse_request(body, Endpoint::kCompletion, 512, defaults, &r);
    case 2: return parse_ollama(body, true, true, 512, defaults, &r);
    case 3: return parse_ollama(body, false, true, 512, defaults, &r);
    case 4: return parse_ollama(body, false, false, 512, defaults, &r);
    case 5: return parse_anthropic(body, false, 512, defaults, &r);
    case 6: return parse_anthropic(body, true, 512, defaults, &r);
    case 7: {
      ResponsesRequest rr;
      return parse_responses(body, 512, defaults, *store, &rr);
    }
    case 8: {
      InfillRequest ir;
      return parse_infill(body, 512, defaults, &ir);
    }
    case 9: {
      TokenizeRequest t;
      return parse_tokenize(body, &t);
    }
    default: {
      std::vector<int32_t> ids;
      return parse_detokenize(body, 1000, &ids);
    }
  }
}

}  // namespace serve
