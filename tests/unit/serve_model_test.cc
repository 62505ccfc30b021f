// serve_model_test.cc: the serving engine on SmolLM2 without HTTP: KV prefix reuse (logits
// after evaluating a prompt's suffix on top of a reused or overwritten cache prefix are
// bit-identical to evaluating the whole prompt), the greedy answer of a prompt does not
// depend on what ran before, concurrent requests and shared prefix blocks give each
// request's answer alone, and a prompt longer than the KV pool is a 400.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "runtime/cluster.h"
#include "serve/api.h"
#include "serve/engine.h"
#include "serve/generation.h"
#include "serve/prompt.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"
#include "vec_dot_order.h"

namespace {

// One request through the engine: its text and result (the status checked).
std::pair<std::string, serve::GenerationResult> generate(serve::Engine& e, const serve::GenerationRequest& g) {
  std::string out;
  serve::GenerationResult r = e.generate(g, [&](const std::string& t) {
    out += t;
    return true;
  });
  EXPECT_TRUE(r.status.ok()) << r.status.message();
  return {out, r};
}

class ServeModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(SHARDLM_DEFAULT_MODEL)) GTEST_SKIP() << "model not found: " SHARDLM_DEFAULT_MODEL;
    auto m = model::load_model(SHARDLM_DEFAULT_MODEL);
    ASSERT_TRUE(m.ok()) << m.error();
    m_ = std::move(*m);
    auto t = tokenizer::Tokenizer::from_gguf(*m_->file);
    ASSERT_TRUE(t.ok()) << t.error();
    tok_ = std::move(*t);
  }
  std::unique_ptr<model::LoadedModel> m_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  util::ThreadPool pool_{2};
};

// In vec_dot order (a row's bits do not depend on its segment's length): SmolLM2's Q4_1
// batches of 4+ rows sum in lane order by default since 2026-12-06, so a split at k gives
// rows of other lengths there (see docs/ARCHITECTURE.md on a slot's own cached prefix).
TEST_F(ServeModel, SuffixOnReusedPrefixGivesIdenticalLogits) {
  const shardlm_test::VecDotOrder vec_dot_order;
  const std::vector<int32_t> p = tok_->encode(
      "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
      "movable metal type, oil-based ink and a wooden press adapted from those used for wine.",
      true, true);
  ASSERT_GT(p.size(), 34u);
  const std::vector<int32_t> other = tok_->encode("Completely different text that fills the cache first, "
                                                  "with enough tokens to cover every position we will reuse.",
                                                  true, true);
  const int n = int(p.size()), V = m_->config.n_vocab;
  model::Transformer full(m_->config, m_->weights, pool_, 256);
  std::vector<float> want(V), got(V);
  ASSERT_TRUE(full.forward(p.data(), n, 0, want.data()).ok());
  for (int k : {1, 32, 33, n - 1}) {
    model::Transformer t(m_->config, m_->weights, pool_, 256);
    // Stale rows past k (another prompt's) must not matter: only 0..k are reused.
    ASSERT_TRUE(t.forward(other.data(), int(other.size()), 0, nullptr).ok());
    ASSERT_TRUE(t.forward(p.data(), k, 0, nullptr).ok());
    ASSERT_TRUE(t.forward(p.data() + k, n - k, k, got.data()).ok());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * V), 0) << "reuse point " << k;
  }
}

