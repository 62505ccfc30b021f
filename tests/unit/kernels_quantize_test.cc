// kernels_quantize_test.cc: the activation quantizers (reference against
// tensor::quantize_row and ggml's x86 rounding, SIMD against reference on every ISA this CPU
// runs), log_sum_exp, ISA dispatch and its refusals, and GeGLU against ggml's definition.
// The matrix kernels are kernels_test.cc's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels_fixture.h"
#include "tensor/quants.h"
#include "tensor/types.h"
#include "util/fp16.h"

namespace kernels {
namespace {

using namespace kernels::test;
using tensor::Type;

// ---- activation quantizers ----

const Type kActivationTypes[] = {Type::F32, Type::F16, Type::BF16, Type::Q8_0, Type::Q8_1, Type::Q8_K};

std::vector<float> awkward_floats(std::mt19937& rng, int64_t n) {
  auto v = gaussian(rng, n, 3.0f);
  for (int64_t i = 0; i < 32 && i < n; ++i) v[i] = 0.0f;  // an all-zero block
  if (n >= 64) {  // a block of exact .5 ties: amax 127 -> d = 1, x * id = k + 0.5
    v[32] = 127.0f;
    for (int i = 1; i < 32; ++i) v[32 + i] = (i % 2 ? 1 : -1) * (float(i) + 0.5f);
  }
  return v;
}

// Q8_0 / Q8_1 activations follow ggml's x86 quantizer (127 / amax, ties to even), not the
// weights' reference quantizer: every value is within half a step of x and exact ties go to
// the even integer.
TEST(KernelsQuantize, Q8ActivationsFollowGgmlX86) {
  std::mt19937 rng(6);
  for (Type t : {Type::Q8_0, Type::Q8_1}) {
    const int64_t n = 96;
    auto v = awkward_floats(rng, n);
    v[0] = 127.0f;  // amax 127 in block 0: id = 1, so 2.5 -> 2 and -3.5 -> -4
    v[1] = 2.5f;
    v[2] = -3.5f;
    for (int i = 3; i < 32; ++i) v[i] = 0.25f * i;
    std::vector<uint8_t> a(activation_bytes(t, n));
    ref::quantize_activation(t, v.data(), a.data(), n);
    const int8_t* qs = t == Type::Q8_0 ? reinterpret_cast<tensor::BlockQ8_0*>(a.data())->qs
                                       : reinterpret_cast<tensor::BlockQ8_1*>(a.data())->qs;
    EXPECT_EQ(qs[0], 127);
    EXPECT_EQ(qs[1], 2);
    EXPECT_EQ(qs[2], -4);
    std::vector<float> back(n);
    tensor::dequantize_row(t, a.data(), back.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b * 32 + j]));
      for (int j = 0; j < 32; ++j) EXPECT_NEAR(back[b * 32 + j], v[b * 32 + j], amax / 127 * 0.5f + std::fabs(v[b * 32 + j]) * 1e-3f + 1e-6f);  // + fp16 rounding of d
    }
  }
}

TEST(KernelsQuantize, RefEqualsTensorQuantizeRow) {
  std::mt19937 rng(5);
  for (Type t : kActivationTypes) {
    if (t == Type::Q8_0 || t == Type::Q8_1) continue;  // see Q8ActivationsFollowGgmlX86
    for (int64_t blocks : {1, 3, 17}) {
      const int64_t n = blocks * (block_size(t) == 1 ? 64 : block_size(t));
      const auto v = awkward_floats(rng, n);
      std::vector<uint8_t> a(activation_bytes(t, n)), b(activation_bytes(t, n));
      ref::quantize_activation(t, v.data(), a.data(), n);
      tensor::quantize_row(t, v.data(), b.data(), n);
      if (t == Type::Q8_K) {  // ggml leaves bsums of an all-zero block unset; compare the rest
        for (int64_t k = 0; k < n / 256; ++k) {
          auto* ba = reinterpret_cast<tensor::BlockQ8_K*>(a.data()) + k;
          auto* bb = reinterpret_cast<tensor::BlockQ8_K*>(b.data()) + k;
          if (ba->d == 0) std::memcpy(bb->bsums, ba->bsums, sizeof(ba->bsums));
        }
      }
      EXPECT_EQ(a, b) << tensor::type_name(t) << " n=" << n;
    }
  }
}

// The SIMD quantizers round exactly like the reference (roundf, half away from zero), so
// their bytes are equal, ties included.
TEST(KernelsQuantize, SimdEqualsRef) {
  std::mt19937 rng(6);
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    for (Type t : kActivationTypes) {
      for (int64_t blocks : {1, 2, 31, 33}) {
        const int64_t n = blocks * (block_size(t) == 1 ? 64 : block_size(t)) + (block_size(t) == 1 ? 3 : 0);
        const auto v = awkward_floats(rng, n);
        std::vector<uint8_t> a(activation_bytes(t, n)), b(activation_bytes(t, n));
        ref::quantize_activation(t, v.data(), a.data(), n);
        quantize_activation(t, v.data(), b.data(), n);
        EXPECT_EQ(a, b) << tensor::type_name(t) << " n=" << n << " isa=" << isa_name(isa);
      }
    }
  }
}

// ---- dispatch ----

