// gpt_oss_test.cc: gpt-oss (issue 31) on its random-weight toy: the config read from the
// file (window pattern, YaRN), batched evaluation equal to position by position through the
// windowed rings, the attention sinks and biases shaping the result, flash attention with
// sinks (kernel and model) close to the exact path, MXFP4 products in ggml's order at
// gpt-oss's width, and bad files refused by name (a
// missing sink or expert bias, a window larger than the context, YaRN without its factor).
// (Agreement with llama.cpp is golden_test's job: GoldenSynthetic's toy-gpt-oss.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "gguf/gguf.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "scratch.h"
#include "toy_model.h"
#include "vec_dot_order.h"
#include "tensor/quants.h"

namespace {

std::string make(const std::string& shape) { return shardlm_test::toy_model(shape, tensor::Type::Q8_0, 7); }

// Logits of the last position of toks, evaluated in batches of `batch`.
std::vector<float> run(const model::Config& c, const model::Weights& w, const std::vector<int32_t>& toks, int batch,
                       model::AttentionMode mode = model::AttentionMode::kExact) {
  util::ThreadPool pool(2);
  model::Transformer tf(c, w, pool, 160, model::KvType::kF16, batch, mode);
  std::vector<float> logits(c.n_vocab);
  for (size_t i = 0; i < toks.size(); i += batch) {
    const int n = std::min<int>(batch, static_cast<int>(toks.size() - i));
    EXPECT_TRUE(tf.forward(toks.data() + i, n, static_cast<int>(i), logits.data()).ok());
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

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % 500);
  return t;
}

TEST(GptOss, ConfigFromTheFile) {
  auto m = model::load_model(make("toy-gpt-oss"));
  ASSERT_TRUE(m.ok()) << m.error();
  const model::Config& c = (*m)->config;
  EXPECT_EQ(c.arch, model::Arch::kGptOss);
  EXPECT_TRUE(c.gpt_oss && c.qkv_bias && c.rope_neox && c.moe() && !c.expert_norm);
  EXPECT_EQ(c.n_swa, 8);
  EXPECT_TRUE(c.is_swa(0) && !c.is_swa(1) && c.is_swa(2) && !c.is_swa(3));  // pattern 2: even layers windowed
  EXPECT_EQ(c.rope_base_swa, c.rope_base);
  EXPECT_EQ(c.rope_freq_scale, 1.0f / 32);
  EXPECT_EQ(c.yarn.ext_factor, 1.0f);
  EXPECT_EQ(c.yarn.n_ctx_orig, 4096);
  EXPECT_NEAR(c.yarn.attn_factor, 1.0f, 1e-6);  // mscale(32) / (1 + 0.1 ln 32)
  const model::LayerWeights& l = (*m)->weights.layers[1];
  EXPECT_EQ(l.sinks.size(), size_t(c.n_heads));
  EXPECT_EQ(l.bo.size(), size_t(c.dim));
  EXPECT_EQ(l.router_b.size(), size_t(c.n_expert));
  EXPECT_EQ(l.gate_exps_b.size(), size_t(c.n_ff) * c.n_expert);
  EXPECT_EQ(l.down_exps_b.size(), size_t(c.dim) * c.n_expert);
  EXPECT_EQ(l.gate_exps.type, tensor::Type::MXFP4);
  EXPECT_TRUE(l.ffn_norm.empty() && !l.attn_post_norm.empty());
}

// 150 positions (the window of 8 wraps the windowed layers' rings of 64 rows): position by
// position, in batches of 4 and in one batch, bit for bit (Q8_0 and MXFP4 products in
// vec_dot order: Q8_0's batches of 4+ would sum in lane order); the sinks, biases and window each change the result; flash attention (the
// window masked in the kernel, reading the rings) is batch-split invariant and within F16
// rounding of the exact path, and the window changes its result too.
TEST(GptOss, BatchedEqualsPositionByPositionAndEveryPartMatters) {
  shardlm_test::VecDotOrder vec_dot;
  auto m = model::load_model(make("toy-gpt-oss"));
  ASSERT_TRUE(m.ok()) << m.error();
  const model::Config& c = (*m)->config;
  const model::Weights& w = (*m)->weights;
  const auto toks = prompt(150);
  const auto one = run(c, w, toks, 1);
  for (float x : one) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(one, run(c, w, toks, 4));
  EXPECT_EQ(one, run(c, w, toks, 150));
  const auto changed = [&](const std::function<void(model::Config&, model::Weights&)>& edit) {
    model::Config c2 = c;
    model::Weights w2 = w;
    edit(c2, w2);
    return max_rel_diff(one, run(c2, w2, toks, 50));
  };
  EXPECT_GT(changed([](model::Config&, model::Weights& x) { for (auto& l : x.layers) l.sinks.clear(); }), 1e-3);
  EXPECT_GT(changed([](model::Config&, model::Weights& x) { for (auto& l : x.layers) l.bo.clear(); }), 1e-3);
  EXPECT_GT(changed([](model::Config&, model::Weights& x) { for (auto& l : x.layers) l.down_exps_b.clear(); }), 1e-3);
  EXPECT_GT(changed([](model::Config&, model::Weights& x) { for (auto& l : x.layers) l.router_b.clear(); }), 1e-3);
  EXPECT_GT(changed([](model::Config& x, model::Weights&) { x.n_swa = 0; }), 1e-3);
  EXPECT_GT(changed([](model::Config& x, model::Weights&) { x.yarn = {}; }), 1e-3);
  const auto flash1 = run(c, w, toks, 1, model::AttentionMode::kFlash);
  EXPECT_EQ(flash1, run(c, w, toks, 7, model::AttentionMode::kFlash));
  EXPECT_EQ(flash1, run(c, w, toks, 150, model::AttentionMode::kFlash));
  EXPECT_LT(max_rel_diff(one, flash1), 2e-2);
  model::Config no_window = c;
  no_window.n_swa = 0;
  EXPECT_GT(max_rel_diff(flash1, run(no_window, w, toks, 50, model::AttentionMode::kFlash)), 1e-3);
}

// Flash attention (tiled, and flash decoding over 600 positions on 2 threads) with sinks
// equals the naive reference with sinks, and the sinks lower every output's weight.
TEST(GptOss, FlashAttentionWithSinksEqualsReference) {
  const int hd = 64, H = 4, G = 2, n_ctx = 600;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint8_t> k(size_t(n_ctx) * hd * 2 * G), v(k.size());
  std::vector<float> row(hd);
  for (int g = 0; g < G; ++g)
    for (int p = 0; p < n_ctx; ++p) {
      for (float& x : row) x = dist(rng);
      kernels::kv_store_row(kernels::KvFormat::kF16, row.data(), &k[(size_t(g) * n_ctx + p) * hd * 2], hd);
      for (float& x : row) x = dist(rng);
      kernels::kv_store_row(kernels::KvFormat::kF16, row.data(), &v[(size_t(g) * n_ctx + p) * hd * 2], hd);
    }
  std::vector<kernels::KvHeadView> views;
  for (int g = 0; g < G; ++g)
    views.push_back({kernels::KvFormat::kF16, &k[size_t(g) * n_ctx * hd * 2], &v[size_t(g) * n_ctx * hd * 2],
                     size_t(hd) * 2});
  const int kv_of_head[H] = {0, 0, 1, 1};
  const float sinks[H] = {2.5f, -1.0f, 0.0f, 8.0f};
  for (int n_q : {1, 5}) {
    std::vector<float> q(size_t(n_q) * H * hd);
    for (float& x : q) x = dist(rng);
    kernels::AttentionArgs a{};
    a.n_q = n_q, a.pos0 = n_ctx - n_q, a.n_heads = H, a.n_kv_heads = G, a.kv_of_head = kv_of_head, a.head_dim = hd;
    a.scale = 0.125f, a.q = q.data(), a.q_stride = size_t(H) * hd, a.out_stride = size_t(H) * hd, a.kv = views.data();
    std::vector<float> ref(q.size()), flash(q.size()), plain(q.size());
    a.out = plain.data();
    kernels::attention_ref(a);
    a.sinks = sinks;
    a.out = ref.data();
    kernels::attention_ref(a);
    util::ThreadPool pool(2);
    a.out = flash.data();
    kernels::flash_attention(a, pool);
    EXPECT_LT(max_rel_diff(ref, flash), 1e-3) << n_q;
    EXPECT_GT(max_rel_diff(plain, ref), 1e-2) << n_q;
  }
}

// gpt-oss's MXFP4 experts at its width (2880 = 90 blocks; 2912 = 91 for the odd tail): every
// matmul output (one row, a decode tile of 3, a packed GEMM of 20) equals vec_dot, which is
// ggml's order for the codebook types (two accumulators, even and odd blocks, then an odd
// last block after the sum; checked against libggml-cpu's vec_dot when this was written).
// With few blocks the sums are exact whatever the order, so only long rows show it.
TEST(GptOss, Mxfp4ProductsInGgmlOrderAtFullWidth) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (tensor::Type t : {tensor::Type::MXFP4, tensor::Type::IQ4_NL})
    for (int n : {2880, 2912})
      for (int nb : {1, 3, 20}) {
        const int R = 5;
        const size_t rb = tensor::row_bytes(t, n), ab = kernels::activation_bytes(tensor::Type::Q8_0, n);
        std::vector<float> w(size_t(n) * R), x(size_t(n) * nb);
        for (float& v : w) v = dist(rng) * 0.05f;
        for (float& v : x) v = dist(rng);
        std::vector<uint8_t> wq(rb * R), xq(ab * nb);
        for (int r = 0; r < R; ++r) tensor::quantize_row(t, &w[size_t(r) * n], wq.data() + r * rb, n);
        for (int c = 0; c < nb; ++c) kernels::quantize_activation(tensor::Type::Q8_0, &x[size_t(c) * n], xq.data() + c * ab, n);
        std::vector<float> y(size_t(R) * nb);
        kernels::matmul(t, n, wq.data(), rb, 0, R, xq.data(), ab, nb, y.data(), R, kernels::BatchOrder::kVecDot);
        for (int c = 0; c < nb; ++c)
          for (int r = 0; r < R; ++r)
            ASSERT_EQ(y[size_t(c) * R + r], kernels::vec_dot(t, n, wq.data() + r * rb, xq.data() + c * ab))
                << tensor::type_name(t) << " n " << n << " batch " << nb << " row " << r << " col " << c;
      }
}

