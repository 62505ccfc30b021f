// server.cc: the HTTP server of `shardlm serve`: TLS, authentication, CORS, the access log,
// the state routes (/health, /metrics, /cluster, the page) and the fallbacks; each API's own
// routes are in its *_routes.cc (OpenAI's in openai_routes.cc).
#include "serve/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include <chrono>
#include <csignal>
#include <memory>
#include <mutex>

#include "serve/assets.h"
#include "serve/cluster_view.h"
#include "serve/generation.h"
#include "serve/infill.h"
#include "serve/metrics.h"
#include "serve/anthropic.h"
#include "serve/ollama.h"
#include "serve/page.h"
#include "serve/responses.h"
#include "serve/tls.h"
#include "util/log.h"

namespace serve {

using nlohmann::json;

namespace {

// An error answered before a route's own handler (401, 404, 405, 411, 413): in the error
// shape of the API the path belongs to.
void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  const bool ollama = req.path.rfind("/api/", 0) == 0, anthropic = req.path.rfind("/v1/messages", 0) == 0;
  if (req.path == "/infill") return serve::send_error(res, e, infill_error_json(e));
  if (!ollama && !anthropic) return serve::send_error(res, e);
  res.status = e.status;
  res.set_content(dump(ollama ? ollama_error_json(e) : anthropic_error_json(e)), "application/json");
}

bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

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

// The HTTP server, over TLS when --tls-cert/--tls-key are given.
util::Status make_server(const ServerOptions& o, std::unique_ptr<httplib::Server>* server) {
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  if (!tls) {
    *server = std::make_unique<httplib::Server>();
    return util::ok_status();
  }
  if (o.tls_cert.empty() || o.tls_key.empty())
    return util::Status::error("HTTPS needs both --tls-cert and --tls-key");
  util::Status tls_status;
  *server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
    tls_status = setup_tls(ctx, o.tls_cert, o.tls_key);
    return tls_status.ok();
  });
  if (!tls_status.ok()) return tls_status;
  if (!(*server)->is_valid()) return util::Status::error("cannot set up TLS with --tls-cert/--tls-key");
  return util::ok_status();
}

// The API key (bearer or x-api-key) where the path needs one; false once the 401 is sent.
bool authorized(const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
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
}

// Before the body is read: CORS, a body without a length, the API key. responses_hook
// answers DELETE /v1/responses/{id}, which takes no body.
void set_pre_routing(httplib::Server& svr, const ServerOptions& o, const Cors& cors, const RouteHook& responses_hook) {
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
    if (!authorized(o, req, res)) return httplib::Server::HandlerResponse::Handled;
    if (bodiless_route && !responses_hook(req, res)) not_found(req, res);
    return bodiless_route ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
}

// The page, its assets, and the server's state: /health, /metrics, /cluster, /v1/models.
void add_state_routes(httplib::Server& svr, Engine& engine, const ServerOptions& o, const RequestCounter& counter) {
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kChatPage, "text/html; charset=utf-8"); });
  for (const Asset* a = assets_begin(); a != assets_end(); ++a)
    svr.Get(a->path, [a](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "public, max-age=86400");
      res.set_content(a->body.data(), a->body.size(), a->content_type);
    });
  svr.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    util::Status st = engine.health();
    if (!st.ok()) return serve::send_error(res, api_error(503, "the model is unavailable: " + st.message(), "server_error"));
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
}

// After the routes: a known route with the wrong method (405 naming the right one), HTTP
// errors and exceptions in the API's error shape, and each answer counted and logged.
void add_fallbacks(httplib::Server& svr, const ServerOptions& o, RequestCounter& counter, AccessLog& access_log) {
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
    serve::send_error(res, api_error(500, "internal error: " + what, "server_error"));
  });
  svr.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
    std::string path = "other";
    if (const Route* r = find_route(req.path)) path = r->path;
    if (req.path.rfind("/assets/", 0) == 0) path = "/assets/";
    counter.add(path, res.status);
    access_log.write(req, res);
  });
}

// Binds --host and --port (0: any free port), calls on_listening with the address, and
// serves until the process ends.
util::Status listen(httplib::Server& svr, const ServerOptions& o,
                    const std::function<void(const std::string&)>& on_listening) {
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
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

}  // namespace

util::Status run_server(Engine& engine, const PromptBuilder& prompts, const ServerOptions& o,
                        const std::function<void(const std::string&)>& on_listening) {
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<httplib::Server> server;
  if (util::Status st = make_server(o, &server); !st.ok()) return st;
  httplib::Server& svr = *server;
  const Generator gen(engine, prompts, o);
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

  RouteHook responses_hook;  // set below, with the Responses routes
  set_pre_routing(svr, o, cors, responses_hook);
  add_state_routes(svr, engine, o, counter);
  add_openai_routes(svr, gen);
  add_ollama_routes(svr, gen);
  add_anthropic_routes(svr, gen);
  responses_hook = add_responses_routes(svr, gen, o.responses_store);
  add_infill_routes(svr, gen);
  add_fallbacks(svr, o, counter, access_log);
  return listen(svr, o, on_listening);
}

}  // namespace serve
