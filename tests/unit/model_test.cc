// model_test.cc: config and weight binding errors, and forward-pass invariants on
// synthetic random-weight models of each architecture (llama, qwen2, qwen3): batched
// evaluation equals token-by-token evaluation (exact and flash attention), thread counts
// agree, F32 / F16 / Q8_0 KV caches agree closely, and with flash attention every row's
// logits are bit-identical whatever the batch split and thread count, on the toys and on
// SmolLM2. Several sequences in one batch (KV slots): every row equal to the sequence run
// alone, bit for bit, and a sequence truncated and extended again equal to a fresh one.
// (Agreement with llama.cpp is golden_test's and test_perplexity.py's job.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <random>
#include <set>
#include <cstring>

#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "sampler/sampler.h"
#include "scratch.h"
#include "tensor/quants.h"
#include "toy_model.h"
#include "vec_dot_order.h"

namespace {

std::string tmp_path(const std::string& name) { return shardlm_test::scratch_path(name); }

std::string make(const std::string& shape, tensor::Type type) { return shardlm_test::toy_model(shape, type, 7); }

std::vector<float> run(const model::LoadedModel& m, const std::vector<int32_t>& toks, int threads, int batch,
                       model::KvType kv = model::KvType::kF16,
                       model::AttentionMode mode = model::AttentionMode::kExact, int ctx = 64) {
  util::ThreadPool pool(threads);
  model::Transformer tf(m.config, m.weights, pool, ctx, kv, batch, mode);
  std::vector<float> logits(m.config.n_vocab);
  for (size_t i = 0; i < toks.size(); i += batch) {
    const int n = std::min<int>(batch, static_cast<int>(toks.size() - i));
    tf.forward(toks.data() + i, n, static_cast<int>(i), logits.data());
  }
  return logits;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, double(std::fabs(a[i])));
    d = std::max(d, double(std::fabs(a[i] - b[i])));
  }
  return d / std::max(scale, 1e-6);
}

class ArchTest : public ::testing::TestWithParam<std::pair<std::string, tensor::Type>> {};

TEST_P(ArchTest, BatchedEqualsTokenByToken) {
  const auto [shape, type] = GetParam();
  auto m = model::load_model(make(shape, type));
  ASSERT_TRUE(m.ok()) << m.error();
  const std::vector<int32_t> toks = {1, 17, 300, 42, 99, 5, 250, 7, 11, 3, 400};
  const auto one = run(**m, toks, 1, 1);
  for (float x : one) ASSERT_TRUE(std::isfinite(x));
  const bool lanes = kernels::lane_order_type(type);  // batches of 4+ in lane order (kernels.h)
  const auto batched = run(**m, toks, 2, 4);
  const auto big = run(**m, toks, 2, 32);
  // Batched and per-token runs quantize the same activations; only float summation order
  // differs. Lane order's differences are amplified by the activation quantization (Q3_K
  // on toy-qwen2: 1.4e-2), so those types are held to 1e-4 in vec_dot order, 2e-2 in lanes.
  EXPECT_LT(max_rel_diff(one, batched), lanes ? 2e-2 : 1e-4);
  EXPECT_LT(max_rel_diff(one, big), lanes ? 2e-2 : 1e-4);
  if (lanes) {
    shardlm_test::VecDotOrder vec_dot;
    EXPECT_LT(max_rel_diff(one, run(**m, toks, 2, 32)), 1e-4);
  }
  EXPECT_EQ(sampler::argmax(one.data(), (int)one.size()), sampler::argmax(big.data(), (int)big.size()));
  const auto f32kv = run(**m, toks, 2, 4, model::KvType::kF32);
  EXPECT_LT(max_rel_diff(one, f32kv), 5e-2);  // F16 rounding of K, V, Q and probabilities
  // Flash attention: batch-split invariant (bit-identical), close to the exact path (no
  // F16 rounding of the probabilities), and a Q8_0 cache close to F16.
  const auto flash1 = run(**m, toks, 1, 1, model::KvType::kF16, model::AttentionMode::kFlash);
  const auto flash4 = run(**m, toks, 2, 4, model::KvType::kF16, model::AttentionMode::kFlash);
  if (lanes)
    EXPECT_LT(max_rel_diff(flash1, flash4), 2e-2);
  else
    EXPECT_EQ(flash1, flash4);
  EXPECT_LT(max_rel_diff(one, flash4), 5e-2);
  const auto q8kv = run(**m, toks, 2, 4, model::KvType::kQ8_0, model::AttentionMode::kFlash);
  EXPECT_LT(max_rel_diff(flash4, q8kv), 5e-2);
}

