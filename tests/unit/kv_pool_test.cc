// kv_pool_test.cc: the paged KV pool (issue 32) through the scheduler, on toy models of a
// vec_dot type (Q4_1) and the lane-order types (Q4_0, Q4_K), against each job alone on a
// fresh one-node cluster, bit for bit (tokens and log-probabilities).
// Shared prefixes: both attention paths, one node and 3 nodes (in-process workers, exact
// sync). A first conversation ends;
// then four prompts that start with its 150-token system prompt run at once, and take its
// cached blocks instead of evaluating them. Every job's tokens and log-probabilities must
// be bit-identical to the same job alone on a fresh one-node cluster; the pool must show the
// sharing (hits, skipped positions, blocks held by several tables, fewer blocks in use than
// the tables hold). Chunks of 48 (not a multiple of the 64-position block) make the
// scheduler pick a shorter shared prefix where the longest would change a row's order.
// Preemption: four jobs that each need 2 blocks in a pool of 4 run at once; when none can
// get its next block the youngest gives its blocks back, reads its prompt and its tokens
// again later, and its text does not change. A prompt longer than the whole pool ends at
// once with an error naming both sizes. The pool itself (runtime::BlockPool): sharing,
// eviction and the host cache, block by block.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <random>
#include <thread>

#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "net/transport.h"
#include "runtime/cluster.h"
#include "runtime/kv_blocks.h"
#include "runtime/scheduler.h"
#include "runtime/worker.h"
#include "scheduler_waves.h"
#include "scratch.h"
#include "toy_model.h"

