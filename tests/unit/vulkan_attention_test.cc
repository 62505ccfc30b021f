// vulkan_attention_test.cc: flash attention and flash decoding of the Vulkan kernel layer
// over an F16 cache (prefill, decode, a sliding window, the KV store then both) against a
// float64 softmax(q k / sqrt(d)) v, on odd sizes. Runs on any Vulkan device (CI: Mesa's
// lavapipe on the CPU); skipped when there is none. Each check prints its largest error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/vulkan/vulkan.h"
#include "util/fp16.h"
#include "vulkan_fixture.h"

namespace {

using shardlm_test::gaussian;
using shardlm_test::VulkanTest;
using kernels::vulkan::AttentionShape;
using kernels::vulkan::Buffer;
using kernels::vulkan::Commands;

// ---- attention over an F16 cache

struct AttentionCase {
  AttentionShape a;
  std::vector<float> q;         // [n_q][n_heads][head_dim]
  std::vector<uint16_t> k, v;   // f16 [n_kv_heads][n_ctx][head_dim]
};

AttentionCase attention_case(std::mt19937& rng, int n_q, int pos0, int n_heads, int n_kv_heads, int head_dim) {
  AttentionCase c;
  c.a = {.n_q = n_q, .pos0 = pos0, .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
         .n_ctx = pos0 + n_q + 3, .scale = 1.0f / std::sqrt(float(head_dim))};
  c.q = gaussian(rng, size_t(n_q) * n_heads * head_dim);
  const size_t cache = size_t(n_kv_heads) * c.a.n_ctx * head_dim;
  for (std::vector<uint16_t>* kv : {&c.k, &c.v}) {
    const std::vector<float> f = gaussian(rng, cache);
    for (float x : f) kv->push_back(util::f32_to_fp16(x));
  }
  return c;
}

// float64 causal softmax(q k * scale) v with the cache's F16 values and q rounded to F16, as
// the CPU's flash attention rounds it for an F16 cache.
std::vector<float> attention_reference(const AttentionCase& c) {
  const AttentionShape& a = c.a;
  const int hd = a.head_dim, group = a.group > 0 ? a.group : a.n_heads / a.n_kv_heads;
  std::vector<float> out(c.q.size());
  for (int t = 0; t < a.n_q; ++t) {
    for (int h = 0; h < a.n_heads; ++h) {
      std::vector<float> q(hd);
      for (int d = 0; d < hd; ++d)
        q[d] = util::fp16_to_f32(util::f32_to_fp16(c.q[(size_t(t) * a.n_heads + h) * hd + d]));
      const size_t base = size_t((h + a.head_offset) / group) * a.n_ctx * hd;
      const int n_kv = a.pos0 + t + 1, lo = a.window > 0 ? std::max(0, n_kv - a.window) : 0;
      std::vector<double> s(n_kv, -INFINITY);
      double m = -INFINITY;
      for (int j = lo; j < n_kv; ++j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += double(q[d]) * util::fp16_to_f32(c.k[base + size_t(j) * hd + d]);
        s[j] = dot * a.scale;
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));  // 0 before a window
      for (int d = 0; d < hd; ++d) {
        double o = 0;
        for (int j = 0; j < n_kv; ++j) o += s[j] * util::fp16_to_f32(c.v[base + size_t(j) * hd + d]);
        out[(size_t(t) * a.n_heads + h) * hd + d] = float(o / sum);
      }
    }
  }
  return out;
}

// Largest |got - want| over the largest |want| of the case.
double attention_error(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0, worst = 0;
  for (float w : want) scale = std::max(scale, double(std::abs(w)));
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  return worst / scale;
}

