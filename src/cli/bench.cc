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

}  // namespace

Command add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "measure prompt and decode speed");
  auto o = std::make_shared<RunOptions>();
  auto n_prompt = std::make_shared<int>(64);
  auto n_gen = std::make_shared<int>(32);
  auto reps = std::make_shared<int>(3);
  auto bandwidth = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto parallel = std::make_shared<int>(1);
  auto co = std::make_shared<ClusterCliOptions>();
  add_run_options(cmd, o.get());
  add_cluster_options(cmd, co.get());
  cmd->add_option("-p,--n-prompt", *n_prompt, "prompt tokens (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", *n_gen, "generated tokens (0: skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", *reps, "repetitions")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_flag("--bandwidth", *bandwidth, "also measure this machine's memory read bandwidth");
  cmd->add_flag("--json", *json, "print one JSON object");
  cmd->add_option("--parallel", *parallel, "sequences decoding together (tg: tokens/s of all of them)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  return Command([=]() {
    auto m = model::load_model(o->model);
    if (!m) return fail(m.error());
    const model::Config& cfg = (*m)->config;
    std::string ctx_error;
    const int ctx = std::max(resolve_ctx(*o, cfg, &ctx_error), *n_prompt + *n_gen + 1);
    if (!ctx_error.empty()) return fail(ctx_error);
    if (ctx > cfg.ctx_train) return fail("-p + -n exceeds the model's trained context");
    util::ThreadPool pool(o->threads);
    std::mt19937 rng(42);
    std::vector<int32_t> prompt(std::max(1, *n_prompt));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % cfg.n_vocab);
    std::vector<float> logits(cfg.n_vocab);
    std::vector<double> pp, tg;
    runtime::ClusterOptions copt;
    if (std::string e = cluster_options(*co, *o, ctx, &copt, *parallel); !e.empty()) return fail(e);
    auto cl = runtime::Cluster::start(**m, o->model, copt, pool);
    if (!cl) return fail(cl.error());
    runtime::Cluster& cluster = **cl;
    sampler::Params greedy;
    greedy.temperature = 0;
    std::vector<std::unique_ptr<runtime::Sequence>> seqs;
    for (int b = 0; b < *parallel; ++b) {
      seqs.push_back(std::make_unique<runtime::Sequence>(b, cfg.n_vocab));
      seqs.back()->set_sampling(greedy);
    }
    runtime::Sequence& seq = *seqs[0];
    auto warm = cluster.extend(seq, std::span<const int32_t>(prompt.data(), 1), true);  // warm-up: page in weights
    if (!warm) return fail(warm.error());
    std::vector<runtime::NodeStats> tg0, tg1;  // counters around the decode phases
    std::vector<runtime::NodeCounters> tg_sum(cluster.n_nodes());
    for (int r = 0; r < *reps; ++r) {
      if (*n_prompt > 0) {
        util::Timer t;
        seq.truncate(0);
        auto st = cluster.extend(seq, std::span<const int32_t>(prompt.data(), *n_prompt), true);
        if (!st) return fail(st.error());
        pp.push_back(*n_prompt / t.seconds());
      }
      if (*n_gen > 0) {
        // Every sequence decodes from the prompt (the others evaluate it untimed).
        std::vector<int32_t> tok(seqs.size(), prompt[0]);
        seq.truncate(*n_prompt > 0 ? *n_prompt : 0);
        for (size_t b = 1; b < seqs.size(); ++b) {
          seqs[b]->truncate(0);
          if (*n_prompt > 0) {
            auto st = cluster.extend(*seqs[b], std::span<const int32_t>(prompt.data(), *n_prompt), false);
            if (!st) return fail(st.error());
          }
        }
        tg0 = cluster.stats();
        util::Timer t;
        std::vector<runtime::Cluster::SeqStep> batch(seqs.size());
        for (int i = 0; i < *n_gen; ++i) {
          for (size_t b = 0; b < seqs.size(); ++b)
            batch[b] = {seqs[b].get(), std::span<const int32_t>(&tok[b], 1), runtime::Want::kCandidates, {}};
          auto next = cluster.run(batch);
          if (!next) return fail(next.error());
          for (size_t b = 0; b < seqs.size(); ++b) tok[b] = (*next)[b].tokens[0];
        }
        tg.push_back(double(*n_gen) * *parallel / t.seconds());
        tg1 = cluster.stats();
        for (int i = 0; i < cluster.n_nodes(); ++i) {
          const auto &a = tg0[i].counters, &b = tg1[i].counters;
          tg_sum[i].compute_s += b.compute_s - a.compute_s;
          tg_sum[i].sync_s += b.sync_s - a.sync_s;
          tg_sum[i].bytes_sent += b.bytes_sent - a.bytes_sent;
          tg_sum[i].bytes_received += b.bytes_received - a.bytes_received;
        }
      }
    }
    const double n_tg = double(*n_gen) * *reps * *parallel;
    const double weight_gb = double((*m)->weights.matrix_bytes((*m)->config)) / 1e9;
    (void)logits;
    const double bw = *bandwidth ? measure_read_bandwidth(pool) : 0;
    const Stat spp = pp.empty() ? Stat{} : stat(pp), stg = tg.empty() ? Stat{} : stat(tg);
    const double gbs = stg.mean / *parallel * weight_gb;  // weights are read once per step
    if (*json) {
      std::printf("{\"model\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, "
                  "\"parallel\": %d, \"kv_type\": \"%s\", \"attention\": \"%s\", "
                  "\"pp_tps\": %.3f, \"pp_sd\": %.3f, \"tg_tps\": %.3f, \"tg_sd\": %.3f, "
                  "\"weight_gb\": %.4f, \"tg_gbps\": %.3f, \"read_bw_gbps\": %.3f, \"n_nodes\": %d, "
                  "\"cluster\": \"%s\", \"device\": \"%s\", \"nodes\": [",
                  o->model.c_str(), o->threads, kernels::isa_name(kernels::active_isa()), *n_prompt, *n_gen,
                  *parallel, model::kv_type_name(o->run.kv_type), model::attention_mode_name(o->run.attention),
                  spp.mean, spp.sd, stg.mean, stg.sd, weight_gb, gbs, bw, cluster.n_nodes(),
                  cluster.n_nodes() > 1 ? cluster.describe().c_str() : "", cluster.root_device().c_str());
      // Per node, per generated token (decode phases only): compute and sync ms, bytes.
      for (int i = 0; i < cluster.n_nodes() && !tg.empty(); ++i)
        std::printf("%s{\"name\": \"%s\", \"tg_compute_ms\": %.4f, \"tg_sync_ms\": %.4f, "
                    "\"tg_bytes_sent\": %.1f, \"tg_bytes_received\": %.1f}",
                    i ? ", " : "", tg1[i].name.c_str(), tg_sum[i].compute_s * 1e3 / n_tg,
                    tg_sum[i].sync_s * 1e3 / n_tg, tg_sum[i].bytes_sent / n_tg, tg_sum[i].bytes_received / n_tg);
      std::printf("]}\n");
    } else {
      std::printf("model %s: %s, %.3f GB of matrices, %d threads, %s, KV %s, attention %s\n", o->model.c_str(),
                  cfg.arch_name.c_str(), weight_gb, o->threads, kernels::isa_name(kernels::active_isa()),
                  model::kv_type_name(o->run.kv_type), model::attention_mode_name(o->run.attention));
      std::printf("device: %s\n", cluster.root_device().c_str());
      if (!pp.empty()) std::printf("pp%-5d %10.2f ± %.2f tokens/s\n", *n_prompt, spp.mean, spp.sd);
      if (!tg.empty())
        std::printf("tg%-5d %10.2f ± %.2f tokens/s%s  (%.2f GB/s of weights)\n", *n_gen, stg.mean, stg.sd,
                    *parallel > 1 ? (" of " + std::to_string(*parallel) + " sequences").c_str() : "", gbs);
      if (cluster.n_nodes() > 1) std::printf("cluster: %s\n", cluster.describe().c_str());
      if (!tg.empty())
        for (int i = 0; i < cluster.n_nodes(); ++i)
          std::printf("tg node %d (%s): %.2f ms compute + %.2f ms sync per token, %.0f B sent, %.0f B received "
                      "per token\n", i, tg1[i].name.c_str(), tg_sum[i].compute_s * 1e3 / n_tg,
                      tg_sum[i].sync_s * 1e3 / n_tg, tg_sum[i].bytes_sent / n_tg, tg_sum[i].bytes_received / n_tg);
      if (*bandwidth)
        std::printf("read bandwidth %.2f GB/s (%d threads); decode reaches %.0f%%\n", bw, o->threads,
                    100.0 * gbs / bw);
    }
    return 0;
  }, o, co);
}

}  // namespace cli
