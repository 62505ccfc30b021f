// ollama.h: Ollama's API on `serve` (what Open WebUI and the `ollama` client speak):
// POST /api/chat and /api/generate (NDJSON lines while streaming, Ollama's default, or one
// object), GET /api/tags, /api/ps, /api/version and POST /api/show. A body is translated
// into an OpenAI chat or completions body (options.num_predict -> max_tokens, options'
// sampling fields, format "json" or a JSON schema -> response_format, tools and an
// assistant's tool_calls with object arguments) and validated by api.h's parse_request,
// so every check is the one place's; errors name Ollama's fields and come back as
// {"error": "..."} with the status.
#pragma once
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "serve/api.h"

namespace httplib {
class Server;
}

namespace serve {

class Generator;

// /api/chat (chat) or /api/generate (!chat; has_chat: the model has a chat template, else
// a prompt is sent as is, as with raw: true).
std::optional<ApiError> parse_ollama(std::string_view body, bool chat, bool has_chat, int ctx,
                                     const sampler::Params& defaults, Request* out);
nlohmann::json ollama_error_json(const ApiError& e);

void add_ollama_routes(httplib::Server& svr, const Generator& gen);

}  // namespace serve
