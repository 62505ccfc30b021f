// attention_bf16_test.cc: the opt-in BF16 flash attention (AttentionArgs::bf16,
// cpu/attention_avx512bf16.cc) against two references, on GQA maps with 1/3/4/8 query heads
// per KV head and a non-uniform one, odd n_q, pos0 > 0, head_dim 64/96/128, 1-3 threads,
// sliding windows, sinks, ring and paged KV views:
//  - a double-precision reference that rounds Q, K and V to BF16 as the kernel does: the only
//    other BF16 rounding is P's (relative error <= u = 2^-8, nearest even), so an output
//    element may differ by u * sum_j p_j |v_j| plus the F32 summation of the scores
//    (<= head_dim * 2^-24 * scale * sum_i |q_i k_i| per score, times 4 max|v| through the
//    softmax) plus attention_test's F32 tolerance;
//  - attention_ref (F16 Q): the BF16 rounding of Q and K moves a score by at most
//    dS = 2u * scale * sum_i |q_i k_i|, which moves an output by at most 4 max|v| dS (1 + dS)
//    (softmax linearised, |v_j - o| <= 2 max|v|), plus 2u max|v| for P and V;
//  - and to the bit: batch splits and thread counts, rings and paged views against the flat
//    cache, and the flag off (or on an F32/Q8_0 cache, or head_dim 80) against no flag.
// Skipped with a printed line where the CPU lacks AVX512_BF16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "util/thread_pool.h"
#include "attention_case.h"

