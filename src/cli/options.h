// options.h: the parsed options of the commands that run a model (RunOptions: model path,
// threads, context, KV cache, batch, device; ClusterCliOptions: the root's cluster), and of
// a node's security (KeyFlags, shared by the root, `shardlm worker` and MPI ranks). Every
// flag that fills them is defined once, in flags.cc.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/transformer.h"
#include "net/transport.h"
#include "runtime/cluster.h"
#include "runtime/worker.h"
#include "sampler/sampler.h"

namespace cli {

struct RunOptions {
  std::string model;
  int threads = std::max(1u, std::thread::hardware_concurrency());
  int ctx = 0;  // 0: min(trained context, 4096)
  // 128: measured best or within noise of the best from 32 to 512 on SmolLM2 and the 1B
  // shape, 1 and 2 threads (docs/BENCHMARKS.md); larger only adds buffer memory.
  int batch = 128;  // prompt rows per step (the step's rows: cluster_options)
  std::string device = "cpu";  // cpu | vulkan[:N] (cli/device.h)
  // --kv-memory: the KV pool's bytes per node ("" : --parallel full contexts, as slots were;
  // a number with an optional K, M, G suffix, powers of 1024).
  std::string kv_memory;
  // --cache-ram (serve): MiB of host memory per node for KV blocks evicted from the pool
  // (llama-server's option: 0 off, -1 no limit); others keep none.
  int64_t cache_ram_mib = 0;
  // How every node runs the model, as the flags set it (--kv-type, --flash-attn,
  // --exact-batches, --fast-batches, --attn-bf16); the backend adds ctx, slots, the KV pool
  // (--kv-memory) and rows per step.
  // Flash by default: faster at long context, and a prompt's logits do not depend on its
  // batch split. `--flash-attn off` is llama.cpp's non-flash path to the bit.
  model::RunConfig run{.attention = model::AttentionMode::kFlash};
};

// --cluster-key, --cluster-key-file, --insecure, --link-encryption (net/cluster_key.h).
struct KeyFlags {
  std::string key, key_file;
  bool insecure = false;
  std::string encryption = "on";
};

// Cluster options of the commands that run a model (DESIGN §1: the root drives workers).
struct ClusterCliOptions {
  std::vector<std::string> workers;
  std::vector<std::string> shares = {"auto"};
  std::string sync = "auto";
  std::string algo = "auto";
  KeyFlags key;
  std::vector<std::string> spares;
  bool no_recovery = false;
  std::string transport = "tcp";  // tcp | mpi (cli/mpi.cc)
  bool model_local = false;       // mpi: every rank reads -m itself
  // Under --transport mpi, the job's transport on rank 0 (set by cli/mpi.cc before the
  // command runs).
  std::shared_ptr<net::Transport> world;
};

// The context to allocate; an error message (non-empty) when --ctx exceeds the model's.
int resolve_ctx(const RunOptions& o, const model::Config& c, std::string* error = nullptr);

// The seed of a run: --seed's value when given, else a random one, so that sampling with a
// temperature differs from run to run unless asked to repeat.
uint64_t run_seed(const CLI::App* cmd, uint64_t given);

// Fills runtime::ClusterOptions for n_slots sequences of ctx positions each (a prompt
// chunk of --batch tokens plus one decode row per slot per step, and guess_rows guesses
// per slot to verify with it); an error message when an option is invalid.
std::string cluster_options(const ClusterCliOptions& c, const RunOptions& r, int ctx, runtime::ClusterOptions* out,
                            int n_slots = 1, int guess_rows = 0);

// A worker's --device (a `shardlm worker` or an MPI rank): its backend factory and, when
// not the CPU, its description; an error message when the device is not there.
std::string worker_device(const std::string& device, runtime::WorkerOptions* o);

// The flags (flags.cc). A flag two subcommands take is defined once, there.
enum class Side { kRoot, kWorker };  // whose help text: the root's or `shardlm worker`'s
void add_threads_option(CLI::App* cmd, int* threads);
void add_device_option(CLI::App* cmd, std::string* device);
void add_key_options(CLI::App* cmd, KeyFlags* o, Side side);
void add_sampler_options(CLI::App* cmd, sampler::Params* s);

// A subcommand that runs a model on a cluster (generate, chat, serve, bench, perplexity).
// Its options begin, in this order, with the run options (-m, -t, --device, --ctx, KV
// cache, batch), the cluster options (--workers ... --model-local) and, where it
// speculates, the speculative-decoding ones (cli/speculation.h); it adds its own after them.
struct SpecCliOptions;
struct ModelCommand {
  CLI::App* cmd = nullptr;
  std::shared_ptr<RunOptions> run;
  std::shared_ptr<ClusterCliOptions> cluster;
  std::shared_ptr<SpecCliOptions> spec;  // null unless it speculates
  Command command(Runner r) const { return Command(std::move(r), run, cluster); }
};
enum class Speculates : bool { kNo, kYes };
// `defaults`: the run options' defaults where the command's differ (perplexity's batch).
ModelCommand add_model_command(CLI::App& app, const std::string& name, const std::string& description,
                               Speculates speculates, const RunOptions& defaults = {});
// CLI::ExistingFile for a file only the root opens: not checked on the other ranks of an
// MPI job (they parse the same command line but never open it).
const CLI::Validator& root_file();

}  // namespace cli