namespace {

constexpr int kChunk = 48, kSlots = 4, kCtx = 320, kGen = 8;

using Outcome = shardlm_test::WaveOutcome;

struct RunSetup {
  std::string path;
  model::AttentionMode mode = model::AttentionMode::kFlash;
  int nodes = 1;
  int slots = kSlots;
  int ctx = kCtx, kv_blocks = 0;
  int max_tokens = kGen;
  int host_blocks = 0;  // the host KV cache (--cache-ram)
};

// The jobs in waves (each wave submitted at once, the next once it has ended).
Outcome run(const RunSetup& r, const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::vector<size_t>>& waves) {
  util::ThreadPool pool(1);
  auto m = model::load_model(r.path);
  EXPECT_TRUE(m.ok());
  runtime::ClusterOptions o;
  o.run.ctx = r.ctx;
  o.run.kv_blocks = r.kv_blocks;
  o.run.n_slots = r.slots;
  o.run.max_batch = kChunk + r.slots;
  o.run.attention = r.mode;
  o.run.kv_host_blocks = r.host_blocks;
  o.progress = false;
  std::vector<std::unique_ptr<net::Transport>> t;
  std::vector<std::thread> workers;
  if (r.nodes > 1) {
    t = net::make_in_process_cluster(r.nodes);
    for (int i = 1; i < r.nodes; ++i)
      workers.emplace_back([&t, i] {
        runtime::WorkerOptions wo;
        EXPECT_TRUE(runtime::run_worker_session(*t[size_t(i)], wo).ok());
      });
    o.transport = std::shared_ptr<net::Transport>(std::move(t[0]));
    o.exact = true;
  }
  Outcome out(prompts.size());
  {
    auto cl = runtime::Cluster::start(**m, r.path, o, pool);
    EXPECT_TRUE(cl.ok()) << cl.error();
    if (!cl.ok()) return out;
    out = shardlm_test::run_waves(**cl, kChunk, r.slots, r.max_tokens, prompts, waves);
  }
  for (auto& w : workers) w.join();
  return out;
}

TEST(SharedPrefix, JobsSharingASystemPromptEqualEachAlone) {
  std::mt19937 rng(3);
  std::vector<int32_t> system(150);
  for (int32_t& x : system) x = int32_t(rng() % 500) + 1;
  // Prompt lengths 152 (the first conversation), 180, 220, 280 and 130 (128 + 2: sharing
  // both blocks would read its last 2 rows in vec_dot order where it reads them in a chunk
  // of 34 rows alone; so it shares one block).
  std::vector<std::vector<int32_t>> prompts;
  for (int extra : {2, 30, 70, 130, -20}) {
    std::vector<int32_t> p(system.begin(), system.begin() + std::min<int>(150, 150 + extra));
    for (int i = 0; i < extra; ++i) p.push_back(int32_t(rng() % 500) + 1);
    prompts.push_back(p);
  }
  const std::vector<std::vector<size_t>> waves = {{0}, {1, 2, 3, 4}};
  struct Case {
    tensor::Type type;
    model::AttentionMode mode;
    int nodes;
  };
  const model::AttentionMode kFlash = model::AttentionMode::kFlash, kExact = model::AttentionMode::kExact;
  for (const Case& k : {Case{tensor::Type::Q4_1, kFlash, 1}, Case{tensor::Type::Q4_0, kFlash, 1},
                        Case{tensor::Type::Q4_K, kFlash, 1}, Case{tensor::Type::Q4_K, kExact, 1},
                        Case{tensor::Type::Q4_K, kFlash, 3}, Case{tensor::Type::Q4_0, kExact, 3}}) {
    SCOPED_TRACE(std::string(tensor::type_name(k.type)) + " " + model::attention_mode_name(k.mode) + " " +
                 std::to_string(k.nodes) + " node(s)");
    const std::string path = shardlm_test::scratch_path(std::string("prefix_") + tensor::type_name(k.type) + ".gguf");
    ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), k.type, 7).ok());
    const Outcome shared = run({path, k.mode, k.nodes}, prompts, waves);
    // Each job alone on a fresh one-node cluster, and (tokens only) on k.nodes: the
    // log-probabilities' last bits follow the vocabulary's split (a merged log-sum-exp).
    for (int nodes : {k.nodes, 1}) {
      Outcome alone;
      alone.tokens.resize(prompts.size());
      alone.logprobs.resize(prompts.size());
      for (size_t j = 0; j < prompts.size(); ++j) {
        const Outcome one = run({path, k.mode, nodes, 1}, {prompts[j]}, {{0}});
        alone.tokens[j] = one.tokens[0];
        alone.logprobs[j] = one.logprobs[0];
        EXPECT_EQ(one.ends[0].cached_tokens, 0);
      }
      for (size_t j = 0; j < prompts.size(); ++j) {
        ASSERT_EQ(alone.tokens[j].size(), size_t(kGen));
        EXPECT_EQ(shared.tokens[j], alone.tokens[j]) << "job " << j << " against " << nodes << " node(s) alone";
        if (nodes == k.nodes) {
          EXPECT_EQ(shared.logprobs[j], alone.logprobs[j]) << "job " << j;
        }
      }
      if (k.nodes == 1) break;
    }
    // Job 1 takes the first conversation's slot (its own 150 cached positions); jobs 2 and
    // 3 share its 2 full blocks, job 4 one of them.
    EXPECT_EQ(shared.ends[1].cached_tokens, 150);
    EXPECT_EQ(shared.ends[2].cached_tokens, 128);
    EXPECT_EQ(shared.ends[3].cached_tokens, 128);
    EXPECT_EQ(shared.ends[4].cached_tokens, 64);
    EXPECT_EQ(shared.stats.kv_prefix_hits, 3u);
    EXPECT_EQ(shared.stats.kv_prefix_tokens, 128u + 128u + 64u);
    EXPECT_EQ(shared.shared, 2);  // the idle slots still hold them
    EXPECT_EQ(shared.stats.kv_blocks_shared, 2);
    // Blocks in use drop: the 4 slots' tables hold 3 + 4 + 5 + 3 entries, block 0 in all 4
    // and block 1 in 3 of them, so 5 fewer blocks are in use than entries.
    EXPECT_EQ(shared.held, 15);
    EXPECT_EQ(shared.held - shared.used, 5);
  }
}

