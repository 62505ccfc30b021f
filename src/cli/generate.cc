// generate.cc: `shardlm generate`: prompt in, generated text to stdout (streamed,
// UTF-8 safe), statistics to stderr (prompt and generation tokens/s separately). With
// --workers the model runs on a cluster (runtime::Cluster); one node otherwise. With
// --stats: the seed (random unless --seed is given), per token ms of compute and of sync,
// and bytes sent / received by each node. The text ends with a newline, so the statistics
// start on a line of their own when stdout and stderr share a pipe.
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/speculation.h"
#include "grammar/json_schema.h"
#include "grammar/vocab_mask.h"
#include "model/loader.h"
#include "runtime/cluster.h"
#include "runtime/scheduler.h"
#include "sampler/distributed.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"
#include "util/timer.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

// Per token figures of each node between two snapshots of the cluster's counters.
void print_node_stats(const std::vector<runtime::NodeStats>& a, const std::vector<runtime::NodeStats>& b,
                      int tokens, const char* what) {
  if (tokens <= 0) return;
  if (a.size() != b.size()) {  // the cluster was re-formed in between: its counters started again
    std::fprintf(stderr, "%s: per-node figures left out (the cluster was re-formed)\n", what);
    return;
  }
  for (size_t i = 0; i < b.size(); ++i) {
    const runtime::NodeCounters& x = a[i].counters;
    const runtime::NodeCounters& y = b[i].counters;
    std::fprintf(stderr, "%s node %zu (%s): %.2f ms compute + %.2f ms sync per token, %.1f KiB sent, %.1f KiB "
                 "received per token\n", what, i, b[i].name.c_str(), (y.compute_s - x.compute_s) * 1e3 / tokens,
                 (y.sync_s - x.sync_s) * 1e3 / tokens, double(y.bytes_sent - x.bytes_sent) / 1024 / tokens,
                 double(y.bytes_received - x.bytes_received) / 1024 / tokens);
  }
}

static void print_spec_stats(const runtime::JobEnd& e) {
  std::fprintf(stderr, "speculation: %d guesses verified, %d kept (%.0f%%), %.2f tokens per decode step (%d steps)\n",
               e.guessed, e.kept, e.guessed ? 100.0 * e.kept / e.guessed : 0.0,
               e.rounds ? double(e.generated - 1) / e.rounds : 0.0, e.rounds);
}

