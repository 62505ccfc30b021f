// server.h: the HTTP side of `shardlm serve` (cpp-httplib): POST /v1/chat/completions and
// /v1/completions (JSON or server-sent events), GET /v1/models, /health, /metrics
// (Prometheus text) and the chat page at "/". Every error is an OpenAI-style error object
// with a 4xx/5xx status: malformed requests 400, missing or wrong API key 401, unknown
// routes 404, wrong methods 405, a full queue 429, a broken cluster 503. A streaming client
// that disconnects is noticed at the next write and its generation stops.
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
  int max_queue = 64;                // requests waiting beyond this get 429
  std::string model_name = "shardlm";
  sampler::Params defaults;          // for fields a request omits
};

// Binds, calls on_listening("http://host:port"), and serves until the process ends.
util::Status run_server(Engine& engine, const PromptBuilder& prompts, const ServerOptions& o,
                        const std::function<void(const std::string&)>& on_listening);

}  // namespace serve