TEST_F(VulkanTest, FlashAttentionPrefillMatchesFloat64) {
  std::mt19937 rng(12);
  // group, offset: a node's slice of heads that starts or ends inside a KV group (its first
  // head the offset-th of a group of that many query heads).
  struct Shape { int n_q, pos0, n_heads, n_kv_heads, head_dim, group = 0, offset = 0; };
  const Shape shapes[] = {{1, 0, 6, 2, 64},  {37, 0, 6, 2, 64},       {17, 283, 4, 4, 128},   {40, 5, 6, 2, 128},
                          {33, 0, 3, 1, 62}, {19, 7, 4, 1, 256},      {21, 3, 4, 2, 64, 3, 2}, {9, 0, 1, 1, 64, 3, 1},
                          {12, 2, 3, 3, 32, 2, 1}};
  double worst = 0;
  for (const Shape& s : shapes) {
    AttentionCase c = attention_case(rng, s.n_q, s.pos0, s.n_heads, s.n_kv_heads, s.head_dim);
    c.a.group = s.group;
    c.a.head_offset = s.offset;
    Buffer qb = upload(c.q), kb = upload(c.k), vb = upload(c.v), ob = alloc(c.q.size() * 4);
    Commands cmd(*dev_);
    cmd.flash_attention(c.a, qb, kb, vb, ob);
    run(cmd);
    const double err = attention_error(download(ob, c.q.size()), attention_reference(c));
    EXPECT_LT(err, 1e-5) << "n_q " << s.n_q << " pos0 " << s.pos0 << " heads " << s.n_heads << "/" << s.n_kv_heads
                         << " head_dim " << s.head_dim << " group " << s.group << " offset " << s.offset;
    worst = std::max(worst, err);
  }
  std::printf("[vulkan] flash attention: max error %.2e of max |out|\n", worst);
}

TEST_F(VulkanTest, FlashDecodeMatchesFloat64) {
  std::mt19937 rng(13);
  double worst = 0;
  for (int head_dim : {64, 128, 256}) {
    for (int n_ctx : {1, 37, 64, 65, 300}) {
      AttentionCase c = attention_case(rng, 1, n_ctx - 1, 6, 2, head_dim);
      if (n_ctx == 65) c.a.group = 4, c.a.head_offset = 1;  // heads 1..6 of groups of 4: KV heads 0, 1
      Buffer qb = upload(c.q), kb = upload(c.k), vb = upload(c.v), ob = alloc(c.q.size() * 4);
      Buffer scratch = alloc(kernels::vulkan::flash_decode_scratch_bytes(c.a));
      Commands cmd(*dev_);
      cmd.flash_decode(c.a, qb, kb, vb, scratch, ob);
      run(cmd);
      const double err = attention_error(download(ob, c.q.size()), attention_reference(c));
      EXPECT_LT(err, 1e-5) << "head_dim " << head_dim << " context " << n_ctx;
      worst = std::max(worst, err);
    }
  }
  std::printf("[vulkan] flash decode: max error %.2e of max |out|\n", worst);
}

// Sliding windows (Gemma 3): the query at P sees P - window + 1 .. P; windows smaller and
// larger than a tile (16 prefill positions) or a decode chunk (64), whole chunks and tiles
// before the window skipped.
TEST_F(VulkanTest, FlashAttentionSlidingWindowMatchesFloat64) {
  std::mt19937 rng(14);
  double worst = 0;
  for (int window : {1, 8, 16, 37, 64, 100, 500}) {
    for (auto [n_q, pos0] : {std::pair{1, 0}, {1, 63}, {1, 64}, {1, 299}, {29, 0}, {19, 150}, {40, 70}}) {
      AttentionCase c = attention_case(rng, n_q, pos0, 4, 2, 64);
      c.a.window = window;
      Buffer qb = upload(c.q), kb = upload(c.k), vb = upload(c.v), ob = alloc(c.q.size() * 4);
      Buffer scratch = alloc(kernels::vulkan::flash_decode_scratch_bytes(c.a));
      Commands cmd(*dev_);
      if (n_q == 1) cmd.flash_decode(c.a, qb, kb, vb, scratch, ob);
      else cmd.flash_attention(c.a, qb, kb, vb, ob);
      run(cmd);
      const double err = attention_error(download(ob, c.q.size()), attention_reference(c));
      EXPECT_LT(err, 1e-5) << "window " << window << " n_q " << n_q << " pos0 " << pos0;
      worst = std::max(worst, err);
    }
  }
  std::printf("[vulkan] sliding-window attention: max error %.2e of max |out|\n", worst);
}