Command add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "generate text from a prompt");
  auto o = std::make_shared<RunOptions>();
  auto co = std::make_shared<ClusterCliOptions>();
  auto prompt = std::make_shared<std::string>();
  auto n_predict = std::make_shared<int>(128);
  auto stats = std::make_shared<bool>(false);
  auto s = std::make_shared<sampler::Params>();
  add_run_options(cmd, o.get());
  add_cluster_options(cmd, co.get());
  auto so = std::make_shared<SpecCliOptions>();
  add_spec_options(cmd, so.get());
  cmd->add_option("-p,--prompt", *prompt, "prompt text")->required();
  cmd->add_option("-n,--n-predict", *n_predict, "tokens to generate")->capture_default_str();
  cmd->add_flag("--stats", *stats, "per token compute / sync ms and bytes of each node; speculation's acceptance");
  auto gbnf = std::make_shared<std::string>();
  auto gbnf_file = std::make_shared<std::string>();
  auto schema = std::make_shared<std::string>();
  cmd->add_option("--grammar", *gbnf, "constrain the text to this GBNF grammar (start rule 'root')");
  cmd->add_option("--grammar-file", *gbnf_file, "the same, from a file")->check(root_file());
  cmd->add_option("-j,--json-schema", *schema, "constrain the text to JSON valid under this schema (JSON text)");
  add_sampler_options(cmd, s.get());
  return Command([=]() {
    if (int(!gbnf->empty()) + int(!gbnf_file->empty()) + int(!schema->empty()) > 1)
      return fail("give one of --grammar, --grammar-file and --json-schema");
    std::shared_ptr<const grammar::Grammar> constraint;
    if (!schema->empty()) {
      auto js = nlohmann::ordered_json::parse(*schema, nullptr, false);
      if (js.is_discarded()) return fail("--json-schema is not valid JSON");
      auto g = grammar::json_schema_gbnf(js);
      if (!g) return fail("--json-schema: " + g.status().message());
      *gbnf = *g;
    }
    if (!gbnf_file->empty()) {
      std::ifstream in(*gbnf_file);
      *gbnf = std::string(std::istreambuf_iterator<char>(in), {});
    }
    if (!gbnf->empty()) {
      auto g = grammar::Grammar::parse(*gbnf);
      if (!g) return fail(g.status().message());
      constraint = *g;
    }
    auto m = model::load_model(o->model);
    if (!m) return fail(m.error());
    auto tok = tokenizer::Tokenizer::from_gguf(*(*m)->file);
    if (!tok) return fail(o->model + ": " + tok.error());
    const model::Config& cfg = (*m)->config;
    std::vector<int32_t> tokens = (*tok)->encode(*prompt, /*add_special=*/true, /*parse_special=*/true);
    if (tokens.empty()) return fail("the prompt is empty after tokenization");
    std::string ctx_error;
    const int ctx = resolve_ctx(*o, cfg, &ctx_error);
    if (!ctx_error.empty()) return fail(ctx_error);
    if (static_cast<int>(tokens.size()) + *n_predict > ctx)
      return fail("prompt (" + std::to_string(tokens.size()) + " tokens) plus -n " + std::to_string(*n_predict) +
                  " exceeds the context of " + std::to_string(ctx) + "; raise --ctx or lower -n");
    runtime::ClusterOptions copt;
    if (std::string e = cluster_options(*co, *o, ctx, &copt, 1, so->guess_rows()); !e.empty()) return fail(e);
    copt.software_version = SHARDLM_VERSION;
    util::ThreadPool pool(o->threads);
    Speculator spec;
    const double root_bytes = double((*m)->file->file_size()) / double(1 + co->workers.size());
    if (std::string e = open_speculator(*so, **m, o->model, *o, ctx, 1, root_bytes, pool, &spec); !e.empty())
      return fail(e);
    auto cl = runtime::Cluster::start(**m, o->model, copt, pool);
    if (!cl) return fail(cl.error());
    runtime::Cluster& cluster = **cl;
    if (cluster.n_nodes() > 1) std::fprintf(stderr, "cluster: %s\n", cluster.describe().c_str());
    // The same scheduler as `serve`, with one job.
    runtime::Scheduler sched(cluster, o->batch, spec.spec);
    tokenizer::StreamDecoder dec(**tok);
    const tokenizer::Tokenizer& tk = **tok;
    std::vector<runtime::NodeStats> stats0 = cluster.stats(), stats1, stats2;
    runtime::JobEnd end;
    std::promise<void> ended;
    int generated = 0;
    auto job = std::make_shared<runtime::Job>();
    job->prompt = tokens;
    job->params = *s;
    job->params.seed = run_seed(cmd, s->seed);
    job->max_tokens = std::max(1, *n_predict);
    if (constraint)
      job->constraint = std::make_shared<grammar::GrammarConstraint>(constraint, std::make_shared<grammar::VocabTrie>(tk));
    job->on_token = [&](int32_t id, const sampler::Logprobs*) {  // on the scheduler's thread
      if (generated == 0) stats1 = cluster.stats();
      if (*n_predict == 0 || tk.is_eog(id)) return false;
      ++generated;
      const std::string text = dec.push(id);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    job->on_end = [&](const runtime::JobEnd& e) {
      end = e;
      stats2 = cluster.stats();
      ended.set_value();
    };
    sched.submit(job);
    ended.get_future().wait();
    const std::string rest = dec.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!end.status.ok()) return fail(end.status.message());
    if (stats1.empty()) stats1 = stats2;
    std::fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.2f tokens/s)\n", tokens.size(), end.prompt_s * 1e3,
                 tokens.size() / end.prompt_s);
    std::fprintf(stderr, "generation: %d tokens in %.1f ms (%.2f tokens/s)\n", generated, end.gen_s * 1e3,
                 generated > 0 && end.gen_s > 0 ? generated / end.gen_s : 0.0);
    if (*stats) {
      std::fprintf(stderr, "seed: %llu%s\n", (unsigned long long)job->params.seed,
                   cmd->count("--seed") ? "" : " (random; --seed repeats a run)");
      print_node_stats(stats0, stats1, static_cast<int>(tokens.size()), "prompt");
      print_node_stats(stats1, stats2, end.generated - 1, "generation");
      if (spec.spec.on()) print_spec_stats(end);
    }
    return 0;
  }, o, co);
}

}  // namespace cli
