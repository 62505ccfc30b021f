// kernels_fixture.h: what kernels_test.cc and kernels_quantize_test.cc share: the ISAs this
// CPU runs, a guard that restores the active one, and random inputs.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tensor/types.h"

namespace kernels::test {

// Every table this CPU offers. A table its start-up self-test disabled (a warning at start)
// fails the calling test: else the SIMD tests would pass on the tables below it alone.
// SHARDLM_TEST_ISAS=a,b (names as isa_name gives them) keeps only those: the ARM CI runs
// each emulated core's own table once (tools/arm64_ci.sh), not again on every higher core;
// naming a table this CPU lacks fails the calling test.
inline std::vector<Isa> supported_isas() {
  EXPECT_TRUE(isa_supported(detected_isa()))
      << "the " << isa_name(detected_isa()) << " kernel table this CPU has was disabled by its start-up self-test";
  const char* env = std::getenv("SHARDLM_TEST_ISAS");
  const std::string only = env ? "," + std::string(env) + "," : "";
  std::vector<Isa> out;
  for (int i = 0; i < kIsaCount; ++i) {
    const Isa isa = static_cast<Isa>(i);
    const bool listed = only.find("," + std::string(isa_name(isa)) + ",") != std::string::npos;
    if (!only.empty() && !listed) continue;
    EXPECT_TRUE(only.empty() || isa_supported(isa)) << "SHARDLM_TEST_ISAS names " << isa_name(isa) << ", which this CPU lacks";
    if (isa_supported(isa)) out.push_back(isa);
  }
  EXPECT_FALSE(out.empty()) << "SHARDLM_TEST_ISAS=" << (env ? env : "") << " names no kernel table";
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