TEST(PoolFull, PreemptedJobsGiveTheTextAlone) {
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {50, 57, 61, 54}) {
    prompts.emplace_back();
    for (int i = 0; i < len; ++i) prompts.back().push_back(int32_t(rng() % 500) + 1);
  }
  for (tensor::Type type : {tensor::Type::Q4_1, tensor::Type::Q4_K}) {
    SCOPED_TRACE(tensor::type_name(type));
    const std::string path = shardlm_test::scratch_path(std::string("pool_") + tensor::type_name(type) + ".gguf");
    ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), type, 5).ok());
    const RunSetup r{path, model::AttentionMode::kFlash, 1, kSlots, 256, 4, 40};
    const Outcome together = run(r, prompts, {{0, 1, 2, 3}});
    int preempted = 0;
    for (size_t j = 0; j < prompts.size(); ++j) {
      const Outcome one = run({path, r.mode, 1, 1, 256, 0, 40}, {prompts[j]}, {{0}});
      ASSERT_EQ(one.tokens[0].size(), 40u);
      EXPECT_EQ(together.tokens[j], one.tokens[0]) << "job " << j;
      EXPECT_EQ(together.logprobs[j], one.logprobs[0]) << "job " << j;
      preempted += together.ends[j].preempted;
    }
    EXPECT_GE(together.stats.kv_preemptions, 1u);
    EXPECT_EQ(uint64_t(preempted), together.stats.kv_preemptions);
    EXPECT_EQ(together.stats.kv_full_ends, 0u);
  }
}

// The host cache (--cache-ram): a first conversation's system prompt blocks are evicted
// from a pool of 6 blocks by a long second one (saved to host memory as they go); a third
// prompt with that system prompt takes the one still in the pool and the saved one back
// (restored into a fresh block, the second conversation's idle slot giving the room)
// instead of evaluating them. Every job's tokens
// and log-probabilities equal the job alone; one node and 3 nodes (each keeps its share).
// With the host cache off the third job evaluates all but the block still in the pool:
// the same text.
TEST(SharedPrefix, HostCacheRestoresEvictedPrefixEqualAlone) {
  std::mt19937 rng(5);
  std::vector<int32_t> system(150);
  for (int32_t& x : system) x = int32_t(rng() % 500) + 1;
  std::vector<std::vector<int32_t>> prompts(3);
  prompts[0] = system;
  prompts[0].push_back(7);
  prompts[0].push_back(9);
  for (int i = 0; i < 300; ++i) prompts[1].push_back(int32_t(rng() % 500) + 1);
  prompts[2] = system;
  for (int i = 0; i < 30; ++i) prompts[2].push_back(int32_t(rng() % 500) + 1);
  const std::vector<std::vector<size_t>> waves = {{0}, {1}, {2}};
  struct Case {
    tensor::Type type;
    model::AttentionMode mode;
    int nodes;
  };
  const model::AttentionMode kFlash = model::AttentionMode::kFlash, kExact = model::AttentionMode::kExact;
  for (const Case& k : {Case{tensor::Type::Q4_1, kFlash, 1}, Case{tensor::Type::Q4_K, kExact, 1},
                        Case{tensor::Type::Q4_K, kFlash, 3}, Case{tensor::Type::Q4_0, kFlash, 2}}) {
    SCOPED_TRACE(std::string(tensor::type_name(k.type)) + " " + model::attention_mode_name(k.mode) + " " +
                 std::to_string(k.nodes) + " node(s)");
    const std::string path = shardlm_test::scratch_path(std::string("host_") + tensor::type_name(k.type) + ".gguf");
    ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), k.type, 11).ok());
    RunSetup r{path, k.mode, k.nodes, 2, kCtx, 6};
    r.host_blocks = 4;
    const Outcome host = run(r, prompts, waves);
    r.host_blocks = 0;
    const Outcome off = run(r, prompts, waves);
    for (size_t j = 0; j < prompts.size(); ++j) {
      const Outcome one = run({path, k.mode, k.nodes, 1}, {prompts[j]}, {{0}});
      ASSERT_EQ(one.tokens[0].size(), size_t(kGen));
      EXPECT_EQ(host.tokens[j], one.tokens[0]) << "job " << j;
      EXPECT_EQ(host.logprobs[j], one.logprobs[0]) << "job " << j;
      EXPECT_EQ(off.tokens[j], one.tokens[0]) << "job " << j;
    }
    EXPECT_EQ(host.ends[2].cached_tokens, 128);
    // Block 0 of the system prompt stayed cached in the pool, block 1 comes back from the
    // host cache; saved: that block, then one of the second conversation's taken back.
    EXPECT_EQ(host.stats.kv_host_restores, 1u);
    EXPECT_GE(host.stats.kv_host_saves, 2u);
    EXPECT_EQ(host.stats.kv_prefix_hits, 1u);
    EXPECT_LE(host.stats.kv_host_blocks, 4);
    EXPECT_EQ(off.ends[2].cached_tokens, 64);  // only the block still in the pool
    EXPECT_EQ(off.stats.kv_host_saves, 0u);
  }
}