// log_sum_exp against a double-precision reference, on odd sizes, for every ISA; the
// ISAs agree bit for bit (the scalar path repeats the vector lanes' operations).
TEST(KernelsLogSumExp, MatchesDoubleReferenceOnEveryIsa) {
  IsaGuard guard;
  std::mt19937 rng(5);
  for (int64_t n : {1, 7, 8, 9, 33, 1000, 24577}) {
    std::vector<float> x = gaussian(rng, n, 8.0f);
    double mx = -INFINITY, sum = 0;
    for (float v : x) mx = std::max(mx, double(v));
    for (float v : x) sum += std::exp(double(v) - mx);
    const double want = mx + std::log(sum);
    std::vector<float> got;
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      got.push_back(log_sum_exp(x.data(), n));
      EXPECT_NEAR(got.back(), want, 1e-5 * std::max(1.0, std::fabs(want))) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(got.back(), got.front()) << isa_name(isa) << " n=" << n;
    }
  }
  EXPECT_EQ(log_sum_exp(nullptr, 0), -INFINITY);
  const float all_masked[3] = {-INFINITY, -INFINITY, -INFINITY};
  EXPECT_EQ(log_sum_exp(all_masked, 3), -INFINITY);
  const float one_masked[3] = {-INFINITY, 0.0f, 0.0f};
  EXPECT_NEAR(log_sum_exp(one_masked, 3), std::log(2.0), 1e-6);
}

TEST(KernelsDispatch, IsaNamesAndSwitching) {
  EXPECT_STREQ(isa_name(Isa::kScalar), "scalar");
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_STREQ(isa_name(Isa::kAmx), "amx");
  EXPECT_STREQ(isa_name(Isa::kNeon), "neon");
  EXPECT_STREQ(isa_name(Isa::kNeonDot), "dotprod");
  EXPECT_STREQ(isa_name(Isa::kNeonI8mm), "i8mm");
  std::printf("detected ISA: %s, active at start (SHARDLM_ISA): %s\n", isa_name(detected_isa()),
              isa_name(active_isa()));
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    EXPECT_EQ(active_isa(), isa);
  }
}

#if defined(__aarch64__)
// An AArch64 binary run by qemu-user on an x86 machine (make test-arm64) reads the host's
// /proc/cpuinfo.
bool emulated_on_x86() {
  std::ifstream f("/proc/cpuinfo");
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s.find("GenuineIntel") != std::string::npos || s.find("AuthenticAMD") != std::string::npos;
}
#endif

TEST(KernelsDispatchDeathTest, UnsupportedTypeNamesIt) {
#if defined(__aarch64__)
  if (emulated_on_x86())
    GTEST_SKIP() << "under qemu-user: the threadsafe style re-executes the binary (no binfmt entry for "
                    "AArch64 here) and a fast-style forked child spins in qemu; runs on real ARM";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint8_t> buf(4096);
  float y = 0;
  EXPECT_DEATH(matmul(Type::Q8_1, 32, buf.data(), 36, 0, 1, buf.data(), 36, 1, &y, 1), "Q8_1");
  EXPECT_DEATH(vec_dot(static_cast<Type>(16), 256, buf.data(), buf.data()), "IQ2_XXS");
  EXPECT_DEATH(quantize_activation(Type::Q4_0, reinterpret_cast<const float*>(buf.data()), buf.data(), 32),
               "Q4_0");
}

}  // namespace
}  // namespace kernels

// GeGLU (gemma3) against a scalar reference of ggml's definition on an odd size: gelu of the
// F16-rounded gate in double (tanh form), rounded to F16, times up; x * up at or above 10,
// 0 at or below -10. The F16 table may differ from the double reference by one F16 ulp.
TEST(Kernels, GegluMatchesGgmlDefinition) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  const int n = 1003;
  std::vector<float> gate(n), up(n), out(n);
  for (int i = 0; i < n; ++i) gate[i] = dist(rng), up[i] = dist(rng) / 4;
  gate[0] = -10.0f, gate[1] = 10.0f, gate[2] = 0.0f, gate[3] = -9.99f;
  kernels::geglu(out.data(), gate.data(), up.data(), n);
  for (int i = 0; i < n; ++i) {
    const double x = util::fp16_to_f32(util::f32_to_fp16(gate[i]));
    double want;
    if (gate[i] <= -10.0f) {
      want = 0;
    } else if (gate[i] >= 10.0f) {
      want = double(gate[i]) * up[i];
    } else {
      const double g = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
      const double g16 = util::fp16_to_f32(util::f32_to_fp16(float(g)));
      // one F16 ulp of g (2^-10 relative) plus the product's float rounding
      const double tol = (std::fabs(g16) * 1.0 / 1024 + 1e-7) * std::fabs(up[i]) + 1e-6;
      ASSERT_NEAR(out[i], g16 * up[i], tol) << "gate " << gate[i];
      continue;
    }
    ASSERT_FLOAT_EQ(out[i], float(want)) << "gate " << gate[i];
  }
  // gelu itself: the float formula within float rounding of the double one.
  for (float x : {-3.5f, -1.0f, -0.25f, 0.0f, 0.5f, 2.0f, 7.0f}) {
    const double g = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * double(x) * x)));
    EXPECT_NEAR(kernels::gelu(x), g, 1e-6 * (1 + std::fabs(g))) << x;
  }
}