namespace {

using kernels::AttentionArgs;
using kernels::KvFormat;
using kernels::KvHeadView;

constexpr double kU = 1.0 / 256;  // BF16's unit roundoff (8 significant bits)

util::ThreadPool& pool(int n) {
  static std::unique_ptr<util::ThreadPool> pools[4];
  if (!pools[n]) pools[n] = std::make_unique<util::ThreadPool>(n);
  return *pools[n];
}

float bf16(float x) {  // round to nearest even, as vcvtne2ps2bf16 (no NaNs here)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

#define SKIP_WITHOUT_BF16()                                                                 \
  if (!kernels::attention_bf16_available()) {                                               \
    std::printf("skipped: this CPU lacks AVX512_BF16 (or SHARDLM_ISA is below avx512)\n"); \
    GTEST_SKIP();                                                                           \
  }

// The random problem of attention_case.h (F16 unless asked), with sinks, a window and the flag.
struct Case : AttentionCase {
  std::vector<float> sinks;
  int window = 0;
  bool bf16 = true;

  Case(int n_q_, int pos0_, int hd_, std::vector<int> map, uint32_t seed, KvFormat f = KvFormat::kF16)
      : AttentionCase(n_q_, pos0_, hd_, f, std::move(map), seed) {}
  size_t stride() const { return size_t(n_heads()) * head_dim; }
  std::vector<float> run(int threads, bool flag) const {
    std::vector<float> out(size_t(n_q) * stride(), NAN);
    AttentionArgs a{};
    a.n_q = n_q, a.pos0 = pos0, a.n_heads = n_heads(), a.n_kv_heads = n_kv_heads;
    a.kv_of_head = kv_of_head.data(), a.head_dim = head_dim, a.scale = 1.0f / std::sqrt(float(head_dim));
    a.q = q.data(), a.q_stride = stride(), a.out = out.data(), a.out_stride = stride();
    a.kv = views.data(), a.window = window, a.sinks = sinks.empty() ? nullptr : sinks.data();
    a.bf16 = flag;
    if (threads == 0) kernels::attention_ref(a);
    else kernels::flash_attention(a, pool(threads));
    return out;
  }
  // The same cache as a ring of `ring` rows, or as 64-row blocks in shuffled order of a pool.
  Case ringed(int ring) const {
    Case c = *this;
    c.make_ring(ring);
    return c;
  }
  Case paged() const {
    Case c = *this;
    c.make_paged();
    return c;
  }
};

// The BF16-emulating double reference (Q, K, V rounded to BF16; P not) and, per element, the
// bound of the header comment; plus the attention_ref bound per case (the largest).
struct Emulated {
  std::vector<double> out, bound;
  double ref_bound = 0.0;
};

Emulated emulate(const Case& c) {
  const int hd = c.head_dim;
  const double scale = 1.0 / std::sqrt(double(hd));
  Emulated e;
  e.out.resize(size_t(c.n_q) * c.stride());
  e.bound.resize(e.out.size());
  // Per KV head: K and V as read (kr, vr) and rounded to BF16 (kb, vb), [n_ctx][hd].
  std::vector<std::vector<double>> KR(c.n_kv_heads), VR(c.n_kv_heads), KB(c.n_kv_heads), VB(c.n_kv_heads);
  std::vector<float> kk(hd), vv(hd);
  for (int g = 0; g < c.n_kv_heads; ++g)
    for (int j = 0; j < c.n_ctx(); ++j) {
      kernels::kv_load_row(c.format, c.k[g].data() + j * c.row_bytes, kk.data(), hd);
      kernels::kv_load_row(c.format, c.v[g].data() + j * c.row_bytes, vv.data(), hd);
      for (int d = 0; d < hd; ++d) {
        KR[g].push_back(kk[d]), VR[g].push_back(vv[d]);
        KB[g].push_back(bf16(kk[d])), VB[g].push_back(bf16(vv[d]));
      }
    }
  for (int t = 0; t < c.n_q; ++t)
    for (int h = 0; h < c.n_heads(); ++h) {
      const int g = c.kv_of_head[h], pos = c.pos0 + t;
      const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      const std::vector<double>&kr = KR[g], &vr = VR[g], &kb = KB[g], &vb = VB[g];
      const float* qr = &c.q[t * c.stride() + h * hd];
      std::vector<double> s(pos + 1, -INFINITY);
      double mx = c.sinks.empty() ? -INFINITY : c.sinks[h], ds_max = 0.0, f32_err = 0.0, vmax = 0.0;
      for (int j = lo; j <= pos; ++j) {
        double d = 0.0, abs_sum = 0.0;
        for (int i = 0; i < hd; ++i) {
          d += double(bf16(qr[i])) * kb[j * hd + i];
          abs_sum += std::fabs(double(qr[i]) * kr[j * hd + i]);
        }
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
        ds_max = std::max(ds_max, 2.0 * kU * scale * abs_sum);
        f32_err = std::max(f32_err, hd * 0x1p-24 * scale * abs_sum * 1.01);
        for (int i = 0; i < hd; ++i) vmax = std::max(vmax, std::fabs(vr[j * hd + i]));
      }
      double sum = c.sinks.empty() ? 0.0 : std::exp(c.sinks[h] - mx);
      for (int j = lo; j <= pos; ++j) sum += (s[j] = std::exp(s[j] - mx));
      const double tol = 1e-5 + 4e-8 * c.n_ctx();  // attention_test's F32 tolerance
      for (int i = 0; i < hd; ++i) {
        double o = 0.0, pv = 0.0;
        for (int j = lo; j <= pos; ++j) {
          o += s[j] / sum * vb[j * hd + i];
          pv += s[j] / sum * std::fabs(vb[j * hd + i]);
        }
        const size_t x = t * c.stride() + h * hd + i;
        e.out[x] = o;
        e.bound[x] = kU * pv + 4.0 * vmax * f32_err + tol;
      }
      e.ref_bound = std::max(e.ref_bound, 4.0 * vmax * ds_max * (1.0 + ds_max) + 2.0 * kU * vmax + tol);
    }
  return e;
}

// Largest |a - b| over the outputs (inf if one is not finite) and the largest ratio to bound.
double worst_ratio(const std::vector<float>& got, const Emulated& e) {
  double r = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    r = std::max(r, std::fabs(got[i] - e.out[i]) / e.bound[i]);
  }
  return r;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::isfinite(a[i]) && std::isfinite(b[i]))) return INFINITY;
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

const std::vector<std::vector<int>> kMaps = {
    {0, 1, 2, 3}, {0, 0, 0, 1, 1, 1}, {0, 0, 0, 0, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 1, 1, 1, 2}};

