// options.h: options shared by the commands that run a model (model path, threads,
// context, KV cache type, batch) and by those that sample.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "model/config.h"
#include "model/kv_cache.h"
#include "cli/device.h"
#include "model/transformer.h"
#include "net/cluster_key.h"
#include "runtime/cluster.h"
#include "sampler/sampler.h"

namespace cli {

inline void add_device_option(CLI::App* cmd, std::string* device) {
  cmd->add_option("--device", *device,
                  "what runs this node's part: cpu, or vulkan / vulkan:N (a Vulkan device of `shardlm devices`; "
                  "flash attention, f16 KV cache; llama, qwen2, qwen3)")
      ->capture_default_str();
}

struct RunOptions {
  std::string model;
  int threads = std::max(1u, std::thread::hardware_concurrency());
  int ctx = 0;  // 0: min(trained context, 4096)
  model::KvType kv_type = model::KvType::kF16;
  // Flash by default: faster at long context, and a prompt's logits do not depend on its
  // batch split. `--flash-attn off` is llama.cpp's non-flash path to the bit.
  model::AttentionMode attention = model::AttentionMode::kFlash;
  // 128: measured best or within noise of the best from 32 to 512 on SmolLM2 and the 1B
  // shape, 1 and 2 threads (docs/BENCHMARKS.md); larger only adds buffer memory.
  int batch = 128;
  // Q4_0 / Q4_K / Q6_K prompt batches in vec_dot order (model::RunConfig::lane_order = false).
  bool exact_batches = false;
  bool fast_batches = false;  // model::RunConfig::decode_lanes
  std::string device = "cpu";  // cpu | vulkan[:N] (cli/device.h)
};

inline void add_run_options(CLI::App* cmd, RunOptions* o) {
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-t,--threads", o->threads, "compute threads")->capture_default_str()->check(CLI::Range(1, 512));
  add_device_option(cmd, &o->device);
  cmd->add_option("-c,--ctx", o->ctx, "context length, up to the model's trained context (default: min(trained, 4096))")
      ->check(CLI::NonNegativeNumber);
  // Enum options are read as names and mapped here: CLI11's enum transformers print the
  // values (raw bytes for a uint8_t enum) in --help and in their errors.
  cmd->add_option_function<std::string>(
         "--kv-type",
         [o](const std::string& v) {
           o->kv_type = v == "f32" ? model::KvType::kF32 : v == "q8_0" ? model::KvType::kQ8_0 : model::KvType::kF16;
         },
         "KV cache type: f16, q8_0 (needs --flash-attn on) or f32")
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}, CLI::ignore_case))->default_str("f16");
  cmd->add_option_function<std::string>(
         "--flash-attn",
         [o](const std::string& v) {
           o->attention = v == "off" ? model::AttentionMode::kExact : model::AttentionMode::kFlash;
         },
         "attention: on (tiled flash attention, default) or off (llama.cpp's exact non-flash path)")
      ->check(CLI::IsMember({"on", "off"}, CLI::ignore_case))->default_str("on");
  cmd->add_option("-b,--batch", o->batch, "prompt tokens evaluated per step (beside one decode row per running request)")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_flag("--exact-batches", o->exact_batches,
                "Q4_0/Q4_K/Q6_K prompt batches in the decode path's summation order: a prompt's logits "
                "bit-identical to token-by-token evaluation (prompt processing up to 2x slower)");
  cmd->add_flag("--fast-batches", o->fast_batches,
                "Q4_0/Q4_K/Q6_K decode rows of 4+ sequences in the faster lane order too (up to 1.4x the "
                "throughput at 8 streams; a request's text may then part from the same request alone at "
                "near-ties)")->excludes("--exact-batches");
}

// The context to allocate; an error message (non-empty) when --ctx exceeds the model's.
inline int resolve_ctx(const RunOptions& o, const model::Config& c, std::string* error = nullptr) {
  if (o.ctx > c.ctx_train && error)
    *error = "--ctx " + std::to_string(o.ctx) + " exceeds the model's trained context of " +
             std::to_string(c.ctx_train) + " tokens; use --ctx " + std::to_string(c.ctx_train) + " or less";
  if (o.ctx > 0) return std::min(o.ctx, c.ctx_train);
  return std::min(c.ctx_train, 4096);
}

inline void add_sampler_options(CLI::App* cmd, sampler::Params* s) {
  // (CLI::NonNegativeNumber's error prints DBL_MAX in full.)
  const CLI::Validator non_negative(
      [](std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return end != v.c_str() && *end == 0 && x >= 0 ? std::string() : "must be 0 (greedy) or more, not " + v;
      },
      "");
  cmd->add_option("--temp", s->temperature, "temperature (0: greedy)")->capture_default_str()->check(non_negative);
  cmd->add_option("--top-k", s->top_k, "top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", s->top_p, "top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", s->min_p, "min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", s->repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", s->repeat_last_n, "tokens the penalties look back")->capture_default_str();
  cmd->add_option("--presence-penalty", s->presence_penalty, "subtracted from the logit of every token seen (0: off)")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", s->frequency_penalty,
                  "subtracted from a token's logit per time it was seen (0: off)")->capture_default_str();
  cmd->add_option("--seed", s->seed, "random seed (default: a random one; 0 and up reproduce a run)");
}

