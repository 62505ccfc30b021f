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

Runner add_worker(CLI::App& app) {
  auto* cmd = app.add_subcommand("worker", "serve a root's sessions: receive a slice of the model and compute it");
  auto o = std::make_shared<runtime::WorkerOptions>();
  o->threads = std::max(1u, std::thread::hardware_concurrency());
  cmd->add_option("--port", o->port, "TCP port (0: pick a free one)")->required();
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "compute threads")->capture_default_str()->check(CLI::Range(1, 512));
  auto device = std::make_shared<std::string>("cpu");
  add_device_option(cmd, device.get());
  auto key_file = std::make_shared<std::string>();
  auto insecure = std::make_shared<bool>(false);
  auto encryption = std::make_shared<std::string>("on");
  cmd->add_option("--cluster-key", o->cluster_key,
                  "shared secret; the root must give the same (visible in ps: prefer --cluster-key-file or "
                  "$SHARDLM_CLUSTER_KEY)");
  cmd->add_option("--cluster-key-file", *key_file, "read the cluster key from this file (`shardlm keygen --out FILE`)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--insecure", *insecure,
                "listen beyond loopback without a cluster key (anyone who reaches the port can use the worker)");
  cmd->add_option("--link-encryption", *encryption,
                  "on: encrypt and authenticate every frame when keyed (default); off needs --insecure")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd->add_option("-m,--model", o->model_path, "slice this GGUF locally instead of receiving weights")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sessions", o->max_sessions, "exit after this many sessions (default: serve forever)");
  cmd->add_option("--idle-timeout", o->idle_timeout_s, "end a session whose root is silent this many seconds")
      ->capture_default_str();
  return [=]() {
    o->software_version = SHARDLM_VERSION;
    if (std::string e = device_factory(*device, &o->backend); !e.empty()) return fail(e);
    auto dev = device_name(*device);
    if (!dev) return fail(dev.error());
    std::fprintf(stderr, "worker: device %s\n", dev->c_str());
    if (*dev != "cpu") o->device = *dev;
    std::vector<std::string> warnings;
    auto key = net::resolve_cluster_key(o->cluster_key, *key_file, &warnings);
    if (!key) return fail(key.error());
    o->cluster_key = *key;
    o->link_encryption = *encryption == "on";
    if (util::Status st = net::check_worker_security(o->host == "0.0.0.0" ? "" : o->host, o->cluster_key, *insecure,
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
