// anthropic.h: Anthropic's Messages API on `serve` (what the `anthropic` SDK and Claude
// Code speak): POST /v1/messages (one message, or server-sent events message_start,
// content_block_start / _delta / _stop, message_delta, message_stop) and
// /v1/messages/count_tokens. A body is translated into an OpenAI chat body (system, text
// blocks, an assistant's tool_use blocks -> tool_calls, a user's tool_result blocks -> role
// "tool" messages, stop_sequences -> stop, tools' input_schema -> parameters, tool_choice
// auto / any / tool / none) and validated by api.h's parse_request, so each check is the
// one place's; errors come back as {"type": "error", "error": {"type", "message"}}.
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

// count: /v1/messages/count_tokens (max_tokens not needed).
std::optional<ApiError> parse_anthropic(std::string_view body, bool count, int ctx, const sampler::Params& defaults,
                                        Request* out);
nlohmann::json anthropic_error_json(const ApiError& e);

void add_anthropic_routes(httplib::Server& svr, const Generator& gen);

}  // namespace serve