// A sliding-window model (toy-gemma3: window 8; its rings keep 128 rows per slot here) and
// one slot: a first conversation of 250 + 8 positions, then a prompt that shares its first
// k tokens. The slot's own prefix is reusable only where the ring still holds the window
// behind it, counted after every cut: k = 160 is cut to the registered block's start, 128,
// whose window the ring overwrote (before, the step failed and the cluster stopped: "KV
// slot 0 rewound from position 256 to 128"), so the prompt is read from position 0; k = 240
// keeps 192 positions. Either way the text equals the prompt alone.
TEST(SharedPrefix, SlidingWindowSlotReusesOnlyRowsItsRingKeeps) {
  std::mt19937 rng(13);
  std::vector<int32_t> first(250);
  for (int32_t& x : first) x = int32_t(rng() % 500) + 1;
  const std::string path = shardlm_test::toy_model("toy-gemma3", tensor::Type::Q4_0, 3);
  for (auto [k, cached] : {std::pair{160, 0}, std::pair{240, 192}}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    std::vector<int32_t> next(first.begin(), first.begin() + k);
    for (int i = 0; i < 40; ++i) next.push_back(int32_t(rng() % 500) + 1);
    const Outcome both = run({path, model::AttentionMode::kFlash, 1, 1}, {first, next}, {{0}, {1}});
    const Outcome alone = run({path, model::AttentionMode::kFlash, 1, 1}, {next}, {{0}});
    ASSERT_EQ(alone.tokens[0].size(), size_t(kGen));
    EXPECT_TRUE(both.ends[1].status.ok()) << both.ends[1].status.message();
    EXPECT_EQ(both.tokens[1], alone.tokens[0]);
    EXPECT_EQ(both.logprobs[1], alone.logprobs[0]);
    EXPECT_EQ(both.ends[1].cached_tokens, cached);
  }
}

// A prompt that needs more blocks than the whole pool holds ends at once (no step spent
// on it), with an error giving both sizes and --kv-memory; the scheduler goes on.
TEST(PoolFull, PromptLongerThanThePoolEndsNamingBothSizes) {
  const std::string path = shardlm_test::scratch_path("pool_unfit_Q4_1.gguf");
  ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), tensor::Type::Q4_1, 5).ok());
  util::ThreadPool pool(1);
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok());
  runtime::ClusterOptions o;
  o.run.ctx = kCtx;
  o.run.kv_blocks = 2;  // 128 positions
  o.run.n_slots = 2;
  o.run.max_batch = kChunk + 2;
  o.progress = false;
  auto cl = runtime::Cluster::start(**m, path, o, pool);
  ASSERT_TRUE(cl.ok()) << cl.error();
  runtime::Scheduler sched(**cl, kChunk);
  EXPECT_EQ(sched.pool_unfit(128), "");
  auto go = [&](int len) {
    auto job = std::make_shared<runtime::Job>();
    job->prompt.assign(size_t(len), 7);
    job->params.temperature = 0;
    job->max_tokens = 1;
    job->on_token = [](int32_t, const sampler::Logprobs*) { return true; };
    std::promise<runtime::JobEnd> end;
    job->on_end = [&end](const runtime::JobEnd& e) { end.set_value(e); };
    sched.submit(job);
    return end.get_future().get();
  };
  const runtime::JobEnd e = go(129);
  EXPECT_FALSE(e.status.ok());
  EXPECT_FALSE(e.cancelled);
  EXPECT_EQ(e.generated, 0);
  EXPECT_EQ(e.status.message(), sched.pool_unfit(129));
  for (const char* part : {"129 tokens", "128 positions", "2 blocks of 64", "--kv-memory"})
    EXPECT_NE(e.status.message().find(part), std::string::npos) << part << " in " << e.status.message();
  EXPECT_EQ(sched.stats().steps, 0u);
  const runtime::JobEnd ok = go(128);
  EXPECT_TRUE(ok.status.ok()) << ok.status.message();
  EXPECT_EQ(ok.generated, 1);
  EXPECT_EQ(sched.stats().kv_full_ends, 0u);
}

