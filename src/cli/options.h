// options.h: options shared by the commands that run a model (model path, threads,
// context, KV cache type, batch) and by those that sample.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <thread>

#include "model/config.h"
#include "model/kv_cache.h"
#include "sampler/sampler.h"

namespace cli {

struct RunOptions {
  std::string model;
  int threads = std::max(1u, std::thread::hardware_concurrency());
  int ctx = 0;  // 0: min(trained context, 4096)
  model::KvType kv_type = model::KvType::kF16;
  int batch = 32;
};

inline void add_run_options(CLI::App* cmd, RunOptions* o) {
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-t,--threads", o->threads, "compute threads")->capture_default_str()->check(CLI::Range(1, 512));
  cmd->add_option("-c,--ctx", o->ctx, "context length (default: min(trained, 4096))")->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-type", o->kv_type, "KV cache type: f16 or f32")
      ->transform(CLI::CheckedTransformer(std::map<std::string, model::KvType>{
          {"f16", model::KvType::kF16}, {"f32", model::KvType::kF32}}, CLI::ignore_case));
  cmd->add_option("-b,--batch", o->batch, "prompt tokens evaluated per step")->capture_default_str()->check(CLI::Range(1, 4096));
}

inline int resolve_ctx(const RunOptions& o, const model::Config& c) {
  if (o.ctx > 0) return std::min(o.ctx, c.ctx_train);
  return std::min(c.ctx_train, 4096);
}

inline void add_sampler_options(CLI::App* cmd, sampler::Params* s) {
  cmd->add_option("--temp", s->temperature, "temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", s->top_k, "top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", s->top_p, "top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", s->min_p, "min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", s->repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", s->repeat_last_n, "tokens the penalties look back")->capture_default_str();
  cmd->add_option("--presence-penalty", s->presence_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", s->frequency_penalty)->capture_default_str();
  cmd->add_option("--seed", s->seed, "random seed")->capture_default_str();
}

}  // namespace cli
