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

#include "cli/backend.h"
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

namespace {

// generate's own flags.
struct GenerateOptions {
  std::string prompt;
  int n_predict = 128;
  bool stats = false;
  std::string gbnf, gbnf_file, schema;  // --grammar, --grammar-file, --json-schema
};

// The grammar the text must follow (null: none), from at most one of the three flags; an
// error message or "".
std::string read_constraint(const GenerateOptions& g, std::shared_ptr<const grammar::Grammar>* out) {
  if (int(!g.gbnf.empty()) + int(!g.gbnf_file.empty()) + int(!g.schema.empty()) > 1)
    return "give one of --grammar, --grammar-file and --json-schema";
  std::string gbnf = g.gbnf;
  if (!g.schema.empty()) {
    auto js = nlohmann::ordered_json::parse(g.schema, nullptr, false);
    if (js.is_discarded()) return "--json-schema is not valid JSON";
    auto gs = grammar::json_schema_gbnf(js);
    if (!gs) return "--json-schema: " + gs.status().message();
    gbnf = *gs;
  }
  if (!g.gbnf_file.empty()) {
    std::ifstream in(g.gbnf_file);
    gbnf = std::string(std::istreambuf_iterator<char>(in), {});
  }
  if (!gbnf.empty()) {
    auto parsed = grammar::Grammar::parse(gbnf);
    if (!parsed) return parsed.status().message();
    *out = *parsed;
  }
  return "";
}

// One job's run: its end, the tokens it printed, the cluster's counters before the prompt,
// after it and at the end. Outlives the scheduler (its thread ends the job here).
struct JobRun {
  runtime::JobEnd end;
  int generated = 0;
  std::vector<runtime::NodeStats> stats0, stats1, stats2;
  std::promise<void> ended;
};

// Runs job on the scheduler (as `serve` does, with one job), streaming its text to stdout.
void run_job(runtime::Cluster& cluster, runtime::Scheduler& sched, const tokenizer::Tokenizer& tk,
             std::shared_ptr<runtime::Job> job, int n_predict, JobRun* run) {
  tokenizer::StreamDecoder dec(tk);  // used until the job's end
  JobRun& r = *run;
  r.stats0 = cluster.stats();
  job->on_token = [&](int32_t id, const sampler::Logprobs*) {  // on the scheduler's thread
    if (r.generated == 0) r.stats1 = cluster.stats();
    if (n_predict == 0 || tk.is_eog(id)) return false;
    ++r.generated;
    const std::string text = dec.push(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  job->on_end = [&](const runtime::JobEnd& e) {
    r.end = e;
    r.stats2 = cluster.stats();
    r.ended.set_value();
  };
  sched.submit(job);
  r.ended.get_future().wait();
  const std::string rest = dec.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

int run_generate(const CLI::App* cmd, const RunOptions& o, const ClusterCliOptions& co, const SpecCliOptions& so,
                 const GenerateOptions& g, const sampler::Params& s) {
  std::shared_ptr<const grammar::Grammar> constraint;
  if (std::string e = read_constraint(g, &constraint); !e.empty()) return fail(e);
  auto m = model::load_model(o.model);
  if (!m) return fail(m.error());
  auto tok = tokenizer::Tokenizer::from_gguf(*(*m)->file);
  if (!tok) return fail(o.model + ": " + tok.error());
  const model::Config& cfg = (*m)->config;
  std::vector<int32_t> tokens = (*tok)->encode(g.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) return fail("the prompt is empty after tokenization");
  std::string ctx_error;
  const int ctx = resolve_ctx(o, cfg, &ctx_error);
  if (!ctx_error.empty()) return fail(ctx_error);
  if (static_cast<int>(tokens.size()) + g.n_predict > ctx)
    return fail("prompt (" + std::to_string(tokens.size()) + " tokens) plus -n " + std::to_string(g.n_predict) +
                " exceeds the context of " + std::to_string(ctx) + "; raise --ctx or lower -n");
  runtime::ClusterOptions copt;
  if (std::string e = cluster_options(co, o, ctx, &copt, 1, so.guess_rows()); !e.empty()) return fail(e);
  const double root_bytes = double((*m)->file->file_size()) / double(1 + co.workers.size());
  if (std::string e = kv_pool_options(cfg, o, ctx, 1, root_bytes, &copt); !e.empty()) return fail(e);
  copt.software_version = SHARDLM_VERSION;
  util::ThreadPool pool(o.threads);
  Speculator spec;
  if (std::string e = open_speculator(so, **m, o.model, o, ctx, 1, root_bytes, pool, &spec); !e.empty())
    return fail(e);
  auto cl = runtime::Cluster::start(**m, o.model, copt, pool);
  if (!cl) return fail(cl.error());
  runtime::Cluster& cluster = **cl;
  if (cluster.n_nodes() > 1) std::fprintf(stderr, "cluster: %s\n", cluster.describe().c_str());
  JobRun r;
  runtime::Scheduler sched(cluster, o.batch, spec.spec);  // the same scheduler as `serve`, with one job
  auto job = std::make_shared<runtime::Job>();
  job->prompt = tokens;
  job->params = s;
  job->params.seed = run_seed(cmd, s.seed);
  job->max_tokens = std::max(1, g.n_predict);
  if (constraint)
    job->constraint = std::make_shared<grammar::GrammarConstraint>(constraint, std::make_shared<grammar::VocabTrie>(**tok));
  run_job(cluster, sched, **tok, job, g.n_predict, &r);
  const runtime::JobEnd& end = r.end;
  if (!end.status.ok()) return fail(end.status.message());
  if (r.stats1.empty()) r.stats1 = r.stats2;
  std::fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.2f tokens/s)\n", tokens.size(), end.prompt_s * 1e3,
               tokens.size() / end.prompt_s);
  std::fprintf(stderr, "generation: %d tokens in %.1f ms (%.2f tokens/s)\n", r.generated, end.gen_s * 1e3,
               r.generated > 0 && end.gen_s > 0 ? r.generated / end.gen_s : 0.0);
  if (g.stats) {
    std::fprintf(stderr, "seed: %llu%s\n", (unsigned long long)job->params.seed,
                 cmd->count("--seed") ? "" : " (random; --seed repeats a run)");
    print_node_stats(r.stats0, r.stats1, static_cast<int>(tokens.size()), "prompt");
    print_node_stats(r.stats1, r.stats2, end.generated - 1, "generation");
    if (spec.spec.on()) print_spec_stats(end);
  }
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  const ModelCommand m = add_model_command(app, "generate", "generate text from a prompt", Speculates::kYes);
  auto g = std::make_shared<GenerateOptions>();
  auto s = std::make_shared<sampler::Params>();
  m.cmd->add_option("-p,--prompt", g->prompt, "prompt text")->required();
  m.cmd->add_option("-n,--n-predict", g->n_predict, "tokens to generate")->capture_default_str();
  m.cmd->add_flag("--stats", g->stats, "per token compute / sync ms and bytes of each node; speculation's acceptance");
  m.cmd->add_option("--grammar", g->gbnf, "constrain the text to this GBNF grammar (start rule 'root')");
  m.cmd->add_option("--grammar-file", g->gbnf_file, "the same, from a file")->check(root_file());
  m.cmd->add_option("-j,--json-schema", g->schema, "constrain the text to JSON valid under this schema (JSON text)");
  add_sampler_options(m.cmd, s.get());
  return m.command([=]() { return run_generate(m.cmd, *m.run, *m.cluster, *m.spec, *g, *s); });
}

}  // namespace cli
