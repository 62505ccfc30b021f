// metrics.cc: /metrics in Prometheus' text format (see metrics.h): one table row per
// engine metric (name, type, help, value) and per node counter.
#include "serve/metrics.h"

#include <cstdio>
#include <vector>

namespace serve {

namespace {

// Text in Prometheus' format: a metric's HELP and TYPE lines, then its values.
class Exposition {
 public:
  void metric(const char* name, const char* type, const char* help) {
    s_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void value(const char* name, const std::string& labels, double v) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s%s %.17g\n", name, labels.c_str(), v);
    s_ += buf;
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

// A metric with one value and no labels.
struct Scalar {
  const char* name;
  const char* type;
  const char* help;
  double value;
};

// The engine's metrics, in the order /metrics lists them.
std::vector<Scalar> scalars(const EngineMetrics& m) {
  return {
      {"shardlm_generations_total", "counter",
       "Generations run (finished, stopped or cancelled).", double(m.generations)},
      {"shardlm_cancelled_total", "counter",
       "Requests whose client went away while queued or streaming.", double(m.cancelled)},
      {"shardlm_prompt_tokens_total", "counter", "Prompt tokens of all requests.", double(m.prompt_tokens)},
      {"shardlm_prompt_tokens_cached_total", "counter",
       "Prompt tokens reused from the KV cache.", double(m.cached_tokens)},
      {"shardlm_completion_tokens_total", "counter", "Generated tokens.", double(m.completion_tokens)},
      {"shardlm_prompt_seconds_total", "counter", "Time spent evaluating prompts.", double(m.prompt_s)},
      {"shardlm_generation_seconds_total", "counter", "Time spent generating.", double(m.gen_s)},
      {"shardlm_generation_tokens_per_second", "gauge",
       "Generation speed of the last finished request.", double(m.last_tokens_per_s)},
      {"shardlm_queue_depth", "gauge", "Requests waiting for a KV slot.", double(m.sched.queued)},
      {"shardlm_requests_running", "gauge",
       "Requests holding a KV slot (prompt or generation).", double(m.sched.slots_in_use)},
      {"shardlm_slots_in_use", "gauge", "KV slots holding a running request.", double(m.sched.slots_in_use)},
      {"shardlm_slots_total", "gauge", "KV slots (--parallel).", double(m.sched.slots)},
      {"shardlm_kv_blocks_total", "gauge",
       "Blocks of the KV pool (64 positions each, --kv-memory).", double(m.sched.kv_blocks)},
      {"shardlm_kv_blocks_in_use", "gauge",
       "KV blocks held by slots, running or idle.", double(m.sched.kv_blocks_used)},
      {"shardlm_kv_blocks_cached", "gauge",
       "KV blocks keeping rows no running request holds: idle slots' and shared prefixes' (freed when needed).", double(m.sched.kv_blocks_idle)},
      {"shardlm_kv_blocks_shared", "gauge",
       "KV blocks held by more than one sequence (a shared prefix).", double(m.sched.kv_blocks_shared)},
      {"shardlm_kv_prefix_hits_total", "counter",
       "Requests that took a shared prefix's cached KV blocks.", double(m.sched.kv_prefix_hits)},
      {"shardlm_kv_prefix_tokens_total", "counter",
       "Prompt positions taken from shared prefixes (not evaluated).", double(m.sched.kv_prefix_tokens)},
      {"shardlm_kv_pool_full_total", "counter",
       "Requests ended because the KV pool was full (one alone that cannot fit).", double(m.sched.kv_full_ends)},
      {"shardlm_kv_preemptions_total", "counter",
       "Requests that gave their KV blocks back when the pool was full, to be computed again.", double(m.sched.kv_preemptions)},
      {"shardlm_kv_host_blocks", "gauge",
       "KV blocks evicted from the pool kept in host memory (--cache-ram).", double(m.sched.kv_host_blocks)},
      {"shardlm_kv_host_bytes", "gauge",
       "Bytes of those blocks (the whole model's KV heads; each node of a cluster keeps its share).",
       double(m.sched.kv_host_bytes)},
      {"shardlm_kv_host_saves_total", "counter",
       "KV blocks copied to host memory as the pool took them back.", double(m.sched.kv_host_saves)},
      {"shardlm_kv_host_restores_total", "counter",
       "KV blocks copied back from host memory for a prompt whose prefix they continue.", double(m.sched.kv_host_restores)},
      {"shardlm_cluster_nodes", "gauge", "Nodes computing now (the root included).", double(m.cluster.nodes)},
      {"shardlm_cluster_nodes_planned", "gauge", "Nodes the cluster started with.", double(m.cluster.nodes_planned)},
      {"shardlm_recoveries_total", "counter",
       "Times the cluster was re-formed (a worker lost or back).", double(m.cluster.recoveries)},
      {"shardlm_workers_lost_total", "counter",
       "Workers lost (died, timed out or answered nonsense).", double(m.cluster.lost)},
      {"shardlm_batch_size", "gauge",
       "Rows (tokens) of the latest step of the model.", double(m.sched.last_batch_rows)},
      {"shardlm_batch_sequences", "gauge",
       "Sequences in the latest step of the model.", double(m.sched.last_batch_seqs)},
      {"shardlm_decode_steps_total", "counter",
       "Decode rows of requests in steps (one per request and step).", double(m.sched.decode_rounds)},
      {"shardlm_decode_tokens_total", "counter",
       "Tokens drawn by those rows (more than one with speculation).", double(m.sched.decode_tokens)},
      {"shardlm_speculative_guesses_total", "counter",
       "Speculative guesses verified (--lookup, --draft-model).", double(m.sched.guessed)},
      {"shardlm_speculative_kept_total", "counter",
       "Speculative guesses kept (acceptance = kept / guesses).", double(m.sched.kept)},
      {"shardlm_grammar_masks_total", "counter",
       "Token masks of constrained requests (response_format, grammar).", double(m.grammar.masks)},
      {"shardlm_grammar_masks_cached_total", "counter",
       "Of them, found in the per-request cache of grammar states.", double(m.grammar.cached)},
      {"shardlm_grammar_mask_seconds_total", "counter",
       "Time spent computing the other masks (on the root).", double(m.grammar.seconds)},
  };
}

// A counter of each node, labelled with the node's index and name.
struct PerNode {
  const char* name;
  const char* help;
  double (*value)(const runtime::NodeCounters&);
};
const PerNode kPerNode[] = {
    {"shardlm_node_compute_seconds_total", "Compute time of each node.",
     [](const runtime::NodeCounters& c) { return c.compute_s; }},
    {"shardlm_node_sync_seconds_total", "Time each node spent in all-reduces (per-node sync time).",
     [](const runtime::NodeCounters& c) { return c.sync_s; }},
    {"shardlm_node_bytes_sent_total", "Bytes each node sent.",
     [](const runtime::NodeCounters& c) { return double(c.bytes_sent); }},
    {"shardlm_node_bytes_received_total", "Bytes each node received.",
     [](const runtime::NodeCounters& c) { return double(c.bytes_received); }},
    {"shardlm_node_steps_total", "Steps of the model each node took part in.",
     [](const runtime::NodeCounters& c) { return double(c.steps); }},
    {"shardlm_node_rows_total", "Token rows (prompt and decode) of the steps each node took part in.",
     [](const runtime::NodeCounters& c) { return double(c.rows); }},
};

}  // namespace

std::string metrics_text(const EngineMetrics& m, const RequestCounter& rc) {
  Exposition e;
  e.metric("shardlm_requests_total", "counter", "HTTP requests answered, by route and status code.");
  for (const auto& [k, n] : rc.snapshot())
    e.value("shardlm_requests_total", "{path=\"" + k.first + "\",code=\"" + std::to_string(k.second) + "\"}",
            double(n));
  for (const Scalar& s : scalars(m)) {
    e.metric(s.name, s.type, s.help);
    e.value(s.name, "", s.value);
  }
  for (const PerNode& p : kPerNode) {
    e.metric(p.name, "counter", p.help);
    for (size_t i = 0; i < m.sched.nodes.size(); ++i)
      e.value(p.name, "{node=\"" + std::to_string(i) + "\",name=\"" + m.sched.nodes[i].name + "\"}",
              p.value(m.sched.nodes[i].counters));
  }
  return e.take();
}

}  // namespace serve