// A slot's own cached rows are checked for their order (Scheduler::in_order) only where the
// order can change bits: lane order on and a lane-order type in the model. A Q5_0 or F16
// model keeps a whole previous conversation; a Q4_0 one, or Q4_1 (the bundled model), must check.
TEST(SharedPrefix, RowOrderMattersOnlyForLaneOrderTypes) {
  util::ThreadPool pool(1);
  for (auto [type, lanes] : {std::pair{tensor::Type::Q5_0, false}, {tensor::Type::F16, false},
                             {tensor::Type::Q4_0, true}, {tensor::Type::Q4_1, true}}) {
    SCOPED_TRACE(tensor::type_name(type));
    const std::string path = shardlm_test::scratch_path(std::string("order_") + tensor::type_name(type) + ".gguf");
    ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), type, 7).ok());
    auto m = model::load_model(path);
    ASSERT_TRUE(m.ok());
    for (bool lane_order : {true, false}) {
      runtime::ClusterOptions o;
      o.run.ctx = 64;
      o.run.lane_order = lane_order;
      o.progress = false;
      auto cl = runtime::Cluster::start(**m, path, o, pool);
      ASSERT_TRUE(cl.ok()) << cl.error();
      EXPECT_EQ((*cl)->order_matters(), lanes && lane_order && kernels::lane_order_type(type));
    }
  }
}

}  // namespace

