// golden_test.cc: our greedy continuations of SmolLM2 against llama.cpp's
// (tests/data/golden_llamacpp.json, made by tools/make_golden.py with llama-cpp-python) on
// the original Q4_1 file and on our own Q8_0, Q4_0 and Q6_K requantizations, with the
// prompt token by token (as llama.cpp made it) and in one batch. Requires the
// same prompt tokens and the same generated ids, and reports the largest difference of
// the top-5 logits while the sequences agree.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/requantize.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/sha256.h"
#include "util/thread_pool.h"

namespace {

using nlohmann::json;

json load_golden() {
  std::ifstream f(std::string(SHARDLM_SOURCE_DIR) + "/tests/data/golden_llamacpp.json");
  if (!f) return json();
  return json::parse(f);
}

// The model file for a variant: the original, or our requantization (cached by hash).
std::string variant_path(const std::string& variant, const std::string& want_sha) {
  if (variant == "Q4_1") return SHARDLM_DEFAULT_MODEL;
  const std::string dir = std::string(SHARDLM_BINARY_DIR) + "/golden-models";
  std::filesystem::create_directories(dir);
  std::string lower = variant;
  for (auto& c : lower) c = static_cast<char>(std::tolower(c));
  const std::string path = dir + "/smollm2-" + lower + ".gguf";
  auto sha = util::sha256_file(path);
  if (sha.ok() && *sha == want_sha) return path;
  auto src = gguf::File::open(SHARDLM_DEFAULT_MODEL);
  EXPECT_TRUE(src.ok()) << src.error();
  auto rep = model::requantize(**src, path, *tensor::type_from_name(variant), 2);
  EXPECT_TRUE(rep.ok()) << rep.error();
  return path;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

// Types whose prompt batches sum in lane order on x86 (kernels.h), and how far below
// llama.cpp's best logit (among its top 5) the token such a prompt picks may be. Measured:
// while the sequences agree, lane-order logits differ from llama.cpp's by up to 0.85 (Q4_0)
// and 1.4 (Q6_K); the flips seen were at margins of 0.004-0.27.
bool lane_order(const std::string& variant) {
  return variant == "Q4_0" || variant == "Q4_1" || variant == "Q8_0" || variant == "Q6_K";
}
constexpr double kNearTie = 0.5;

// Greedy continuations of every golden prompt against llama.cpp's. batched = false: the
// prompt one token per step, as the golden was made (llama.cpp n_batch = 1). batched =
// true: the whole prompt in one step (our prompt-processing path: for Q4_0 and Q6_K the
// lane-order GEMM, not bit-identical to decode), then the same one-token steps.
// near_tie_ok: whether a flip at a near-tie is reported rather than failed (see below).
void check_runs(const json& golden, const std::string& variant, const std::string& path, bool batched,
                bool near_tie_ok);

void check_variant(const std::string& variant, bool batched) {
  static const json golden = load_golden();
  ASSERT_FALSE(golden.is_null()) << "tests/data/golden_llamacpp.json is missing";
  const json& g = golden["variants"][variant];
  const std::string path = variant_path(variant, g["sha256"]);
  check_runs(golden, variant, path, batched, batched && lane_order(variant) && kernels::lane_order());
}

void check_runs(const json& golden, const std::string& variant, const std::string& path, bool batched,
                bool near_tie_ok) {
  const json& g = golden["variants"][variant];
  auto sha = util::sha256_file(path);
  ASSERT_TRUE(sha.ok()) << sha.error();
  ASSERT_EQ(*sha, g["sha256"].get<std::string>())
      << "our " << variant << " requantization differs from the file llama.cpp was run on; if the "
      << "quantizer changed on purpose, rerun tools/make_golden.py";
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.error();
  auto tok = tokenizer::Tokenizer::from_gguf(*(*m)->file);
  ASSERT_TRUE(tok.ok()) << tok.error();
  const model::Config& cfg = (*m)->config;
  util::ThreadPool pool(2);
  const int n_ctx = golden["n_ctx"];
  double max_diff = 0;
  int mismatched_runs = 0, near_ties = 0;
  for (const json& run : g["runs"]) {
    const std::string prompt = run["prompt"];
    const std::vector<int32_t> want_prompt = run["prompt_tokens"];
    const std::vector<int32_t> want = run["tokens"];
    std::vector<int32_t> toks = (*tok)->encode(prompt, true, true);
    EXPECT_EQ(toks, want_prompt) << "prompt tokens differ for " << prompt;
    toks = want_prompt;
    const int max_batch = batched ? static_cast<int>(toks.size()) : 1;
    model::Transformer tf(cfg, (*m)->weights, pool, n_ctx, model::KvType::kF16, max_batch);
    std::vector<float> logits(cfg.n_vocab);
    tf.forward(toks.data(), static_cast<int>(toks.size()), 0, logits.data());
    std::vector<int32_t> got;
    bool agree = true;
    for (size_t i = 0; i < want.size(); ++i) {
      const int32_t next = sampler::argmax(logits.data(), cfg.n_vocab);
      got.push_back(next);
      if (agree) {
        for (const json& top : run["top"][i]) {
          const double d = std::fabs(logits[top[0].get<int>()] - top[1].get<double>());
          max_diff = std::max(max_diff, d);
        }
      }
      if (next != want[i]) agree = false;
      const int pos = static_cast<int>(toks.size() + i);
      tf.forward(&next, 1, pos, logits.data());
    }
    if (got != want) {
      ++mismatched_runs;
      size_t first = 0;
      while (first < got.size() && got[first] == want[first]) ++first;
      const json& top = run["top"][first];
      std::ostringstream what;
      what << variant << (batched ? " (batched prompt)" : "") << ": prompt '" << prompt
           << "' diverges at generated token " << first << " (ours " << got[first] << ", llama.cpp "
           << want[first] << "; llama.cpp top-2 " << top[0] << " " << top[1] << ")";
      // A lane-order prompt (kernels.h) is not bit-identical to llama.cpp's token-by-token
      // path; SmolLM2's per-activation Q8_0 quantization turns that into logit differences of
      // tenths, so its greedy choice may flip where llama.cpp's best candidates are that
      // close. Such flips are reported; anything else (a token outside llama.cpp's top 5 or
      // more than kNearTie below its best) fails.
      bool near_tie = false;
      for (const json& t : top)
        near_tie |= t[0].get<int32_t>() == got[first] && top[0][1].get<double>() - t[1].get<double>() < kNearTie;
      if (near_tie_ok && near_tie) {
        std::printf("INFO %s\n", what.str().c_str());
        ++near_ties;
      } else {
        ADD_FAILURE() << what.str();
      }
    }
  }
  std::printf("[%s%s] %zu prompts, %d mismatched (%d at near-ties); max |logit - llama.cpp| over top-5 while "
              "agreeing: %.5f\n",
              variant.c_str(), batched ? ", batched prompt" : "", g["runs"].size(), mismatched_runs, near_ties,
              max_diff);
  ::testing::Test::RecordProperty("max_logit_diff", std::to_string(max_diff));
}

TEST_P(GoldenTest, SameGreedyTokensAsLlamaCpp) { check_variant(GetParam(), false); }
TEST_P(GoldenTest, BatchedPromptSameGreedyTokens) { check_variant(GetParam(), true); }
// --exact-batches: lane order off, so a batched prompt must give llama.cpp's tokens exactly.
TEST_P(GoldenTest, ExactBatchesSameGreedyTokens) {
  if (!lane_order(GetParam())) GTEST_SKIP() << "batches of this type are in vec_dot order anyway";
  kernels::set_lane_order(false);
  check_variant(GetParam(), true);
  kernels::set_lane_order(true);
}

INSTANTIATE_TEST_SUITE_P(Variants, GoldenTest, ::testing::Values("Q4_1", "Q8_0", "Q4_0", "Q6_K"));

// Gemma 3 270M Q4_K_M (the PyPI file, `make gemma3`): Q8_0 embedding and Q5_0, Q8_0, Q4_K,
// Q6_K matrices; GeGLU, post-norms, scaled embedding and queries, sliding-window layers with
// their own rope base (tests/data/golden_gemma3.json, tools/make_golden_gemma3.py). Token by
// token (llama.cpp's path) and with the prompt in one batch in vec_dot order
// (--exact-batches) the ids must be llama.cpp's; a lane-order prompt may part at near-ties.
json load_gemma3_golden() {
  std::ifstream f(std::string(SHARDLM_SOURCE_DIR) + "/tests/data/golden_gemma3.json");
  return f ? json::parse(f) : json();
}

TEST(Gemma3Golden, SameGreedyTokensAsLlamaCpp) {
  static const json golden = load_gemma3_golden();
  ASSERT_FALSE(golden.is_null()) << "tests/data/golden_gemma3.json is missing";
  ASSERT_TRUE(std::filesystem::exists(SHARDLM_GEMMA3_MODEL)) << SHARDLM_GEMMA3_MODEL << " is missing: run `make gemma3`";
  check_runs(golden, "Q4_K_M", SHARDLM_GEMMA3_MODEL, false, false);
}

TEST(Gemma3Golden, BatchedPromptSameGreedyTokens) {
  static const json golden = load_gemma3_golden();
  ASSERT_FALSE(golden.is_null()) << "tests/data/golden_gemma3.json is missing";
  ASSERT_TRUE(std::filesystem::exists(SHARDLM_GEMMA3_MODEL)) << SHARDLM_GEMMA3_MODEL << " is missing: run `make gemma3`";
  check_runs(golden, "Q4_K_M", SHARDLM_GEMMA3_MODEL, true, kernels::lane_order());
}

TEST(Gemma3Golden, ExactBatchesSameGreedyTokens) {
  static const json golden = load_gemma3_golden();
  ASSERT_FALSE(golden.is_null()) << "tests/data/golden_gemma3.json is missing";
  ASSERT_TRUE(std::filesystem::exists(SHARDLM_GEMMA3_MODEL)) << SHARDLM_GEMMA3_MODEL << " is missing: run `make gemma3`";
  kernels::set_lane_order(false);
  check_runs(golden, "Q4_K_M", SHARDLM_GEMMA3_MODEL, true, false);
  kernels::set_lane_order(true);
}

// A prompt past the 512-position window, in batches of 64: the windowed layers' ring of
// 640 rows must give the very logits of a cache that keeps every position.
TEST(Gemma3Golden, WindowRingEqualsFullCache) {
  ASSERT_TRUE(std::filesystem::exists(SHARDLM_GEMMA3_MODEL)) << SHARDLM_GEMMA3_MODEL << " is missing: run `make gemma3`";
  auto m = model::load_model(SHARDLM_GEMMA3_MODEL);
  ASSERT_TRUE(m.ok()) << m.error();
  const model::Config& cfg = (*m)->config;
  ASSERT_EQ(cfg.n_swa, 512);
  std::vector<int32_t> toks;
  for (int i = 0; i < 704; ++i) toks.push_back(1000 + (i * 7919) % 50000);
  util::ThreadPool pool(2);
  const int n = static_cast<int>(toks.size()), B = 64;
  model::Transformer ring(cfg, (*m)->weights, pool, 1024, model::KvType::kF16, B);
  model::Transformer full(cfg, (*m)->weights, pool, 1024, model::KvType::kF16, 1024);
  std::vector<float> a(cfg.n_vocab), b(cfg.n_vocab);
  for (int i = 0; i < n; i += B) {
    ASSERT_TRUE(ring.forward(toks.data() + i, B, i, a.data()).ok());
    ASSERT_TRUE(full.forward(toks.data() + i, B, i, b.data()).ok());
  }
  EXPECT_EQ(a, b);
  // Rewinding a ring further than it keeps is refused: its 640 rows (512 + 64 + 31 rounded
  // up to 64) hold positions 64 .. 703; position 550 needs 39 .. 549 (600 needs 89 .. 599).
  EXPECT_FALSE(ring.forward(toks.data(), 1, 550, a.data()).ok());
}

// Architectures without a real model here (qwen2, qwen3, gemma3 with a window of 8, Llama
// 3.1 rope factors, qwen3moe, qwen3 with YaRN, gpt-oss): random
// models written by our writer, llama.cpp's logits at 16 positions (tests/data/
// golden_synthetic.json, tools/make_golden_synthetic.py) must equal ours.
TEST(GoldenSynthetic, LogitsEqualLlamaCpp) {
  std::ifstream f(std::string(SHARDLM_SOURCE_DIR) + "/tests/data/golden_synthetic.json");
  ASSERT_TRUE(f) << "tests/data/golden_synthetic.json is missing";
  const json golden = json::parse(f);
  const std::vector<int32_t> toks = golden["tokens"];
  const std::string dir = std::string(SHARDLM_BINARY_DIR) + "/golden-models";
  std::filesystem::create_directories(dir);
  for (const json& g : golden["models"]) {
    const std::string shape = g["shape"], type = g["type"];
    const std::string path = dir + "/synthetic-" + shape + "-" + type + ".gguf";
    auto s = model::shape_by_name(shape);
    ASSERT_TRUE(s.has_value()) << shape;
    ASSERT_TRUE(model::write_synthetic_model(path, *s, *tensor::type_from_name(type), golden["seed"]).ok());
    auto sha = util::sha256_file(path);
    ASSERT_TRUE(sha.ok());
    ASSERT_EQ(*sha, g["sha256"].get<std::string>()) << shape << ": our writer's output changed; rerun tools/make_golden_synthetic.py";
    auto m = model::load_model(path);
    ASSERT_TRUE(m.ok()) << m.error();
    util::ThreadPool pool(2);
    model::Transformer tf((*m)->config, (*m)->weights, pool, 64, model::KvType::kF16, 1);
    const int V = (*m)->config.n_vocab;
    std::vector<float> logits(toks.size() * V);
    ASSERT_TRUE(tf.forward(toks.data(), static_cast<int>(toks.size()), 0, logits.data(), true).ok());
    double max_diff = 0;
    for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << shape;  // a NaN would hide in max_diff
    for (size_t t = 0; t < toks.size(); ++t)
      for (int v = 0; v < V; ++v)
        max_diff = std::max(max_diff, std::fabs(double(logits[t * V + v]) - g["logits"][t][v].get<double>()));
    std::printf("[%s %s] max |logit - llama.cpp| over %zu positions x %d: %.7f\n", shape.c_str(), type.c_str(),
                toks.size(), V, max_diff);
    // Q8_0, Q4_0 and Q4_K (its mins in their own accumulator, as ggml's) follow ggml's
    // vec_dot order exactly; gemma3's windowed rows sum as llama.cpp's masked ones.
    EXPECT_EQ(max_diff, 0.0) << shape;
  }
}

}  // namespace