// Prefill then one decode step as a backend runs them: new K and V rows go into the F16
// caches with kv_store (the same bits as util::f32_to_fp16), attention reads them back;
// store and attention are in one command buffer per step.
TEST_F(VulkanTest, KvStoreThenPrefillAndDecode) {
  std::mt19937 rng(15);
  const int n_prompt = 37, n_heads = 6, n_kv_heads = 2, head_dim = 64, n_ctx = 50;
  AttentionCase c = attention_case(rng, n_prompt, 0, n_heads, n_kv_heads, head_dim);
  c.a.n_ctx = n_ctx;
  const size_t cache_values = size_t(n_kv_heads) * n_ctx * head_dim, row = size_t(n_kv_heads) * head_dim;
  const std::vector<float> k_new = gaussian(rng, (n_prompt + 1) * row), v_new = gaussian(rng, (n_prompt + 1) * row);
  c.k.assign(cache_values, 0);
  c.v.assign(cache_values, 0);
  Buffer kc = upload(c.k), vc = upload(c.v);
  const std::vector<float> k_prompt(k_new.begin(), k_new.begin() + n_prompt * row);
  const std::vector<float> v_prompt(v_new.begin(), v_new.begin() + n_prompt * row);
  Buffer kb = upload(k_prompt), vb = upload(v_prompt), qb = upload(c.q), ob = alloc(c.q.size() * 4);
  Commands cmd(*dev_);
  cmd.kv_store(kc, kb, n_prompt, 0, n_kv_heads, head_dim, n_ctx);
  cmd.kv_store(vc, vb, n_prompt, 0, n_kv_heads, head_dim, n_ctx);
  cmd.flash_attention(c.a, qb, kc, vc, ob);
  run(cmd);
  for (int t = 0; t <= n_prompt; ++t)  // the reference cache, with the decode token's row
    for (int h = 0; h < n_kv_heads; ++h)
      for (int d = 0; d < head_dim; ++d) {
        const size_t src = (size_t(t) * n_kv_heads + h) * head_dim + d, dst = (size_t(h) * n_ctx + t) * head_dim + d;
        c.k[dst] = util::f32_to_fp16(k_new[src]);
        c.v[dst] = util::f32_to_fp16(v_new[src]);
      }
  // kv_store rounds exactly (f16.glsl): the cache holds the CPU's F16 bits.
  for (std::vector<uint16_t>* want : {&c.k, &c.v}) {
    std::vector<uint16_t> got(cache_values);
    ASSERT_TRUE(dev_->download(want == &c.k ? kc : vc, got.data(), cache_values * 2).ok());
    for (int h = 0; h < n_kv_heads; ++h)
      for (size_t i = size_t(h) * n_ctx * head_dim; i < (size_t(h) * n_ctx + n_prompt) * head_dim; ++i)
        ASSERT_EQ(got[i], (*want)[i]) << "kv head " << h << " element " << i;
  }
  const double prefill_err = attention_error(download(ob, c.q.size()), attention_reference(c));
  EXPECT_LT(prefill_err, 1e-5);

  AttentionCase step = c;  // decode the token at position n_prompt
  step.a.n_q = 1;
  step.a.pos0 = n_prompt;
  step.q = gaussian(rng, size_t(n_heads) * head_dim);
  Buffer kb1 = upload(std::vector<float>(k_new.end() - row, k_new.end()));
  Buffer vb1 = upload(std::vector<float>(v_new.end() - row, v_new.end()));
  Buffer qb1 = upload(step.q), ob1 = alloc(step.q.size() * 4);
  Buffer scratch = alloc(kernels::vulkan::flash_decode_scratch_bytes(step.a));
  cmd.kv_store(kc, kb1, 1, n_prompt, n_kv_heads, head_dim, n_ctx);
  cmd.kv_store(vc, vb1, 1, n_prompt, n_kv_heads, head_dim, n_ctx);
  cmd.flash_decode(step.a, qb1, kc, vc, scratch, ob1);
  run(cmd);
  const double decode_err = attention_error(download(ob1, step.q.size()), attention_reference(step));
  EXPECT_LT(decode_err, 1e-5);
  std::printf("[vulkan] kv_store + prefill %.2e, + decode %.2e of max |out|\n", prefill_err, decode_err);
}

}  // namespace
