// vulkan_model_test.cc: the Vulkan backend (model/vulkan/vulkan_backend.h) against the
// CPU backend's flash path on random toy models: logits close and the same greedy tokens,
// for one sequence (prefill then decode) and for a batch of several segments; the paged
// cache (issue 32): scattered block tables give the bits of identity ones, shared prefixes
// and the host cache through the scheduler give each job's bits alone; and the refusals
// (no such device, unsupported settings). Labels unit and gpu; every test skips
// itself when the machine has no Vulkan device. Registered only with SHARDLM_VULKAN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <future>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/vulkan/vulkan.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "model/vulkan/vulkan_backend.h"
#include "runtime/cluster.h"
#include "runtime/scheduler.h"
#include "scheduler_waves.h"
#include "scratch.h"
#include "tokenizer/tokenizer.h"

namespace {

bool have_device(std::string* why) {
  auto devs = kernels::vulkan::list_devices();
  if (!devs) return *why = devs.error(), false;
  if (devs->empty()) return *why = "no Vulkan device", false;
  return true;
}

#define SKIP_WITHOUT_DEVICE()                   \
  do {                                          \
    std::string why_;                           \
    if (!have_device(&why_)) GTEST_SKIP() << why_; \
  } while (0)

std::unique_ptr<model::LoadedModel> toy(const std::string& shape, tensor::Type type) {
  const std::string path = shardlm_test::scratch_path(shape + "_" + tensor::type_name(type) + ".gguf");
  auto s = model::shape_by_name(shape);
  EXPECT_TRUE(s.has_value());
  EXPECT_TRUE(model::write_synthetic_model(path, *s, type, 7).ok());
  auto m = model::load_model(path);
  EXPECT_TRUE(m.ok()) << m.error();
  return std::move(*m);
}

model::RunConfig flash_config(int n_slots = 1) {
  model::RunConfig rc;
  rc.ctx = 64;
  rc.n_slots = n_slots;
  rc.max_batch = 32;
  rc.attention = model::AttentionMode::kFlash;
  return rc;
}

// Largest |a - b| over the largest |a|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    scale = std::max(scale, double(std::fabs(a[i]))), d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d / std::max(scale, 1e-6);
}

int argmax(const float* l, int n) { return int(std::max_element(l, l + n) - l); }

// The largest logit minus the second largest.
float top_two_gap(std::vector<float> l) {
  std::partial_sort(l.begin(), l.begin() + 2, l.end(), std::greater<float>());
  return l[0] - l[1];
}

// Greedy decoding from a prompt on the CPU and on the device, both fed the CPU's token: every
// step's logits within tol of the largest logit: 5e-4 for F32 weights (the CPU multiplies
// F32 activations too; both round q and the cache to F16: measured 0.8-2.1e-4), 3e-2 for
// quantized ones (both round activations to the same Q8 grid, but a last-bit difference
// upstream moves a value across a rounding boundary now and then, and these random-weight
// models amplify that: measured 0.8-2.5e-2, as with the device's F32 activations before);
// the same token at every step, or the CPU's top two logits within tol of the largest (a
// near-tie: measured once in 84 steps, toy-qwen3 Q6_K, a gap of 1% of the largest logit).
class VulkanModel : public ::testing::TestWithParam<std::pair<std::string, tensor::Type>> {};

