// kernels_bench.cc: Google Benchmark for the kernels: matrix x vector per weight type
// (GB/s of weights streamed, 1 thread) on 4096x4096 and 14336x4096, a batch-32 matmul
// (GFLOP/s), batch-128 matmuls of prompt-processing shapes, and this machine's plain
// streaming-read bandwidth (AVX2 sum over 1 GiB) to compare the matvec GB/s with, and decode
// batches of 1-8 sequences in vec_dot order (Decode/). Not a test: no assertions on timing.
//
// Built with the release preset: cmake --build build/release --target kernels_bench
// Run: build/release/kernels_bench [--benchmark_filter=Matvec] (SHARDLM_ISA=scalar|avx2 to compare)
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/kernels.h"
#include "tensor/quants.h"
#include "tensor/types.h"

namespace {

using tensor::Type;

const Type kTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1, Type::Q5_0,
                       Type::Q5_1, Type::Q8_0, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K,
                       Type::Q6_K, Type::IQ4_NL, Type::IQ4_XS, Type::MXFP4};

std::vector<float> gaussian(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// rows x n weights of type t: 8 distinct quantized rows repeated (quantizing 58M values
// with the reference K-quantizer would take minutes; the speed does not depend on values).
struct Matrix {
  Type type;
  int64_t rows, n;
  size_t row_bytes;
  std::vector<uint8_t> data;
  Matrix(Type t, int64_t rows_, int64_t n_) : type(t), rows(rows_), n(n_), row_bytes(tensor::row_bytes(t, n_)) {
    data.resize(rows * row_bytes);
    for (int64_t r = 0; r < 8 && r < rows; ++r) tensor::quantize_row(t, gaussian(n, 10 + r).data(), &data[r * row_bytes], n);
    for (int64_t r = 8; r < rows; ++r) std::memcpy(&data[r * row_bytes], &data[(r % 8) * row_bytes], row_bytes);
  }
};

void BM_Matvec(benchmark::State& state, Type t, int64_t rows, int64_t n) {
  const Matrix w(t, rows, n);
  const Type at = tensor::traits(t).vec_dot_type;
  std::vector<uint8_t> xq(kernels::activation_bytes(at, n));
  kernels::quantize_activation(at, gaussian(n, 1).data(), xq.data(), n);
  std::vector<float> y(rows);
  for (auto _ : state) {
    kernels::matmul(t, n, w.data.data(), w.row_bytes, 0, rows, xq.data(), xq.size(), 1, y.data(), rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(double(w.data.size()) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernels::isa_name(kernels::active_isa()));
}

void BM_Matmul(benchmark::State& state, Type t, int64_t rows, int64_t n, int64_t batch,
               kernels::BatchOrder order) {
  const Matrix w(t, rows, n);
  const Type at = tensor::traits(t).vec_dot_type;
  const size_t xs = kernels::activation_bytes(at, n);
  std::vector<uint8_t> xq(batch * xs);
  for (int64_t b = 0; b < batch; ++b) kernels::quantize_activation(at, gaussian(n, 100 + b).data(), &xq[b * xs], n);
  std::vector<float> y(batch * rows);
  for (auto _ : state) {
    kernels::matmul(t, n, w.data.data(), w.row_bytes, 0, rows, xq.data(), xs, batch, y.data(), rows, order);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * n * batch / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernels::isa_name(kernels::active_isa()));
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

// Streaming read of a 1 GiB buffer: the bandwidth one thread can pull from memory.
void BM_ReadBandwidth(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < bytes / 4; ++i) p[i] = 1.0f;
  for (auto _ : state) benchmark::DoNotOptimize(sum_avx2(p, bytes / 4));
  state.counters["GB/s"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  std::free(p);
}
BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->MinTime(2.0);
#endif

int register_all = [] {
  for (Type t : kTypes) {
    for (int64_t rows : {4096, 14336}) {
      const std::string name = std::string("Matvec/") + tensor::type_name(t) + "/" + std::to_string(rows) + "x4096";
      benchmark::RegisterBenchmark(name.c_str(), BM_Matvec, t, rows, 4096)->Unit(benchmark::kMillisecond);
    }
  }
  // Qwen3-30B-A3B's experts (gate / up 768 x 2048, down 2048 x 768): 0.9 MB each in Q4_K, in
  // cache here, so these time the kernel's arithmetic and per-row overhead, not memory.
  for (Type t : {Type::Q4_0, Type::Q4_1, Type::Q8_0, Type::Q4_K, Type::Q6_K, Type::IQ4_NL}) {
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{768, 2048}, {2048, 768}}) {
      const std::string name = std::string("Matvec/") + tensor::type_name(t) + "/" + std::to_string(rows) + "x" +
                               std::to_string(n);
      benchmark::RegisterBenchmark(name.c_str(), BM_Matvec, t, rows, n)->Unit(benchmark::kMicrosecond);
    }
  }
  // Out of every cache (151 MB in Q4_K, like a 150k-vocabulary output matrix): memory-bound,
  // to set beside ReadBandwidth.
  for (Type t : {Type::Q4_0, Type::Q4_K}) {
    const std::string name = std::string("Matvec/") + tensor::type_name(t) + "/65536x4096";
    benchmark::RegisterBenchmark(name.c_str(), BM_Matvec, t, 65536, 4096)->Unit(benchmark::kMillisecond);
  }
  for (Type t : kTypes) {
    const std::string name = std::string("Matmul/") + tensor::type_name(t) + "/4096x4096/batch32";
    benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, 4096, 4096, 32, kernels::BatchOrder::kLanes)->Unit(benchmark::kMillisecond);
  }
  // Prompt-processing shapes: SmolLM2's FFN (1536 x 576) and Llama 3.2 1B's (8192 x 2048),
  // a 128-token batch.
  for (Type t : kTypes) {
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{1536, 576}, {8192, 2048}}) {
      if (n % tensor::traits(t).block_size != 0) continue;  // 576 is not a K-quant row
      const std::string name = std::string("Matmul/") + tensor::type_name(t) + "/" + std::to_string(rows) + "x" +
                               std::to_string(n) + "/batch128";
      benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, rows, n, 128, kernels::BatchOrder::kLanes)->Unit(benchmark::kMillisecond);
    }
  }
  // Decode rows of 1-64 sequences (vec_dot order, as the runtime's default mode steps them;
  // 64 columns are also an --exact-batches prompt chunk):
  // Llama 3.2 1B's FFN up (8192 x 2048; 9.4 MB in Q4_K, inside a 32 MB L3): the arithmetic
  // cost of a decode batch per column, seqs1 being matrix x vector.
  for (Type t : kTypes) {
    for (int64_t seqs : {1, 2, 4, 8, 64}) {
      const std::string name = std::string("Decode/") + tensor::type_name(t) + "/8192x2048/seqs" + std::to_string(seqs);
      benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, 8192, 2048, seqs, kernels::BatchOrder::kVecDot)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