// The root's KV block allocation (issue 32): tables grow from one pool; full blocks are
// registered by their prefix and shared by a later prompt with the same prefix, token for
// token and in the same row order, reference-counted (blocks in use drop when shared);
// cached blocks are taken back least recently used first and only when no table holds
// them; a log cut short unregisters what it rewrites and never rewrites a shared block.
TEST(BlockPool, SharesRegisteredPrefixesAndEvictsLeastRecentlyUsed) {
  constexpr int B = model::kKvBlockRows;
  runtime::BlockPool p(6, 3);
  std::vector<int32_t> a(3 * B + 10), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = int32_t(i % 97);
  ASSERT_TRUE(p.reserve(0, int(a.size())));
  EXPECT_EQ(p.held(0), 4);
  EXPECT_EQ(p.free_blocks(), 2);
  EXPECT_FALSE(p.reserve(1, 3 * B));  // 3 blocks, 2 free: nothing taken
  EXPECT_EQ(p.held(1), 0);
  p.note_rows(0, 0, B + 5, false);  // a prompt chunk in lane order
  p.note_rows(0, B + 5, int(a.size()) - B - 5, true);  // then decode rows (vec_dot order)
  p.register_full(0, a);  // 3 full blocks
  EXPECT_EQ(p.registered(0), 3 * B);
  // The same prefix, another last block: only block 0's rows are all in lane order.
  b.assign(a.begin(), a.begin() + 2 * B + 5);
  EXPECT_EQ(p.prefix_blocks(b, 2, false), 1);
  EXPECT_EQ(p.prefix_blocks(b, 2, true), 0);  // lane order off: all rows must be vec_dot
  p.note_rows(0, B, 2 * B + 10, false);  // as if rows B.. were a prompt too
  EXPECT_EQ(p.prefix_blocks(b, 2, false), 2);
  EXPECT_EQ(p.used_blocks(), 4);
  EXPECT_EQ(p.attach_prefix(1, b, int(b.size() - 1) / B, false), 2);
  EXPECT_EQ(p.held(1), 2);
  EXPECT_EQ(p.used_blocks(), 4);  // shared: no block taken
  EXPECT_EQ(p.shared_blocks(), 2);
  EXPECT_EQ(p.table(1)[0], p.table(0)[0]);
  EXPECT_EQ(p.refs(p.table(0)[1]), 2);
  EXPECT_EQ(p.prefix_hits(), 1u);
  EXPECT_EQ(p.prefix_tokens(), uint64_t(2 * B));
  std::vector<int32_t> e0, e1;
  EXPECT_EQ(p.entries(0, 3 * B, 10, &e0), 0);  // the nodes hold nothing of slot 0 yet: from 0
  EXPECT_EQ(e0.size(), 4u);
  EXPECT_EQ(p.entries(0, 3 * B, 10, &e0), 3);  // then only the block written
  ASSERT_TRUE(p.reserve(1, 2 * B + 5));
  EXPECT_EQ(p.used_blocks(), 5);
  EXPECT_EQ(p.entries(1, 2 * B, 5, &e1), 0);  // the shared blocks, then its own
  ASSERT_EQ(e1.size(), 3u);
  EXPECT_EQ(p.entries(1, 2 * B + 5, 1, &e1), 2);  // synced: only the block written
  // A different first token shares nothing; a changed token in block 1 shares block 0 only.
  b[0] = 1000;
  EXPECT_EQ(p.prefix_blocks(b, 3, false), 0);
  b[0] = a[0];
  b[B + 3] = 1000;
  EXPECT_EQ(p.prefix_blocks(b, 3, false), 1);
  // Slot 0 rewriting from position B + 1 would write block 1, which slot 1 holds too.
  EXPECT_FALSE(p.truncate(0, B + 1));
  EXPECT_EQ(p.held(0), 4);
  EXPECT_TRUE(p.truncate(0, 3 * B));  // its own last block: it leaves the table
  EXPECT_EQ(p.held(0), 3);
  EXPECT_EQ(p.used_blocks(), 4);
  // Released, registered blocks stay cached (still shareable) and count as free.
  p.release(1);
  EXPECT_EQ(p.shared_blocks(), 0);
  EXPECT_EQ(p.cached_blocks(), 0);  // slot 0 still holds them: none can be taken back
  EXPECT_EQ(p.free_blocks(), 3);
  p.release(0);
  EXPECT_EQ(p.free_blocks(), 6);
  EXPECT_EQ(p.cached_blocks(), 3);
  EXPECT_EQ(p.prefix_blocks(a, 3, false), 3);
  // Slot 2 holds the first block again (not cached now); taking 4 blocks uses the 3
  // unregistered free ones, then the least recently cached: the prefix's last block (a
  // released table lets its tail go first); one more takes block 1. Block 0, held, stays.
  EXPECT_EQ(p.attach_prefix(2, a, 1, false), 1);
  EXPECT_EQ(p.cached_blocks(), 2);
  ASSERT_TRUE(p.reserve(2, 5 * B));
  EXPECT_EQ(p.prefix_blocks(a, 3, false), 2);
  EXPECT_EQ(p.cached_blocks(), 1);
  ASSERT_TRUE(p.reserve(2, 6 * B));
  EXPECT_EQ(p.prefix_blocks(a, 3, false), 1);
  EXPECT_EQ(p.free_blocks(), 0);
  EXPECT_FALSE(p.reserve(1, 1));  // nothing left: the block held is never taken
  // A log cut inside a registered block unregisters it (its rows will change).
  runtime::BlockPool q(3, 1);
  const std::vector<int32_t> c(a.begin(), a.begin() + 2 * B);
  ASSERT_TRUE(q.reserve(0, 2 * B));
  q.note_rows(0, 0, 2 * B, false);
  q.register_full(0, c);
  EXPECT_EQ(q.prefix_blocks(c, 2, false), 2);
  EXPECT_TRUE(q.truncate(0, B + 7));
  EXPECT_EQ(q.registered(0), B);
  EXPECT_EQ(q.held(0), 2);
  EXPECT_EQ(q.prefix_blocks(c, 2, false), 1);
}

