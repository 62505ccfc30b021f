// ollama_routes.cc: Ollama's routes and replies (see ollama.h): NDJSON lines or one
// object per reply, the served model as /api/tags, /api/ps and /api/show describe one.
#include <httplib.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "serve/generation.h"
#include "serve/ollama.h"

namespace serve {

using nlohmann::json;

namespace {

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[64];
  const long long ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() % 1000000000LL;
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%09lldZ", ns);
  return buf;
}

void send_ollama(httplib::Response& res, const ApiError& e) { send_error(res, e, ollama_error_json(e)); }

// The served model as Ollama describes one.
json details(const ServerOptions& o) {
  return {{"parent_model", ""}, {"format", "gguf"}, {"family", o.model_arch}, {"families", json::array({o.model_arch})},
          {"parameter_size", ""}, {"quantization_level", ""}};
}
json model_entry(const ServerOptions& o) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(o.model_path, ec);
  const auto mtime = std::filesystem::last_write_time(o.model_path, ec);
  // file_clock to system_clock through the two clocks' now
  const auto when = ec ? std::chrono::system_clock::now()
                       : std::chrono::time_point_cast<std::chrono::system_clock::duration>(
                             mtime - std::filesystem::file_time_type::clock::now() + std::chrono::system_clock::now());
  return {{"name", o.model_name}, {"model", o.model_name}, {"modified_at", rfc3339(when)},
          {"size", ec ? uintmax_t(0) : size}, {"details", details(o)}};
}

class OllamaHandler {
 public:
  explicit OllamaHandler(const Generator& g) : g_(g) {}

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) const {
    const ServerOptions& o = g_.options();
    Request r;
    if (auto e = parse_ollama(req.body, chat, g_.prompts().has_chat(), g_.engine().ctx(), o.defaults, &r))
      return send_ollama(res, *e);
    Job job;
    if (auto e = g_.prepare(r, &job)) return send_ollama(res, *e);
    const std::string model = r.model.empty() ? o.model_name : r.model;
    // A line of the reply: chat's message or generate's response (and its thinking).
    auto line = [chat, model](const std::string& text, const std::vector<ToolCall>& calls,
                              const std::string& thinking = "") {
      json j = {{"model", model}, {"created_at", rfc3339(std::chrono::system_clock::now())}};
      if (!chat) {
        j["response"] = text;
        if (!thinking.empty()) j["thinking"] = thinking;
        return j;
      }
      j["message"] = {{"role", "assistant"}, {"content", text}};
      if (!thinking.empty()) j["message"]["thinking"] = thinking;
      if (!calls.empty()) {
        json list = json::array();
        for (const ToolCall& c : calls)
          list.push_back({{"function", {{"name", c.name}, {"arguments", json::parse(c.arguments, nullptr, false)}}}});
        j["message"]["tool_calls"] = list;
      }
      return j;
    };
    auto done = [](json j, const Reply& out) {
      const long long prompt_ns = (long long)(out.out.prompt_s * 1e9), gen_ns = (long long)(out.out.gen_s * 1e9);
      j["done"] = true;
      j["done_reason"] = out.out.finish_reason == "length" ? "length" : "stop";
      j["total_duration"] = prompt_ns + gen_ns;
      j["load_duration"] = 0;
      j["prompt_eval_count"] = out.out.usage.prompt_tokens;
      j["prompt_eval_duration"] = prompt_ns;
      j["eval_count"] = out.out.usage.completion_tokens;
      j["eval_duration"] = gen_ns;
      return j;
    };
    if (!r.stream) {
      Reply out;
      std::string text;
      if (auto e = g_.run_whole(job, req, &out, &text)) return send_ollama(res, *e);
      res.set_content(dump(done(line(text, out.tail.calls, out.reasoning), out)), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("application/x-ndjson", [this, job, line, done](size_t, httplib::DataSink& sink) {
      auto write = [&](const json& j) {
        const std::string s = dump(j) + "\n";
        return sink.write(s.data(), s.size());
      };
      auto piece = [&](const std::string& t) {
        json j = line(t, {});
        j["done"] = false;
        return write(j);
      };
      auto thought = [&](const std::string& t) {
        json j = line("", {}, t);
        j["done"] = false;
        return write(j);
      };
      Reply out = g_.run(job, 0, [&](const std::string& t) { return t.empty() ? sink.is_writable() : piece(t); },
                         [&] { return sink.is_writable(); }, {}, thought);
      if (out.cancelled()) return false;
      if (!out.out.status.ok()) {
        write(ollama_error_json(api_error(503, "generation failed: " + out.out.status.message(), "server_error")));
      } else {
        if (!out.tail.content.empty() || !out.tail.calls.empty()) {
          json j = line(out.tail.content, out.tail.calls);
          j["done"] = false;
          write(j);
        }
        write(done(line("", {}), out));
      }
      sink.done();
      return true;
    });
  }

  void show(const httplib::Request& req, httplib::Response& res) const {
    const ServerOptions& o = g_.options();
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return send_ollama(res, bad_request("the request body must be a JSON object {\"model\": NAME}"));
    json info = {{"general.architecture", o.model_arch}, {o.model_arch + ".context_length", g_.engine().ctx()}};
    json caps = json::array({"completion"});
    if (tool_format(g_.prompts().template_source()) != ToolFormat::kNone) caps.push_back("tools");
    res.set_content(dump({{"modelfile", ""}, {"parameters", ""}, {"template", g_.prompts().template_source()},
                          {"details", details(o)}, {"model_info", info}, {"capabilities", caps},
                          {"modified_at", model_entry(o)["modified_at"]}}),
                    "application/json");
  }

  void tags(httplib::Response& res, bool running) const {
    json m = model_entry(g_.options());
    if (running) {
      m["expires_at"] = "2999-01-01T00:00:00Z";  // never unloaded
      m["size_vram"] = 0;
      m["context_length"] = g_.engine().ctx();
    }
    res.set_content(dump({{"models", json::array({m})}}), "application/json");
  }

 private:
  const Generator& g_;
};

}  // namespace

void add_ollama_routes(httplib::Server& svr, const Generator& gen) {
  auto h = std::make_shared<OllamaHandler>(gen);
  svr.Post("/api/chat", [h](const httplib::Request& req, httplib::Response& res) { h->generate(req, res, true); });
  svr.Post("/api/generate", [h](const httplib::Request& req, httplib::Response& res) { h->generate(req, res, false); });
  svr.Post("/api/show", [h](const httplib::Request& req, httplib::Response& res) { h->show(req, res); });
  svr.Get("/api/tags", [h](const httplib::Request&, httplib::Response& res) { h->tags(res, false); });
  svr.Get("/api/ps", [h](const httplib::Request&, httplib::Response& res) { h->tags(res, true); });
  svr.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"version":"0.9.0"})", "application/json");
  });
}

}  // namespace serve
