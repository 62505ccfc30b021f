// bench.cc: `shardlm bench`: prompt-processing and decode speed of a model on this machine,
// with achieved weight-read GB/s per decoded token and (with --bandwidth) this machine's
// measured read bandwidth for comparison. Prints a table, or JSON with --json (with, for a
// cluster, each node's decode compute / sync ms and bytes sent / received per token).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "runtime/cluster.h"
#include "sampler/distributed.h"
#include "sampler/sampler.h"
#include "util/thread_pool.h"
#include "util/timer.h"

namespace cli {

namespace {

// Best-of-3 read bandwidth over a 1 GiB buffer with all pool threads, in GB/s.
double measure_read_bandwidth(util::ThreadPool& pool) {
  const size_t n = (size_t(1) << 30) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n);
  pool.parallel_for(int64_t(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[i] = uint64_t(i);
  });
  double best = 0;
  std::vector<uint64_t> sums(pool.size());
  for (int rep = 0; rep < 3; ++rep) {
    util::Timer t;
    pool.run([&](int ith, int nth) {
      int64_t b, e;
      util::split_range(int64_t(n), ith, nth, &b, &e);
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = b; i + 3 < e; i += 4) {
        s0 += buf[i]; s1 += buf[i + 1]; s2 += buf[i + 2]; s3 += buf[i + 3];
      }
      sums[ith] = s0 + s1 + s2 + s3;
    });
    best = std::max(best, n * sizeof(uint64_t) / t.seconds() / 1e9);
  }
  return best;
}

struct Stat {
  double mean = 0, sd = 0;
};
Stat stat(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / (v.size() - 1)) : 0;
  return s;
}

// bench's own flags.
struct BenchOptions {
  int n_prompt = 64, n_gen = 32, reps = 3, parallel = 1;
  bool bandwidth = false, json = false;
};

// What the repetitions measured: tokens/s of each prompt and decode phase, and per node
// the decode phases' counters (summed) and names.
struct Measured {
  std::vector<double> pp, tg;
  std::vector<runtime::NodeStats> tg1;           // counters after the last decode phase
  std::vector<runtime::NodeCounters> tg_sum;     // summed over the decode phases
};

// One decode phase: every sequence decodes n_gen tokens from the prompt (the others
// evaluate it untimed); adds its tokens/s and counters to *out. An error message or "".
std::string decode_phase(runtime::Cluster& cluster, std::vector<std::unique_ptr<runtime::Sequence>>& seqs,
                         const std::vector<int32_t>& prompt, const BenchOptions& b, Measured* out) {
  std::vector<int32_t> tok(seqs.size(), prompt[0]);
  seqs[0]->truncate(b.n_prompt > 0 ? b.n_prompt : 0);
  for (size_t i = 1; i < seqs.size(); ++i) {
    seqs[i]->truncate(0);
    if (b.n_prompt > 0) {
      auto st = cluster.extend(*seqs[i], std::span<const int32_t>(prompt.data(), b.n_prompt), false);
      if (!st) return st.error();
    }
  }
  const std::vector<runtime::NodeStats> tg0 = cluster.stats();
  util::Timer t;
  std::vector<runtime::Cluster::SeqStep> batch(seqs.size());
  for (int i = 0; i < b.n_gen; ++i) {
    for (size_t j = 0; j < seqs.size(); ++j)
      batch[j] = {seqs[j].get(), std::span<const int32_t>(&tok[j], 1), runtime::Want::kCandidates, {}};
    auto next = cluster.run(batch);
    if (!next) return next.error();
    for (size_t j = 0; j < seqs.size(); ++j) tok[j] = (*next)[j].tokens[0];
  }
  out->tg.push_back(double(b.n_gen) * b.parallel / t.seconds());
  out->tg1 = cluster.stats();
  for (int i = 0; i < cluster.n_nodes(); ++i) {
    const auto &x = tg0[i].counters, &y = out->tg1[i].counters;
    out->tg_sum[i].compute_s += y.compute_s - x.compute_s;
    out->tg_sum[i].sync_s += y.sync_s - x.sync_s;
    out->tg_sum[i].bytes_sent += y.bytes_sent - x.bytes_sent;
    out->tg_sum[i].bytes_received += y.bytes_received - x.bytes_received;
  }
  return "";
}