// The host cache (issue 32 step 4): a cached block the pool takes back is saved (a KvCopy
// the next step carries); a prompt whose prefix continues past the pool's blocks into saved
// ones takes them back only when the pool has blocks for them (any_room: as if it had),
// restored into fresh blocks, registered again (a later prompt shares them from the pool);
// past the capacity the least recently saved entry is dropped first; a mixed-order block is
// never saved; drop_cache forgets the host cache and the copies not sent.
TEST(BlockPool, HostCacheSavesEvictedBlocksAndRestoresThem) {
  constexpr int B = model::kKvBlockRows;
  using K = model::KvCopy::Kind;
  runtime::BlockPool p(3, 2);
  p.set_host_capacity(1);
  std::vector<int32_t> t(3 * B + 5);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(i % 50) + 1;
  ASSERT_TRUE(p.reserve(0, 3 * B));
  EXPECT_EQ(p.table(0), (std::vector<int32_t>{0, 1, 2}));
  p.note_rows(0, 0, 3 * B, false);
  p.register_full(0, std::span<const int32_t>(t).first(3 * B));
  p.release(0);  // the cache: 2, 1, 0 (its tail first in line)
  std::vector<model::KvCopy> c;
  p.take_copies(&c);
  EXPECT_TRUE(c.empty());
  ASSERT_TRUE(p.reserve(1, 1));  // takes block 2 back: saved
  EXPECT_EQ(p.table(1), std::vector<int32_t>{2});
  EXPECT_EQ(p.host_blocks(), 1);
  EXPECT_EQ(p.host_saves(), 1u);
  // The pool's 2 blocks, then the host's 1 only when a block is there to take for it.
  EXPECT_EQ(p.prefix_blocks(t, 3, false), 2);
  EXPECT_EQ(p.prefix_blocks(t, 3, false, true), 2);
  EXPECT_EQ(p.prefix_blocks(t, 3, false, true, true), 3);
  EXPECT_EQ(p.prefix_blocks(t, 3, true, true, true), 0);  // rows in another order
  p.release(1);
  EXPECT_EQ(p.prefix_blocks(t, 3, false, true), 3);
  EXPECT_EQ(p.attach_prefix(1, t, 3, false, true), 3);
  EXPECT_EQ(p.table(1), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.host_blocks(), 0);
  EXPECT_EQ(p.host_restores(), 1u);
  p.take_copies(&c);
  EXPECT_EQ(c, (std::vector<model::KvCopy>{{K::kSave, 2, 0}, {K::kRestore, 2, 0}}));
  p.take_copies(&c);
  EXPECT_TRUE(c.empty());
  // Registered again: shared from the pool with no copy.
  EXPECT_EQ(p.prefix_blocks(t, 3, false), 3);
  // Capacity 1: the second save drops the first entry.
  p.release(1);
  ASSERT_TRUE(p.reserve(0, 2 * B));
  EXPECT_EQ(p.table(0), (std::vector<int32_t>{2, 1}));
  p.take_copies(&c);
  EXPECT_EQ(c, (std::vector<model::KvCopy>{{K::kSave, 2, 1}, {K::kForget, 0, 1}, {K::kSave, 1, 2}}));
  EXPECT_EQ(p.host_blocks(), 1);
  // Block 0 still cached, block 1 saved, block 2's entry gone: 2 of the prefix.
  p.release(0);
  EXPECT_EQ(p.prefix_blocks(t, 3, false, true), 2);
  // Rows of two orders in one block: not saved when taken back.
  runtime::BlockPool q(1, 1);
  q.set_host_capacity(4);
  ASSERT_TRUE(q.reserve(0, B));
  q.note_rows(0, 0, B - 1, false);
  q.note_rows(0, B - 1, 1, true);
  q.register_full(0, std::span<const int32_t>(t).first(B));
  q.release(0);
  ASSERT_TRUE(q.reserve(0, 1));
  EXPECT_EQ(q.host_blocks(), 0);
  // drop_cache: nothing saved, nothing to send.
  p.drop_cache();
  p.take_copies(&c);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(p.host_blocks(), 0);
}
