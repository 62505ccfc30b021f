// backend.cc: opens the model, tokenizer, chat template, cluster and engine for `serve`
// and `chat`.
#include "cli/backend.h"

#include <cstdio>

#include "runtime/node.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

std::string slots_unfit(const model::Config& c, const RunOptions& o, int ctx, int n_slots) {
  if (n_slots < 1) return "--parallel must be at least 1 (the requests that run at once)";
  if (n_slots > runtime::kMaxSlots) return "--parallel must be at most " + std::to_string(runtime::kMaxSlots);
  const runtime::MemoryFit fit = runtime::memory_fit(c, c.n_kv_heads, o.kv_type, ctx, n_slots, 0, 0.8);
  if (!fit.fits)
    return "--parallel " + std::to_string(n_slots) + " slots of " + std::to_string(ctx) + " positions need " +
           std::to_string(int64_t(fit.kv_bytes / 1e6)) +
           " MB of KV cache on the root, more than this machine can hold (" + std::to_string(int64_t(fit.have / 1e6)) +
           " MB of memory); lower --parallel or --ctx, or use --kv-type q8_0";
  return "";
}

std::string open_backend(const RunOptions& o, const ClusterCliOptions& co, const SpecCliOptions& so,
                         const std::string& chat_template, Backend* b, int n_slots, bool need_chat) {
  auto m = model::load_model(o.model);
  if (!m) return m.error();
  b->model = std::move(*m);
  auto tok = tokenizer::Tokenizer::from_gguf(*b->model->file);
  if (!tok) return o.model + ": " + tok.error();
  b->tok = std::move(*tok);
  auto prompts = serve::PromptBuilder::create(*b->model->file, *b->tok, chat_template);
  if (!prompts) return prompts.error();
  if (need_chat && !prompts->has_chat()) return serve::PromptBuilder::no_template_error();
  b->prompts.emplace(std::move(*prompts));
  std::string ctx_error;
  const int ctx = resolve_ctx(o, b->model->config, &ctx_error);
  if (!ctx_error.empty()) return ctx_error;
  if (std::string e = slots_unfit(b->model->config, o, ctx, n_slots); !e.empty()) return e;
  runtime::ClusterOptions copt;
  if (std::string e = cluster_options(co, o, ctx, &copt, n_slots, so.guess_rows()); !e.empty()) return e;
  copt.software_version = SHARDLM_VERSION;
  b->pool = std::make_unique<util::ThreadPool>(o.threads);
  const double root_bytes = double(b->model->file->file_size()) / double(1 + co.workers.size());
  if (std::string e = open_speculator(so, *b->model, o.model, o, ctx, n_slots, root_bytes, *b->pool, &b->spec);
      !e.empty())
    return e;
  auto cl = runtime::Cluster::start(*b->model, o.model, copt, *b->pool);
  if (!cl) return cl.error();
  b->cluster = std::move(*cl);
  if (b->cluster->n_nodes() > 1) std::fprintf(stderr, "cluster: %s\n", b->cluster->describe().c_str());
  b->engine = std::make_unique<serve::Engine>(*b->cluster, *b->tok, o.batch, b->spec.spec);
  return "";
}

}  // namespace cli