// Every row's logits of a prompt evaluated in batches of `batch` (all_logits), and the
// greedy continuation after it (n_gen tokens, one at a time).
struct EvalRun {
  std::vector<float> logits;  // [n][n_vocab]
  std::vector<int32_t> gen;
};
EvalRun run_all(const model::LoadedModel& m, const std::vector<int32_t>& toks, int threads, int batch,
            model::AttentionMode mode, int n_gen, model::KvType kv = model::KvType::kF16) {
  util::ThreadPool pool(threads);
  const int n = int(toks.size()), V = m.config.n_vocab;
  model::Transformer tf(m.config, m.weights, pool, n + n_gen + 1, kv, batch, mode);
  EvalRun r;
  r.logits.resize(size_t(n) * V);
  EXPECT_TRUE(tf.forward(toks.data(), n, 0, r.logits.data(), /*all_logits=*/true).ok());
  std::vector<float> last(r.logits.end() - V, r.logits.end());
  for (int i = 0; i < n_gen; ++i) {
    const int32_t id = sampler::argmax(last.data(), V);
    r.gen.push_back(id);
    EXPECT_TRUE(tf.forward(&id, 1, n + i, last.data()).ok());
  }
  return r;
}

// A prompt longer than flash attention's 256-position chunks, in token ids below the toy
// vocabulary.
std::vector<int32_t> long_prompt(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7919 + 13) % vocab;
  return t;
}

// With flash attention every row is bit-identical whatever the batch split (1 = token by
// token, which on 2 threads takes flash decoding past 512 positions) and thread count, so
// the last row and the greedy continuation are too. (Q4_1 weights, their batched matmuls
// in vec_dot order: Q4_1 batches of 4+ sum in lane order by default since 2026-12-06, as
// Q4_0's, see Q4_0LaneOrderBatches.)
TEST(FlashAttention, AnyBatchSplitGivesIdenticalLogits) {
  const shardlm_test::VecDotOrder vec_dot_order;
  for (const char* shape : {"toy", "toy-qwen3"}) {
    auto m = model::load_model(make(shape, tensor::Type::Q4_1));
    ASSERT_TRUE(m.ok()) << m.error();
    const auto toks = long_prompt(600, (*m)->config.n_vocab);
    const EvalRun ref = run_all(**m, toks, 2, 64, model::AttentionMode::kFlash, 8);
    for (auto [threads, batch] : {std::pair{1, 1}, {2, 1}, {2, 7}, {1, 256}, {2, 600}}) {
      const EvalRun r = run_all(**m, toks, threads, batch, model::AttentionMode::kFlash, 8);
      EXPECT_TRUE(r.logits == ref.logits) << shape << " threads " << threads << " batch " << batch
                                          << " max rel diff " << max_rel_diff(r.logits, ref.logits);
      EXPECT_EQ(r.gen, ref.gen) << shape << " threads " << threads << " batch " << batch;
    }
    // The exact path: same per-row order in a batch, so also identical across splits on one
    // thread count; and within tolerance of flash.
    const EvalRun e1 = run_all(**m, toks, 2, 5, model::AttentionMode::kExact, 8);
    const EvalRun e64 = run_all(**m, toks, 2, 64, model::AttentionMode::kExact, 8);
    EXPECT_TRUE(e1.logits == e64.logits) << shape << " max rel diff " << max_rel_diff(e1.logits, e64.logits);
    EXPECT_LT(max_rel_diff(e64.logits, ref.logits), 5e-2) << shape;
  }
}

