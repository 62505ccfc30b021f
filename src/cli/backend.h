// backend.h: what `serve` and `chat` share: the model, its tokenizer and chat template,
// the cluster (one node or --workers) and the serve::Engine on top.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "cli/options.h"
#include "cli/speculation.h"
#include "model/loader.h"
#include "runtime/cluster.h"
#include "serve/engine.h"
#include "serve/prompt.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace cli {

struct Backend {
  std::unique_ptr<model::LoadedModel> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<util::ThreadPool> pool;
  std::unique_ptr<runtime::Cluster> cluster;
  Speculator spec;  // declared after the pool it runs on, before the engine that uses it
  std::optional<serve::PromptBuilder> prompts;
  std::unique_ptr<serve::Engine> engine;
};

inline void add_chat_template_option(CLI::App* cmd, std::string* choice) {
  cmd->add_option("--chat-template", *choice,
                  "chat template: chatml, llama3, llama2, mistral, qwen2, gemma or a Jinja file "
                  "(default: the model's tokenizer.chat_template)");
}

// Opens everything with n_slots KV slots of the resolved context each; an error message
// ("" on success). need_chat: a model without a chat template (and no --chat-template) is
// refused; else it is opened for completions only (serve).
std::string open_backend(const RunOptions& o, const ClusterCliOptions& co, const SpecCliOptions& so,
                         const std::string& chat_template, Backend* b, int n_slots = 1, bool need_chat = true);
// Why n_slots slots of ctx positions cannot run this model here ("" when they can).
// With --kv-memory, *kv_blocks is the pool's blocks (else 0: n_slots full contexts); a
// --kv-memory larger than the machine or smaller than one context is refused by name.
std::string slots_unfit(const model::Config& c, const RunOptions& o, int ctx, int n_slots, int* kv_blocks = nullptr);
// --cache-ram's blocks: the whole model's KV blocks (every KV head, full layers) its MiB hold
// (-1: no limit), at most what this machine's memory leaves (of the 80 % slots_unfit allows)
// after weight_bytes of the root's weights and the KV pool of kv_blocks; 0 off.
int host_cache_blocks(const model::Config& c, const RunOptions& o, int ctx, int n_slots, int kv_blocks,
                      double weight_bytes);
// The KV pool (--kv-memory) and the host KV cache (--cache-ram) of n_slots sequences of ctx
// positions into out->run (kv_blocks, kv_host_blocks), for every subcommand that builds a
// pool (serve, chat, generate, bench, perplexity), after cluster_options: the flags mean
// the same everywhere. An error message when the pool cannot be held (slots_unfit). Every
// node's memory check counts the host cache's share it may come to hold (runtime::memory_fit).
std::string kv_pool_options(const model::Config& c, const RunOptions& o, int ctx, int n_slots, double weight_bytes,
                            runtime::ClusterOptions* out);

}  // namespace cli
