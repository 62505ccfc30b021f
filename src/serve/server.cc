// server.cc: routes, authentication, SSE streaming and metrics of `shardlm serve`.
#include "serve/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <map>
#include <memory>
#include <mutex>
#include <random>

#include "serve/assets.h"
#include "serve/cluster_view.h"
#include "serve/generation.h"
#include "serve/infill.h"
#include "serve/anthropic.h"
#include "serve/ollama.h"
#include "serve/page.h"
#include "serve/responses.h"
#include "serve/tls.h"
#include "util/log.h"

namespace serve {

using nlohmann::json;

namespace {

void send_error(httplib::Response& res, const ApiError& e) { serve::send_error(res, e, error_json(e)); }

// An error answered before a route's own handler (401, 404, 405, 411, 413): in the error
// shape of the API the path belongs to.
void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  const bool ollama = req.path.rfind("/api/", 0) == 0, anthropic = req.path.rfind("/v1/messages", 0) == 0;
  if (req.path == "/infill") return serve::send_error(res, e, infill_error_json(e));
  if (!ollama && !anthropic) return send_error(res, e);
  res.status = e.status;
  res.set_content(dump(ollama ? ollama_error_json(e) : anthropic_error_json(e)), "application/json");
}

bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Requests answered, by route and status code, for /metrics.
class RequestCounter {
 public:
  void add(const std::string& path, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    counts_[{path, status}]++;
  }
  std::map<std::pair<std::string, int>, uint64_t> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

struct Route {
  const char* path;
  bool post;   // else GET
  bool keyed;  // needs the API key (as does every /v1/ path)
};
const Route kRoutes[] = {{"/", false, false},          {"/health", false, false},
                         {"/metrics", false, false},   {"/v1/models", false, true},
                         {"/v1/chat/completions", true, true}, {"/v1/completions", true, true},
                         {"/tokenize", true, true},    {"/detokenize", true, true},
                         {"/props", false, true},      {"/api/chat", true, true},
                         {"/api/generate", true, true}, {"/api/show", true, true},
                         {"/api/tags", false, true},   {"/api/ps", false, true},
                         {"/api/version", false, true}, {"/v1/messages", true, true},
                         {"/v1/messages/count_tokens", true, true}, {"/v1/responses", true, true},
                         {"/infill", true, true},      {"/cluster", false, false}};

void method_not_allowed(const httplib::Request& req, httplib::Response& res, bool post) {
  res.set_header("Allow", post ? "POST" : "GET");
  send_error(req, res, api_error(405, req.method + " is not allowed on " + req.path + "; use " + (post ? "POST" : "GET"),
                            "invalid_request_error", "method_not_allowed"));
}

void not_found(const httplib::Request& req, httplib::Response& res) {
  send_error(req, res, api_error(404, "no route " + req.method + " " + req.path +
                                     "; see /v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize, "
                                     "/props, /health, /metrics, /api/chat, /api/generate, /api/tags, /api/show, "
                                     "/api/ps, /api/version, /v1/messages, /v1/messages/count_tokens, /v1/responses, /infill, /cluster",
                            "invalid_request_error", "unknown_url"));
}

const Route* find_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}

bool needs_key(const std::string& path) {
  if (path.rfind("/v1/", 0) == 0) return true;
  const Route* r = find_route(path);
  return r && r->keyed;
}

// Methods whose requests cpp-httplib reads a body for: without Content-Length or chunked
// encoding it would read until the client closes (or the read timeout).
bool expects_body(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// One line per answered request: time, client, method, path, status, body bytes (or
// "stream"), seconds. The start time is the handler thread's (a thread serves one request
// at a time; 0 when the request failed before routing, e.g. a malformed request line).
class AccessLog {
 public:
  explicit AccessLog(const std::string& where) {
    if (where == "-") f_ = stderr;
    else if (!where.empty()) f_ = std::fopen(where.c_str(), "a");
  }
  ~AccessLog() {
    if (f_ && f_ != stderr) std::fclose(f_);
  }
  bool failed(const std::string& where) const { return !where.empty() && !f_; }
  static void started() { start_ = std::chrono::steady_clock::now(); }
  void write(const httplib::Request& req, const httplib::Response& res) {
    const auto t0 = start_;
    start_ = {};
    if (!f_) return;
    char when[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char secs[32] = "-";
    if (t0 != std::chrono::steady_clock::time_point{})
      std::snprintf(secs, sizeof secs, "%.3fs",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const bool stream = res.get_header_value("Content-Type") == "text/event-stream";
    const std::string bytes = stream ? "stream" : std::to_string(res.body.size());
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(f_, "%s %s:%d \"%s %s\" %d %s %s\n", when, req.remote_addr.c_str(), req.remote_port,
                 req.method.c_str(), req.path.c_str(), res.status, bytes.c_str(), secs);
    std::fflush(f_);
  }

 private:
  FILE* f_ = nullptr;
  std::mutex mu_;
  static thread_local std::chrono::steady_clock::time_point start_;
};
thread_local std::chrono::steady_clock::time_point AccessLog::start_;

// CORS for the configured origins ("*": any): the allow-origin header on every answer to
// such an origin, and the preflight's methods and headers.
class Cors {
 public:
  explicit Cors(const std::vector<std::string>& origins) : origins_(origins) {}
  bool on() const { return !origins_.empty(); }
  // Sets Access-Control-Allow-Origin when req's Origin is allowed.
  void allow(const httplib::Request& req, httplib::Response& res) const {
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty() || !on()) return;
    for (const std::string& o : origins_) {
      if (o == "*") return res.set_header("Access-Control-Allow-Origin", "*");
      if (o == origin) {
        res.set_header("Access-Control-Allow-Origin", origin);
        return res.set_header("Vary", "Origin");
      }
    }
  }
  void preflight(const httplib::Request& req, httplib::Response& res) const {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
    res.set_header("Access-Control-Max-Age", "600");
  }

 private:
  std::vector<std::string> origins_;
};

std::string metrics_text(const EngineMetrics& m, const RequestCounter& rc) {
  std::string s;
  char buf[512];
  auto metric = [&](const char* name, const char* type, const char* help) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto value = [&](const char* name, const std::string& labels, double v) {
    std::snprintf(buf, sizeof buf, "%s%s %.17g\n", name, labels.c_str(), v);
    s += buf;
  };
  metric("shardlm_requests_total", "counter", "HTTP requests answered, by route and status code.");
  for (const auto& [k, n] : rc.snapshot())
    value("shardlm_requests_total", "{path=\"" + k.first + "\",code=\"" + std::to_string(k.second) + "\"}", double(n));
  metric("shardlm_generations_total", "counter", "Generations run (finished, stopped or cancelled).");
  value("shardlm_generations_total", "", double(m.generations));
  metric("shardlm_cancelled_total", "counter", "Requests whose client went away while queued or streaming.");
  value("shardlm_cancelled_total", "", double(m.cancelled));
  metric("shardlm_prompt_tokens_total", "counter", "Prompt tokens of all requests.");
  value("shardlm_prompt_tokens_total", "", double(m.prompt_tokens));
  metric("shardlm_prompt_tokens_cached_total", "counter", "Prompt tokens reused from the KV cache.");
  value("shardlm_prompt_tokens_cached_total", "", double(m.cached_tokens));
  metric("shardlm_completion_tokens_total", "counter", "Generated tokens.");
  value("shardlm_completion_tokens_total", "", double(m.completion_tokens));
  metric("shardlm_prompt_seconds_total", "counter", "Time spent evaluating prompts.");
  value("shardlm_prompt_seconds_total", "", m.prompt_s);
  metric("shardlm_generation_seconds_total", "counter", "Time spent generating.");
  value("shardlm_generation_seconds_total", "", m.gen_s);
  metric("shardlm_generation_tokens_per_second", "gauge", "Generation speed of the last finished request.");
  value("shardlm_generation_tokens_per_second", "", m.last_tokens_per_s);
  metric("shardlm_queue_depth", "gauge", "Requests waiting for a KV slot.");
  value("shardlm_queue_depth", "", m.sched.queued);
  metric("shardlm_requests_running", "gauge", "Requests holding a KV slot (prompt or generation).");
  value("shardlm_requests_running", "", m.sched.slots_in_use);
  metric("shardlm_slots_in_use", "gauge", "KV slots holding a running request.");
  value("shardlm_slots_in_use", "", m.sched.slots_in_use);
  metric("shardlm_slots_total", "gauge", "KV slots (--parallel).");
  value("shardlm_slots_total", "", m.sched.slots);
  metric("shardlm_kv_blocks_total", "gauge", "Blocks of the KV pool (64 positions each, --kv-memory).");
  value("shardlm_kv_blocks_total", "", m.sched.kv_blocks);
  metric("shardlm_kv_blocks_in_use", "gauge", "KV blocks held by slots, running or idle.");
  value("shardlm_kv_blocks_in_use", "", m.sched.kv_blocks_used);
  metric("shardlm_kv_blocks_cached", "gauge",
         "KV blocks keeping rows no running request holds: idle slots' and shared prefixes' (freed when needed).");
  value("shardlm_kv_blocks_cached", "", m.sched.kv_blocks_idle);
  metric("shardlm_kv_blocks_shared", "gauge", "KV blocks held by more than one sequence (a shared prefix).");
  value("shardlm_kv_blocks_shared", "", m.sched.kv_blocks_shared);
  metric("shardlm_kv_prefix_hits_total", "counter", "Requests that took a shared prefix's cached KV blocks.");
  value("shardlm_kv_prefix_hits_total", "", double(m.sched.kv_prefix_hits));
  metric("shardlm_kv_prefix_tokens_total", "counter", "Prompt positions taken from shared prefixes (not evaluated).");
  value("shardlm_kv_prefix_tokens_total", "", double(m.sched.kv_prefix_tokens));
  metric("shardlm_kv_pool_full_total", "counter", "Requests ended because the KV pool was full (one alone that cannot fit).");
  value("shardlm_kv_pool_full_total", "", double(m.sched.kv_full_ends));
  metric("shardlm_kv_preemptions_total", "counter",
         "Requests that gave their KV blocks back when the pool was full, to be computed again.");
  value("shardlm_kv_preemptions_total", "", double(m.sched.kv_preemptions));
  metric("shardlm_cluster_nodes", "gauge", "Nodes computing now (the root included).");
  value("shardlm_cluster_nodes", "", m.cluster.nodes);
  metric("shardlm_cluster_nodes_planned", "gauge", "Nodes the cluster started with.");
  value("shardlm_cluster_nodes_planned", "", m.cluster.nodes_planned);
  metric("shardlm_recoveries_total", "counter", "Times the cluster was re-formed (a worker lost or back).");
  value("shardlm_recoveries_total", "", double(m.cluster.recoveries));
  metric("shardlm_workers_lost_total", "counter", "Workers lost (died, timed out or answered nonsense).");
  value("shardlm_workers_lost_total", "", double(m.cluster.lost));
  metric("shardlm_batch_size", "gauge", "Rows (tokens) of the latest step of the model.");
  value("shardlm_batch_size", "", m.sched.last_batch_rows);
  metric("shardlm_batch_sequences", "gauge", "Sequences in the latest step of the model.");
  value("shardlm_batch_sequences", "", m.sched.last_batch_seqs);
  metric("shardlm_decode_steps_total", "counter", "Decode rows of requests in steps (one per request and step).");
  value("shardlm_decode_steps_total", "", double(m.sched.decode_rounds));
  metric("shardlm_decode_tokens_total", "counter", "Tokens drawn by those rows (more than one with speculation).");
  value("shardlm_decode_tokens_total", "", double(m.sched.decode_tokens));
  metric("shardlm_speculative_guesses_total", "counter", "Speculative guesses verified (--lookup, --draft-model).");
  value("shardlm_speculative_guesses_total", "", double(m.sched.guessed));
  metric("shardlm_speculative_kept_total", "counter", "Speculative guesses kept (acceptance = kept / guesses).");
  value("shardlm_speculative_kept_total", "", double(m.sched.kept));
  metric("shardlm_grammar_masks_total", "counter", "Token masks of constrained requests (response_format, grammar).");
  value("shardlm_grammar_masks_total", "", double(m.grammar.masks));
  metric("shardlm_grammar_masks_cached_total", "counter", "Of them, found in the per-request cache of grammar states.");
  value("shardlm_grammar_masks_cached_total", "", double(m.grammar.cached));
  metric("shardlm_grammar_mask_seconds_total", "counter", "Time spent computing the other masks (on the root).");
  value("shardlm_grammar_mask_seconds_total", "", m.grammar.seconds);
  metric("shardlm_node_compute_seconds_total", "counter", "Compute time of each node.");
  for (size_t i = 0; i < m.sched.nodes.size(); ++i)
    value("shardlm_node_compute_seconds_total",
          "{node=\"" + std::to_string(i) + "\",name=\"" + m.sched.nodes[i].name + "\"}", m.sched.nodes[i].counters.compute_s);
  metric("shardlm_node_sync_seconds_total", "counter", "Time each node spent in all-reduces (per-node sync time).");
  for (size_t i = 0; i < m.sched.nodes.size(); ++i)
    value("shardlm_node_sync_seconds_total", "{node=\"" + std::to_string(i) + "\",name=\"" + m.sched.nodes[i].name + "\"}",
          m.sched.nodes[i].counters.sync_s);
  metric("shardlm_node_bytes_sent_total", "counter", "Bytes each node sent.");
  for (size_t i = 0; i < m.sched.nodes.size(); ++i)
    value("shardlm_node_bytes_sent_total", "{node=\"" + std::to_string(i) + "\",name=\"" + m.sched.nodes[i].name + "\"}",
          double(m.sched.nodes[i].counters.bytes_sent));
  metric("shardlm_node_bytes_received_total", "counter", "Bytes each node received.");
  for (size_t i = 0; i < m.sched.nodes.size(); ++i)
    value("shardlm_node_bytes_received_total", "{node=\"" + std::to_string(i) + "\",name=\"" + m.sched.nodes[i].name + "\"}",
          double(m.sched.nodes[i].counters.bytes_received));
  metric("shardlm_node_steps_total", "counter", "Steps of the model each node took part in.");
  for (size_t i = 0; i < m.sched.nodes.size(); ++i)
    value("shardlm_node_steps_total", "{node=\"" + std::to_string(i) + "\",name=\"" + m.sched.nodes[i].name + "\"}",
          double(m.sched.nodes[i].counters.steps));
  metric("shardlm_node_rows_total", "counter", "Token rows (prompt and decode) of the steps each node took part in.");
  for (size_t i = 0; i < m.sched.nodes.size(); ++i)
    value("shardlm_node_rows_total", "{node=\"" + std::to_string(i) + "\",name=\"" + m.sched.nodes[i].name + "\"}",
          double(m.sched.nodes[i].counters.rows));
  return s;
}

class Handler {
 public:
  Handler(const Generator& g) : gen_(g), engine_(g.engine()), prompts_(g.prompts()), o_(g.options()) {}

  void completions(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    Request r;
    if (auto e = parse_request(req.body, ep, engine_.ctx(), o_.defaults, &r)) return send_error(res, *e);
    Job job;
    if (auto e = gen_.prepare(r, &job)) return send_error(res, *e);
    ResponseIds ids;
    ids.id = random_id(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    ids.created = unix_now();
    ids.model = r.model.empty() ? o_.model_name : r.model;

    // n > 1: the choices run one after another, choice i with seed + i, so each is what it
    // would be alone with its seed, and each after the first finds the prompt's KV in the
    // slot the one before left (the scheduler's longest-prefix reuse).
    const int n_choices = r.n;
    const std::string echo = r.echo ? r.prompt : "";
    const int top_logprobs = job.gen.params.top_logprobs;
    auto add_usage = [](Usage& total, const Usage& u, bool first_choice) {
      if (first_choice) {
        total.prompt_tokens = u.prompt_tokens;
        total.cached_tokens = u.cached_tokens;
      }
      total.completion_tokens += u.completion_tokens, total.reasoning_tokens += u.reasoning_tokens;
    };

    if (!r.stream) {
      std::vector<Choice> choices;
      Usage usage;
      ClientWatch client(req);
      for (int i = 0; i < n_choices; ++i) {
        Choice c;
        c.text = echo;
        std::vector<TokenLogprobs> lps;
        Reply out = gen_.run(
            job, i,
            [&](const std::string& t) {
              c.text += t;
              return client.still_there();
            },
            {}, [&](const std::vector<TokenLogprobs>& t) { lps.insert(lps.end(), t.begin(), t.end()); });
        if (out.cancelled()) return send_error(res, api_error(499, "the client went away", "cancelled"));
        if (!out.out.status.ok())
          return send_error(res, api_error(503, "generation failed: " + out.out.status.message(), "server_error"));
        c.finish_reason = out.finish_reason;
        c.text += out.tail.content;
        c.tool_calls = std::move(out.tail.calls);
        c.reasoning = std::move(out.reasoning);
        if (top_logprobs >= 0) c.logprobs = logprobs_json(ep, lps);
        add_usage(usage, out.out.usage, i == 0);
        choices.push_back(std::move(c));
      }
      res.set_content(dump(response_json(ep, ids, choices, usage)), "application/json");
      return;
    }
    const bool include_usage = r.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, n_choices, echo, top_logprobs, add_usage, ids, ep, include_usage](size_t, httplib::DataSink& sink) {
          auto event = [&](const std::string& data) {
            const std::string s = "data: " + data + "\n\n";
            return sink.write(s.data(), s.size());
          };
          // A comment line while queued, ": waiting N" with the requests queued (the page
          // shows it): SSE clients ignore it, and a write to a closed connection fails, so
          // a client that left gives up its place.
          auto waiting = [&] {
            const std::string w = ": waiting " + std::to_string(engine_.metrics().sched.queued) + "\n\n";
            return sink.write(w.data(), w.size());
          };
          Usage usage;
          for (int i = 0; i < n_choices; ++i) {
            bool first = true;
            size_t offset = 0;  // completions' text_offset
            if (!echo.empty()) {
              event(dump(chunk_json(ep, ids, echo, "", first, i)));
              first = false;
            }
            // A piece's log-probabilities arrive just before the piece and go out with it.
            std::vector<TokenLogprobs> lps;
            auto take_logprobs = [&] {
              json lp = top_logprobs >= 0 ? logprobs_json(ep, lps, offset) : json(nullptr);
              lps.clear();
              return lp;
            };
            auto content = [&](const std::string& t) {
              const bool ok = event(dump(chunk_json(ep, ids, t, "", first, i, take_logprobs())));
              offset += t.size();
              first = false;
              return ok;
            };
            auto thought = [&](const std::string& t) {
              const bool ok = event(dump(reasoning_chunk_json(ids, i, t, first)));
              first = false;
              return ok;
            };
            auto call = [&](const ToolDelta& d) {
              const bool ok = event(dump(tool_delta_chunk_json(ids, i, d, first)));
              first = false;
              return ok;
            };
            Reply out = gen_.run(
                job, i, [&](const std::string& t) { return t.empty() ? sink.is_writable() : content(t); }, waiting,
                [&](const std::vector<TokenLogprobs>& t) { lps.insert(lps.end(), t.begin(), t.end()); }, thought,
                call);
            if (out.cancelled()) return false;
            if (!out.out.status.ok()) {
              event(dump(error_json(api_error(503, "generation failed: " + out.out.status.message(), "server_error"))));
              sink.done();
              return true;
            }
            if (!out.tail.content.empty()) content(out.tail.content);
            for (size_t k = out.streamed_calls; k < out.tail.calls.size(); ++k) {
              event(dump(tool_call_chunk_json(ids, i, int(k), out.tail.calls[k], first)));
              first = false;
            }
            event(dump(chunk_json(ep, ids, "", out.finish_reason, first, i, lps.empty() ? json(nullptr) : take_logprobs())));
            add_usage(usage, out.out.usage, i == 0);
          }
          if (include_usage) event(dump(usage_chunk_json(ep, ids, usage)));
          event("[DONE]");
          sink.done();
          return true;
        });
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    TokenizeRequest r;
    if (auto e = parse_tokenize(req.body, &r)) return send_error(res, *e);
    const tokenizer::Tokenizer& tok = prompts_.tokenizer();
    json tokens = json::array();
    for (int32_t id : tok.encode(r.content, r.add_special, r.parse_special)) {
      if (r.with_pieces)
        tokens.push_back({{"id", id}, {"piece", tok.piece(id, true)}});
      else
        tokens.push_back(id);
    }
    res.set_content(dump(json{{"tokens", tokens}}), "application/json");
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    std::vector<int32_t> ids;
    if (auto e = parse_detokenize(req.body, prompts_.tokenizer().n_vocab(), &ids)) return send_error(res, *e);
    res.set_content(dump(json{{"content", prompts_.tokenizer().decode(ids, true)}}), "application/json");
  }

  void props(httplib::Response& res) {
    const sampler::Params& d = o_.defaults;
    auto tidy = [](float x) { return std::round(double(x) * 1e6) / 1e6; };  // 0.8f as 0.8, not 0.800000011920929
    const tokenizer::Tokenizer& tok = prompts_.tokenizer();
    const runtime::SchedulerStats sched = engine_.metrics().sched;
    json p = {
        {"model", o_.model_name},
        {"n_ctx", engine_.ctx()},
        {"total_slots", o_.slots},
        {"kv_pool", {{"blocks", sched.kv_blocks},
                     {"block_positions", model::kKvBlockRows},
                     {"positions", int64_t(sched.kv_blocks) * model::kKvBlockRows},
                     {"blocks_in_use", sched.kv_blocks_used},
                     {"blocks_shared", sched.kv_blocks_shared},
                     {"prefix_hits", sched.kv_prefix_hits},
                     {"prefix_tokens", sched.kv_prefix_tokens}}},
        {"chat_template", prompts_.template_source()},
        {"has_chat_template", prompts_.has_chat()},
        {"tool_format", tool_format_name(gen_.template_tool_format())},
        {"reasoning_format", reasoning_format_name(o_.reasoning_format)},
        {"bos_token", tok.bos() >= 0 ? tok.piece(tok.bos(), true) : ""},
        {"eos_token", tok.eos() >= 0 ? tok.piece(tok.eos(), true) : ""},
        {"n_vocab", tok.n_vocab()},
        {"default_generation_settings",
         {{"n_ctx", engine_.ctx()}, {"max_tokens", o_.default_max_tokens}, {"temperature", tidy(d.temperature)},
          {"top_k", d.top_k}, {"top_p", tidy(d.top_p)}, {"min_p", tidy(d.min_p)}, {"repeat_penalty", tidy(d.repeat_penalty)},
          {"repeat_last_n", d.repeat_last_n}, {"presence_penalty", tidy(d.presence_penalty)},
          {"frequency_penalty", tidy(d.frequency_penalty)}}},
    };
    res.set_content(dump(p), "application/json");
  }

 private:
  const Generator& gen_;
  Engine& engine_;
  const PromptBuilder& prompts_;
  const ServerOptions& o_;
};

}  // namespace

util::Status run_server(Engine& engine, const PromptBuilder& prompts, const ServerOptions& o,
                        const std::function<void(const std::string&)>& on_listening) {
  std::signal(SIGPIPE, SIG_IGN);
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  std::unique_ptr<httplib::Server> server;
  if (tls) {
    if (o.tls_cert.empty() || o.tls_key.empty())
      return util::Status::error("HTTPS needs both --tls-cert and --tls-key");
    util::Status tls_status;
    server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      tls_status = setup_tls(ctx, o.tls_cert, o.tls_key);
      return tls_status.ok();
    });
    if (!tls_status.ok()) return tls_status;
    if (!server->is_valid()) return util::Status::error("cannot set up TLS with --tls-cert/--tls-key");
  } else {
    server = std::make_unique<httplib::Server>();
  }
  httplib::Server& svr = *server;
  const Generator gen(engine, prompts, o);
  Handler h(gen);
  RequestCounter counter;
  AccessLog access_log(o.access_log);
  if (access_log.failed(o.access_log))
    return util::Status::error("--access-log " + o.access_log + ": cannot open it for appending");
  const Cors cors(o.cors_origins);
  const int threads = o.max_queue + 8;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(o.max_body);
  svr.set_read_timeout(30);
  svr.set_write_timeout(10);

  // The API key (bearer or x-api-key) where the path needs one; false once the 401 is sent.
  auto authorized = [&](const httplib::Request& req, httplib::Response& res) {
    if (o.api_key.empty() || !needs_key(req.path) || req.method == "OPTIONS") return true;
    // Anthropic's clients send the key as x-api-key, the others as a bearer token.
    if (req.has_header("x-api-key")) {
      if (same_secret(req.get_header_value("x-api-key"), o.api_key)) return true;
      send_error(req, res, api_error(401, "incorrect API key in the x-api-key header", "invalid_request_error",
                                     "invalid_api_key"));
      return false;
    }
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.empty()) {
      send_error(req, res, api_error(401, "missing API key: send the header 'Authorization: Bearer KEY' or 'x-api-key: "
                                     "KEY' (the server was started with --api-key)", "invalid_request_error",
                                     "invalid_api_key"));
      return false;
    }
    if (auth.rfind(prefix, 0) != 0 || !same_secret(auth.substr(prefix.size()), o.api_key)) {
      send_error(req, res, api_error(401, "incorrect API key in the Authorization header", "invalid_request_error",
                                "invalid_api_key"));
      return false;
    }
    return true;
  };
  RouteHook responses_hook;  // set below, with the Responses routes
  // Before the body is read: CORS, a body without a length, the API key.
  svr.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    AccessLog::started();
    cors.allow(req, res);
    if (req.method == "OPTIONS" && cors.on()) {
      cors.preflight(req, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool bodiless = expects_body(req.method) && !req.has_header("Content-Length") &&
                          req.get_header_value("Transfer-Encoding").find("chunked") == std::string::npos;
    // DELETE /v1/responses/{id} takes no body: answered here, as the router would read one.
    const bool bodiless_route = bodiless && req.method == "DELETE" && req.path.rfind("/v1/responses/", 0) == 0;
    if (bodiless && !bodiless_route) {
      res.set_header("Connection", "close");
      // Only POST routes take a body: other methods are answered as they would be after it.
      const Route* r = find_route(req.path);
      if (req.method != "POST" || !r || !r->post) {
        if (r) method_not_allowed(req, res, r->post);
        else not_found(req, res);
        return httplib::Server::HandlerResponse::Handled;
      }
      send_error(req, res, api_error(411, "the request has no body (no Content-Length header): send a JSON body, "
                                     "e.g. curl -d '{...}'", "invalid_request_error", "missing_body"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!authorized(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (bodiless_route && !responses_hook(req, res)) not_found(req, res);
    return bodiless_route ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });

  svr.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kChatPage, "text/html; charset=utf-8"); });
  for (const Asset* a = assets_begin(); a != assets_end(); ++a)
    svr.Get(a->path, [a](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "public, max-age=86400");
      res.set_content(a->body.data(), a->body.size(), a->content_type);
    });
  svr.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    util::Status st = engine.health();
    if (!st.ok()) return send_error(res, api_error(503, "the model is unavailable: " + st.message(), "server_error"));
    const runtime::ClusterHealth h = engine.metrics().cluster;  // degraded: serving on fewer nodes than started
    res.set_content(dump({{"status", h.nodes < h.nodes_planned ? "degraded" : "ok"}, {"nodes", h.nodes},
                          {"nodes_planned", h.nodes_planned}, {"recoveries", h.recoveries}}),
                    "application/json");
  });
  svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(engine.metrics(), counter), "text/plain; version=0.0.4");
  });
  svr.Get("/cluster", [&](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(dump(cluster_json(engine.metrics(), engine.cluster_info(), engine.health().ok())),
                    "application/json");
  });
  svr.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", o.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "shardlm"},
              {"context_length", engine.ctx()}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  svr.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    h.completions(req, res, Endpoint::kChat);
  });
  svr.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    h.completions(req, res, Endpoint::kCompletion);
  });
  svr.Post("/tokenize", [&](const httplib::Request& req, httplib::Response& res) { h.tokenize(req, res); });
  svr.Post("/detokenize", [&](const httplib::Request& req, httplib::Response& res) { h.detokenize(req, res); });
  svr.Get("/props", [&](const httplib::Request&, httplib::Response& res) { h.props(res); });
  add_ollama_routes(svr, gen);
  add_anthropic_routes(svr, gen);
  responses_hook = add_responses_routes(svr, gen, o.responses_store);
  add_infill_routes(svr, gen);
  // Known routes with the wrong method: 405 naming the right one.
  for (const Route& route : kRoutes) {
    const bool post = route.post;
    auto wrong = [post](const httplib::Request& req, httplib::Response& res) { method_not_allowed(req, res, post); };
    if (post)
      svr.Get(route.path, wrong);
    else
      svr.Post(route.path, wrong);
    svr.Put(route.path, wrong);
    svr.Delete(route.path, wrong);
    svr.Patch(route.path, wrong);
  }
  svr.set_error_handler(httplib::Server::HandlerWithResponse([&](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 413) {
      send_error(req, res, api_error(413, "the request body is larger than the server's limit of " +
                                         std::to_string(o.max_body) + " bytes (--max-body)",
                                "invalid_request_error", "request_too_large"));
    } else if (res.status == 404) {
      not_found(req, res);
    } else {
      send_error(req, res, api_error(res.status, "HTTP error " + std::to_string(res.status),
                                res.status < 500 ? "invalid_request_error" : "server_error"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, api_error(500, "internal error: " + what, "server_error"));
  });
  svr.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
    std::string path = "other";
    if (const Route* r = find_route(req.path)) path = r->path;
    if (req.path.rfind("/assets/", 0) == 0) path = "/assets/";
    counter.add(path, res.status);
    access_log.write(req, res);
  });

  int port = o.port;
  if (port == 0) {
    port = svr.bind_to_any_port(o.host);
    if (port < 0) return util::Status::error("cannot listen on " + o.host + ": no free port");
  } else if (!svr.bind_to_port(o.host, port)) {
    return util::Status::error("cannot listen on " + o.host + ":" + std::to_string(port) +
                               " (in use or not allowed); choose another --port");
  }
  on_listening((tls ? "https://" : "http://") + o.host + ":" + std::to_string(port));
  if (!svr.listen_after_bind()) return util::Status::error("the HTTP server stopped unexpectedly");
  return util::ok_status();
}

}  // namespace serve