// Q4_0 batches of 4 or more columns sum in lane order on x86 (kernels.h): splits whose
// chunks all have at least 4 rows stay bit-identical to each other; token by token
// (vec_dot order) is within tolerance of them. The matmuls differ in the last bits only
// (kernels_test checks both orders exactly), but on a random toy model the Q8_0
// quantization of every activation turns a last-bit difference at a rounding boundary into
// a whole quantization step: 0.9 % of the largest logit measured here.
TEST(FlashAttention, Q4_0LaneOrderBatches) {
  auto m = model::load_model(make("toy", tensor::Type::Q4_0));
  ASSERT_TRUE(m.ok()) << m.error();
  const auto toks = long_prompt(600, (*m)->config.n_vocab);
  const EvalRun ref = run_all(**m, toks, 2, 64, model::AttentionMode::kFlash, 0);
  for (auto [threads, batch] : {std::pair{2, 7}, {1, 256}, {2, 600}}) {  // 600 = 85 * 7 + 5
    const EvalRun r = run_all(**m, toks, threads, batch, model::AttentionMode::kFlash, 0);
    EXPECT_TRUE(r.logits == ref.logits) << " threads " << threads << " batch " << batch << " max rel diff "
                                        << max_rel_diff(r.logits, ref.logits);
  }
  const EvalRun one = run_all(**m, toks, 2, 1, model::AttentionMode::kFlash, 0);
  const double d = max_rel_diff(one.logits, ref.logits);
  std::printf("Q4_0 toy, 600 rows: token by token vs batches of 64, max rel diff %.3g\n", d);
  EXPECT_LT(d, 2e-2);
  // --exact-batches (lane order off): batches in vec_dot order, equal to token by token.
  const EvalRun exact = [&] {
    shardlm_test::VecDotOrder vec_dot;
    return run_all(**m, toks, 2, 64, model::AttentionMode::kFlash, 0);
  }();
  EXPECT_TRUE(exact.logits == one.logits) << "max rel diff " << max_rel_diff(exact.logits, one.logits);
}

// SmolLM2 (the real model): a 64-token prompt in one batch vs token by token. Flash: the
// last row's logits are equal to the bit and so is the greedy continuation. Exact path:
// the same. Flash vs exact: last-token logits within 1.5 (measured 0.96 at 300 tokens: the
// exact path rounds probabilities to F16 as llama.cpp's, and the activation quantization
// before every matmul amplifies such differences, as runtime_test's kSmolLogitTol notes);
// their greedy tokens may part at a near-tie (this synthetic prompt parts at token 3), so
// that is not asserted. Every row's logits are computed (all_logits), through SmolLM2's
// Q8_0 output matrix, which sums 4+ rows in lane order: vec_dot order here, as for a
// prompt's last row alone.
TEST(FlashAttention, SmolLM2BatchedPrefillEqualsTokenByToken) {
  shardlm_test::VecDotOrder vec_dot;
  auto m = model::load_model(SHARDLM_DEFAULT_MODEL);
  if (!m.ok()) GTEST_SKIP() << m.error();
  const int V = (*m)->config.n_vocab;
  std::vector<int32_t> toks;
#ifdef __SANITIZE_ADDRESS__
  const int n = 20;  // the sanitizer build checks memory, not numerics: a shorter prompt (still 4+ rows)
#else
  const int n = 64;
#endif
  for (int i = 0; i < n; ++i) toks.push_back(1000 + (i % 50) * 17 + (i / 50));
  auto last = [&](const EvalRun& r) { return std::vector<float>(r.logits.end() - V, r.logits.end()); };
  std::vector<EvalRun> batched;
  for (auto mode : {model::AttentionMode::kFlash, model::AttentionMode::kExact}) {
    batched.push_back(run_all(**m, toks, 2, 64, mode, 4));
    const EvalRun single = run_all(**m, toks, 2, 1, mode, 4);
    EXPECT_TRUE(last(batched.back()) == last(single)) << model::attention_mode_name(mode) << " max rel diff "
                                                      << max_rel_diff(last(batched.back()), last(single));
    EXPECT_EQ(batched.back().gen, single.gen) << model::attention_mode_name(mode);
  }
  float d = 0;
  for (int i = 0; i < V; ++i) d = std::max(d, std::fabs(last(batched[0])[i] - last(batched[1])[i]));
  EXPECT_LT(d, 1.5f);
}

TEST(FlashAttention, Q8CacheNeedsFlashAndIsReported) {
  auto m = model::load_model(make("toy", tensor::Type::Q8_0));
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_NE(model::attention_unsupported((*m)->config, model::KvType::kQ8_0, model::AttentionMode::kExact)
                .find("flash"), std::string::npos);
  EXPECT_EQ(model::attention_unsupported((*m)->config, model::KvType::kQ8_0, model::AttentionMode::kFlash), "");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ArchTest,
    ::testing::Values(std::make_pair("toy", tensor::Type::Q4_0), std::make_pair("toy", tensor::Type::Q4_K),
                      std::make_pair("toy", tensor::Type::Q6_K), std::make_pair("toy", tensor::Type::F16), std::make_pair("toy-llama31", tensor::Type::Q5_0),
                      std::make_pair("toy-qwen2", tensor::Type::Q8_0), std::make_pair("toy-qwen3", tensor::Type::Q5_K),
                      std::make_pair("toy-qwen3moe", tensor::Type::Q8_0),
                      std::make_pair("toy-qwen3moe-e8", tensor::Type::Q4_0),
                      std::make_pair("toy", tensor::Type::Q2_K), std::make_pair("toy-qwen2", tensor::Type::Q3_K),
                      std::make_pair("toy", tensor::Type::IQ4_XS), std::make_pair("toy-llama31", tensor::Type::IQ4_NL),
                      std::make_pair("toy-qwen3moe", tensor::Type::MXFP4)));

