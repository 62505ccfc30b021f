// perplexity.cc: `shardlm perplexity`: perplexity of a model on a text file with llama.cpp's
// method (examples/perplexity): the whole text tokenized once (BOS as the model's flags
// say), cut into chunks of --ctx tokens, each chunk evaluated from position 0 with its
// first token replaced by BOS when the model adds BOS, and only the second half of every
// chunk scored (the logits of positions ctx/2 .. ctx-2 against the tokens that follow).
// Prints the running perplexity after each chunk and "Final estimate: PPL = x +/- e" as
// llama.cpp does. With --workers the rows are scored across the cluster without gathering
// logits (runtime::Cluster::score).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "model/loader.h"
#include "runtime/cluster.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"
#include "util/timer.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

namespace {

// The scored rows' negative log-likelihoods: sum, sum of squares, count.
struct Nll {
  double sum = 0, sum2 = 0;
  long count = 0;
};

// Scores n_chunk chunks of n_ctx tokens (the second half of each), printing the running
// perplexity after each; an error message or "".
std::string score_chunks(runtime::Cluster& cluster, const tokenizer::Tokenizer& tk, const std::vector<int32_t>& tokens,
                         int n_chunk, int n_ctx, int batch, int n_vocab, Nll* out) {
  const bool add_bos = tk.add_bos();
  const int32_t bos = tk.bos();
  const int first = n_ctx / 2;
  Nll& r = *out;
  std::vector<int32_t> chunk(n_ctx), targets(n_ctx);
  runtime::Sequence seq(0, n_vocab);
  util::Timer t_all;
  for (int i = 0; i < n_chunk; ++i) {
    const size_t start = size_t(i) * n_ctx;
    std::copy(tokens.begin() + start, tokens.begin() + start + n_ctx, chunk.begin());
    if (add_bos && bos >= 0) chunk[0] = bos;
    // Row j predicts the text's token start + j + 1; rows first .. n_ctx - 2 count.
    for (int j = 0; j < n_ctx; ++j) targets[j] = j >= first && j < n_ctx - 1 ? tokens[start + j + 1] : -1;
    // Batches end at `first` too, so the unscored first half computes no logits (the
    // rows do not depend on the batch split, so this changes no result).
    seq.truncate(0);
    for (int b = 0; b < n_ctx;) {
      const int n = std::min(batch, (b < first ? first : n_ctx) - b);
      auto v = cluster.score(seq, std::span<const int32_t>(chunk).subspan(b, n),
                             std::span<const int32_t>(targets).subspan(b, n));
      if (!v) return v.error();
      for (double x : *v) {
        r.sum += x;
        r.sum2 += x * x;
        ++r.count;
      }
      b += n;
    }
    if (i == 0)
      std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.1f minutes\n", t_all.seconds(),
                   t_all.seconds() * n_chunk / 60);
    std::printf("[%d]%.4f,", i + 1, std::exp(r.sum / r.count));
    std::fflush(stdout);
  }
  std::printf("\n");
  return "";
}

int run_perplexity(const RunOptions& o, const ClusterCliOptions& co, const std::string& file, int chunks) {
  auto m = model::load_model(o.model);
  if (!m) return fail(m.error());
  auto tok = tokenizer::Tokenizer::from_gguf(*(*m)->file);
  if (!tok) return fail(o.model + ": " + tok.error());
  const model::Config& cfg = (*m)->config;
  RunOptions ro = o;
  if (ro.ctx == 0) ro.ctx = 512;  // llama.cpp's usual perplexity context
  std::string ctx_error;
  const int n_ctx = resolve_ctx(ro, cfg, &ctx_error);
  if (!ctx_error.empty()) return fail(ctx_error);
  if (n_ctx < 4) return fail("--ctx must be at least 4 for perplexity");
  ro.batch = std::min(ro.batch, n_ctx);

  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return fail("cannot read " + file);
  util::Timer t_tok;
  const std::vector<int32_t> tokens = (*tok)->encode(ss.str(), /*add_special=*/true, /*parse_special=*/false);
  std::fprintf(stderr, "perplexity: tokenization took %.1f ms, %zu tokens\n", t_tok.seconds() * 1e3, tokens.size());
  if (tokens.size() < size_t(2) * n_ctx)
    return fail("the text has " + std::to_string(tokens.size()) + " tokens; perplexity needs at least 2 * --ctx = " +
                std::to_string(2 * n_ctx) + " (use a longer text or a smaller --ctx)");
  int n_chunk = int(tokens.size() / n_ctx);
  if (chunks >= 0) n_chunk = std::min(n_chunk, chunks);
  if (n_chunk < 1) return fail("--chunks must be at least 1");

  runtime::ClusterOptions copt;
  if (std::string e = cluster_options(co, ro, n_ctx, &copt); !e.empty()) return fail(e);
  const double root_bytes = double((*m)->file->file_size()) / double(1 + co.workers.size());
  if (std::string e = kv_pool_options(cfg, ro, n_ctx, 1, root_bytes, &copt); !e.empty()) return fail(e);
  copt.software_version = SHARDLM_VERSION;
  util::ThreadPool pool(ro.threads);
  auto cl = runtime::Cluster::start(**m, ro.model, copt, pool);
  if (!cl) return fail(cl.error());
  runtime::Cluster& cluster = **cl;
  if (cluster.n_nodes() > 1) std::fprintf(stderr, "cluster: %s\n", cluster.describe().c_str());
  std::fprintf(stderr, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, kv %s, "
               "attention %s\n", n_chunk, n_ctx, ro.batch, model::kv_type_name(ro.run.kv_type),
               model::attention_label(ro.run));
  util::Timer t_all;
  Nll r;
  if (std::string e = score_chunks(cluster, **tok, tokens, n_chunk, n_ctx, ro.batch, cfg.n_vocab, &r); !e.empty())
    return fail(e);
  const double mean = r.sum / r.count;
  const double ppl = std::exp(mean);
  const double var = r.sum2 / r.count - mean * mean;
  if (var > 0)
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, std::sqrt(var / (r.count - 1)) * ppl);
  else
    std::printf("Final estimate: PPL = %.4f\n", ppl);
  std::fprintf(stderr, "perplexity: %ld tokens scored in %.1f s (%.1f tokens/s evaluated)\n", r.count,
               t_all.seconds(), double(n_chunk) * n_ctx / t_all.seconds());
  return 0;
}

}  // namespace

Command add_perplexity(CLI::App& app) {
  RunOptions defaults;
  defaults.batch = 512;
  const ModelCommand m = add_model_command(app, "perplexity", "perplexity of a text file (llama.cpp's method)",
                                           Speculates::kNo, defaults);
  auto file = std::make_shared<std::string>();
  auto chunks = std::make_shared<int>(-1);
  m.cmd->add_option("-f,--file", *file, "text file")->required()->check(root_file());
  m.cmd->add_option("--chunks", *chunks, "score only the first N chunks (-1: all)")->capture_default_str();
  return m.command([=]() { return run_perplexity(*m.run, *m.cluster, *file, *chunks); });
}

}  // namespace cli
