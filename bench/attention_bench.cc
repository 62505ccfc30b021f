// attention_bench.cc: Google Benchmark for the attention kernels on one Llama-3-8B-shaped
// layer (32 query heads, 8 KV heads, head_dim 128): decode (n_q = 1) at context 128 and
// 4096 (F16 at 4096 also BF16), and a 512- and 2048-token prefill, per KV format and thread count, for an F16 cache
// also with the opt-in BF16 kernels (bf16:1, --attn-bf16; an error line where the CPU lacks
// AVX512_BF16). Reports the K+V bytes read
// per second for decode (to compare with the machine's bandwidth and the weights' bytes)
// and GFLOP/s (4 * head_dim flops per query-head-position) for prefill. Not a test: no
// assertions on timing.
//
// Built with the release preset: cmake --build build/release --target attention_bench
// Run: build/release/attention_bench [--benchmark_filter=Decode] (SHARDLM_ISA=scalar|avx2 to compare)
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "util/thread_pool.h"

namespace {

using kernels::AttentionArgs;
using kernels::KvFormat;

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;

util::ThreadPool& pool(int n) {
  static std::unique_ptr<util::ThreadPool> pools[9];
  if (!pools[n]) pools[n] = std::make_unique<util::ThreadPool>(n);
  return *pools[n];
}

// One layer's KV cache with n_ctx random positions, and n_q random queries.
struct Layer {
  KvFormat format;
  size_t row_bytes;
  std::vector<uint8_t> k, v;  // [n_kv_heads][n_ctx][row_bytes]
  std::vector<kernels::KvHeadView> views;
  std::vector<int> kv_of_head;
  std::vector<float> q, out;  // [n_q][n_heads * head_dim]

  Layer(KvFormat f, int n_ctx, int n_q) : format(f), row_bytes(kernels::kv_row_bytes(f, kHeadDim)) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    k.resize(size_t(kKvHeads) * n_ctx * row_bytes);
    v.resize(k.size());
    std::vector<float> x(kHeadDim);
    for (size_t r = 0; r < size_t(kKvHeads) * n_ctx; ++r) {
      for (float& e : x) e = nd(rng);
      kernels::kv_store_row(f, x.data(), k.data() + r * row_bytes, kHeadDim);
      for (float& e : x) e = nd(rng);
      kernels::kv_store_row(f, x.data(), v.data() + r * row_bytes, kHeadDim);
    }
    for (int g = 0; g < kKvHeads; ++g)
      views.push_back({f, k.data() + size_t(g) * n_ctx * row_bytes,
                       v.data() + size_t(g) * n_ctx * row_bytes, row_bytes});
    for (int h = 0; h < kHeads; ++h) kv_of_head.push_back(h / (kHeads / kKvHeads));
    q.resize(size_t(n_q) * kHeads * kHeadDim);
    for (float& e : q) e = nd(rng);
    out.resize(q.size());
  }

  AttentionArgs args(int n_q, int pos0) {
    AttentionArgs a{};
    a.n_q = n_q;
    a.pos0 = pos0;
    a.n_heads = kHeads;
    a.n_kv_heads = kKvHeads;
    a.kv_of_head = kv_of_head.data();
    a.head_dim = kHeadDim;
    a.scale = 1.0f / std::sqrt(float(kHeadDim));
    a.q = q.data();
    a.q_stride = size_t(kHeads) * kHeadDim;
    a.out = out.data();
    a.out_stride = a.q_stride;
    a.kv = views.data();
    return a;
  }
};

// args: format, context, threads, bf16 (the opt-in BF16 kernels)
void BM_Decode(benchmark::State& state) {
  const auto f = KvFormat(state.range(0));
  const int n_ctx = int(state.range(1));
  if (state.range(3) && !kernels::attention_bf16_available()) {
    state.SkipWithError("this CPU lacks AVX512_BF16");
    return;
  }
  Layer layer(f, n_ctx, 1);
  AttentionArgs a = layer.args(1, n_ctx - 1);
  a.bf16 = state.range(3) != 0;
  util::ThreadPool& p = pool(int(state.range(2)));
  for (auto _ : state) {
    kernels::flash_attention(a, p);
    benchmark::DoNotOptimize(layer.out.data());
  }
  const double bytes = 2.0 * kKvHeads * n_ctx * layer.row_bytes;
  state.SetBytesProcessed(int64_t(bytes) * state.iterations());
}

void BM_DecodeRef(benchmark::State& state) {
  const int n_ctx = int(state.range(1));
  Layer layer(KvFormat(state.range(0)), n_ctx, 1);
  const AttentionArgs a = layer.args(1, n_ctx - 1);
  for (auto _ : state) {
    kernels::attention_ref(a);
    benchmark::DoNotOptimize(layer.out.data());
  }
  state.SetBytesProcessed(int64_t(2.0 * kKvHeads * n_ctx * layer.row_bytes) * state.iterations());
}

// args: format, prompt length, threads, bf16 (the opt-in BF16 kernels, --attn-bf16)
void BM_Prefill(benchmark::State& state) {
  const auto f = KvFormat(state.range(0));
  const int n_q = int(state.range(1));
  if (state.range(3) && !kernels::attention_bf16_available()) {
    state.SkipWithError("this CPU lacks AVX512_BF16");
    return;
  }
  Layer layer(f, n_q, n_q);
  AttentionArgs a = layer.args(n_q, 0);
  a.bf16 = state.range(3) != 0;
  util::ThreadPool& p = pool(int(state.range(2)));
  for (auto _ : state) {
    kernels::flash_attention(a, p);
    benchmark::DoNotOptimize(layer.out.data());
  }
  const double pairs = double(n_q) * (n_q + 1) / 2 * kHeads;  // (query, head, position)
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * kHeadDim * pairs * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

constexpr int kF16 = int(KvFormat::kF16), kF32 = int(KvFormat::kF32), kQ8 = int(KvFormat::kQ8_0);

BENCHMARK(BM_Decode)
    ->ArgNames({"fmt", "ctx", "threads", "bf16"})
    ->ArgsProduct({{kF16, kQ8, kF32}, {128, 4096}, {1, 2}, {0}})
    ->ArgsProduct({{kF16}, {4096}, {1, 2}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_DecodeRef)->ArgNames({"fmt", "ctx"})->Args({kF16, 4096})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefill)
    ->ArgNames({"fmt", "n", "threads", "bf16"})
    ->ArgsProduct({{kQ8}, {512}, {1, 2}, {0}})
    ->ArgsProduct({{kF16}, {512, 2048}, {1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
