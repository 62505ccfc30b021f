// vulkan_fixture.h: what the Vulkan kernel tests share (vulkan_test.cc,
// vulkan_attention_test.cc): the VulkanTest fixture, which opens device 0 once per suite and
// skips each test when there is none, buffers up and down, a float64-tolerant error measure.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/vulkan/vulkan.h"

namespace shardlm_test {
using kernels::vulkan::Buffer;
using kernels::vulkan::Commands;
using kernels::vulkan::Device;

inline std::vector<float> gaussian(std::mt19937& rng, size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// v in a new buffer of `dev` (a failure is a test failure here).
template <typename T>
inline Buffer upload_to(Device& dev, const std::vector<T>& v) {
  util::Expected<Buffer> b = dev.alloc(v.size() * sizeof(T), "test buffer");
  EXPECT_TRUE(b.ok()) << b.error();
  EXPECT_TRUE(dev.upload(*b, v.data(), v.size() * sizeof(T)).ok());
  return std::move(b.value());
}

class VulkanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    util::Expected<std::unique_ptr<Device>> dev = Device::open(0);
    if (dev) {
      dev_ = std::move(dev.value()).release();
      std::printf("[vulkan] on %s\n", kernels::vulkan::describe(dev_->info()).c_str());
    } else {
      why_ = dev.error();
    }
  }
  static void TearDownTestSuite() {
    delete dev_;
    dev_ = nullptr;
  }
  void SetUp() override {
    if (!dev_) GTEST_SKIP() << "no Vulkan device: " << why_;
  }

  static Buffer alloc(size_t bytes) {
    util::Expected<Buffer> b = dev_->alloc(bytes, "test buffer");
    EXPECT_TRUE(b.ok()) << b.error();
    return std::move(b.value());
  }
  template <typename T>
  static Buffer upload(const std::vector<T>& v) {
    return upload_to(*dev_, v);
  }
  static std::vector<float> download(const Buffer& b, size_t n) {
    std::vector<float> v(n);
    EXPECT_TRUE(dev_->download(b, v.data(), n * sizeof(float)).ok());
    return v;
  }
  static void run(Commands& cmd) {
    util::Status st = cmd.submit_and_wait();
    ASSERT_TRUE(st.ok()) << st.message();
  }

  static inline Device* dev_ = nullptr;
  static inline std::string why_;
};

// Largest |got - want| / max(|want|, floor) (floor keeps near-zero values absolute).
inline double max_rel_error(const std::vector<float>& got, const std::vector<float>& want, double floor = 1e-3) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::max(std::abs(double(want[i])), floor));
  return worst;
}

}  // namespace shardlm_test
