// serve.cc: `shardlm serve`: the OpenAI-compatible HTTP server (serve/server.h) on one
// node or as the root of a cluster (--workers). Prints "listening on http://HOST:PORT" on
// stdout once bound (with --port 0 the port is chosen by the system).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/backend.h"
#include "cli/commands.h"
#include "net/cluster_key.h"
#include "serve/server.h"
#include "serve/tls.h"

namespace cli {

Command add_serve(CLI::App& app) {
  const ModelCommand m =
      add_model_command(app, "serve", "OpenAI-compatible HTTP server with a web chat page", Speculates::kYes);
  const std::shared_ptr<RunOptions> o = m.run;
  auto so = std::make_shared<serve::ServerOptions>();
  auto tmpl = std::make_shared<std::string>();
  auto parallel = std::make_shared<int>(4);
  add_chat_template_option(m.cmd, tmpl.get());
  m.cmd->add_option("--host", so->host, "address to listen on")->capture_default_str();
  m.cmd->add_option("--port", so->port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  m.cmd->add_option("--api-key", so->api_key,
                  "require 'Authorization: Bearer KEY' on /v1/ routes (default: $SHARDLM_API_KEY)");
  m.cmd->add_option("--max-body", so->max_body, "largest request body in bytes")->capture_default_str()
      ->check(CLI::Range(size_t(1024), size_t(1) << 30));
  m.cmd->add_option("--parallel", *parallel,
                  "requests that run at once (continuous batching), each in its own KV slot of --ctx positions")
      ->capture_default_str();
  o->cache_ram_mib = 8192;  // llama-server's default
  m.cmd->add_option("--cache-ram", o->cache_ram_mib,
                  "MiB of host memory per node that keep KV blocks evicted from the pool (shared prefixes), copied "
                  "back when a prompt's prefix continues into them (0: off, -1: no limit); at most what the "
                  "root's memory leaves after the model and the pool, and counted in every worker's memory check")
      ->capture_default_str()->check(CLI::Range(int64_t(-1), int64_t(1) << 40));
  m.cmd->add_option("--max-queue", so->max_queue, "requests allowed to wait for a slot; more get HTTP 429")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  m.cmd->add_option("--max-tokens", so->default_max_tokens, "max_tokens of a request that gives none")
      ->capture_default_str()->check(CLI::PositiveNumber);
  m.cmd->add_option("--model-name", so->model_name, "model id reported by /v1/models (default: the file name)");
  auto* cert = m.cmd->add_option("--tls-cert", so->tls_cert, "serve HTTPS with this PEM certificate (chain)");
  auto* key = m.cmd->add_option("--tls-key", so->tls_key, "the PEM private key of --tls-cert (no passphrase)");
  cert->needs(key);
  key->needs(cert);
  m.cmd->add_option("--cors", so->cors_origins,
                  "let browser pages from these origins call the API (e.g. https://app.example.com, or '*')")
      ->delimiter(',');
  m.cmd->add_option("--access-log", so->access_log, "one line per request to this file ('-': stderr)");
  auto reasoning = std::make_shared<std::string>("auto");
  m.cmd->add_option("--reasoning-format", *reasoning,
                  "a reply's <think>...</think>: none (left in the text), deepseek or auto (split off as "
                  "reasoning_content, thinking blocks, reasoning items), deepseek-legacy (both)")
      ->capture_default_str()->check(CLI::IsMember({"none", "auto", "deepseek", "deepseek-legacy"}));
  m.cmd->add_option("--responses-store", so->responses_store,
                  "responses of /v1/responses kept for previous_response_id (least recently used dropped; 0: none)")
      ->capture_default_str()->check(CLI::Range(size_t(0), size_t(1) << 20));
  add_sampler_options(m.cmd, &so->defaults);
  return m.command([=]() {
    if (so->api_key.empty())
      if (const char* k = std::getenv("SHARDLM_API_KEY")) so->api_key = k;
    if (so->api_key.empty() && !net::is_loopback_host(so->host))
      std::fprintf(stderr, "warning: serving on %s without --api-key (or $SHARDLM_API_KEY): anyone who can reach "
                   "the port can use the model\n", so->host.c_str());
    if (so->model_name == "shardlm") so->model_name = std::filesystem::path(o->model).stem().string();
    // The certificate's errors before the model is loaded.
    if (!so->tls_cert.empty())
      if (util::Status st = serve::check_tls_files(so->tls_cert, so->tls_key); !st.ok()) return fail(st.message());
    so->slots = *parallel;
    so->reasoning_format = *serve::reasoning_format_from_name(*reasoning);
    Backend b;
    if (std::string e = open_backend(*o, *m.cluster, *m.spec, *tmpl, &b, *parallel, /*need_chat=*/false); !e.empty()) return fail(e);
    so->model_path = o->model;
    so->model_arch = b.model->config.arch_name;
    if (!b.prompts->has_chat())
      std::fprintf(stderr, "note: %s; /v1/chat/completions and the chat page answer 400\n",
                   serve::PromptBuilder::no_template_error().c_str());
    util::Status st = serve::run_server(*b.engine, *b.prompts, *so, [&](const std::string& url) {
      std::printf("listening on %s\n", url.c_str());
      std::fflush(stdout);
      const int blocks = b.cluster->kv_pool().n_blocks();
      const std::string no_share = b.cluster->no_prefix_sharing();
      const int host = b.cluster->kv_pool().host_capacity();  // --cache-ram within this machine's memory
      const double host_bytes = double(host) * double(b.cluster->kv_block_bytes());
      const bool clamped = o->cache_ram_mib < 0 ||
                           double(o->cache_ram_mib) * (1 << 20) - host_bytes >= double(b.cluster->kv_block_bytes());
      const std::string host_line =
          host == 0 ? "off"
                    : std::to_string(host) + " blocks (" + std::to_string(int64_t(host_bytes / (1 << 20))) + " MiB" +
                          (clamped ? ": what this machine's memory leaves of --cache-ram)" : ")");
      std::fprintf(stderr,
                   "model %s, %d slots of %d tokens, KV pool %d blocks of %d positions (%lld), prefix sharing %s, "
                   "host KV cache %s, %d node(s)%s\n",
                   so->model_name.c_str(), *parallel, b.engine->ctx(), blocks, model::kKvBlockRows,
                   (long long)blocks * model::kKvBlockRows, no_share.empty() ? "on" : ("off: " + no_share).c_str(),
                   host_line.c_str(), b.cluster->n_nodes(), so->api_key.empty() ? "" : ", API key required");
    });
    if (!st.ok()) return fail(st.message());
    return 0;
  });
}

}  // namespace cli