TEST_F(ServeModel, GreedyAnswerDoesNotDependOnWhatRanBefore) {
  auto answer = [&](serve::Engine& e, const std::string& text, int n, std::vector<std::string> stop = {}) {
    serve::GenerationRequest g;
    g.prompt = tok_->encode(text, true, true);
    g.params.temperature = 0;
    g.seed_given = true;
    g.max_tokens = n;
    g.stop = std::move(stop);
    return generate(e, g);
  };
  runtime::ClusterOptions o;
  o.run.ctx = 256;
  o.progress = false;
  const std::string a = "The capital of France is Paris. The capital of Germany is";
  std::string alone;
  {
    auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
    ASSERT_TRUE(c.ok()) << c.error();
    serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
    alone = answer(e, a, 10).first;
  }
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
  answer(e, "Once upon a time", 6);
  answer(e, "The capital of France is Paris. The capital of Italy is", 6);  // shares a long prefix
  auto [again, r] = answer(e, a, 10);
  EXPECT_EQ(again, alone);
  // Reuse keeps every row in the order the prompt alone gives it (Scheduler::in_order):
  // alone, this 12-token prompt is one lane-order chunk, so at least kLaneMinBatch rows are
  // evaluated again (fewer would run in vec_dot order).
  EXPECT_GE(r.usage.cached_tokens, 8);
  auto [same, r2] = answer(e, a, 10);  // the whole prompt cached: its last 4 tokens re-evaluated
  EXPECT_EQ(same, alone);
  EXPECT_EQ(r2.usage.cached_tokens, r2.usage.prompt_tokens - int(kernels::kLaneMinBatch));
  // A stop string inside the greedy answer cuts it there.
  ASSERT_GT(alone.size(), 6u);
  const std::string stop = alone.substr(3, 3);
  auto [cut, r3] = answer(e, a, 10, {stop});
  EXPECT_EQ(cut, alone.substr(0, alone.find(stop)));
  EXPECT_EQ(r3.finish_reason, "stop");
  // A client that goes away stops the generation at once.
  serve::GenerationRequest g;
  g.prompt = tok_->encode(a, true, true);
  g.params.temperature = 0;
  g.max_tokens = 200;
  int calls = 0;
  // "" asks whether the client is still there (every 100 ms without text): not a token.
  serve::GenerationResult gone = e.generate(g, [&](const std::string& t) { return (calls += !t.empty()) < 3; });
  EXPECT_EQ(gone.finish_reason, "cancelled");
  EXPECT_GE(gone.usage.completion_tokens, 3);  // the scheduler notices between steps
  EXPECT_LT(gone.usage.completion_tokens, 100);  // not the whole budget (a loaded machine may lag)
  EXPECT_EQ(e.metrics().cancelled, 1u);
}

