// server.h: the HTTP side of `shardlm serve` (cpp-httplib, HTTPS with a certificate):
// POST /v1/chat/completions and /v1/completions (JSON or server-sent events), GET
// /v1/models, /health, /metrics (Prometheus text), the chat page at "/" with its libraries
// at /assets/ (serve/assets.h), and llama-server's
// POST /tokenize, /detokenize and GET /props; Ollama's /api/ routes (ollama.h) and Anthropic's
// /v1/messages (anthropic.h), OpenAI's /v1/responses (responses.h), llama-server's /infill
// (infill.h). Every error is an OpenAI-style error object (on /api/ and
// /v1/messages, that API's own shape) with a 4xx/5xx status: malformed requests 400, missing or wrong API key 401 (bearer or x-api-key; on /v1/, /api/,
// /tokenize, /detokenize and /props), unknown routes 404, wrong methods 405, a POST without
// a body length 411 (answered at once, not after the read timeout), a body over --max-body
// 413, a full queue 429 (with Retry-After), a broken cluster 503. A model without a chat
// template serves completions; chat requests get a 400 naming --chat-template. With
// cors_origins, browsers on those origins may call every route (preflight included). A
// client that disconnects (streaming or not) is noticed within about 100 ms and its
// generation stops.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "sampler/sampler.h"
#include "serve/engine.h"
#include "serve/prompt.h"
#include "serve/reasoning.h"
#include "util/status.h"

namespace serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port
  std::string api_key;               // "": no authentication
  size_t max_body = 1 << 20;         // bytes
  int max_queue = 64;                // requests waiting for a slot; beyond this 429 + Retry-After
  int default_max_tokens = 1024;     // for requests without max_tokens (and at most the context)
  std::string model_name = "shardlm";
  std::string model_path, model_arch;  // the GGUF file and its general.architecture (Ollama's /api/tags)
  sampler::Params defaults;          // for fields a request omits
  int slots = 1;                     // --parallel, reported by /props
  std::string tls_cert, tls_key;     // both or neither: HTTPS (serve/tls.h)
  std::vector<std::string> cors_origins;  // "*": any origin
  std::string access_log;            // "": none, "-": stderr, else a file appended to
  ReasoningFormat reasoning_format = ReasoningFormat::kAuto;  // --reasoning-format (reasoning.h)
  size_t responses_store = 256;      // /v1/responses kept for previous_response_id (LRU; 0: none)
};

// Binds, calls on_listening("http(s)://host:port"), and serves until the process ends.
util::Status run_server(Engine& engine, const PromptBuilder& prompts, const ServerOptions& o,
                        const std::function<void(const std::string&)>& on_listening);

}  // namespace serve
