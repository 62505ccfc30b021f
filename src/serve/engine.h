// engine.h: one model (one node or the root of a cluster) shared by every request of
// `shardlm serve` and by `shardlm chat`. Requests wait in a fair FIFO queue and generate
// one at a time; a waiting or streaming client that goes away gives up its place at once.
// The KV cache is positional, so the engine keeps the tokens it last evaluated and, for a
// new prompt, evaluates only the suffix after the longest common prefix (at least one
// token, for the logits). Our matmuls and attention compute each row the same way
// whatever the batch, so this reuse does not change results (tests/unit/serve_test.cc).
// Deliberately no text formats here: prompts arrive as tokens (prompt.h), text leaves
// through a callback, HTTP lives in server.h.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cluster.h"
#include "sampler/sampler.h"
#include "serve/api.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace serve {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty; prompt.size() + max_tokens <= ctx
  sampler::Params params;
  bool seed_given = false;      // else a random seed (temperature > 0)
  int max_tokens = 1;
  std::vector<std::string> stop;
};

struct GenerationResult {
  util::Status status;        // a failed step (a worker lost): the engine is then unusable
  std::string finish_reason;  // "stop", "length", "cancelled" or "error"
  Usage usage;
  double prompt_s = 0, gen_s = 0;
};

// Receives each piece of text that may be shown (possibly ""); false: the client is gone.
using TextSink = std::function<bool(const std::string&)>;
// Asked about every 100 ms while a request waits in the queue; false: give up the place.
using StillWaiting = std::function<bool()>;

struct EngineMetrics {
  uint64_t generations = 0, cancelled = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double prompt_s = 0, gen_s = 0;
  double last_tokens_per_s = 0;  // generation speed of the last finished request
  int queued = 0;                // waiting, not counting the one generating
  bool busy = false;
  std::vector<runtime::NodeStats> nodes;  // as of the last finished request
};

class Engine {
 public:
  Engine(runtime::Cluster& cluster, const tokenizer::Tokenizer& tok, int n_vocab, int ctx);

  GenerationResult generate(const GenerationRequest& req, const TextSink& sink, const StillWaiting& waiting = {});

  EngineMetrics metrics() const;
  int ctx() const { return ctx_; }
  // The error that broke the engine (a lost worker), or ok.
  util::Status health() const;

 private:
  GenerationResult run(const GenerationRequest& req, const TextSink& sink);

  runtime::Cluster& cluster_;
  const tokenizer::Tokenizer& tok_;
  const int n_vocab_, ctx_;
  std::vector<int32_t> cached_;  // tokens whose KV rows the cache holds, from position 0

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> queue_;
  uint64_t next_ticket_ = 0;
  bool busy_ = false;
  util::Status broken_;
  EngineMetrics m_;
};

}  // namespace serve
