// options.cc: from parsed options to the runtime's (options.h).
#include "cli/options.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "cli/device.h"
#include "cli/progress.h"
#include "net/cluster_key.h"

namespace cli {

int resolve_ctx(const RunOptions& o, const model::Config& c, std::string* error) {
  if (o.ctx > c.ctx_train && error)
    *error = "--ctx " + std::to_string(o.ctx) + " exceeds the model's trained context of " +
             std::to_string(c.ctx_train) + " tokens; use --ctx " + std::to_string(c.ctx_train) + " or less";
  if (o.ctx > 0) return std::min(o.ctx, c.ctx_train);
  return std::min(c.ctx_train, 4096);
}

uint64_t run_seed(const CLI::App* cmd, uint64_t given) {
  if (cmd->count("--seed") > 0) return given;
  std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

// Fills runtime::ClusterOptions for n_slots sequences of ctx positions each (a prompt
// chunk of --batch tokens plus one decode row per slot per step, and guess_rows guesses
// per slot to verify with it); an error message when an option is invalid.
std::string cluster_options(const ClusterCliOptions& c, const RunOptions& r, int ctx, runtime::ClusterOptions* out,
                            int n_slots, int guess_rows) {
  const bool exact = c.sync == "exact", automatic = c.sync == "auto";
  auto sync = exact || automatic ? std::optional<net::SyncType>(net::SyncType::kF32) : net::sync_type_from_name(c.sync);
  if (!sync) return "--sync-type must be auto, exact, q8_0, f16 or f32, not '" + c.sync + "'";
  if (c.algo != "auto" && !net::algo_from_name(c.algo))
    return "--allreduce must be auto, all-gather, star, ring or mpi, not '" + c.algo + "'";
  out->shares.clear();
  const std::string mode = c.shares.size() == 1 ? c.shares[0] : "";
  if (mode == "auto" || mode == "measured" || mode == "equal") {
    out->shares_mode = mode == "auto" ? runtime::SharesMode::kAuto
                       : mode == "measured" ? runtime::SharesMode::kMeasured : runtime::SharesMode::kEqual;
  } else {
    for (const std::string& v : c.shares) {
      char* end = nullptr;
      const double s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != 0 || !(s > 0) || !std::isfinite(s))
        return "--shares must be auto, measured, equal or positive numbers (one per node, root first), not '" + v + "'";
      out->shares.push_back(s);
    }
  }
  if (c.model_local && c.transport != "mpi") return "--model-local is for --transport mpi (a TCP worker takes --model)";
  out->transport = c.world;  // set by cli/mpi.cc under --transport mpi
  std::vector<std::string> warnings;
  auto key = net::resolve_cluster_key(c.key.key, c.key.key_file, &warnings);
  if (!key) return key.error();
  std::vector<std::string> all = c.workers;
  all.insert(all.end(), c.spares.begin(), c.spares.end());
  if (util::Status st = net::check_root_security(all, *key, c.key.insecure, c.key.encryption == "on", &warnings); !st.ok())
    return st.message();
  for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  out->workers = c.workers;
  out->spares = c.spares;
  out->recover = !c.no_recovery;
  out->sync = *sync;
  out->exact = exact;
  out->auto_sync = automatic;
  out->algo = c.algo;
  out->cluster_key = *key;
  out->link_encryption = c.key.encryption == "on";
  out->run = r.run;
  out->run.ctx = ctx;
  out->run.max_batch = r.batch + n_slots * (1 + guess_rows);
  out->run.n_slots = n_slots;
  out->on_progress = weight_progress_printer();
  if (std::string e = device_factory(r.device, &out->backend); !e.empty()) return e;
  if (r.device != "cpu" && (!c.workers.empty() || c.transport == "mpi")) {  // named in speed probes
    auto dev = device_name(r.device);
    if (!dev) return dev.error();
    out->device = *dev;
  }
  return "";
}

std::string worker_device(const std::string& device, runtime::WorkerOptions* o) {
  if (std::string e = device_factory(device, &o->backend); !e.empty()) return e;
  auto dev = device_name(device);
  if (!dev) return dev.error();
  if (*dev != "cpu") o->device = *dev;
  return "";
}

}  // namespace cli
