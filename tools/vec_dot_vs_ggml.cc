// vec_dot_vs_ggml.cc: our matrix x vector (and vec_dot-order batches) against ggml-cpu's own
// vec_dot, bit for bit, per weight type, on random rows quantized by ggml itself (issue 28:
// greedy text equal to llama.cpp's decode needs every dot product equal to its AVX2 one).
// Built and run by ctest as VecDotVsGgml.avx2 / .native (tests/golden/CMakeLists.txt) when
// tools/ggml_ref.sh has built ggml's AVX2 CPU library from the llama-cpp-python sdist into
// .deps/ggml (`make test` does); by hand: `SHARDLM_ISA=avx2 build/release/tests/golden/vec_dot_vs_ggml`.
//
// Per type: how many of the rows differ from ggml (activations quantized by both must be
// byte-equal too), at batch 1 and in vec_dot-order batches of 2 and 3. Exit status 1 if any.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/kernels.h"
#include "tensor/types.h"

int main() {
  ggml_cpu_init();
  struct T {
    ggml_type g;
    tensor::Type t;
  };
  const T types[] = {{GGML_TYPE_Q4_0, tensor::Type::Q4_0},   {GGML_TYPE_Q4_1, tensor::Type::Q4_1},
                     {GGML_TYPE_Q5_0, tensor::Type::Q5_0},   {GGML_TYPE_Q5_1, tensor::Type::Q5_1},
                     {GGML_TYPE_Q8_0, tensor::Type::Q8_0},   {GGML_TYPE_Q2_K, tensor::Type::Q2_K},
                     {GGML_TYPE_Q3_K, tensor::Type::Q3_K},   {GGML_TYPE_Q4_K, tensor::Type::Q4_K},
                     {GGML_TYPE_Q5_K, tensor::Type::Q5_K},   {GGML_TYPE_Q6_K, tensor::Type::Q6_K},
                     {GGML_TYPE_IQ4_NL, tensor::Type::IQ4_NL}, {GGML_TYPE_IQ4_XS, tensor::Type::IQ4_XS},
                     {GGML_TYPE_MXFP4, tensor::Type::MXFP4}};
  std::printf("isa %s\n", kernels::isa_name(kernels::active_isa()));
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int kRows = 5, kCols = 3, kTrials = 40;
  int bad = 0;
  for (const auto& ty : types) {
    const auto* tr = ggml_get_type_traits_cpu(ty.g);
    const tensor::Type at = tensor::traits(ty.t).vec_dot_type;
    const int bs = int(ggml_blck_size(ty.g));
    int diff[4] = {}, diff_act = 0, total = 0;
    for (int trial = 0; trial < kTrials; ++trial) {
      const int n = bs * (trial % 2 ? 33 : 3 + trial % 5);  // odd block counts and others
      const size_t wb = ggml_row_size(ty.g, n), ab = ggml_row_size(tr->vec_dot_type, n);
      std::vector<uint8_t> w(wb * kRows), a(ab * kCols), a2(kernels::activation_bytes(at, n));
      std::vector<float> f(n);
      for (int r = 0; r < kRows; ++r) {
        for (auto& v : f) v = nd(rng) * float(1 + (trial + r) % 5);
        ggml_quantize_chunk(ty.g, f.data(), w.data() + r * wb, 0, 1, n, nullptr);
      }
      for (int c = 0; c < kCols; ++c) {
        for (auto& v : f) v = nd(rng) * (c == 2 ? 0.01f : 1.0f);
        ggml_get_type_traits_cpu(tr->vec_dot_type)->from_float(f.data(), a.data() + c * ab, n);
        kernels::quantize_activation(at, f.data(), a2.data(), n);
        if (a2.size() != ab || std::memcmp(a2.data(), a.data() + c * ab, ab)) ++diff_act;
      }
      for (int nbatch = 1; nbatch <= kCols; ++nbatch) {
        std::vector<float> y(kRows * kCols);
        kernels::matmul(ty.t, n, w.data(), wb, 0, kRows, a.data(), ab, nbatch, y.data(), kRows,
                        kernels::BatchOrder::kVecDot);
        for (int c = 0; c < nbatch; ++c)
          for (int r = 0; r < kRows; ++r) {
            float g = 0;
            tr->vec_dot(n, &g, 0, w.data() + r * wb, 0, a.data() + c * ab, 0, 1);
            diff[nbatch] += std::memcmp(&g, &y[c * kRows + r], 4) != 0;
            if (nbatch == 1) ++total;
          }
      }
    }
    std::printf("%-7s activations differ %d; rows differing from ggml: batch 1 %d/%d, 2 %d, 3 %d\n",
                ggml_type_name(ty.g), diff_act, diff[1], total, diff[2], diff[3]);
    bad += diff_act + diff[1] + diff[2] + diff[3];
  }
  return bad ? 1 : 0;
}