// Qwen3-MoE: a prompt in one batch (each expert's tokens in one matmul) gives the bits of
// token-by-token decode (expert products always in vec_dot order), and the tokens of the
// batch pick several experts (the grouping is exercised, not one expert for everyone).
TEST(Moe, GroupedPromptEqualsTokenByTokenBitwise) {
  for (const char* shape : {"toy-qwen3moe", "toy-qwen3moe-e8"}) {
    SCOPED_TRACE(shape);
    auto m = model::load_model(make(shape, tensor::Type::Q4_0));
    ASSERT_TRUE(m.ok()) << m.error();
    const std::vector<int32_t> toks = {1, 17, 300, 42, 99, 5, 250, 7, 11, 3, 400, 77, 8, 123, 456};
    const model::Config& c = (*m)->config;
    model::RunConfig rc;
    rc.ctx = 64, rc.max_batch = 16, rc.lane_order = false;  // the dense matmuls in vec_dot order too
    util::ThreadPool pool(2);
    model::Transformer one(c, (*m)->weights, pool, rc, model::Partition::whole(c), nullptr);
    model::Transformer all(c, (*m)->weights, pool, rc, model::Partition::whole(c), nullptr);
    const int n = int(toks.size()), V = c.n_vocab;
    std::vector<float> a(size_t(n) * V), b(size_t(n) * V);
    for (int i = 0; i < n; ++i) ASSERT_TRUE(one.forward(&toks[i], 1, i, &a[size_t(i) * V]).ok());
    ASSERT_TRUE(all.forward(toks.data(), n, 0, b.data(), true).ok());
    EXPECT_EQ(a, b);
    // The router's picks over the prompt: more than k distinct experts in layer 0.
    std::vector<float> x(size_t(n) * c.dim), xn(c.dim), logits(c.n_expert);
    std::set<int> picked;
    const model::LayerWeights& l0 = (*m)->weights.layers[0];
    for (int i = 0; i < n; ++i) {
      one.embed(toks[i], xn.data());
      kernels::rmsnorm(xn.data(), xn.data(), l0.attn_norm.data(), c.dim, c.rms_eps);
      for (int e = 0; e < c.n_expert; ++e) {
        std::vector<float> row(c.dim);
        tensor::dequantize_row(l0.router.type, l0.router.row(e), row.data(), c.dim);
        double d = 0;
        for (int j = 0; j < c.dim; ++j) d += double(row[j]) * xn[j];
        logits[e] = float(d);
      }
      picked.insert(int(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    }
    EXPECT_GT(picked.size(), 2u) << "the router sends every token to the same expert";
  }
}

// Writes a copy of `src` with one key or tensor changed, then expects load_model to fail
// with a message containing `want`.
void expect_load_error(const std::function<void(gguf::Writer&, const gguf::File&)>& edit, const std::string& want,
                       std::string src_path = "") {
  if (src_path.empty()) src_path = make("toy", tensor::Type::Q8_0);
  auto src = gguf::File::open(src_path);
  ASSERT_TRUE(src.ok()) << src.error();
  gguf::Writer w;
  edit(w, **src);
  const std::string out = tmp_path("edited.gguf");
  ASSERT_TRUE(w.write(out).ok());
  auto m = model::load_model(out);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find(want), std::string::npos) << m.error();
}

void copy_all(gguf::Writer& w, const gguf::File& f, const std::string& skip_tensor = "") {
  for (const auto& [k, v] : f.kv()) w.set(k, v);
  for (const auto& t : f.tensors())
    if (t.name != skip_tensor) w.add_tensor(t.name, t.ne, t.type, t.data);
}

// Three sequences of one toy model, each alone in its own Transformer (prompt in one
// batch, then token by token) and all together in one 4-slot Transformer whose steps mix
// prompt segments and decode rows of the others, in slots 3, 0 and 2. Every logits row
// must be bit-identical: for Q4_1 because every matmul keeps vec_dot order, for the
// lane-order types (Q4_0, Q8_0, Q4_K, Q6_K) because a segment's order depends only on its own
// length (prompt segments of >= 4 rows in lanes, decode rows always in vec_dot order:
// model::RunConfig::lane_order). Then sequence A is truncated to 2 decoded positions and
// extended with the same tokens: the logits are those of the first time.
// Paged (issue 32): the together-Transformer's KV pool has 7 blocks of 64 positions for 4
// slots, handed out in a scrambled order as the steps need them (the root's allocation,
// carried by each segment), and the sequences cross block boundaries in their prompts and
// while decoding: the rows must still be those of the contiguous caches alone.
TEST(MultiSequence, BatchedRowsEqualEachSequenceAlone) {
  for (const bool paged : {false, true}) {
  for (tensor::Type type : {tensor::Type::Q4_1, tensor::Type::Q8_0, tensor::Type::Q4_0, tensor::Type::Q4_K,
                            tensor::Type::Q6_K}) {
    for (model::AttentionMode mode : {model::AttentionMode::kFlash, model::AttentionMode::kExact}) {
      auto m = model::load_model(make("toy", type));
      ASSERT_TRUE(m.ok()) << m.error();
      const model::Config& c = (*m)->config;
      const int V = c.n_vocab, D = c.dim, n_dec = 6;
      const int ctx = paged ? 256 : 64, B = paged ? 160 : 32;
      const std::vector<int> lens = paged ? std::vector<int>{60, 5, 125} : std::vector<int>{9, 5, 13};
      const std::vector<int> slots = {3, 0, 2};
      std::vector<std::vector<int32_t>> toks(3);
      std::mt19937 rng(5);
      for (int s = 0; s < 3; ++s)
        for (int i = 0; i < lens[s] + n_dec; ++i) toks[s].push_back(int32_t(rng() % V));
      util::ThreadPool pool(2);
      // alone[s][k]: logits after the prompt (k = 0) and after each decode token.
      std::vector<std::vector<std::vector<float>>> alone(3);
      for (int s = 0; s < 3; ++s) {
        model::Transformer tf(c, (*m)->weights, pool, ctx, model::KvType::kF16, B, mode);
        std::vector<float> l(V);
        ASSERT_TRUE(tf.forward(toks[s].data(), lens[s], 0, l.data()).ok());
        alone[s].push_back(l);
        for (int i = 0; i < n_dec; ++i) {
          ASSERT_TRUE(tf.forward(&toks[s][lens[s] + i], 1, lens[s] + i, l.data()).ok());
          alone[s].push_back(l);
        }
      }
      model::RunConfig rc;
      rc.ctx = ctx;
      rc.n_slots = 4;
      rc.max_batch = B;
      rc.attention = mode;
      if (paged) rc.kv_blocks = 7;
      model::Transformer tf(c, (*m)->weights, pool, rc, model::Partition::whole(c), nullptr);
      std::vector<int32_t> free_blocks = {4, 1, 3, 0, 6, 2, 5};  // taken from the back
      std::vector<std::vector<int32_t>> table(4), carried(3);
      std::vector<int> fed(3, 0), got(3, 0);  // tokens evaluated, logits rows checked
      std::vector<float> x(size_t(B) * D), l(size_t(B) * V);
      // Step t: sequence s starts its prompt at step s, then decodes one token per step.
      for (int step = 0; step < 3 + n_dec; ++step) {
        std::vector<model::Segment> segs;
        std::vector<int> who;
        int rows = 0;
        for (int s = 2; s >= 0; --s) {  // decode rows first, as the scheduler does
          if (step < s || got[s] > n_dec) continue;
          const int n = fed[s] == 0 ? lens[s] : 1;
          segs.push_back({slots[s], fed[s], n, model::Logits::kLast});
          if (paged) {  // the root's allocation: the blocks of positions fed .. fed + n - 1
            std::vector<int32_t>& t = table[size_t(slots[s])];
            while (int(t.size()) * 64 < fed[s] + n) {
              ASSERT_FALSE(free_blocks.empty());
              t.push_back(free_blocks.back());
              free_blocks.pop_back();
            }
            const int from = fed[s] / 64;
            carried[size_t(s)].assign(t.begin() + from, t.end());
            segs.back().blocks_from = from;
            segs.back().blocks = carried[size_t(s)];
          }
          for (int b = 0; b < n; ++b) tf.embed(toks[s][fed[s] + b], &x[size_t(rows + b) * D]);
          rows += n;
          who.push_back(s);
        }
        if (segs.empty()) break;
        ASSERT_TRUE(tf.forward_batch(segs.data(), int(segs.size()), x.data(), l.data()).ok());
        for (size_t i = 0; i < who.size(); ++i) {
          const int s = who[i];
          EXPECT_EQ(std::memcmp(&l[i * V], alone[s][got[s]].data(), sizeof(float) * V), 0)
              << tensor::type_name(type) << " " << model::attention_mode_name(mode) << (paged ? " paged" : "")
              << " sequence " << s << " logits row " << got[s] << " at step " << step;
          fed[s] += segs[i].n;
          got[s]++;
        }
      }
      // Roll sequence A back to its prompt + 2 decoded positions and extend it again.
      for (int k = 0; k < 3; ++k) {
        const int pos = lens[0] + 2 + k;
        model::Segment seg{slots[0], pos, 1, model::Logits::kLast};
        tf.embed(toks[0][pos], x.data());
        ASSERT_TRUE(tf.forward_batch(&seg, 1, x.data(), l.data()).ok());
        EXPECT_EQ(std::memcmp(l.data(), alone[0][pos - lens[0] + 1].data(), sizeof(float) * V), 0)
            << tensor::type_name(type) << (paged ? " paged" : "") << " replayed position " << pos;
      }
      if (paged) {  // a slot whose table does not reach a position is an error, not a crash
        model::Segment seg{slots[1], 200, 1, model::Logits::kLast};
        EXPECT_FALSE(tf.forward_batch(&seg, 1, x.data(), l.data()).ok());
      }
    }
  }
  }
}

// A cluster rebuilding a slot after losing a node (runtime/cluster.h, SlotHistory) evaluates
// decode rows that ran one per step as one rowwise segment: every row must come out with
// the bits it had when it ran alone, in each batch regime (20 rows: past the decode tiles'
// 16), for lane-order and vec_dot types and both attention paths.
TEST(MultiSequence, RowwiseSegmentEqualsTheRowsOneByOne) {
  for (tensor::Type type : {tensor::Type::Q4_0, tensor::Type::Q4_1, tensor::Type::Q4_K, tensor::Type::Q6_K}) {
    for (model::AttentionMode mode : {model::AttentionMode::kFlash, model::AttentionMode::kExact}) {
      auto m = model::load_model(make("toy", type));
      ASSERT_TRUE(m.ok()) << m.error();
      const model::Config& c = (*m)->config;
      const int V = c.n_vocab, D = c.dim, n_prompt = 7, n_dec = 20;
      std::vector<int32_t> toks;
      std::mt19937 rng(11);
      for (int i = 0; i < n_prompt + n_dec; ++i) toks.push_back(int32_t(rng() % V));
      util::ThreadPool pool(2);
      model::RunConfig rc;
      rc.ctx = 64;
      rc.max_batch = 32;
      rc.attention = mode;
      std::vector<float> x(size_t(32) * D), l(size_t(32) * V), alone(size_t(n_dec) * V);
      model::Transformer one(c, (*m)->weights, pool, rc, model::Partition::whole(c), nullptr);
      model::Segment prompt{0, 0, n_prompt, model::Logits::kNone};
      for (int b = 0; b < n_prompt; ++b) one.embed(toks[b], &x[size_t(b) * D]);
      ASSERT_TRUE(one.forward_batch(&prompt, 1, x.data(), nullptr).ok());
      for (int i = 0; i < n_dec; ++i) {
        model::Segment seg{0, n_prompt + i, 1, model::Logits::kLast};
        one.embed(toks[n_prompt + i], x.data());
        ASSERT_TRUE(one.forward_batch(&seg, 1, x.data(), &alone[size_t(i) * V]).ok());
      }
      model::Transformer re(c, (*m)->weights, pool, rc, model::Partition::whole(c), nullptr);
      for (int b = 0; b < n_prompt; ++b) re.embed(toks[b], &x[size_t(b) * D]);
      ASSERT_TRUE(re.forward_batch(&prompt, 1, x.data(), nullptr).ok());
      model::Segment rows{0, n_prompt, n_dec, model::Logits::kAll, /*rowwise=*/true};
      for (int b = 0; b < n_dec; ++b) re.embed(toks[n_prompt + b], &x[size_t(b) * D]);
      ASSERT_TRUE(re.forward_batch(&rows, 1, x.data(), l.data()).ok());
      for (int i = 0; i < n_dec; ++i)
        EXPECT_EQ(std::memcmp(&l[size_t(i) * V], &alone[size_t(i) * V], sizeof(float) * V), 0)
            << tensor::type_name(type) << " " << model::attention_mode_name(mode) << " row " << i;
      // Without rowwise, lane-order types take lanes for these rows: other bits (so the flag
      // is what the equality rests on). Only asserted where lanes exist.
      if (type == tensor::Type::Q4_0) {
        model::Transformer lanes(c, (*m)->weights, pool, rc, model::Partition::whole(c), nullptr);
        for (int b = 0; b < n_prompt; ++b) lanes.embed(toks[b], &x[size_t(b) * D]);
        ASSERT_TRUE(lanes.forward_batch(&prompt, 1, x.data(), nullptr).ok());
        rows.rowwise = false;
        for (int b = 0; b < n_dec; ++b) lanes.embed(toks[n_prompt + b], &x[size_t(b) * D]);
        ASSERT_TRUE(lanes.forward_batch(&rows, 1, x.data(), l.data()).ok());
        EXPECT_NE(std::memcmp(l.data(), alone.data(), sizeof(float) * V * n_dec), 0) << "lanes gave the same bits";
      }
    }
  }
}

TEST(ModelErrors, UnknownArchitectureListsSupported) {
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    copy_all(w, f);
    w.set("general.architecture", gguf::Value::string("mamba"));
  }, "unsupported architecture 'mamba'; supported: llama");
}

