// infill_routes.cc: /infill's FIM tokens, prompt layout, route and replies (see infill.h).
#include <httplib.h>

#include "serve/generation.h"
#include "serve/infill.h"

namespace serve {

using nlohmann::json;

FimTokens find_fim_tokens(const tokenizer::Tokenizer& tok) {
  // The names llama.cpp's vocabulary looks for (llama-vocab.cpp), in its order.
  static const std::vector<const char*> kPre = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>",
                                                "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"};
  static const std::vector<const char*> kSuf = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>",
                                                "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"};
  static const std::vector<const char*> kMid = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>",
                                                "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"};
  static const std::vector<const char*> kRep = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
  static const std::vector<const char*> kSep = {"<|file_sep|>"};
  auto first = [&](const std::vector<const char*>& names) {
    for (const char* n : names)
      if (auto id = tok.find_token(n)) return *id;
    return int32_t(-1);
  };
  return {first(kPre), first(kSuf), first(kMid), first(kRep), first(kSep)};
}

std::vector<int32_t> infill_prompt(const tokenizer::Tokenizer& tok, const FimTokens& fim, const InfillRequest& r) {
  auto text = [&](const std::string& s) { return tok.encode(s, false, false); };  // the user's text: no special tokens
  std::vector<int32_t> out;
  auto add = [&](const std::vector<int32_t>& t) { out.insert(out.end(), t.begin(), t.end()); };
  if (tok.add_bos() && tok.bos() >= 0) out.push_back(tok.bos());
  if (fim.rep >= 0) {
    out.push_back(fim.rep);
    add(text("myproject\n"));
  }
  for (const auto& [filename, body] : r.extra) {
    if (fim.sep >= 0) {
      out.push_back(fim.sep);
      add(text(filename + "\n"));
    } else {
      add(text("\n\n--- snippet ---\n\n"));
    }
    add(text(body));
  }
  if (fim.sep >= 0) {
    out.push_back(fim.sep);
    add(text("filename\n"));
  }
  out.push_back(fim.pre);
  add(text(r.prefix));
  out.push_back(fim.suf);
  add(text(r.suffix));
  out.push_back(fim.mid);
  add(text(r.prompt));
  return out;
}

namespace {

void send_infill(httplib::Response& res, const ApiError& e) { send_error(res, e, infill_error_json(e)); }

class InfillHandler {
 public:
  explicit InfillHandler(const Generator& g) : g_(g), fim_(find_fim_tokens(g.prompts().tokenizer())) {}

  void infill(const httplib::Request& req, httplib::Response& res) const {
    const tokenizer::Tokenizer& tok = g_.prompts().tokenizer();
    if (!fim_.usable()) {
      std::string missing;
      for (auto [id, name] : {std::pair{fim_.pre, "prefix"}, std::pair{fim_.suf, "suffix"}, std::pair{fim_.mid, "middle"}})
        if (id < 0) missing += std::string(missing.empty() ? "" : ", ") + name;
      return send_infill(res, api_error(400, "Infill is not supported by this model: its vocabulary has no FIM " + missing +
                                          " token (/infill needs a code model with FIM tokens, such as "
                                          "Qwen2.5-Coder's <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>)",
                                 "not_supported_error"));
    }
    InfillRequest r;
    if (auto e = parse_infill(req.body, g_.engine().ctx(), g_.options().defaults, &r)) return send_infill(res, *e);
    Request& c = r.completion;
    c.prompt_tokens = infill_prompt(tok, fim_, r);
    Job job;
    if (auto e = g_.prepare(c, &job)) return send_infill(res, *e);
    const json head = {{"index", 0}, {"model", c.model.empty() ? g_.options().model_name : c.model},
                       {"prompt", tok.decode(c.prompt_tokens, true)}};
    auto last = [head](const std::string& content, const Reply& out) {
      json j = head;
      j["content"] = content;
      j["stop"] = true;
      j["tokens_predicted"] = out.out.usage.completion_tokens;
      j["tokens_evaluated"] = out.out.usage.prompt_tokens;
      j["tokens_cached"] = out.out.usage.cached_tokens;
      j["truncated"] = false;
      j["stop_type"] = out.finish_reason == "length" ? "limit" : out.out.stop_string.empty() ? "eos" : "word";
      j["stopping_word"] = out.out.stop_string;
      j["timings"] = {{"prompt_n", out.out.usage.prompt_tokens}, {"prompt_ms", out.out.prompt_s * 1e3},
                      {"predicted_n", out.out.usage.completion_tokens}, {"predicted_ms", out.out.gen_s * 1e3}};
      return j;
    };
    if (!c.stream) {
      Reply out;
      std::string text;
      if (auto e = g_.run_whole(job, req, &out, &text)) return send_infill(res, *e);
      res.set_content(dump(last(text, out)), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream", [this, job, last](size_t, httplib::DataSink& sink) {
      auto line = [&](const json& j) {
        const std::string s = "data: " + dump(j) + "\n\n";
        return sink.write(s.data(), s.size());
      };
      auto piece = [&](const std::string& t) { return line({{"index", 0}, {"content", t}, {"stop", false}}); };
      Reply out = g_.run(job, 0, [&](const std::string& t) { return t.empty() ? sink.is_writable() : piece(t); },
                         [&] { return sink.is_writable(); });
      if (out.cancelled()) return false;
      if (!out.out.status.ok())
        line(infill_error_json(api_error(503, "generation failed: " + out.out.status.message(), "server_error")));
      else
        line(last(out.tail.content, out));
      sink.done();
      return true;
    });
  }

 private:
  const Generator& g_;
  const FimTokens fim_;
};

}  // namespace

void add_infill_routes(httplib::Server& svr, const Generator& gen) {
  auto h = std::make_shared<InfillHandler>(gen);
  svr.Post("/infill", [h](const httplib::Request& req, httplib::Response& res) { h->infill(req, res); });
}

}  // namespace serve
