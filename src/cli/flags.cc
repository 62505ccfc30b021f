// flags.cc: every flag that more than one subcommand takes, defined once, and the options
// every command that runs a model begins with (add_model_command; options.h).
#include <cstdlib>

#include "cli/options.h"
#include "cli/speculation.h"
#include "net/mpi_transport.h"

namespace cli {

const CLI::Validator& root_file() {
  static const CLI::Validator v(
      [](std::string& path) { return net::mpi_env_rank() > 0 ? std::string() : CLI::ExistingFile(path); }, "FILE");
  return v;
}

void add_threads_option(CLI::App* cmd, int* threads) {
  cmd->add_option("-t,--threads", *threads, "compute threads")->capture_default_str()->check(CLI::Range(1, 512));
}

void add_key_options(CLI::App* cmd, KeyFlags* o, Side side) {
  const bool root = side == Side::kRoot;
  cmd->add_option("--cluster-key", o->key,
                  std::string(root ? "shared secret the workers were started with" : "shared secret; the root must give the same") +
                      " (visible in ps: prefer --cluster-key-file or $SHARDLM_CLUSTER_KEY)");
  cmd->add_option("--cluster-key-file", o->key_file,
                  root ? "read the cluster key from this file" : "read the cluster key from this file (`shardlm keygen --out FILE`)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--insecure", o->insecure,
                root ? "allow --link-encryption off"
                     : "listen beyond loopback without a cluster key (anyone who reaches the port can use the worker)");
  cmd->add_option("--link-encryption", o->encryption,
                  std::string("on: encrypt and authenticate every frame ") + (root ? "to keyed workers" : "when keyed") +
                      " (default); off needs --insecure")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
}

void add_device_option(CLI::App* cmd, std::string* device) {
  cmd->add_option("--device", *device,
                  "what runs this node's part: cpu, or vulkan / vulkan:N (a Vulkan device of `shardlm devices`; "
                  "flash attention, f16 KV cache; llama, qwen2, qwen3, gemma3, YaRN included)")
      ->capture_default_str();
}

void add_sampler_options(CLI::App* cmd, sampler::Params* s) {
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

namespace {

void add_run_options(CLI::App* cmd, RunOptions* o) {
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(root_file());
  add_threads_option(cmd, &o->threads);
  add_device_option(cmd, &o->device);
  cmd->add_option("-c,--ctx", o->ctx, "context length, up to the model's trained context (default: min(trained, 4096))")
      ->check(CLI::NonNegativeNumber);
  // Enum options are read as names and mapped here: CLI11's enum transformers print the
  // values (raw bytes for a uint8_t enum) in --help and in their errors.
  cmd->add_option_function<std::string>(
         "--kv-type",
         [o](const std::string& v) {
           o->run.kv_type = v == "f32" ? model::KvType::kF32 : v == "q8_0" ? model::KvType::kQ8_0 : model::KvType::kF16;
         },
         "KV cache type: f16, q8_0 (needs --flash-attn on) or f32")
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}, CLI::ignore_case))->default_str("f16");
  cmd->add_option_function<std::string>(
         "--flash-attn",
         [o](const std::string& v) {
           o->run.attention = v == "off" ? model::AttentionMode::kExact : model::AttentionMode::kFlash;
         },
         "attention: on (tiled flash attention, default) or off (llama.cpp's exact non-flash path)")
      ->check(CLI::IsMember({"on", "off"}, CLI::ignore_case))->default_str("on");
  cmd->add_option("--kv-memory", o->kv_memory,
                  "KV cache pool per node in bytes (K, M, G suffixes: powers of 1024), shared by the running "
                  "requests in blocks of 64 positions (default: --parallel full contexts)");
  cmd->add_option("-b,--batch", o->batch, "prompt tokens evaluated per step (beside one decode row per running request)")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_flag_callback("--exact-batches", [o] { o->run.lane_order = false; },
                "Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K/Q2_K/Q3_K/IQ4_XS/IQ4_NL/MXFP4 prompt batches in the decode path's summation order: a prompt's logits "
                "bit-identical to token-by-token evaluation (prompt processing up to 2x slower)");
  cmd->add_flag("--fast-batches", o->run.decode_lanes,
                "lane-order types' decode rows of 4+ sequences in the faster lane order too (up to 1.4x the "
                "throughput at 8 streams; a request's text may then part from the same request alone at "
                "near-ties)")->excludes("--exact-batches");
  cmd->add_flag("--attn-bf16", o->run.attn_bf16,
                "flash attention's QK^T and PV in BF16 (vdpbf16ps) on CPUs with AVX512_BF16, F16 KV cache: "
                "faster long prompts, numbers rounded to BF16 (an error where the CPU lacks it)");
}

void add_cluster_options(CLI::App* cmd, ClusterCliOptions* o) {
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
  add_key_options(cmd, &o->key, Side::kRoot);
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

}  // namespace

ModelCommand add_model_command(CLI::App& app, const std::string& name, const std::string& description,
                               Speculates speculates, const RunOptions& defaults) {
  ModelCommand m{app.add_subcommand(name, description), std::make_shared<RunOptions>(defaults),
                 std::make_shared<ClusterCliOptions>(), nullptr};
  add_run_options(m.cmd, m.run.get());
  add_cluster_options(m.cmd, m.cluster.get());
  if (speculates == Speculates::kYes) {
    m.spec = std::make_shared<SpecCliOptions>();
    add_spec_options(m.cmd, m.spec.get());
  }
  return m;
}

}  // namespace cli