// toy-gemma3 (window 8, layer 5 global) over 150 positions: the windowed layers' rings
// (8 + 1 + 31 rounded up to 64 rows, wrapped) give the logits of one batch of all 150
// (whose ring is the whole context), the
// window shapes the result (a window-free copy of the config differs), and flash mode
// (the window masked in flash attention, the ring read as a ring) gives one batch's logits
// position by position and stays within F16 rounding of exact mode, with an F16 cache
// and with a Q8_0 one (which only flash attention reads). Matmuls in vec_dot order (Q8_0
// batches of 4+ would sum in lane order).
TEST(Gemma3, SlidingWindowRingAndModes) {
  shardlm_test::VecDotOrder vec_dot;
  auto m = model::load_model(make("toy-gemma3", tensor::Type::Q8_0));
  ASSERT_TRUE(m.ok()) << m.error();
  ASSERT_EQ((*m)->config.n_swa, 8);
  ASSERT_TRUE((*m)->config.is_swa(0) && !(*m)->config.is_swa(5));
  std::vector<int32_t> toks;
  for (int i = 0; i < 150; ++i) toks.push_back((i * 37 + 11) % 500);
  const auto exact = model::AttentionMode::kExact, flash_mode = model::AttentionMode::kFlash;
  const std::vector<float> one = run(**m, toks, 2, 1, model::KvType::kF16, exact, 160);       // position by position
  const std::vector<float> whole = run(**m, toks, 2, 150, model::KvType::kF16, exact, 160);  // one batch
  EXPECT_EQ(one, whole);
  model::Config no_window = (*m)->config;
  no_window.n_swa = 0;
  util::ThreadPool pool(2);
  model::Transformer tf(no_window, (*m)->weights, pool, 160, model::KvType::kF16, 150);
  std::vector<float> full(no_window.n_vocab);
  ASSERT_TRUE(tf.forward(toks.data(), 150, 0, full.data()).ok());
  EXPECT_GT(max_rel_diff(full, one), 1e-3);
  const std::vector<float> flash = run(**m, toks, 2, 1, model::KvType::kF16, flash_mode, 160);
  EXPECT_EQ(flash, run(**m, toks, 2, 150, model::KvType::kF16, flash_mode, 160));
  EXPECT_LT(max_rel_diff(flash, one), 2e-2);
  EXPECT_EQ(model::attention_unsupported((*m)->config, model::KvType::kQ8_0, flash_mode), "");
  const std::vector<float> q8 = run(**m, toks, 2, 1, model::KvType::kQ8_0, flash_mode, 160);
  EXPECT_EQ(q8, run(**m, toks, 2, 7, model::KvType::kQ8_0, flash_mode, 160));
  EXPECT_LT(max_rel_diff(q8, one), 5e-2);
}

