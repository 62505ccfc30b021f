// engine.h: one model (one node or the root of a cluster) shared by every request of
// `shardlm serve` and by `shardlm chat`, on runtime::Scheduler: requests run at once, one
// KV slot each (continuous batching), and wait in a FIFO queue while every slot is busy.
// A request's text is what it would get alone: rows of other sequences never change a
// row's result, and a new prompt evaluates only the suffix after the longest prefix a free
// slot already holds (tests/unit/serve_test.cc). generate() blocks its caller (an HTTP
// handler thread) while the scheduler's thread steps; text reaches the caller's sink on
// its own thread, and a sink or waiting callback that says the client left cancels the
// request at the next step.
// Deliberately no text formats here: prompts arrive as tokens (prompt.h), text leaves
// through a callback, HTTP lives in server.h.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cluster.h"
#include "grammar/trigger.h"
#include "grammar/vocab_mask.h"
#include "runtime/scheduler.h"
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
  int max_guesses = -1;         // speculation: guesses per step at most; -1: the server's
  std::vector<std::string> stop;
  std::shared_ptr<const grammar::Grammar> grammar;  // constrained decoding, or null
  // The grammar applies from the first of these in the text on (trigger.h); none: from the start.
  std::vector<grammar::Trigger> triggers;
};

struct GenerationResult {
  util::Status status;        // a failed step (a worker lost): the engine is then unusable
  std::string finish_reason;  // "stop", "length", "cancelled" or "error"
  std::string stop_string;    // the stop string that ended it ("" at an end-of-generation token)
  Usage usage;
  double prompt_s = 0, gen_s = 0;
};

// Receives the log-probabilities of the tokens behind the next piece of text, just before
// that piece reaches the TextSink (only when params.top_logprobs >= 0).
using LogprobSink = std::function<void(const std::vector<TokenLogprobs>&)>;
// Receives the number of generated tokens behind the next piece of text (end-of-text not
// counted), just before that piece reaches the TextSink; a piece may have no text (tokens
// a stop string swallowed, or held at the end). Their sum is usage.completion_tokens.
using TokenCountSink = std::function<void(int)>;

// Receives each piece of text that may be shown, and "" about every 100 ms while nothing
// new is there (a chance to notice a client that left); false: the client is gone.
using TextSink = std::function<bool(const std::string&)>;
// Asked about every 100 ms while a request waits for a slot; false: give up the place.
using StillWaiting = std::function<bool()>;

struct EngineMetrics {
  uint64_t generations = 0, cancelled = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double prompt_s = 0, gen_s = 0;
  double last_tokens_per_s = 0;  // generation speed of the last finished request
  runtime::SchedulerStats sched;  // slots, queue, the latest step, each node's counters
  runtime::ClusterHealth cluster; // nodes now and as started, recoveries
  grammar::MaskStats grammar;     // constrained requests' token masks, over all of them
};

// The cluster as /cluster shows it (cluster_view.h): every node the cluster has had, in
// the order it had them (the root first), with its share and memory from the current plan
// and its state: "ok", "lost" (gone since a re-forming), "rejoined" (back after a loss).
struct NodeInfo {
  std::string name;    // "root", "worker 127.0.0.1:9001" (NodeStats::name)
  std::string device;  // its device description (NodeStats::device)
  double link_alpha_us = -1;  // the root's link to it, α in µs (NodeStats::link_alpha_us); -1: not probed
  double share = 0;    // of the model's rows (plan::NodeSlice::share); 0 when lost
  uint64_t memory_bytes = 0;  // weights held (plan::resident_bytes)
  std::string state = "ok";
};
struct ClusterInfo {
  std::string summary;  // Cluster::describe()
  std::vector<NodeInfo> nodes;
};

class Engine {
 public:
  // chunk: prompt tokens per step, spec: speculative decoding (see runtime::Scheduler).
  Engine(runtime::Cluster& cluster, const tokenizer::Tokenizer& tok, int chunk, runtime::Speculation spec = {});

  GenerationResult generate(const GenerationRequest& req, const TextSink& sink, const StillWaiting& waiting = {},
                            const LogprobSink& logprobs = {}, const TokenCountSink& tokens = {});

  EngineMetrics metrics() const;
  // The nodes, shares and states as of the latest re-forming (read on the scheduler's
  // thread, where the cluster re-forms, so never while it changes).
  ClusterInfo cluster_info() const;
  int ctx() const { return cluster_.ctx(); }  // of one slot
  // Why a prompt of n tokens can never run (more than the whole KV pool), or "".
  std::string pool_unfit(int n) const { return sched_.pool_unfit(n); }
  // The error that broke the engine (a lost worker), or ok.
  util::Status health() const { return sched_.health(); }

 private:
  runtime::Cluster& cluster_;
  const tokenizer::Tokenizer& tok_;
  runtime::Scheduler sched_;

  mutable std::mutex mu_;
  EngineMetrics m_;
  std::shared_ptr<const grammar::VocabTrie> trie_;  // built for the first constrained request
  // Counts a finished generation in m_ (grammar: its constraint's masks, if it had one).
  void record(const GenerationResult& r, const grammar::MaskStats* grammar);

  // cluster_info()'s snapshot, refreshed by refresh_info() (at start, then on the
  // scheduler's thread after a recovery or a loss).
  void refresh_info();
  void maybe_refresh_info();
  mutable std::mutex info_mu_;
  ClusterInfo info_;
  std::string root_device_;
  std::atomic<uint64_t> seen_events_{0};  // recoveries + losses when info_ was taken
};

}  // namespace serve
