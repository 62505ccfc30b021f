// scheduler_waves.h: for kv_pool_test and vulkan_model_test: jobs through a Scheduler on a
// started cluster in waves (each wave submitted at once, the next once it has ended),
// greedy, 2 top log-probabilities per token, and the KV pool's tables at the end.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

#include "runtime/cluster.h"
#include "runtime/scheduler.h"

namespace shardlm_test {

struct WaveOutcome {
  explicit WaveOutcome(size_t jobs = 0) : tokens(jobs), logprobs(jobs), ends(jobs) {}
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;  // per token: its own, then each top one's + its id
  std::vector<runtime::JobEnd> ends;
  runtime::SchedulerStats stats;
  int held = 0, used = 0, shared = 0;  // the pool at the end: table entries, blocks in use, shared
};

inline WaveOutcome run_waves(runtime::Cluster& cl, int chunk, int slots, int max_tokens,
                             const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<std::vector<size_t>>& waves) {
  WaveOutcome out(prompts.size());
  {
    runtime::Scheduler sched(cl, chunk);
    for (const std::vector<size_t>& wave : waves) {
      std::vector<std::promise<runtime::JobEnd>> ends(prompts.size());
      // A wave's first token waits until the whole wave is queued (the jobs are not
      // admitted one by one as a loaded machine happens to run this loop).
      std::promise<void> queued;
      std::shared_future<void> gate = queued.get_future().share();
      for (size_t j : wave) {
        auto job = std::make_shared<runtime::Job>();
        job->prompt = prompts[j];
        job->params.temperature = 0;
        job->params.top_logprobs = 2;
        job->max_tokens = max_tokens;
        job->on_token = [&out, j, gate](int32_t tok, const sampler::Logprobs* lp) {
          gate.wait();
          out.tokens[j].push_back(tok);
          if (lp) {
            out.logprobs[j].push_back(lp->logprob);
            for (const auto& x : lp->top) out.logprobs[j].push_back(x.logprob + float(x.id));
          }
          return true;
        };
        job->on_end = [&ends, j](const runtime::JobEnd& e) { ends[j].set_value(e); };
        sched.submit(job);
      }
      queued.set_value();
      for (size_t j : wave) {
        out.ends[j] = ends[j].get_future().get();
        EXPECT_TRUE(out.ends[j].status.ok()) << out.ends[j].status.message();
      }
    }
    out.stats = sched.stats();
  }
  const runtime::BlockPool& p = cl.kv_pool();
  for (int s = 0; s < slots; ++s) out.held += p.held(s);
  out.used = p.used_blocks();
  out.shared = p.shared_blocks();
  return out;
}

}  // namespace shardlm_test