TEST_P(VulkanModel, GreedyTokensAndLogitsMatchTheCpuFlashPath) {
  SKIP_WITHOUT_DEVICE();
  const auto [shape, type] = GetParam();
  const double tol = type == tensor::Type::F32 ? 5e-4 : 3e-2;
  auto m = toy(shape, type);
  const model::Config& c = m->config;
  const model::RunConfig rc = flash_config();
  const model::Partition whole = model::Partition::whole(c);
  util::ThreadPool pool(2);
  model::Transformer cpu(c, m->weights, pool, rc, whole, nullptr);
  auto be = model::make_vulkan_backend(0, c, m->weights, rc, whole);
  ASSERT_TRUE(be.ok()) << be.error();
  model::Transformer gpu(c, m->weights, std::move(*be), rc, whole, nullptr);
  std::vector<int32_t> toks = {1, 17, 300, 42, 99, 5, 250, 7, 11};
  std::vector<float> lc(c.n_vocab), lg(c.n_vocab);
  // The prompt in two batches: the second attends to the first's cache (pos0 > 0).
  for (model::Transformer* tf : {&cpu, &gpu}) ASSERT_TRUE(tf->forward(toks.data(), 5, 0, nullptr).ok());
  ASSERT_TRUE(cpu.forward(toks.data() + 5, int(toks.size()) - 5, 5, lc.data()).ok());
  ASSERT_TRUE(gpu.forward(toks.data() + 5, int(toks.size()) - 5, 5, lg.data()).ok());
  for (int step = 0; step < 12; ++step) {
    EXPECT_LT(rel_diff(lc, lg), tol) << "step " << step;
    const int t = argmax(lc.data(), c.n_vocab);
    if (t != argmax(lg.data(), c.n_vocab)) {
      double scale = 0;
      for (float v : lc) scale = std::max(scale, double(std::fabs(v)));
      EXPECT_LT(top_two_gap(lc), tol * scale) << "step " << step << ": not a near-tie";
      ASSERT_NE(type, tensor::Type::F32) << "step " << step;
    }
    const int pos = int(toks.size());
    toks.push_back(t);
    ASSERT_TRUE(cpu.forward(&toks.back(), 1, pos, lc.data()).ok());
    ASSERT_TRUE(gpu.forward(&toks.back(), 1, pos, lg.data()).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, VulkanModel,
                         ::testing::Values(std::pair{std::string("toy"), tensor::Type::F32},
                                           std::pair{std::string("toy-qwen2"), tensor::Type::F32},
                                           std::pair{std::string("toy-qwen3"), tensor::Type::F32},
                                           std::pair{std::string("toy"), tensor::Type::Q4_1},
                                           std::pair{std::string("toy"), tensor::Type::Q4_K},
                                           std::pair{std::string("toy-qwen2"), tensor::Type::Q8_0},
                                           std::pair{std::string("toy-qwen3"), tensor::Type::Q6_K},
                                           std::pair{std::string("toy-qwen3-yarn"), tensor::Type::F32},
                                           std::pair{std::string("toy-gemma3"), tensor::Type::F32},
                                           std::pair{std::string("toy-gemma3"), tensor::Type::Q8_0}));

// SmolLM2 (Q4_1), 3 prompts, kSteps (16) greedy tokens each, on the CPU's flash path (SIMD
// kernels), on the same CPU path with the scalar kernels, and on the device, all three fed
// the SIMD path's token. Where the device picks another token, the CPU's top two logits
// must be a near-tie: within the largest difference of a picked token's logit between the
// CPU's own two kernel paths over the run (at least kNearTie). Both differ from the SIMD
// path by summation order only, which a Q8 activation grid turns into whole rounding steps
// now and then; so the CPU's own spread is the scale of "near". The device's largest
// difference of a picked logit must stay within twice that spread (and below 1.0).
// Measured (2026-12-03): scalar vs SIMD 0.73 for the picked token (1.31 over the whole
// vocabulary), no step parted; the device 0.71 (1.41), parted at 2 of 48 steps, at gaps
// 0.06 and 0.31. 31 s on lavapipe on two quiet cores (96 s before matvec.comp and matmul.comp
// read straight from the buffers, 2026-12-06): labels e2e and gpu, not unit.
TEST(VulkanSmolLM2, GreedyTokensMatchTheCpuFlashPathOrPartAtNearTies) {
  SKIP_WITHOUT_DEVICE();
  constexpr float kNearTie = 0.05f;
  constexpr int kSteps = 16;
  auto m = model::load_model(SHARDLM_DEFAULT_MODEL);
  ASSERT_TRUE(m.ok()) << m.error();
  const model::Config& c = (*m)->config;
  auto tok = tokenizer::Tokenizer::from_gguf(*(*m)->file);
  ASSERT_TRUE(tok.ok()) << tok.error();
  model::RunConfig rc = flash_config();
  rc.ctx = 96;
  const model::Partition whole = model::Partition::whole(c);
  util::ThreadPool pool(2);
  model::Transformer cpu(c, (*m)->weights, pool, rc, whole, nullptr);
  model::Transformer scalar(c, (*m)->weights, pool, rc, whole, nullptr);
  auto be = model::make_vulkan_backend(0, c, (*m)->weights, rc, whole);
  ASSERT_TRUE(be.ok()) << be.error();
  model::Transformer gpu(c, (*m)->weights, std::move(*be), rc, whole, nullptr);
  const kernels::Isa simd = kernels::active_isa();
  auto on_scalar = [&](const int32_t* t, int n, int pos, float* out) {
    kernels::set_isa(kernels::Isa::kScalar);
    const util::Status st = scalar.forward(t, n, pos, out);
    kernels::set_isa(simd);
    return st;
  };
  const int V = c.n_vocab;
  struct Diffs {
    double all = 0, picked = 0;  // largest |logit difference| over the vocabulary; of the CPU's pick
    std::vector<double> gaps;    // the CPU's top-two gap where the pick differed
    void add(const std::vector<float>& lc, const std::vector<float>& l, int t) {
      for (size_t i = 0; i < lc.size(); ++i) all = std::max(all, double(std::fabs(lc[i] - l[i])));
      picked = std::max(picked, double(std::fabs(lc[size_t(t)] - l[size_t(t)])));
      if (t != argmax(l.data(), int(l.size()))) gaps.push_back(top_two_gap(lc));
    }
  } dev, cpu_spread;
  for (const char* prompt : {"The three primary colors are", "def fibonacci(n):", "Once upon a time, in a village"}) {
    std::vector<int32_t> toks = (*tok)->encode(prompt, true, false);
    std::vector<float> lc(V), ls(V), lg(V);
    ASSERT_TRUE(cpu.forward(toks.data(), int(toks.size()), 0, lc.data()).ok());
    ASSERT_TRUE(on_scalar(toks.data(), int(toks.size()), 0, ls.data()).ok());
    ASSERT_TRUE(gpu.forward(toks.data(), int(toks.size()), 0, lg.data()).ok());
    for (int step = 0; step < kSteps; ++step) {
      const int t = argmax(lc.data(), V);
      dev.add(lc, lg, t);
      cpu_spread.add(lc, ls, t);
      const int pos = int(toks.size());
      toks.push_back(t);
      ASSERT_TRUE(cpu.forward(&toks.back(), 1, pos, lc.data()).ok());
      ASSERT_TRUE(on_scalar(&toks.back(), 1, pos, ls.data()).ok());
      ASSERT_TRUE(gpu.forward(&toks.back(), 1, pos, lg.data()).ok());
    }
  }
  const double near = std::max(double(kNearTie), cpu_spread.picked);
  std::printf("SmolLM2, %d steps: CPU scalar vs SIMD: largest logit difference %.3g (picked token %.3g), %zu "
              "parted; the device: %.3g (%.3g), %zu parted, near-tie bound %.3g\n",
              3 * kSteps, cpu_spread.all, cpu_spread.picked, cpu_spread.gaps.size(), dev.all, dev.picked,
              dev.gaps.size(), near);
  for (double g : dev.gaps) EXPECT_LT(g, near) << "the device parted from the CPU where its top two were " << g << " apart";
  EXPECT_LT(dev.picked, std::max(2 * cpu_spread.picked, 0.1));
  EXPECT_LT(dev.picked, 1.0);
}

// A batch of three segments (two prompts, one decode row; slots out of order, every row's
// logits) gives each row what the same sequence gives alone on the device.
TEST(VulkanModelBatch, SegmentsOfSeveralSlotsMatchEachAlone) {
  SKIP_WITHOUT_DEVICE();
  auto m = toy("toy", tensor::Type::Q8_0);
  const model::Config& c = m->config;
  const int V = c.n_vocab, D = c.dim;
  const model::Partition whole = model::Partition::whole(c);
  const std::vector<int> lens = {7, 4, 1}, slots = {2, 0, 1};
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> toks(3);
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < lens[s]; ++i) toks[s].push_back(int32_t(rng() % V));
  auto be = model::make_vulkan_backend(0, c, m->weights, flash_config(3), whole);
  ASSERT_TRUE(be.ok()) << be.error();
  model::Transformer batched(c, m->weights, std::move(*be), flash_config(3), whole, nullptr);
  std::vector<model::Segment> segs;
  std::vector<float> x(size_t(12) * D), l(size_t(12) * V);
  int rows = 0;
  for (int s = 0; s < 3; ++s) {
    segs.push_back({slots[s], 0, lens[s], model::Logits::kAll});
    for (int b = 0; b < lens[s]; ++b) batched.embed(toks[s][b], &x[size_t(rows + b) * D]);
    rows += lens[s];
  }
  ASSERT_TRUE(batched.forward_batch(segs.data(), 3, x.data(), l.data()).ok());
  rows = 0;
  for (int s = 0; s < 3; ++s) {
    auto one = model::make_vulkan_backend(0, c, m->weights, flash_config(), whole);
    ASSERT_TRUE(one.ok()) << one.error();
    model::Transformer alone(c, m->weights, std::move(*one), flash_config(), whole, nullptr);
    std::vector<float> la(size_t(lens[s]) * V);
    ASSERT_TRUE(alone.forward(toks[s].data(), lens[s], 0, la.data(), true).ok());
    std::vector<float> lb(l.begin() + size_t(rows) * V, l.begin() + size_t(rows + lens[s]) * V);
    EXPECT_LT(rel_diff(la, lb), 1e-5) << "segment " << s;
    rows += lens[s];
  }
}

// Two sequences through the Vulkan backend, every step's last-row logits: prompts in chunks
// of 32 rows beside each other (several segments per batch), then decode rows beside each
// other, then one sequence alone; positions cross block boundaries (64) in prefill and in
// decode. `tables`: each slot's block table given with its first segment (empty: identity
// tables, the cache's rows in position order).
std::vector<float> paged_run(const model::LoadedModel& m, int kv_blocks,
                             const std::vector<std::vector<int32_t>>& tables) {
  const model::Config& c = m.config;
  model::RunConfig rc = flash_config(2);
  rc.ctx = 128;
  rc.max_batch = 64;
  rc.kv_blocks = kv_blocks;
  auto be = model::make_vulkan_backend(0, c, m.weights, rc, model::Partition::whole(c));
  EXPECT_TRUE(be.ok()) << be.error();
  if (!be.ok()) return {};
  model::Transformer tf(c, m.weights, std::move(*be), rc, model::Partition::whole(c), nullptr);
  std::mt19937 rng(11);
  const int lens[2] = {60, 70}, gen = 8;
  std::vector<int32_t> toks[2];
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < lens[s] + gen; ++i) toks[s].push_back(int32_t(rng() % c.n_vocab));
  std::vector<float> out, x(size_t(64) * c.dim), l(size_t(2) * c.n_vocab);
  int pos[2] = {0, 0};
  bool first[2] = {true, true};
  // One batch: each listed slot's next n rows (n = 0: up to 32 of its prompt).
  auto step = [&](std::vector<int> slots, int n) {
    std::vector<model::Segment> segs;
    int rows = 0;
    for (int s : slots) {
      const int k = n > 0 ? n : std::min(32, lens[s] - pos[s]);
      model::Segment g{s, pos[s], k, model::Logits::kLast};
      if (first[s] && !tables.empty()) g.blocks_from = 0, g.blocks = tables[size_t(s)];
      first[s] = false;
      for (int b = 0; b < k; ++b) tf.embed(toks[s][size_t(pos[s] + b)], &x[size_t(rows + b) * c.dim]);
      rows += k;
      pos[s] += k;
      segs.push_back(g);
    }
    EXPECT_TRUE(tf.forward_batch(segs.data(), int(segs.size()), x.data(), l.data()).ok());
    out.insert(out.end(), l.begin(), l.begin() + size_t(segs.size()) * c.n_vocab);
  };
  while (pos[0] < lens[0] || pos[1] < lens[1]) {
    std::vector<int> slots;
    for (int s : {1, 0})
      if (pos[s] < lens[s]) slots.push_back(s);
    step(slots, 0);
  }
  for (int i = 0; i < gen / 2; ++i) step({0, 1}, 1);
  for (int i = 0; i < gen / 2; ++i) step({0}, 1);
  return out;
}