// A gemma3 file (the toy's keys under "gemma3.") without its sliding-window size.
TEST(ModelErrors, Gemma3WithoutWindowKeyNamesIt) {
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv())
      w.set(k.rfind("llama.", 0) == 0 ? "gemma3." + k.substr(6) : k, v);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data);
    w.set("general.architecture", gguf::Value::string("gemma3"));
  }, "gemma3 model metadata lacks gemma3.attention.sliding_window");
}

// Qwen3-MoE files with a missing expert tensor, an expert count that does not match the
// tensors, more experts used than there are, and no expert count.
TEST(ModelErrors, MoeFilesWithBadExpertsAreNamed) {
  const std::string moe = make("toy-qwen3moe", tensor::Type::Q8_0);
  expect_load_error([](gguf::Writer& w, const gguf::File& f) { copy_all(w, f, "blk.1.ffn_down_exps.weight"); },
                    "missing tensor 'blk.1.ffn_down_exps.weight'", moe);
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    copy_all(w, f);
    w.set("qwen3moe.expert_count", gguf::Value::u32(16));
  }, "tensor 'blk.0.ffn_gate_inp.weight' has shape [256, 32], expected [256, 16]", moe);
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv()) w.set(k, v);
    for (const auto& t : f.tensors()) {
      std::vector<int64_t> ne = t.ne;
      if (t.name == "blk.0.ffn_up_exps.weight") ne[2] = 16;  // half the experts
      w.add_tensor(t.name, ne, t.type, t.data);
    }
  }, "tensor 'blk.0.ffn_up_exps.weight' has shape [256, 128, 16], expected [256, 128, 32] (the model's expert_count is 32)", moe);
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    copy_all(w, f);
    w.set("qwen3moe.expert_used_count", gguf::Value::u32(33));
  }, "qwen3moe.expert_used_count must be 1 to qwen3moe.expert_count (32), not 33", moe);
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv())
      if (k != "qwen3moe.expert_count") w.set(k, v);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data);
  }, "model metadata lacks qwen3moe.expert_count", moe);
}