// A copy of the toy with one edit, expected to fail loading with `want` in the message.
void expect_load_error(const std::string& src_path, const std::function<void(gguf::Writer&, const gguf::File&)>& edit,
                       const std::string& want) {
  auto src = gguf::File::open(src_path);
  ASSERT_TRUE(src.ok()) << src.error();
  gguf::Writer w;
  edit(w, **src);
  const std::string out = shardlm_test::scratch_path("edited.gguf");
  ASSERT_TRUE(w.write(out).ok());
  auto m = model::load_model(out);
  ASSERT_FALSE(m.ok()) << want;
  EXPECT_NE(m.error().find(want), std::string::npos) << m.error();
}

void copy_all(gguf::Writer& w, const gguf::File& f, const std::string& skip_tensor = "") {
  for (const auto& [k, v] : f.kv()) w.set(k, v);
  for (const auto& t : f.tensors())
    if (t.name != skip_tensor) w.add_tensor(t.name, t.ne, t.type, t.data);
}

TEST(GptOss, BadFilesAreRefusedByName) {
  const std::string toy = make("toy-gpt-oss");
  for (const char* t : {"blk.1.attn_sinks.weight", "blk.2.ffn_down_exps.bias", "blk.0.ffn_gate_exps.bias",
                        "blk.3.ffn_up_exps.bias", "blk.1.ffn_gate_inp.bias", "blk.0.attn_output.bias"})
    expect_load_error(toy, [&](gguf::Writer& w, const gguf::File& f) { copy_all(w, f, t); },
                      "missing tensor '" + std::string(t) + "'");
  expect_load_error(toy, [](gguf::Writer& w, const gguf::File& f) {
    copy_all(w, f);
    w.set("gpt-oss.attention.sliding_window", gguf::Value::u32(200000));
  }, "gpt-oss.attention.sliding_window (200000) is larger than the context (gpt-oss.context_length 131072)");
  expect_load_error(toy, [](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv())
      if (k != "gpt-oss.attention.sliding_window") w.set(k, v);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data);
  }, "gpt-oss model metadata lacks gpt-oss.attention.sliding_window");
  expect_load_error(toy, [](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv())
      if (k != "gpt-oss.rope.scaling.factor") w.set(k, v);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data);
  }, "gpt-oss.rope.scaling.factor must be positive for yarn rope scaling");
  expect_load_error(toy, [](gguf::Writer& w, const gguf::File& f) {
    for (const auto& [k, v] : f.kv()) w.set(k, v);
    for (const auto& t : f.tensors()) {
      std::vector<int64_t> ne = t.ne;
      if (t.name == "blk.0.attn_sinks.weight") ne[0] = 4;  // half the heads
      w.add_tensor(t.name, ne, t.type, t.data);
    }
  }, "tensor 'blk.0.attn_sinks.weight' has shape [4], expected [8]");
}

// Qwen3 with rope.scaling.type = yarn loads (ext_factor 1, its original context) and the
// scaling changes the logits of positions past the start.
TEST(Yarn, Qwen3WithYarnLoadsAndScales) {
  auto m = model::load_model(make("toy-qwen3-yarn"));
  ASSERT_TRUE(m.ok()) << m.error();
  model::Config c = (*m)->config;
  EXPECT_EQ(c.yarn.ext_factor, 1.0f);
  EXPECT_EQ(c.yarn.n_ctx_orig, 4096);
  EXPECT_EQ(c.rope_freq_scale, 0.25f);
  const auto toks = prompt(12);
  const auto yarn = run(c, (*m)->weights, toks, 4);
  c.yarn = {};
  c.rope_freq_scale = 1.0f;
  EXPECT_GT(max_rel_diff(yarn, run(c, (*m)->weights, toks, 4)), 1e-3);
}

}  // namespace
