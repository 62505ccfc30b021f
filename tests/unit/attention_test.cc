// attention_test.cc: flash_attention and flash_decode against the naive attention_ref for
// every KV format, head_dim 64/128 (and odd sizes), GQA ratios 1/3/4/8 plus a non-uniform
// head map, contexts 1..1000 split as (n_q, pos0) with and without a prior context, on
// 1, 2 and 3 threads, on the AVX2 and the scalar tile kernels; attention_ref against a
// double-precision softmax; KV row round trips. Sliding windows (1 .. 300 positions, odd
// sizes) over flat caches and rings: flash against the reference, rings against flat caches
// and batch splits to the bit. No timing here (see bench/attention_bench.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "util/thread_pool.h"
#include "attention_case.h"

namespace {

using kernels::AttentionArgs;
using kernels::KvFormat;
using kernels::KvHeadView;

// flash vs ref: both round Q and read K/V identically, so they differ only by F32
// summation order, tiling of the softmax and the SIMD exp (~1 ulp). Outputs are convex
// combinations of V rows with |v| < ~4, so an absolute bound is the right measure.
// The reference sums p * v over the whole context sequentially in F32, so its rounding
// error grows with the context: the bound is 1e-5 + 4e-8 * n_ctx (5e-5 at 1000 positions).

util::ThreadPool& pool(int n) {
  static std::unique_ptr<util::ThreadPool> pools[4];
  if (!pools[n]) pools[n] = std::make_unique<util::ThreadPool>(n);
  return *pools[n];
}

const char* format_name(KvFormat f) {
  return f == KvFormat::kF16 ? "F16" : f == KvFormat::kF32 ? "F32" : "Q8_0";
}

// The random problem of attention_case.h, with a window and flash attention's arguments.
struct Case : AttentionCase {
  int window = 0;  // > 0: sliding window of the queries