TEST(ModelErrors, MissingTensorIsNamed) {
  expect_load_error([](gguf::Writer& w, const gguf::File& f) { copy_all(w, f, "blk.1.ffn_up.weight"); },
                    "missing tensor 'blk.1.ffn_up.weight'");
}

TEST(ModelErrors, MisshapenTensorIsNamed) {
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv()) w.set(k, v);
    for (const auto& t : f.tensors()) {
      if (t.name == "blk.0.attn_k.weight")
        w.add_tensor(t.name, {t.ne[0], t.ne[1] / 2}, t.type, t.data);
      else
        w.add_tensor(t.name, t.ne, t.type, t.data);
    }
  }, "tensor 'blk.0.attn_k.weight' has shape [256, 64], expected [256, 128]");
}

// A block scale that is NaN or infinite (fp16 d, or MXFP4's E8M0 0xFF) is refused at load
// with the tensor, block and row named.
TEST(ModelErrors, NonFiniteBlockScaleIsNamed) {
  for (tensor::Type type : {tensor::Type::Q8_0, tensor::Type::IQ4_XS, tensor::Type::IQ4_NL, tensor::Type::MXFP4,
                            tensor::Type::Q2_K}) {
    std::vector<uint8_t> copy;
    expect_load_error([&copy, type](gguf::Writer& w, const gguf::File& f) {
      for (const auto& [k, v] : f.kv()) w.set(k, v);
      for (const auto& t : f.tensors()) {
        if (t.name != "blk.1.ffn_down.weight") {
          w.add_tensor(t.name, t.ne, t.type, t.data);
          continue;
        }
        copy.assign(t.data, t.data + t.n_bytes);
        const size_t bb = tensor::traits(type).block_bytes, per_row = t.ne[0] / tensor::traits(type).block_size;
        uint8_t* blk = copy.data() + (2 * per_row + 1) * bb;  // row 2, block 1
        if (type == tensor::Type::MXFP4) {
          blk[0] = 0xFF;
        } else {
          const uint16_t nan = 0x7E00;
          std::memcpy(blk + (type == tensor::Type::Q2_K ? offsetof(tensor::BlockQ2_K, d) : 0), &nan, 2);
        }
        w.add_tensor(t.name, t.ne, t.type, copy.data());
      }
    }, std::string("tensor 'blk.1.ffn_down.weight' (") + tensor::type_name(type) +
           ") has a NaN or infinite scale in block 1 of row 2", make("toy", type));
  }
}

TEST(ModelErrors, MissingHyperparameterIsNamed) {
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv())
      if (k != "llama.block_count") w.set(k, v);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data);
  }, "llama.block_count");
}

}  // namespace
