// backend.cc: opens the model, tokenizer, chat template, cluster and engine for `serve`
// and `chat`.
#include "cli/backend.h"

#include <cstdio>

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

std::string open_backend(const RunOptions& o, const ClusterCliOptions& co, const std::string& chat_template,
                         Backend* b) {
  auto m = model::load_model(o.model);
  if (!m) return m.error();
  b->model = std::move(*m);
  auto tok = tokenizer::Tokenizer::from_gguf(*b->model->file);
  if (!tok) return o.model + ": " + tok.error();
  b->tok = std::move(*tok);
  auto prompts = serve::PromptBuilder::create(*b->model->file, *b->tok, chat_template);
  if (!prompts) return prompts.error();
  b->prompts.emplace(std::move(*prompts));
  const int ctx = resolve_ctx(o, b->model->config);
  runtime::ClusterOptions copt;
  if (std::string e = cluster_options(co, o, ctx, &copt); !e.empty()) return e;
  copt.software_version = SHARDLM_VERSION;
  b->pool = std::make_unique<util::ThreadPool>(o.threads);
  auto cl = runtime::Cluster::start(*b->model, o.model, copt, *b->pool);
  if (!cl) return cl.error();
  b->cluster = std::move(*cl);
  if (b->cluster->n_nodes() > 1) std::fprintf(stderr, "cluster: %s\n", b->cluster->describe().c_str());
  b->engine = std::make_unique<serve::Engine>(*b->cluster, *b->tok, b->model->config.n_vocab, ctx);
  return "";
}

}  // namespace cli
