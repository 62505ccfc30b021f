// server.h: the HTTP side of `shardlm serve` (cpp-httplib): POST /v1/chat/completions and
// /v1/completions (JSON or server-sent events), GET /v1/models, /health, /metrics
// (Prometheus text) and the chat page at "/". Every error is an OpenAI-style error object
// with a 4xx/5xx status: malformed requests 400, missing or wrong API key 401, unknown
// routes 404, wrong methods 405, a full queue 429 (with Retry-After), a broken cluster
// 503. A client that disconnects (streaming or not) is noticed within about 100 ms and its
// generation stops.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "sampler/sampler.h"
#include "serve/engine.h"
#include "serve/prompt.h"
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
  sampler::Params defaults;          // for fields a request omits
};

// Binds, calls on_listening("http://host:port"), and serves until the process ends.
util::Status run_server(Engine& engine, const PromptBuilder& prompts, const ServerOptions& o,
                        const std::function<void(const std::string&)>& on_listening);

}  // namespace serve
