// kernels_fixture.h: what kernels_test.cc and kernels_quantize_test.cc share: the ISAs this
// CPU runs, a guard that restores the active one, and random inputs.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "tensor/types.h"

namespace kernels::test {

inline std::vector<Isa> supported_isas() {
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