uint64_t fnv(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// The cache read through block tables (issue 32): blocks scattered over a larger pool
// give every logit bit for bit what identity tables give (the rows' addresses change, the
// order of every sum does not); the sliding-window layers of toy-gemma3 keep their
// per-slot caches. The hash is printed to compare with a build before paging.
TEST(VulkanPaged, ScatteredBlocksGiveTheBitsOfIdentityTables) {
  SKIP_WITHOUT_DEVICE();
  for (const char* shape : {"toy", "toy-gemma3"}) {
    SCOPED_TRACE(shape);
    auto m = toy(shape, tensor::Type::Q8_0);
    const std::vector<float> ident = paged_run(*m, 0, {});
    const std::vector<float> scattered = paged_run(*m, 6, {{5, 2}, {0, 4}});
    ASSERT_FALSE(ident.empty());
    ASSERT_EQ(ident.size(), scattered.size());
    EXPECT_EQ(std::memcmp(ident.data(), scattered.data(), ident.size() * sizeof(float)), 0);
    std::printf("%s: %zu logits, hash %016llx\n", shape, ident.size(), (unsigned long long)fnv(ident));
  }
}

// The scheduler on a one-node cluster whose node is the Vulkan device (kv_pool_test's setup):
// jobs in waves (each wave at once, the next once it has ended), greedy, 2 top log-probs.
using VkOutcome = shardlm_test::WaveOutcome;

VkOutcome vk_run(const std::string& path, int slots, int kv_blocks, int host_blocks, int max_tokens,
                 const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::vector<size_t>>& waves) {
  constexpr int kChunk = 48;
  util::ThreadPool pool(1);
  auto m = model::load_model(path);
  EXPECT_TRUE(m.ok());
  runtime::ClusterOptions o;
  o.run.ctx = 320;
  o.run.kv_blocks = kv_blocks;
  o.run.n_slots = slots;
  o.run.max_batch = kChunk + slots;
  o.run.attention = model::AttentionMode::kFlash;
  o.run.kv_host_blocks = host_blocks;
  o.progress = false;
  o.backend = [](const model::Config& c, const model::Weights& w, util::ThreadPool&, const model::RunConfig& rc,
                 const model::Partition& part) { return model::make_vulkan_backend(0, c, w, rc, part); };
  auto cl = runtime::Cluster::start(**m, path, o, pool);
  EXPECT_TRUE(cl.ok()) << cl.error();
  if (!cl.ok()) return VkOutcome(prompts.size());
  EXPECT_EQ((*cl)->no_prefix_sharing(), "");
  return shardlm_test::run_waves(**cl, kChunk, slots, max_tokens, prompts, waves);
}

// Shared prefixes on a Vulkan node (issue 32): a first conversation with an 86-token system
// prompt ends; then three prompts with it run at once and take its cached blocks (read
// through their tables, held by several tables at once): their first tokens equal each
// job alone on a fresh node, their log-probabilities within 1e-4. (One token each, and not
// bit for bit: on the device a row's product is the matvec's when it is its batch's only
// row, else the tiled GEMM's, which sum in other orders; so a decode row, and the output
// projection of a prompt's last row when another prompt ends in the same step, part from
// the job alone in the last bits, as they always did. Decoding through tables that are not
// the identity, bit for bit: ScatteredBlocksGiveTheBitsOfIdentityTables.) Then jobs one
// after another, one of whose prefix comes back from the host cache: 4 tokens each,
// tokens and log-probabilities bit-equal to each alone.
TEST(VulkanPaged, SharedPrefixAndHostCacheJobsEqualEachAlone) {
  SKIP_WITHOUT_DEVICE();
  const std::string path = shardlm_test::scratch_path("vk_prefix_q8_0.gguf");
  ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), tensor::Type::Q8_0, 7).ok());
  std::mt19937 rng(3);
  std::vector<int32_t> system(86);  // one full block and 22 positions
  for (int32_t& x : system) x = int32_t(rng() % 500) + 1;
  std::vector<std::vector<int32_t>> prompts;
  for (int extra : {2, 30, 50, 14}) {
    std::vector<int32_t> p = system;
    for (int i = 0; i < extra; ++i) p.push_back(int32_t(rng() % 500) + 1);
    prompts.push_back(p);
  }
  constexpr int kGen = 4;
  std::vector<VkOutcome> alone;
  for (const std::vector<int32_t>& p : prompts) {
    alone.push_back(vk_run(path, 1, 0, 0, kGen, {p}, {{0}}));
    ASSERT_EQ(alone.back().tokens[0].size(), size_t(kGen));
    EXPECT_EQ(alone.back().ends[0].cached_tokens, 0);
  }
  const VkOutcome together = vk_run(path, 4, 0, 0, 1, prompts, {{0}, {1, 2, 3}});
  for (size_t j = 0; j < prompts.size(); ++j) {
    SCOPED_TRACE("job " + std::to_string(j));
    ASSERT_EQ(together.tokens[j].size(), 1u);
    EXPECT_EQ(together.tokens[j][0], alone[j].tokens[0][0]);
    ASSERT_EQ(together.logprobs[j].size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(together.logprobs[j][i], alone[j].logprobs[0][i], 1e-4 * std::max(1.0f, std::fabs(alone[j].logprobs[0][i])));
    if (j > 0) {
      EXPECT_GE(together.ends[j].cached_tokens, 64);
    }
  }
  // At once: the first job's single token holds the scheduler until the wave is queued
  // (the gate), so either all three are admitted together (two attach the first
  // conversation's full block, one takes its slot and keeps its own rows) or the first
  // ends first and the other two then split that way: at least one attach, and at the end
  // that block held by two tables.
  EXPECT_GE(together.stats.kv_prefix_hits, 1u);
  EXPECT_EQ(together.shared, 1);
  EXPECT_GE(together.held - together.used, 1);
  // The host cache (kv_copy: device <-> host copies): a 150-token prompt in a pool of 3
  // blocks takes back the first conversation's cached block, saved to host memory as it
  // goes; the next prompt with its system prompt finds it saved, and it is restored into a
  // fresh block instead of evaluated.
  std::vector<int32_t> other(150);
  for (int32_t& x : other) x = int32_t(rng() % 500) + 1;
  const VkOutcome other_alone = vk_run(path, 1, 0, 0, kGen, {other}, {{0}});
  const VkOutcome host = vk_run(path, 2, 3, 4, kGen, {prompts[0], other, prompts[1]}, {{0}, {1}, {2}});
  EXPECT_EQ(host.tokens[0], alone[0].tokens[0]);
  EXPECT_EQ(host.logprobs[0], alone[0].logprobs[0]);
  EXPECT_EQ(host.tokens[1], other_alone.tokens[0]);
  EXPECT_EQ(host.logprobs[1], other_alone.logprobs[0]);
  EXPECT_EQ(host.tokens[2], alone[1].tokens[0]);
  EXPECT_EQ(host.logprobs[2], alone[1].logprobs[0]);
  EXPECT_EQ(host.ends[2].cached_tokens, 64);
  EXPECT_EQ(host.stats.kv_host_restores, 1u);
  EXPECT_GE(host.stats.kv_host_saves, 1u);
}