// Checks one case: flash (BF16, 1-3 threads) within the emulated and the attention_ref bounds.
void check(const Case& c, const char* what) {
  const Emulated e = emulate(c);
  const auto ref = c.run(0, false);
  const auto one = c.run(1, true);
  EXPECT_LE(worst_ratio(one, e), 1.0) << what << " hd " << c.head_dim << " n_q " << c.n_q << " pos0 " << c.pos0;
  EXPECT_LE(max_diff(one, ref), e.ref_bound) << what << " vs attention_ref";
  for (int th : {2, 3}) EXPECT_EQ(max_diff(one, c.run(th, true)), 0.0f) << what << " threads " << th;
}

TEST(AttentionBf16, MatchesReferences) {
  SKIP_WITHOUT_BF16();
  const std::pair<int, int> shapes[] = {{1, 0}, {7, 0}, {5, 28}, {33, 0}, {40, 217}, {1, 300}, {129, 3}, {257, 0}};
  for (int hd : {64, 96, 128})
    for (size_t mi = 0; mi < kMaps.size(); ++mi)
      for (auto [n_q, pos0] : shapes) check(Case(n_q, pos0, hd, kMaps[mi], uint32_t(hd + mi * 10 + n_q + pos0)), "plain");
}

TEST(AttentionBf16, LongContextWindowsAndSinks) {
  SKIP_WITHOUT_BF16();
  check(Case(300, 700, 64, kMaps[2], 3), "context 1000");
  for (int window : {1, 37, 64, 65, 300}) {
    Case c(70, 230, 64, kMaps[(window) % kMaps.size()], uint32_t(window));
    c.window = window;
    check(c, "window");
  }
  Case s(45, 100, 64, kMaps[4], 9);
  s.sinks = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -2.0f};
  check(s, "sinks");
  s.window = 50;
  check(s, "sinks+window");
}

// Rings and paged views read as the flat cache to the bit; batch splits give the same rows.
TEST(AttentionBf16, RingPagedAndBatchSplitsAreBitIdentical) {
  SKIP_WITHOUT_BF16();
  Case c(57, 300, 64, kMaps[2], 21);
  c.window = 8;
  EXPECT_EQ(max_diff(c.run(2, true), c.ringed(64).run(2, true)), 0.0f) << "ring";
  c.window = 0;
  const auto flat = c.run(2, true);
  EXPECT_EQ(max_diff(flat, c.paged().run(3, true)), 0.0f) << "paged";
  for (int bs : {1, 20, 56}) {
    float m = 0.0f;
    for (int first = 0; first < c.n_q; first += bs) {
      Case part = c;
      part.n_q = std::min(bs, c.n_q - first);
      part.pos0 = c.pos0 + first;
      part.q.assign(c.q.begin() + first * c.stride(), c.q.begin() + (first + part.n_q) * c.stride());
      const auto out = part.run(2, true);
      for (size_t i = 0; i < out.size(); ++i) m = std::max(m, std::fabs(out[i] - flat[first * c.stride() + i]));
    }
    EXPECT_EQ(m, 0.0f) << "batch " << bs;
  }
}

// The flag changes only F16 caches with head_dim % 32 == 0; off, the usual kernels.
TEST(AttentionBf16, FlagScope) {
  SKIP_WITHOUT_BF16();
  for (KvFormat f : {KvFormat::kF32, KvFormat::kQ8_0}) {
    const Case c(33, 40, 64, kMaps[1], 5, f);
    EXPECT_EQ(max_diff(c.run(2, false), c.run(2, true)), 0.0f);
  }
  const Case odd(33, 40, 80, kMaps[1], 5);
  EXPECT_EQ(max_diff(odd.run(2, false), odd.run(2, true)), 0.0f) << "head_dim 80";
  const Case f16(33, 40, 64, kMaps[1], 5);
  EXPECT_GT(max_diff(f16.run(2, false), f16.run(2, true)), 0.0f) << "the flag changes an F16 cache's numbers";
}

}  // namespace
