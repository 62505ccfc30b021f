// openai_routes.cc: OpenAI's routes and replies on `serve` (see api.h): /v1/chat/completions
// and /v1/completions (one body, or server-sent events), and llama-server's /tokenize,
// /detokenize and /props.
#include <httplib.h>

#include <cmath>
#include <memory>

#include "serve/api.h"
#include "serve/generation.h"

namespace serve {

using nlohmann::json;

namespace {

// A completion's choices, as the request asks for them. n > 1: the choices run one after
// another, choice i with seed + i, so each is what it would be alone with its seed, and
// each after the first finds the prompt's KV in the slot the one before left (the
// scheduler's longest-prefix reuse).
struct Choices {
  Endpoint ep = Endpoint::kChat;
  ResponseIds ids;
  int n = 1;
  std::string echo;       // the prompt, shown before each choice's text
  int top_logprobs = -1;  // < 0: no log-probabilities
  bool include_usage = false;
};

// Adds a choice's usage to the choices' total: the prompt counted once (the first choice's).
void add_usage(Usage& total, const Usage& u, bool first_choice) {
  if (first_choice) {
    total.prompt_tokens = u.prompt_tokens;
    total.cached_tokens = u.cached_tokens;
  }
  total.completion_tokens += u.completion_tokens, total.reasoning_tokens += u.reasoning_tokens;
}

// One server-sent event with a data line.
bool sse_data(httplib::DataSink& sink, const std::string& data) {
  const std::string s = "data: " + data + "\n\n";
  return sink.write(s.data(), s.size());
}

class OpenAiHandler {
 public:
  OpenAiHandler(const Generator& g) : gen_(g), engine_(g.engine()), prompts_(g.prompts()), o_(g.options()) {}

  void completions(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    Request r;
    if (auto e = parse_request(req.body, ep, engine_.ctx(), o_.defaults, &r)) return send_error(res, *e);
    Job job;
    if (auto e = gen_.prepare(r, &job)) return send_error(res, *e);
    Choices c;
    c.ep = ep;
    c.ids.id = random_id(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    c.ids.created = unix_now();
    c.ids.model = r.model.empty() ? o_.model_name : r.model;
    c.n = r.n;
    c.echo = r.echo ? r.prompt : "";
    c.top_logprobs = job.gen.params.top_logprobs;
    c.include_usage = r.include_usage;
    if (!r.stream) return whole(req, res, job, c);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream", [this, job, c](size_t, httplib::DataSink& sink) {
      return stream(job, c, sink);
    });
  }

  // The choices in one body.
  void whole(const httplib::Request& req, httplib::Response& res, const Job& job, const Choices& cs) {
    std::vector<Choice> choices;
    Usage usage;
    ClientWatch client(req);
    for (int i = 0; i < cs.n; ++i) {
      Choice c;
      c.text = cs.echo;
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
      if (cs.top_logprobs >= 0) c.logprobs = logprobs_json(cs.ep, lps);
      add_usage(usage, out.out.usage, i == 0);
      choices.push_back(std::move(c));
    }
    res.set_content(dump(response_json(cs.ep, cs.ids, choices, usage)), "application/json");
  }

  // The choices as server-sent events, one after another, then the usage and [DONE];
  // false when the client went away.
  bool stream(const Job& job, const Choices& c, httplib::DataSink& sink) {
    Usage usage;
    for (int i = 0; i < c.n; ++i) {
      Reply out = stream_choice(job, c, i, sink);
      if (out.cancelled()) return false;
      if (!out.out.status.ok()) {
        sse_data(sink, dump(error_json(api_error(503, "generation failed: " + out.out.status.message(), "server_error"))));
        sink.done();
        return true;
      }
      add_usage(usage, out.out.usage, i == 0);
    }
    if (c.include_usage) sse_data(sink, dump(usage_chunk_json(c.ep, c.ids, usage)));
    sse_data(sink, "[DONE]");
    sink.done();
    return true;
  }

  // Choice i's chunks: the echo, the text, thought and calls as written, the rest and the
  // finish reason; its reply (cancelled or failed: nothing sent after the pieces).
  Reply stream_choice(const Job& job, const Choices& c, int i, httplib::DataSink& sink) {
    const Endpoint ep = c.ep;
    const ResponseIds& ids = c.ids;
    auto event = [&](const std::string& data) { return sse_data(sink, data); };
    // A comment line while queued, ": waiting N" with the requests queued (the page shows
    // it): SSE clients ignore it, and a write to a closed connection fails, so a client that
    // left gives up its place.
    auto waiting = [&] {
      const std::string w = ": waiting " + std::to_string(engine_.metrics().sched.queued) + "\n\n";
      return sink.write(w.data(), w.size());
    };
    bool first = true;
    size_t offset = 0;  // completions' text_offset
    if (!c.echo.empty()) {
      event(dump(chunk_json(ep, ids, c.echo, "", first, i)));
      first = false;
    }
    // A piece's log-probabilities arrive just before the piece and go out with it.
    std::vector<TokenLogprobs> lps;
    auto take_logprobs = [&] {
      json lp = c.top_logprobs >= 0 ? logprobs_json(ep, lps, offset) : json(nullptr);
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
        [&](const std::vector<TokenLogprobs>& t) { lps.insert(lps.end(), t.begin(), t.end()); }, thought, call);
    if (out.cancelled() || !out.out.status.ok()) return out;
    if (!out.tail.content.empty()) content(out.tail.content);
    for (size_t k = out.streamed_calls; k < out.tail.calls.size(); ++k) {
      event(dump(tool_call_chunk_json(ids, i, int(k), out.tail.calls[k], first)));
      first = false;
    }
    event(dump(chunk_json(ep, ids, "", out.finish_reason, first, i, lps.empty() ? json(nullptr) : take_logprobs())));
    return out;
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
                     {"prefix_tokens", sched.kv_prefix_tokens},
                     {"host_blocks", sched.kv_host_blocks},
                     {"host_bytes", sched.kv_host_bytes},
                     {"host_restores", sched.kv_host_restores}}},
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

// OpenAI's and llama-server's own routes: completions, tokens, props.
void add_openai_routes(httplib::Server& svr, const Generator& gen) {
  auto h = std::make_shared<OpenAiHandler>(gen);
  svr.Post("/v1/chat/completions", [h](const httplib::Request& req, httplib::Response& res) {
    h->completions(req, res, Endpoint::kChat);
  });
  svr.Post("/v1/completions", [h](const httplib::Request& req, httplib::Response& res) {
    h->completions(req, res, Endpoint::kCompletion);
  });
  svr.Post("/tokenize", [h](const httplib::Request& req, httplib::Response& res) { h->tokenize(req, res); });
  svr.Post("/detokenize", [h](const httplib::Request& req, httplib::Response& res) { h->detokenize(req, res); });
  svr.Get("/props", [h](const httplib::Request&, httplib::Response& res) { h->props(res); });
}

}  // namespace serve