// Continuous batching: six requests (greedy and seeded sampling, a stop string, different
// lengths) sent at once to an engine with 4 slots (two wait for a slot) give each exactly
// the text it gets alone on a fresh engine; while they run, steps carry several sequences.
TEST_F(ServeModel, ConcurrentRequestsEqualEachAlone) {
  struct Case {
    std::string text;
    int n;
    float temp;
    std::vector<std::string> stop;
  };
  const std::vector<Case> cases = {{"The capital of France is", 12, 0, {}},
                                   {"Once upon a time", 9, 0.8f, {}},
                                   {"def fibonacci(n):", 14, 0, {"\n\n"}},
                                   {"1, 2, 3, 4, 5,", 6, 0, {}},
                                   {"My favourite colour is", 11, 1.0f, {}},
                                   {"The quick brown fox jumps over the lazy dog. The quick brown fox", 8, 0, {}}};
  auto request = [&](const Case& k) {
    serve::GenerationRequest g;
    g.prompt = tok_->encode(k.text, true, true);
    g.params.temperature = k.temp;
    g.params.seed = 1234;
    g.seed_given = true;
    g.max_tokens = k.n;
    g.stop = k.stop;
    return g;
  };
  auto answer = [&](serve::Engine& e, const Case& k) {
    auto [out, r] = generate(e, request(k));
    return out + "|" + r.finish_reason;
  };
  runtime::ClusterOptions o;
  o.run.ctx = 128;
  o.progress = false;
  std::vector<std::string> alone;
  for (const Case& k : cases) {
    auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
    ASSERT_TRUE(c.ok()) << c.error();
    serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
    alone.push_back(answer(e, k));
  }
  o.run.n_slots = 4;
  o.run.max_batch = 64 + o.run.n_slots;
  // Paged KV (issue 32): the default pool (4 contexts), then one of 2 blocks of 64
  // positions for the 4 slots (each request needs one): requests wait for blocks and idle
  // slots' cached rows are released, and every text is still the one alone.
  for (int kv_blocks : {0, 2}) {
  o.run.kv_blocks = kv_blocks;
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, 64);
  std::vector<std::string> together(cases.size());
  std::atomic<bool> running{true};
  int peak_seqs = 0;
  std::thread watch([&] {
    while (running) {
      peak_seqs = std::max(peak_seqs, e.metrics().sched.last_batch_seqs);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> clients;
  for (size_t i = 0; i < cases.size(); ++i) clients.emplace_back([&, i] { together[i] = answer(e, cases[i]); });
  for (auto& t : clients) t.join();
  running = false;
  watch.join();
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(together[i], alone[i]) << cases[i].text << " kv_blocks " << kv_blocks;
  EXPECT_GT(peak_seqs, 1);
  const serve::EngineMetrics m = e.metrics();
  EXPECT_EQ(m.sched.slots_in_use, 0);
  EXPECT_EQ(m.sched.queued, 0);
  EXPECT_EQ(m.sched.slots, 4);
  EXPECT_EQ(m.generations, cases.size());
  EXPECT_EQ(m.sched.kv_blocks, kv_blocks ? kv_blocks : 8);
  EXPECT_EQ(m.sched.kv_full_ends, 0u);
  EXPECT_LE(m.sched.kv_blocks_idle, m.sched.kv_blocks);
  }
}

// Shared prefixes (issue 32 step 2): a finished request's full KV blocks stay registered
// (cached) after another conversation took its slot; a later request whose prompt starts
// with the same 64-token blocks takes them instead of evaluating them (cached_tokens), and
// its text is the one alone.
TEST_F(ServeModel, SharedPrefixBlocksGiveTheTextAlone) {
  std::string system;
  for (int i = 0; i < 16; ++i) system += "The assistant answers questions about geography briefly. ";
  const std::vector<std::string> prompts = {system + "Q: the capital of France? A:", system + "Q: the capital of Spain? A:",
                                            system + "Q: the capital of Italy? A:"};
  auto answer = [&](serve::Engine& e, const std::string& p) {
    serve::GenerationRequest g;
    g.prompt = tok_->encode(p, true, true);
    g.params.temperature = 0;
    g.max_tokens = 6;
    return generate(e, g);
  };
  runtime::ClusterOptions o;
  o.run.ctx = 256;
  o.progress = false;
  std::vector<std::string> alone;
  for (const std::string& p : prompts) {
    auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
    ASSERT_TRUE(c.ok()) << c.error();
    serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
    alone.push_back(answer(e, p).first);
  }
  ASSERT_GT(tok_->encode(system, true, true).size(), 128u);
  o.run.max_batch = 64 + o.run.n_slots;
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, 64);
  EXPECT_EQ(answer(e, prompts[0]).first, alone[0]);
  answer(e, "Once upon a time");  // the slot's next conversation: prompt 0's blocks stay cached
  for (int i : {1, 2}) {
    auto [text, r] = answer(e, prompts[size_t(i)]);
    EXPECT_EQ(text, alone[size_t(i)]) << i;
    EXPECT_GE(r.usage.cached_tokens, 128) << i;
    answer(e, "Once upon a time");
  }
  const serve::EngineMetrics m = e.metrics();
  EXPECT_EQ(m.sched.kv_prefix_hits, 2u);
  EXPECT_GE(m.sched.kv_prefix_tokens, 256u);
}

// A prompt longer than the whole KV pool (a pool smaller than --ctx: the runtime allows it,
// serve's --kv-memory does not) is a 400 giving both sizes and --kv-memory, before the
// engine; one that fits passes.
TEST_F(ServeModel, PromptLongerThanTheKvPoolIs400) {
  runtime::ClusterOptions o;
  o.run.ctx = 256;
  o.run.kv_blocks = 2;
  o.progress = false;
  auto c = runtime::Cluster::start(*m_, SHARDLM_DEFAULT_MODEL, o, pool_);
  ASSERT_TRUE(c.ok()) << c.error();
  serve::Engine e(**c, *tok_, o.run.max_batch - o.run.n_slots);
  auto prompts = serve::PromptBuilder::create(*m_->file, *tok_, "");
  ASSERT_TRUE(prompts.ok()) << prompts.error();
  serve::ServerOptions so;
  serve::Generator g(e, *prompts, so);
  serve::Request r;
  r.endpoint = serve::Endpoint::kCompletion;
  r.max_tokens = 4;
  r.prompt_tokens.assign(129, 28);
  serve::Job job;
  const std::optional<serve::ApiError> err = g.prepare(r, &job);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->code, "context_length_exceeded");
  EXPECT_EQ(err->param, "prompt");
  for (const char* part : {"129 tokens", "128 positions", "--kv-memory"})
    EXPECT_NE(err->message.find(part), std::string::npos) << part << " in " << err->message;
  r.prompt_tokens.assign(128, 28);
  EXPECT_FALSE(g.prepare(r, &job).has_value());
}

}  // namespace
