// model_test.cc: config and weight binding errors, and forward-pass invariants on
// synthetic random-weight models of each architecture (llama, qwen2, qwen3): batched
// evaluation equals token-by-token evaluation, thread counts agree, F32 and F16 KV caches
// agree closely. (Agreement with llama.cpp is golden_test's job.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "gguf/gguf.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "sampler/sampler.h"

namespace {

// Per process: ctest runs these tests in parallel processes, and rewriting a file another
// process has mapped kills that process with SIGBUS.
std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("shardlm_model_test_" + std::to_string(getpid()) + "_" + name)).string();
}

std::string make(const std::string& shape, tensor::Type type) {
  const std::string path = tmp_path(shape + "_" + tensor::type_name(type) + ".gguf");
  auto s = model::shape_by_name(shape);
  EXPECT_TRUE(s.has_value());
  util::Status st = model::write_synthetic_model(path, *s, type, 7);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

std::vector<float> run(const model::LoadedModel& m, const std::vector<int32_t>& toks, int threads, int batch,
                       model::KvType kv = model::KvType::kF16) {
  util::ThreadPool pool(threads);
  model::Transformer tf(m.config, m.weights, pool, 64, kv, batch);
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
  const auto batched = run(**m, toks, 2, 4);
  const auto big = run(**m, toks, 2, 32);
  // Batched and per-token runs quantize the same activations; only float summation order differs.
  EXPECT_LT(max_rel_diff(one, batched), 1e-4);
  EXPECT_LT(max_rel_diff(one, big), 1e-4);
  EXPECT_EQ(sampler::argmax(one.data(), (int)one.size()), sampler::argmax(big.data(), (int)big.size()));
  const auto f32kv = run(**m, toks, 2, 4, model::KvType::kF32);
  EXPECT_LT(max_rel_diff(one, f32kv), 5e-2);  // F16 rounding of K, V, Q and probabilities
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ArchTest,
    ::testing::Values(std::make_pair("toy", tensor::Type::Q4_0), std::make_pair("toy", tensor::Type::Q4_K),
                      std::make_pair("toy", tensor::Type::Q6_K), std::make_pair("toy", tensor::Type::F16), std::make_pair("toy-llama31", tensor::Type::Q5_0),
                      std::make_pair("toy-qwen2", tensor::Type::Q8_0), std::make_pair("toy-qwen3", tensor::Type::Q5_K)));

// Writes a copy of `src` with one key or tensor changed, then expects load_model to fail
// with a message containing `want`.
void expect_load_error(const std::function<void(gguf::Writer&, const gguf::File&)>& edit, const std::string& want) {
  const std::string src_path = make("toy", tensor::Type::Q8_0);
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

TEST(ModelErrors, UnknownArchitectureListsSupported) {
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    copy_all(w, f);
    w.set("general.architecture", gguf::Value::string("mamba"));
  }, "unsupported architecture 'mamba'; supported: llama");
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

TEST(ModelErrors, MissingHyperparameterIsNamed) {
  expect_load_error([](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv())
      if (k != "llama.block_count") w.set(k, v);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data);
  }, "llama.block_count");
}

}  // namespace