// The repetitions of a prompt phase and a decode phase over a random prompt.
std::string measure(runtime::Cluster& cluster, const model::Config& cfg, const BenchOptions& b, Measured* out) {
  std::mt19937 rng(42);
  std::vector<int32_t> prompt(std::max(1, b.n_prompt));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % cfg.n_vocab);
  sampler::Params greedy;
  greedy.temperature = 0;
  std::vector<std::unique_ptr<runtime::Sequence>> seqs;
  for (int i = 0; i < b.parallel; ++i) {
    seqs.push_back(std::make_unique<runtime::Sequence>(i, cfg.n_vocab));
    seqs.back()->set_sampling(greedy);
  }
  runtime::Sequence& seq = *seqs[0];
  auto warm = cluster.extend(seq, std::span<const int32_t>(prompt.data(), 1), true);  // warm-up: page in weights
  if (!warm) return warm.error();
  out->tg_sum.assign(size_t(cluster.n_nodes()), {});
  for (int r = 0; r < b.reps; ++r) {
    if (b.n_prompt > 0) {
      util::Timer t;
      seq.truncate(0);
      auto st = cluster.extend(seq, std::span<const int32_t>(prompt.data(), b.n_prompt), true);
      if (!st) return st.error();
      out->pp.push_back(b.n_prompt / t.seconds());
    }
    if (b.n_gen > 0)
      if (std::string e = decode_phase(cluster, seqs, prompt, b, out); !e.empty()) return e;
  }
  return "";
}

// The figures, as a table or (--json) one JSON object.
void report(const RunOptions& o, const BenchOptions& b, const model::LoadedModel& m, runtime::Cluster& cluster,
            const Measured& me, double bw) {
  const model::Config& cfg = m.config;
  const double n_tg = double(b.n_gen) * b.reps * b.parallel;
  const double weight_gb = double(m.weights.matrix_bytes(cfg)) / 1e9;
  const Stat spp = me.pp.empty() ? Stat{} : stat(me.pp), stg = me.tg.empty() ? Stat{} : stat(me.tg);
  const double gbs = stg.mean / b.parallel * weight_gb;  // weights are read once per step
  const auto& tg1 = me.tg1;
  const auto& tg_sum = me.tg_sum;
  if (b.json) {
    std::printf("{\"model\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, "
                "\"parallel\": %d, \"kv_type\": \"%s\", \"attention\": \"%s\", "
                "\"pp_tps\": %.3f, \"pp_sd\": %.3f, \"tg_tps\": %.3f, \"tg_sd\": %.3f, "
                "\"weight_gb\": %.4f, \"tg_gbps\": %.3f, \"read_bw_gbps\": %.3f, \"n_nodes\": %d, "
                "\"cluster\": \"%s\", \"device\": \"%s\", \"nodes\": [",
                o.model.c_str(), o.threads, kernels::isa_name(kernels::active_isa()), b.n_prompt, b.n_gen,
                b.parallel, model::kv_type_name(o.run.kv_type), model::attention_label(o.run),
                spp.mean, spp.sd, stg.mean, stg.sd, weight_gb, gbs, bw, cluster.n_nodes(),
                cluster.n_nodes() > 1 ? cluster.describe().c_str() : "", cluster.root_device().c_str());
    // Per node, per generated token (decode phases only): compute and sync ms, bytes.
    for (int i = 0; i < cluster.n_nodes() && !me.tg.empty(); ++i)
      std::printf("%s{\"name\": \"%s\", \"tg_compute_ms\": %.4f, \"tg_sync_ms\": %.4f, "
                  "\"tg_bytes_sent\": %.1f, \"tg_bytes_received\": %.1f}",
                  i ? ", " : "", tg1[i].name.c_str(), tg_sum[i].compute_s * 1e3 / n_tg,
                  tg_sum[i].sync_s * 1e3 / n_tg, tg_sum[i].bytes_sent / n_tg, tg_sum[i].bytes_received / n_tg);
    std::printf("]}\n");
    return;
  }
  const std::string isa = kernels::isa_name(kernels::active_isa()) + kernels::kquant_width_note();
  std::printf("model %s: %s, %.3f GB of matrices, %d threads, %s, KV %s, attention %s\n", o.model.c_str(),
              cfg.arch_name.c_str(), weight_gb, o.threads, isa.c_str(), model::kv_type_name(o.run.kv_type),
              model::attention_label(o.run));
  std::printf("device: %s\n", cluster.root_device().c_str());
  if (!me.pp.empty()) std::printf("pp%-5d %10.2f ± %.2f tokens/s\n", b.n_prompt, spp.mean, spp.sd);
  if (!me.tg.empty())
    std::printf("tg%-5d %10.2f ± %.2f tokens/s%s  (%.2f GB/s of weights)\n", b.n_gen, stg.mean, stg.sd,
                b.parallel > 1 ? (" of " + std::to_string(b.parallel) + " sequences").c_str() : "", gbs);
  if (cluster.n_nodes() > 1) std::printf("cluster: %s\n", cluster.describe().c_str());
  if (!me.tg.empty())
    for (int i = 0; i < cluster.n_nodes(); ++i)
      std::printf("tg node %d (%s): %.2f ms compute + %.2f ms sync per token, %.0f B sent, %.0f B received "
                  "per token\n", i, tg1[i].name.c_str(), tg_sum[i].compute_s * 1e3 / n_tg,
                  tg_sum[i].sync_s * 1e3 / n_tg, tg_sum[i].bytes_sent / n_tg, tg_sum[i].bytes_received / n_tg);
  if (b.bandwidth)
    std::printf("read bandwidth %.2f GB/s (%d threads); decode reaches %.0f%%\n", bw, o.threads, 100.0 * gbs / bw);
}