  Case(int n_q_, int pos0_, int head_dim_, KvFormat f, std::vector<int> map, uint32_t seed = 1)
      : AttentionCase(n_q_, pos0_, head_dim_, f, std::move(map), seed) {}
  size_t out_stride() const { return size_t(n_heads()) * head_dim + 3; }
  AttentionArgs args(float* out) const {
    AttentionArgs a{};
    a.n_q = n_q;
    a.pos0 = pos0;
    a.n_heads = n_heads();
    a.n_kv_heads = n_kv_heads;
    a.kv_of_head = kv_of_head.data();
    a.head_dim = head_dim;
    a.scale = 1.0f / std::sqrt(float(head_dim));
    a.q = q.data();
    a.q_stride = size_t(n_heads()) * head_dim;
    a.out = out;
    a.out_stride = out_stride();
    a.kv = views.data();
    a.window = window;
    return a;
  }
  Case ringed(int ring) const {
    Case c = *this;
    c.make_ring(ring);
    return c;
  }
  std::vector<float> out_buffer() const { return std::vector<float>(n_q * out_stride(), NAN); }
};

float max_diff(const Case& c, const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (int t = 0; t < c.n_q; ++t)
    for (int i = 0; i < c.n_heads() * c.head_dim; ++i) {
      const float x = a[t * c.out_stride() + i], y = b[t * c.out_stride() + i];
      if (!(std::isfinite(x) && std::isfinite(y))) return INFINITY;
      m = std::max(m, std::fabs(x - y));
    }
  return m;
}

float tolerance(const Case& c) { return 1e-5f + 4e-8f * float(c.pos0 + c.n_q); }

std::vector<float> run_ref(const Case& c) {
  auto out = c.out_buffer();
  kernels::attention_ref(c.args(out.data()));
  return out;
}

std::vector<float> run_flash(const Case& c, int threads) {
  auto out = c.out_buffer();
  kernels::flash_attention(c.args(out.data()), pool(threads));
  return out;
}

std::vector<float> run_decode(const Case& c, int threads) {
  auto out = c.out_buffer();
  kernels::flash_decode(c.args(out.data()), pool(threads));
  return out;
}

const std::vector<std::vector<int>> kMaps = {
    {0, 1, 2, 3},                 // 1 query head per KV head
    {0, 0, 0, 1, 1, 1},           // 3
    {0, 0, 0, 0, 1, 1, 1, 1},     // 4
    {0, 0, 0, 0, 0, 0, 0, 0},     // 8
    {0, 0, 1, 1, 1, 2},           // non-uniform
};
const KvFormat kFormats[] = {KvFormat::kF16, KvFormat::kF32, KvFormat::kQ8_0};
// (n_q, pos0): total contexts 1, 7, 33, 257 as fresh prompts, continued prompts and decode.
const std::pair<int, int> kShapes[] = {{1, 0},  {7, 0},  {2, 5},   {1, 6},  {33, 0},
                                       {5, 28}, {1, 32}, {40, 217}, {1, 256}, {257, 0}};

class IsaGuard {
 public:
  explicit IsaGuard(kernels::Isa isa) : saved_(kernels::active_isa()) { kernels::set_isa(isa); }
  ~IsaGuard() { kernels::set_isa(saved_); }
 private:
  kernels::Isa saved_;
};

void check_all_shapes(int head_dim) {
  for (KvFormat f : kFormats)
    for (size_t mi = 0; mi < kMaps.size(); ++mi)
      for (auto [n_q, pos0] : kShapes) {
        const Case c(n_q, pos0, head_dim, f, kMaps[mi], uint32_t(mi * 100 + n_q + pos0));
        const auto ref = run_ref(c);
        for (int th = 1; th <= 3; ++th)
          ASSERT_LE(max_diff(c, ref, run_flash(c, th)), tolerance(c))
              << format_name(f) << " hd " << head_dim << " map " << mi << " n_q " << n_q
              << " pos0 " << pos0 << " threads " << th;
      }
}

TEST(Attention, FlashMatchesRefHeadDim64) { check_all_shapes(64); }
TEST(Attention, FlashMatchesRefHeadDim128) { check_all_shapes(128); }

TEST(Attention, FlashMatchesRefScalarKernels) {
  IsaGuard guard(kernels::Isa::kScalar);
  for (KvFormat f : kFormats)
    for (auto [n_q, pos0] : {std::pair{1, 0}, {9, 24}, {70, 100}, {1, 300}}) {
      const Case c(n_q, pos0, 64, f, kMaps[4]);
      const auto ref = run_ref(c);
      for (int th : {1, 3})
        EXPECT_LE(max_diff(c, ref, run_flash(c, th)), tolerance(c)) << format_name(f) << " " << n_q << "," << pos0;
    }
}

// Context 1000: a whole prompt, a prompt continuing a context, and decode.
TEST(Attention, FlashMatchesRefContext1000) {
  for (KvFormat f : kFormats)
    for (auto [n_q, pos0] : {std::pair{1000, 0}, {24, 976}, {1, 999}}) {
      const Case c(n_q, pos0, 128, f, kMaps[4], 7);
      const auto ref = run_ref(c);
      for (int th : {1, 2, 3})
        EXPECT_LE(max_diff(c, ref, run_flash(c, th)), tolerance(c))
            << format_name(f) << " n_q " << n_q << " pos0 " << pos0 << " threads " << th;
    }
}

// head_dim 80 (AVX2 with narrow V chunks) and 40 (not a multiple of 16: scalar kernels).
TEST(Attention, FlashMatchesRefOddHeadDims) {
  for (int hd : {80, 40})
    for (KvFormat f : {KvFormat::kF16, KvFormat::kF32})
      for (auto [n_q, pos0] : {std::pair{1, 0}, {13, 50}, {1, 600}}) {
        const Case c(n_q, pos0, hd, f, kMaps[1]);
        const auto ref = run_ref(c);
        for (int th : {1, 2})
          EXPECT_LE(max_diff(c, ref, run_flash(c, th)), tolerance(c)) << hd << " " << format_name(f);
      }
}

// flash_decode on several threads equals the single-thread flash path to the bit (the
// context is cut into chunks at the same absolute positions and folded in the same order),
// and the reference within tolerance.
TEST(Attention, FlashDecodeMatchesSingleThread) {
  for (KvFormat f : kFormats)
    for (int hd : {64, 128})
      for (int n_ctx : {1, 7, 300, 1000, 2500})
        for (size_t mi : {size_t(0), size_t(3), size_t(4)}) {
          const Case c(1, n_ctx - 1, hd, f, kMaps[mi], uint32_t(n_ctx + mi));
          const auto single = run_flash(c, 1);
          for (int th : {1, 2, 3}) {
            EXPECT_EQ(max_diff(c, single, run_decode(c, th)), 0.0f)
                << format_name(f) << " hd " << hd << " ctx " << n_ctx << " threads " << th;
          }
          if (n_ctx <= 1000) {
            EXPECT_LE(max_diff(c, single, run_ref(c)), tolerance(c));
          }
        }
}

// Rows n_q0 .. n_q0 + n of `whole` as their own batch at pos0 = n_q0 (same cache).
std::vector<float> run_rows(const Case& whole, int first, int n, int threads) {
  Case part = whole;
  part.n_q = n;
  part.pos0 = first;
  const size_t row = size_t(whole.n_heads()) * whole.head_dim;
  part.q.assign(whole.q.begin() + first * row, whole.q.begin() + (first + n) * row);
  part.views.clear();
  for (int g = 0; g < part.n_kv_heads; ++g)
    part.views.push_back({whole.format, part.k[g].data(), part.v[g].data(), part.row_bytes});
  return run_flash(part, threads);
}

// A prompt split into batches of any size (the later ones continuing the earlier ones'
// context), token by token (flash decoding past 512 positions on several threads) or in
// one batch, on 1-3 threads, gives the same rows to the bit: KV tiles and chunks sit at
// absolute positions and every row is reduced in the same order.
TEST(Attention, AnyBatchSplitIsBitIdentical) {
  for (KvFormat f : kFormats) {
    const Case whole(700, 0, 64, f, kMaps[2], 11);
    const auto full = run_flash(whole, 2);
    const size_t width = size_t(whole.n_heads()) * 64;
    for (int threads : {1, 2, 3})
      for (int bs : {1, 37, 256, 300}) {
        float m = 0.0f;
        // Token by token only over the last rows (the whole prompt would be slow).
        for (int first = bs == 1 ? 600 : 0; first < whole.n_q; first += bs) {
          const int n = std::min(bs, whole.n_q - first);
          const auto part = run_rows(whole, first, n, threads);
          for (int t = 0; t < n; ++t)
            for (size_t i = 0; i < width; ++i)
              m = std::max(m, std::fabs(part[t * whole.out_stride() + i] - full[(first + t) * whole.out_stride() + i]));
        }
        EXPECT_EQ(m, 0.0f) << format_name(f) << " batch " << bs << " threads " << threads;
      }
  }
}

// Softmax attention in double precision over an F32 cache (no rounding of Q).
std::vector<float> run_double(const Case& c) {
  const int hd = c.head_dim;
  auto out = c.out_buffer();
  for (int t = 0; t < c.n_q; ++t)
    for (int h = 0; h < c.n_heads(); ++h) {
      const int g = c.kv_of_head[h];
      const int n_ctx = c.pos0 + t + 1;
      const int lo = c.window > 0 ? std::max(0, n_ctx - c.window) : 0;
      std::vector<double> s(n_ctx, -INFINITY);
      double mx = -INFINITY, sum = 0.0;
      for (int j = lo; j < n_ctx; ++j) {
        const auto* k = reinterpret_cast<const float*>(c.k[g].data() + j * c.row_bytes);
        double d = 0.0;
        for (int i = 0; i < hd; ++i) d += double(c.q[(t * c.n_heads() + h) * hd + i]) * k[i];
        s[j] = d / std::sqrt(double(hd));
        mx = std::max(mx, s[j]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0.0;
        for (int j = lo; j < n_ctx; ++j)
          o += s[j] / sum * reinterpret_cast<const float*>(c.v[g].data() + j * c.row_bytes)[i];
        out[t * c.out_stride() + h * hd + i] = float(o);
      }
    }
  return out;
}

// With an F32 cache both paths are plain F32 arithmetic: compare them with double precision.
TEST(Attention, RefAndFlashMatchDoublePrecision) {
  for (auto [n_q, pos0] : {std::pair{20, 80}, {24, 976}}) {
    const Case c(n_q, pos0, 64, KvFormat::kF32, kMaps[4], 3);
    const auto exact = run_double(c);
    EXPECT_LE(max_diff(c, exact, run_ref(c)), tolerance(c)) << "ref, pos0 " << pos0;
    EXPECT_LE(max_diff(c, exact, run_flash(c, 2)), tolerance(c)) << "flash, pos0 " << pos0;
  }
}

// ---- sliding windows ------------------------------------------------------------------------

// Windows of 1 to 300 positions (odd sizes, shorter and longer than a tile, a chunk, the
// context), prompts and decode at odd offsets, every format, GQA maps, 1-3 threads, head
// dims 64, 80 (AVX2, narrow V chunks) and 40 (scalar): flash within tolerance of the
// reference, and the window changes the result once the context is longer than it.
TEST(Attention, WindowedFlashMatchesRef) {
  const std::pair<int, int> shapes[] = {{1, 0}, {7, 0}, {13, 50}, {1, 200}, {70, 100}, {40, 217}, {1, 600}, {129, 3}};
  for (int window : {1, 8, 37, 64, 65, 128, 300})
    for (int hd : {64, 80, 40})
      for (KvFormat f : kFormats) {
        if (f == KvFormat::kQ8_0 && hd % 32 != 0) continue;
        for (auto [n_q, pos0] : shapes) {
          Case c(n_q, pos0, hd, f, kMaps[(window + n_q) % kMaps.size()], uint32_t(window * 7 + n_q + pos0));
          const auto full = run_ref(c);
          c.window = window;
          const auto ref = run_ref(c);
          for (int th = 1; th <= 3; ++th)
            ASSERT_LE(max_diff(c, ref, run_flash(c, th)), tolerance(c))
                << "window " << window << " hd " << hd << " " << format_name(f) << " n_q " << n_q << " pos0 " << pos0
                << " threads " << th;
          if (pos0 + n_q > window) {
            EXPECT_GT(max_diff(c, full, ref), 1e-3f) << "window " << window;
          }
        }
      }
}

TEST(Attention, WindowedFlashMatchesRefScalarKernels) {
  IsaGuard guard(kernels::Isa::kScalar);
  for (KvFormat f : kFormats)
    for (auto [n_q, pos0] : {std::pair{1, 0}, {9, 24}, {70, 100}, {1, 300}, {1, 700}}) {
      Case c(n_q, pos0, 64, f, kMaps[4]);
      c.window = 45;
      const auto ref = run_ref(c);
      for (int th : {1, 3})
        EXPECT_LE(max_diff(c, ref, run_flash(c, th)), tolerance(c)) << format_name(f) << " " << n_q << "," << pos0;
    }
}

// A window over an F32 cache against double precision: the reference's own masking is right.
TEST(Attention, WindowedRefAndFlashMatchDoublePrecision) {
  for (auto [n_q, pos0] : {std::pair{20, 80}, {24, 976}, {1, 333}}) {
    Case c(n_q, pos0, 64, KvFormat::kF32, kMaps[4], 3);
    c.window = 57;
    const auto exact = run_double(c);
    EXPECT_LE(max_diff(c, exact, run_ref(c)), tolerance(c)) << "ref, pos0 " << pos0;
    EXPECT_LE(max_diff(c, exact, run_flash(c, 2)), tolerance(c)) << "flash, pos0 " << pos0;
  }
}

// A windowed layer's ring (a multiple of 64 rows, holding window + batch - 1 positions and
// more) reads as the flat cache to the bit, in the flash path, flash decoding and the
// reference; a ring larger than every position read need not be a multiple of 64.
TEST(Attention, RingEqualsFlatCacheBitForBit) {
  for (KvFormat f : kFormats)
    for (auto [window, ring, n_q, pos0] : {std::tuple{128, 192, 1, 700}, {128, 192, 40, 517}, {8, 64, 57, 300},
                                           {100, 256, 100, 1000}, {37, 100, 20, 30}}) {
      Case c(n_q, pos0, 64, f, kMaps[2], uint32_t(ring + pos0));
      c.window = window;
      const Case r = c.ringed(ring);
      for (int th : {1, 2, 3}) {
        EXPECT_EQ(max_diff(c, run_flash(c, th), run_flash(r, th)), 0.0f)
            << format_name(f) << " ring " << ring << " pos0 " << pos0 << " threads " << th;
        if (n_q == 1) {
          EXPECT_EQ(max_diff(c, run_flash(c, 1), run_decode(r, th)), 0.0f) << "decode threads " << th;
        }
      }
      EXPECT_EQ(max_diff(c, run_ref(c), run_ref(r)), 0.0f) << format_name(f) << " ring " << ring;
    }
}

// With a window, a prompt split into batches of any size, token by token (flash decoding on
// several threads past 512 positions) or in one batch gives the same rows to the bit: a row
// reads the tiles that meet its window whatever unit it is in.
TEST(Attention, WindowedAnyBatchSplitIsBitIdentical) {
  for (KvFormat f : kFormats)
    for (int window : {5, 128, 200}) {
      Case whole(700, 0, 64, f, kMaps[2], 13);
      whole.window = window;
      const auto full = run_flash(whole, 2);
      const size_t width = size_t(whole.n_heads()) * 64;
      for (int threads : {1, 3})
        for (int bs : {1, 37, 300}) {
          float m = 0.0f;
          for (int first = bs == 1 ? 600 : 0; first < whole.n_q; first += bs) {
            const int n = std::min(bs, whole.n_q - first);
            const auto part = run_rows(whole, first, n, threads);
            for (int t = 0; t < n; ++t)
              for (size_t i = 0; i < width; ++i)
                m = std::max(m, std::fabs(part[t * whole.out_stride() + i] - full[(first + t) * whole.out_stride() + i]));
          }
          EXPECT_EQ(m, 0.0f) << format_name(f) << " window " << window << " batch " << bs << " threads " << threads;
        }
    }
}

TEST(Attention, KvRowRoundTrip) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int hd : {32, 64, 128}) {
    std::vector<float> x(hd), y(hd);
    for (float& e : x) e = nd(rng);
    for (KvFormat f : kFormats) {
      std::vector<uint8_t> row(kernels::kv_row_bytes(f, hd));
      kernels::kv_store_row(f, x.data(), row.data(), hd);
      kernels::kv_load_row(f, row.data(), y.data(), hd);
      for (int b = 0; b < hd; b += 32) {
        float amax = 0.0f;
        for (int i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        for (int i = b; i < b + 32; ++i) {
          const float bound = f == KvFormat::kF32   ? 0.0f
                              : f == KvFormat::kF16 ? std::fabs(x[i]) * 0x1p-11f
                                                    : amax / 127.0f * 0.57f;
          EXPECT_LE(std::fabs(x[i] - y[i]), bound) << format_name(f) << " hd " << hd << " i " << i;
        }
      }
    }
  }
  EXPECT_EQ(kernels::kv_row_bytes(KvFormat::kF16, 128), 256u);
  EXPECT_EQ(kernels::kv_row_bytes(KvFormat::kF32, 128), 512u);
  EXPECT_EQ(kernels::kv_row_bytes(KvFormat::kQ8_0, 128), 136u);
}

}  // namespace
