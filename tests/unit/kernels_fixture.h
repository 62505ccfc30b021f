// kernels_fixture.h: what kernels_test.cc and kernels_quantize_test.cc share: the ISAs this
// CPU runs, a guard that restores the active one, and random inputs.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "tensor/types.h"

namespace kernels::test {

// Every table this CPU offers. A table its start-up self-test disabled (a warning at start)
// fails the calling test: else the SIMD tests would pass on the tables below it alone.
inline std::vector<Isa> supported_isas() {
  EXPECT_TRUE(isa_supported(detected_isa()))
      << "the " << isa_name(detected_isa()) << " kernel table this CPU has was disabled by its start-up self-test";
  std::vector<Isa> out;
  for (int i = 0; i < kIsaCount; ++i)
    if (isa_supported(static_cast<Isa>(i))) out.push_back(static_cast<Isa>(i));
  return out;
}

// Restores the ISA dispatch used before the test.
struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

inline int block_size(tensor::Type t) { return tensor::traits(t).block_size; }

inline std::vector<float> gaussian(std::mt19937& rng, int64_t n, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace kernels::test