int run_bench(const RunOptions& o, const ClusterCliOptions& co, const BenchOptions& b) {
  auto m = model::load_model(o.model);
  if (!m) return fail(m.error());
  const model::Config& cfg = (*m)->config;
  std::string ctx_error;
  const int ctx = std::max(resolve_ctx(o, cfg, &ctx_error), b.n_prompt + b.n_gen + 1);
  if (!ctx_error.empty()) return fail(ctx_error);
  if (ctx > cfg.ctx_train) return fail("-p + -n exceeds the model's trained context");
  util::ThreadPool pool(o.threads);
  runtime::ClusterOptions copt;
  if (std::string e = cluster_options(co, o, ctx, &copt, b.parallel); !e.empty()) return fail(e);
  const double root_bytes = double((*m)->file->file_size()) / double(1 + co.workers.size());
  if (std::string e = kv_pool_options(cfg, o, ctx, b.parallel, root_bytes, &copt); !e.empty()) return fail(e);
  const int need = b.parallel * model::kv_blocks_for(b.n_prompt + b.n_gen);  // every sequence at its end at once
  if (copt.run.kv_blocks > 0 && copt.run.kv_blocks < need)
    return fail("--kv-memory " + o.kv_memory + " holds " + std::to_string(copt.run.kv_blocks) + " blocks of " +
                std::to_string(model::kKvBlockRows) + " positions; --parallel " + std::to_string(b.parallel) +
                " sequences of -p + -n = " + std::to_string(b.n_prompt + b.n_gen) + " positions need " +
                std::to_string(need));
  auto cl = runtime::Cluster::start(**m, o.model, copt, pool);
  if (!cl) return fail(cl.error());
  Measured me;
  if (std::string e = measure(**cl, cfg, b, &me); !e.empty()) return fail(e);
  const double bw = b.bandwidth ? measure_read_bandwidth(pool) : 0;
  report(o, b, **m, **cl, me, bw);
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  const ModelCommand m = add_model_command(app, "bench", "measure prompt and decode speed", Speculates::kNo);
  auto b = std::make_shared<BenchOptions>();
  m.cmd->add_option("-p,--n-prompt", b->n_prompt, "prompt tokens (0: skip)")->capture_default_str();
  m.cmd->add_option("-n,--n-gen", b->n_gen, "generated tokens (0: skip)")->capture_default_str();
  m.cmd->add_option("-r,--repetitions", b->reps, "repetitions")->capture_default_str()->check(CLI::Range(1, 1000));
  m.cmd->add_flag("--bandwidth", b->bandwidth, "also measure this machine's memory read bandwidth");
  m.cmd->add_flag("--json", b->json, "print one JSON object");
  m.cmd->add_option("--parallel", b->parallel, "sequences decoding together (tg: tokens/s of all of them)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  return m.command([=]() { return run_bench(*m.run, *m.cluster, *b); });
}

}  // namespace cli