// The seed of a run: --seed's value when given, else a random one, so that sampling with a
// temperature differs from run to run unless asked to repeat.
inline uint64_t run_seed(const CLI::App* cmd, uint64_t given) {
  if (cmd->count("--seed") > 0) return given;
  std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

// Cluster options of the commands that run a model (DESIGN §1: the root drives workers).
struct ClusterCliOptions {
  std::vector<std::string> workers;
  std::vector<std::string> shares = {"auto"};
  std::string sync = "auto";
  std::string algo = "auto";
  std::string cluster_key;
  std::string cluster_key_file;
  bool insecure = false;
  std::string link_encryption = "on";
  std::vector<std::string> spares;
  bool no_recovery = false;
  std::string transport = "tcp";  // tcp | mpi (cli/mpi.cc)
  bool model_local = false;       // mpi: every rank reads -m itself
};

// The MPI job's transport on rank 0 under --transport mpi (cli/mpi.cc), else null.
std::shared_ptr<net::Transport> mpi_world();

inline void add_cluster_options(CLI::App* cmd, ClusterCliOptions* o) {
  cmd->add_option("--workers", o->workers, "workers host:port,... (each started with `shardlm worker`)")
      ->delimiter(',');
  cmd->add_option("--shares", o->shares,
                  "auto (measured speed when the nodes' devices differ, else equal), measured, equal, or the "
                  "relative capacity of each node, root first, e.g. 2,1,1")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--sync-type", o->sync,
                  "auto (exact unless the measured links make q8_0 a third faster, never on loopback; printed), exact (gathers: "
                  "bit-identical to one node), or the all-reduce encoding q8_0 (perplexity +0.35% on 3 nodes), f16, f32")
      ->capture_default_str();
  cmd->add_option("--allreduce", o->algo, "all-reduce: auto, all-gather, star, ring or mpi (MPI_Allreduce: --transport mpi, f32/f16)")->capture_default_str();
  cmd->add_option("--cluster-key", o->cluster_key,
                  "shared secret the workers were started with (visible in ps: prefer --cluster-key-file or "
                  "$SHARDLM_CLUSTER_KEY)");
  cmd->add_option("--cluster-key-file", o->cluster_key_file, "read the cluster key from this file")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--insecure", o->insecure, "allow --link-encryption off");
  cmd->add_option("--link-encryption", o->link_encryption,
                  "on: encrypt and authenticate every frame to keyed workers (default); off needs --insecure")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd->add_option("--spare", o->spares,
                  "idle workers host:port,... that take a lost worker's place (else the root re-plans over the rest)")
      ->delimiter(',');
  cmd->add_flag("--no-recovery", o->no_recovery,
                "end the run when a worker is lost, instead of re-forming the cluster and replaying");
  cmd->add_option("--transport", o->transport,
                  "tcp (--workers started with `shardlm worker`) or mpi (started by `mpirun -np N` or `srun`: rank 0 "
                  "is the root, every other rank a worker)")
      ->check(CLI::IsMember({"tcp", "mpi"}))->capture_default_str();
  cmd->add_flag("--model-local", o->model_local,
                "--transport mpi: every rank reads -m FILE itself (same path) instead of receiving its slice from rank 0");
}

// Fills runtime::ClusterOptions for n_slots sequences of ctx positions each (a prompt
// chunk of --batch tokens plus one decode row per slot per step, and guess_rows guesses
// per slot to verify with it); an error message when an option is invalid.
inline std::string cluster_options(const ClusterCliOptions& c, const RunOptions& r, int ctx,
                                   runtime::ClusterOptions* out, int n_slots = 1, int guess_rows = 0) {
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
  if (c.transport == "mpi") {
    out->transport = mpi_world();
    if (!out->transport)
      return "--transport mpi: start every rank with mpirun or srun (e.g. `mpirun -np 3 shardlm generate -m FILE -p "
             "TEXT --transport mpi`), giving --transport mpi as two words or as --transport=mpi";
  }
  std::vector<std::string> warnings;
  auto key = net::resolve_cluster_key(c.cluster_key, c.cluster_key_file, &warnings);
  if (!key) return key.error();
  std::vector<std::string> all = c.workers;
  all.insert(all.end(), c.spares.begin(), c.spares.end());
  if (util::Status st = net::check_root_security(all, *key, c.insecure, c.link_encryption == "on", &warnings); !st.ok())
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
  out->link_encryption = c.link_encryption == "on";
  out->ctx = ctx;
  out->kv_type = r.kv_type;
  out->attention = r.attention;
  out->batch = r.batch + n_slots * (1 + guess_rows);
  out->n_slots = n_slots;
  out->lane_order = !r.exact_batches;
  out->decode_lanes = r.fast_batches;
  if (std::string e = device_factory(r.device, &out->backend); !e.empty()) return e;
  if (r.device != "cpu" && (!c.workers.empty() || c.transport == "mpi")) {  // named in speed probes
    auto dev = device_name(r.device);
    if (!dev) return dev.error();
    out->device = *dev;
  }
  return "";
}

}  // namespace cli