TEST(VulkanModelErrors, RefusalsSayWhatToUse) {
  SKIP_WITHOUT_DEVICE();
  auto m = toy("toy", tensor::Type::Q8_0);
  const model::Config& c = m->config;
  const model::Partition whole = model::Partition::whole(c);
  auto missing = model::make_vulkan_backend(7, c, m->weights, flash_config(), whole);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("7"), std::string::npos) << missing.error();
  model::RunConfig exact = flash_config();
  exact.attention = model::AttentionMode::kExact;
  auto e = model::make_vulkan_backend(0, c, m->weights, exact, whole);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("--flash-attn on"), std::string::npos) << e.error();
  model::RunConfig q8 = flash_config();
  q8.kv_type = model::KvType::kQ8_0;
  auto k = model::make_vulkan_backend(0, c, m->weights, q8, whole);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().find("--kv-type f16"), std::string::npos) << k.error();
  // gpt-oss: the device and every missing feature named at once (its MXFP4 experts are
  // never reached). Sliding windows (toy-gemma3) and YaRN (toy-qwen3-yarn) run: the shapes above.
  auto o = toy("toy-gpt-oss", tensor::Type::Q8_0);
  auto oe = model::make_vulkan_backend(0, o->config, o->weights, flash_config(), model::Partition::whole(o->config));
  ASSERT_FALSE(oe.ok());
  EXPECT_NE(oe.error().find("Vulkan device 0 ("), std::string::npos) << oe.error();
  EXPECT_NE(oe.error().find("gpt-oss needs mixture of experts, attention sinks and an output-projection bias, "
                            "which the Vulkan backend does not run: use --device cpu"),
            std::string::npos) << oe.error();
}

}  // namespace
