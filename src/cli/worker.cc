// worker.cc: `shardlm worker`: serve a root's sessions one after another (runtime/worker.h).
// Prints "listening on HOST:PORT" on stdout once the port is open (--port 0 picks one).
#include <algorithm>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "runtime/worker.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

Runner add_worker(CLI::App& app) {
  auto* cmd = app.add_subcommand("worker", "serve a root's sessions: receive a slice of the model and compute it");
  auto o = std::make_shared<runtime::WorkerOptions>();
  o->threads = std::max(1u, std::thread::hardware_concurrency());
  cmd->add_option("--port", o->port, "TCP port (0: pick a free one)")->required();
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "compute threads")->capture_default_str()->check(CLI::Range(1, 512));
  cmd->add_option("--cluster-key", o->cluster_key, "shared secret; the root must give the same");
  cmd->add_option("-m,--model", o->model_path, "slice this GGUF locally instead of receiving weights")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sessions", o->max_sessions, "exit after this many sessions (default: serve forever)");
  cmd->add_option("--idle-timeout", o->idle_timeout_s, "end a session whose root is silent this many seconds")
      ->capture_default_str();
  return [o]() {
    o->software_version = SHARDLM_VERSION;
    util::Status st = runtime::run_worker(*o);
    if (!st.ok()) return fail(st.message());
    return 0;
  };
}

}  // namespace cli
