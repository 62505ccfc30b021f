// worker.cc: `shardlm worker`: serve a root's sessions one after another (runtime/worker.h).
// Prints "listening on HOST:PORT" on stdout once the port is open (--port 0 picks one).
// Refuses to listen beyond loopback without a cluster key unless --insecure
// (net/cluster_key.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/options.h"
#include "net/cluster_key.h"
#include "runtime/worker.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

Command add_worker(CLI::App& app) {
  auto* cmd = app.add_subcommand("worker", "serve a root's sessions: receive a slice of the model and compute it");
  auto o = std::make_shared<runtime::WorkerOptions>();
  o->threads = std::max(1u, std::thread::hardware_concurrency());
  cmd->add_option("--port", o->port, "TCP port (0: pick a free one)")->required();
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  add_threads_option(cmd, &o->threads);
  auto device = std::make_shared<std::string>("cpu");
  add_device_option(cmd, device.get());
  auto keys = std::make_shared<KeyFlags>();
  add_key_options(cmd, keys.get(), Side::kWorker);
  cmd->add_option("-m,--model", o->model_path, "slice this GGUF locally instead of receiving weights")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sessions", o->max_sessions, "exit after this many sessions (default: serve forever)");
  cmd->add_option("--idle-timeout", o->idle_timeout_s, "end a session whose root is silent this many seconds")
      ->capture_default_str();
  return [=]() {
    o->software_version = SHARDLM_VERSION;
    if (std::string e = worker_device(*device, o.get()); !e.empty()) return fail(e);
    std::fprintf(stderr, "worker: device %s\n", o->device.empty() ? "cpu" : o->device.c_str());
    std::vector<std::string> warnings;
    auto key = net::resolve_cluster_key(keys->key, keys->key_file, &warnings);
    if (!key) return fail(key.error());
    o->cluster_key = *key;
    o->link_encryption = keys->encryption == "on";
    if (util::Status st = net::check_worker_security(o->host == "0.0.0.0" ? "" : o->host, o->cluster_key, keys->insecure,
                                                     o->link_encryption, &warnings);
        !st.ok())
      return fail(st.message());
    for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    util::Status st = runtime::run_worker(*o);
    if (!st.ok()) return fail(st.message());
    return 0;
  };
}

}  // namespace cli
