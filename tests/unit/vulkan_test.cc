// vulkan_test.cc: the Vulkan kernel layer (kernels/vulkan) against the CPU: the rounding of
// activations to Q8_0 / Q8_1 / Q8_K grids bit for bit against kernels::quantize_activation,
// matrix x vector and matrix x matrix for every weight type against a float64 dot of
// tensor::dequantize_row with the so rounded activations, Q4_1 / Q4_K against kernels::matmul,
// the float ops against kernels::rmsnorm / swiglu / softmax / rope, on odd sizes (flash
// attention is vulkan_attention_test.cc's). Runs on any Vulkan device (CI: Mesa's lavapipe
// on the CPU); skipped when there is none. Each check prints its largest error ("[vulkan] ...").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/vulkan/vulkan.h"
#include "tensor/quants.h"
#include "util/fp16.h"
#include "vulkan_fixture.h"

namespace {

using shardlm_test::gaussian;
using shardlm_test::max_rel_error;
using shardlm_test::upload_to;
using shardlm_test::VulkanTest;
using kernels::vulkan::AttentionShape;
using kernels::vulkan::Buffer;
using kernels::vulkan::Commands;
using kernels::vulkan::Device;
using tensor::Type;

// ---- device layer

TEST(VulkanDevices, ListOrSayWhy) {
  util::Expected<std::vector<kernels::vulkan::DeviceInfo>> devices = kernels::vulkan::list_devices();
  if (!devices) {
    EXPECT_NE(devices.error().find("Vulkan"), std::string::npos) << devices.error();
    GTEST_SKIP() << devices.error();
  }
  for (const kernels::vulkan::DeviceInfo& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.memory_bytes, 0u) << d.name;
    EXPECT_GT(d.max_buffer_bytes, 0u) << d.name;
    EXPECT_GT(d.subgroup_size, 0u) << d.name;
  }
}

TEST_F(VulkanTest, NoSuchDeviceIsAClearError) {
  util::Expected<std::unique_ptr<Device>> dev = Device::open(1000);
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.error().find("no Vulkan device 1000"), std::string::npos) << dev.error();
}

TEST_F(VulkanTest, TooLargeForTheDeviceNamesItsMemory) {
  const kernels::vulkan::DeviceInfo& info = dev_->info();
  EXPECT_TRUE(dev_->check_fits(info.memory_bytes, "a model").ok());
  const util::Status st = dev_->check_fits(info.memory_bytes + 1, "model.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.gguf"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(info.name), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("GiB of device memory"), std::string::npos) << st.message();
  for (uint64_t bytes : {info.memory_bytes + 1, info.max_buffer_bytes + 1}) {
    util::Expected<Buffer> b = dev_->alloc(bytes, "blk.0.ffn_up.weight");
    ASSERT_FALSE(b.ok()) << bytes;
    EXPECT_NE(b.error().find("blk.0.ffn_up.weight"), std::string::npos) << b.error();
    EXPECT_NE(b.error().find(info.name), std::string::npos) << b.error();
    EXPECT_NE(b.error().find("GiB of device memory"), std::string::npos) << b.error();
  }
}

void round_trip(Device& dev) {
  std::vector<uint8_t> data(1000 + 7);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 37 + 11);
  util::Expected<Buffer> b = dev.alloc(data.size() + 100, "round trip");
  ASSERT_TRUE(b.ok()) << b.error();
  ASSERT_TRUE(dev.upload(*b, data.data(), data.size(), 50).ok());
  std::vector<uint8_t> back(data.size() - 3);
  ASSERT_TRUE(dev.download(*b, back.data(), back.size(), 53).ok());
  EXPECT_EQ(0, std::memcmp(back.data(), data.data() + 3, back.size()));
}

TEST_F(VulkanTest, UploadDownloadRoundTrip) { round_trip(*dev_); }

TEST_F(VulkanTest, UploadDownloadThroughStaging) {
  util::Expected<std::unique_ptr<Device>> dev = Device::open(0, {.force_staging = true});
  ASSERT_TRUE(dev.ok()) << dev.error();
  round_trip(**dev);
}

// ---- matrix products

struct Weights {
  std::vector<uint8_t> bytes;  // [rows][row_bytes(t, cols)]
  std::vector<float> deq;      // [rows][cols], the CPU's dequantized values
};

Weights random_weights(std::mt19937& rng, Type t, int64_t rows, int64_t cols) {
  Weights w;
  const size_t rb = tensor::row_bytes(t, cols);
  w.bytes.resize(rb * rows);
  w.deq.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = gaussian(rng, size_t(cols), 0.5f);
    tensor::quantize_row(t, x.data(), w.bytes.data() + r * rb, cols);
    tensor::dequantize_row(t, w.bytes.data() + r * rb, w.deq.data() + r * cols, cols);
  }
  return w;
}

// x (rows of cols) as the CPU's matmul sees it against weights of type wt: quantized to
// traits(wt).vec_dot_type by kernels::quantize_activation and dequantized (d * q). The
// float weight types' F32 activations are unchanged (the Vulkan shaders keep F16 / BF16
// weights' activations F32).
std::vector<float> cpu_rounded(Type wt, const std::vector<float>& x, int64_t cols) {
  const Type at = tensor::traits(wt).vec_dot_type;
  if (at == Type::F32) return x;
  std::vector<float> out(x.size());
  std::vector<uint8_t> q(kernels::activation_bytes(at, cols));
  for (size_t r = 0; r < x.size() / size_t(cols); ++r) {
    kernels::quantize_activation(at, x.data() + r * cols, q.data(), cols);
    tensor::dequantize_row(at, q.data(), out.data() + r * cols, cols);
  }
  return out;
}

// Q4_1 and Q5_1 (vec_dot type Q8_1): the CPU multiplies a weight block's m by Q8_1's s =
// fp16(d * sum(q)) (d before its fp16 rounding), not by the sum of the rounded x; this is
// sum over the blocks of m * (s - sum(x')) for weight row w_row and activation row x, to
// add to a dot with cpu_rounded x (0 for the other types).
double min_term_excess(Type wt, const uint8_t* w_row, const float* x, int64_t cols) {
  if (wt != Type::Q4_1 && wt != Type::Q5_1) return 0;
  std::vector<tensor::BlockQ8_1> xq(size_t(cols / 32));
  kernels::quantize_activation(Type::Q8_1, x, xq.data(), cols);
  double excess = 0;
  for (int64_t i = 0; i < cols / 32; ++i) {
    const uint16_t m = wt == Type::Q4_1 ? reinterpret_cast<const tensor::BlockQ4_1*>(w_row)[i].m
                                        : reinterpret_cast<const tensor::BlockQ5_1*>(w_row)[i].m;
    int sum = 0;
    for (int8_t q : xq[i].qs) sum += q;
    excess += double(util::fp16_to_f32(m)) *
              (double(util::fp16_to_f32(xq[i].s)) - double(util::fp16_to_f32(xq[i].d)) * sum);
  }
  return excess;
}

// y[b][r] against the float64 dot of the CPU's dequantized row r with x[b] rounded as the
// CPU's matmul rounds it (cpu_rounded, and Q8_1's s: min_term_excess); the error is
// relative to sum |w||x| of that output. Rows {1, 7, 33, 257} x {1, 3, 5} blocks, each
// batch size of `batches` in one command buffer; returns the largest error.
double check_matmul(Device& dev, Type t, std::mt19937& rng, const std::vector<int64_t>& batches) {
  const int block = tensor::traits(t).block_size == 256 ? 256 : 32;
  double worst = 0;
  for (int64_t rows : {1, 7, 33, 257}) {
    for (int64_t n_blocks : {1, 3, 5}) {
      const int64_t cols = block * n_blocks;
      const Weights w = random_weights(rng, t, rows, cols);
      Buffer wb = upload_to(dev, w.bytes);
      std::vector<std::vector<float>> xs, raw;
      std::vector<Buffer> xbs, ybs;
      Commands cmd(dev);
      for (int64_t n_batch : batches) {
        const std::vector<float> x = gaussian(rng, size_t(n_batch * cols));
        xbs.push_back(upload_to(dev, x));
        xs.push_back(cpu_rounded(t, x, cols));
        raw.push_back(x);
        ybs.push_back(upload_to(dev, std::vector<float>(size_t(n_batch * rows))));
        cmd.matmul(t, wb, rows, cols, xbs.back(), n_batch, ybs.back());
      }
      const util::Status st = cmd.submit_and_wait();
      EXPECT_TRUE(st.ok()) << st.message();
      for (size_t i = 0; i < batches.size(); ++i) {
        const int64_t n_batch = batches[i];
        std::vector<float> y(size_t(n_batch * rows));
        EXPECT_TRUE(dev.download(ybs[i], y.data(), y.size() * 4).ok());
        for (int64_t b = 0; b < n_batch; ++b) {
          for (int64_t r = 0; r < rows; ++r) {
            double dot = min_term_excess(t, &w.bytes[r * tensor::row_bytes(t, cols)], &raw[i][b * cols], cols);
            double mag = 0;
            for (int64_t k = 0; k < cols; ++k) {
              dot += double(w.deq[r * cols + k]) * xs[i][b * cols + k];
              mag += std::abs(double(w.deq[r * cols + k]) * xs[i][b * cols + k]);
            }
            const double err = std::abs(y[b * rows + r] - dot) / mag;
            worst = std::max(worst, err);
            if (err >= 1e-5) {
              ADD_FAILURE() << tensor::type_name(t) << " rows " << rows << " cols " << cols << " batch " << n_batch
                            << " b " << b << " r " << r << ": " << y[b * rows + r] << " vs " << dot;
              return worst;
            }
          }
        }
      }
    }
  }
  return worst;
}

class VulkanMatmul : public VulkanTest, public ::testing::WithParamInterface<Type> {};

TEST_P(VulkanMatmul, MatchesDequantizedFloat64Dot) {
  const Type t = GetParam();
  ASSERT_TRUE(kernels::vulkan::supports_weight_type(t));
  ASSERT_FALSE(kernels::vulkan::supports_weight_type(Type::Q8_K));  // an activation type
  std::mt19937 rng(int(t) + 1);
  const double worst = check_matmul(*dev_, t, rng, {1, 5, 17});
  std::printf("[vulkan] matmul %s: max error %.2e of sum |w||x|\n", tensor::type_name(t), worst);
}

// matvec.comp's other row counts per invocation than this device's (1 is a GPU's; 3 leaves
// rows past the end in the last invocations of 7, 33 and 257 rows), every weight type.
TEST_F(VulkanTest, MatvecAtEveryRowsPerInvocation) {
  for (uint32_t rows_per_invocation : {1u, 3u}) {
    util::Expected<std::unique_ptr<Device>> dev = Device::open(0, {.matvec_rows = rows_per_invocation});
    ASSERT_TRUE(dev.ok()) << dev.error();
    for (Type t : {Type::F32, Type::F16, Type::BF16, Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1,
                   Type::Q4_K, Type::Q5_K, Type::Q6_K}) {
      std::mt19937 rng(int(t) + 7);
      const double worst = check_matmul(**dev, t, rng, {1});
      std::printf("[vulkan] matvec %s, %u rows per invocation: max error %.2e of sum |w||x|\n",
                  tensor::type_name(t), rows_per_invocation, worst);
    }
  }
}

// More rows than one dispatch has workgroups (65535): the shaders loop over rows.
TEST_F(VulkanTest, MoreRowsThanWorkgroups) {
  std::mt19937 rng(16);
  const int64_t rows = 65535 + 77, cols = 64;
  const Weights w = random_weights(rng, Type::Q8_0, rows, cols);
  const std::vector<float> x = gaussian(rng, cols);
  Buffer wb = upload(w.bytes), xb = upload(x), yb = alloc(size_t(rows) * 4), sb = upload(w.deq);
  Commands cmd(*dev_);
  cmd.matmul(Type::Q8_0, wb, rows, cols, xb, 1, yb);
  const std::vector<float> xr = cpu_rounded(Type::Q8_0, x, cols);
  cmd.softmax(sb, rows, cols);
  run(cmd);
  const std::vector<float> y = download(yb, size_t(rows)), soft = download(sb, w.deq.size());
  for (int64_t r : {int64_t(0), int64_t(65534), int64_t(65535), rows - 1}) {
    double dot = 0, mag = 0, sum = 0;
    for (int64_t k = 0; k < cols; ++k) {
      dot += double(w.deq[r * cols + k]) * xr[k];
      mag += std::abs(double(w.deq[r * cols + k]) * xr[k]);
      sum += soft[r * cols + k];
    }
    EXPECT_LT(std::abs(y[r] - dot) / mag, 1e-5) << "row " << r;
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, VulkanMatmul,
                         ::testing::Values(Type::F32, Type::F16, Type::BF16, Type::Q8_0, Type::Q4_0, Type::Q4_1,
                                           Type::Q5_0, Type::Q5_1, Type::Q4_K, Type::Q5_K, Type::Q6_K),
                         [](const auto& info) { return std::string(tensor::type_name(info.param)); });

// ---- activations rounded to the CPU's Q8 grids

// Rows of `block`-element blocks: gaussian blocks at scales from 1e-4 to 1e3, an all-zero
// block, and blocks of exact ties (x * id = k + 0.5 with id = 1, 2 or 1/2, as amax is 127,
// 63.5 or 254, of either sign), where rounding half away from zero (the weight quantizers'
// way) or a division one ulp off would differ from the CPU.
std::vector<float> rounding_inputs(std::mt19937& rng, int block, int64_t rows, int64_t n_blocks) {
  std::vector<float> x;
  std::uniform_int_distribution<int> pick(0, 126), scale_exp(-4, 3);
  for (int64_t b = 0; b < rows * n_blocks; ++b) {
    const int kind = int(b % 5);
    std::vector<float> v = gaussian(rng, size_t(block), std::pow(10.0f, float(scale_exp(rng))));
    if (kind == 1) {
      v.assign(size_t(block), 0.0f);
    } else if (kind >= 2) {
      const float amax = kind == 2 ? 127.0f : kind == 3 ? 63.5f : 254.0f, id = 127.0f / amax;
      for (int i = 0; i < block; ++i) {
        const float k = float(pick(rng)) + 0.5f;  // x * id = +-(k + 0.5), k + 0.5 < 127
        v[size_t(i)] = (i % 3 == 0 ? -k : k) / id;
      }
      const size_t at = size_t(pick(rng) % block);
      v[at] = (b % 2 ? -amax : amax);
      if (block == 256) v[(at + 5) % 256] = -v[at];  // Q8_K: the first of equal |x| gives the sign
    }
    x.insert(x.end(), v.begin(), v.end());
  }
  return x;
}

TEST_F(VulkanTest, RoundActivationsMatchCpuQuantizerBitForBit) {
  std::mt19937 rng(21);
  for (Type at : {Type::Q8_0, Type::Q8_1, Type::Q8_K}) {
    const int block = tensor::traits(at).block_size;
    for (int64_t rows : {1, 3, 7}) {
      for (int64_t n_blocks : {1, 3}) {
        const int64_t cols = block * n_blocks, n = rows * cols;
        const std::vector<float> x = rounding_inputs(rng, block, rows, n_blocks);
        std::vector<float> want(x.size());
        std::vector<uint8_t> q(kernels::activation_bytes(at, cols));
        for (int64_t r = 0; r < rows; ++r) {
          kernels::quantize_activation(at, x.data() + r * cols, q.data(), cols);
          tensor::dequantize_row(at, q.data(), want.data() + r * cols, cols);
        }
        std::vector<float> want_s;  // Q8_1: the stored s of each block
        for (int64_t r = 0; r < rows && at == Type::Q8_1; ++r) {
          std::vector<tensor::BlockQ8_1> xq(static_cast<size_t>(n_blocks));
          kernels::quantize_activation(at, x.data() + r * cols, xq.data(), cols);
          for (const tensor::BlockQ8_1& blk : xq) want_s.push_back(util::fp16_to_f32(blk.s));
        }
        Buffer xb = upload(x), ob = alloc(size_t(n) * 4), sb = alloc(size_t(n / 32) * 4);
        Commands cmd(*dev_);
        cmd.round_activations(at, ob, xb, n, at == Type::Q8_1 ? &sb : nullptr);
        run(cmd);
        const std::vector<float> got = download(ob, size_t(n)), got_s = download(sb, want_s.size());
        for (size_t i = 0; i < want_s.size(); ++i)
          EXPECT_EQ(std::memcmp(&got_s[i], &want_s[i], 4), 0) << "Q8_1 rows " << rows << " cols " << cols << " block "
                                                              << i << " s: " << got_s[i] << " vs " << want_s[i];
        int64_t mismatches = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (std::memcmp(&got[i], &want[i], 4) != 0 && mismatches++ < 5)
            ADD_FAILURE() << tensor::type_name(at) << " rows " << rows << " cols " << cols << " element " << i
                          << " x " << x[i] << ": " << got[i] << " vs the CPU's " << want[i];
        }
        EXPECT_EQ(mismatches, 0) << tensor::type_name(at) << " rows " << rows << " cols " << cols;
      }
    }
  }
}

// F16 / BF16 (the F16 and BF16 weights' activations): every value rounded as the CPU's
// converters do, ties to even, subnormal halves, overflow to infinity and signed zeros.
TEST_F(VulkanTest, RoundActivationsToHalvesMatchCpuBitForBit) {
  std::mt19937 rng(23);
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 1e-8f, -3e-8f,
                          6.1e-5f, 1e30f, -1e-30f, 3.0e38f};
  for (int k = 0; k < 64; ++k) {  // exact ties: halfway between two halves / two bfloat16s
    x.push_back((1.0f + (2.0f * float(k) + 1.0f) / 2048.0f) * std::ldexp(1.0f, k % 40 - 20));
    x.push_back(-(1.0f + (2.0f * float(k) + 1.0f) / 256.0f) * std::ldexp(1.0f, k % 60 - 30));
  }
  for (float s : {1e-6f, 1e-3f, 1.0f, 1e3f}) {
    const std::vector<float> g = gaussian(rng, 200, s);
    x.insert(x.end(), g.begin(), g.end());
  }
  x.resize(x.size() / 32 * 32 + 32, 0.25f);
  const int64_t n = int64_t(x.size());
  for (Type at : {Type::F16, Type::BF16}) {
    std::vector<uint16_t> h(x.size());
    kernels::quantize_activation(at, x.data(), h.data(), n);
    std::vector<float> want(x.size());
    tensor::dequantize_row(at, h.data(), want.data(), n);
    Buffer xb = upload(x), ob = alloc(size_t(n) * 4);
    Commands cmd(*dev_);
    cmd.round_activations(at, ob, xb, n);
    run(cmd);
    const std::vector<float> got = download(ob, size_t(n));
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(&got[i], &want[i], 4) != 0 && mismatches++ < 5)
        ADD_FAILURE() << tensor::type_name(at) << " element " << i << " x " << x[i] << ": " << got[i]
                      << " vs the CPU's " << want[i];
    }
    EXPECT_EQ(mismatches, 0) << tensor::type_name(at);
  }
}

// Vulkan's matmul of quantized weights against the CPU's kernels::matmul (which dots Q8
// activations, and Q4_1's m with Q8_1's s): within float summation error of sum |w||x|,
// where with F32 activations the gap was about 1e-3 of it (the Q8 rounding itself).
TEST_F(VulkanTest, QuantizedMatmulMatchesCpuKernels) {
  std::mt19937 rng(22);
  for (Type t : {Type::Q4_1, Type::Q4_K, Type::Q5_1, Type::Q8_0, Type::Q6_K}) {
    const Type at = tensor::traits(t).vec_dot_type;
    const int64_t rows = 37, cols = 768;
    const Weights w = random_weights(rng, t, rows, cols);
    const size_t rb = tensor::row_bytes(t, cols);
    Buffer wb = upload(w.bytes);
    double worst = 0, worst_f32 = 0;
    for (int64_t n_batch : {1, 6}) {
      const std::vector<float> x = gaussian(rng, size_t(n_batch * cols));
      const size_t xq_stride = kernels::activation_bytes(at, cols);
      std::vector<uint8_t> xq(xq_stride * n_batch);
      for (int64_t b = 0; b < n_batch; ++b) kernels::quantize_activation(at, &x[b * cols], &xq[b * xq_stride], cols);
      std::vector<float> want(size_t(n_batch * rows));
      kernels::matmul(t, cols, w.bytes.data(), rb, 0, rows, xq.data(), xq_stride, n_batch, want.data(), rows);
      Buffer xb = upload(x), yb = alloc(want.size() * 4);
      Commands cmd(*dev_);
      cmd.matmul(t, wb, rows, cols, xb, n_batch, yb);
      run(cmd);
      const std::vector<float> got = download(yb, want.size());
      for (int64_t b = 0; b < n_batch; ++b) {
        for (int64_t r = 0; r < rows; ++r) {
          double mag = 0, dot_f32 = 0;
          for (int64_t k = 0; k < cols; ++k) {
            mag += std::abs(double(w.deq[r * cols + k]) * x[b * cols + k]);
            dot_f32 += double(w.deq[r * cols + k]) * x[b * cols + k];
          }
          const double err = std::abs(double(got[b * rows + r]) - want[b * rows + r]) / mag;
          worst = std::max(worst, err);
          worst_f32 = std::max(worst_f32, std::abs(dot_f32 - want[b * rows + r]) / mag);
          EXPECT_LT(err, 2e-6) << tensor::type_name(t) << " batch " << n_batch << " b " << b << " r " << r;
        }
      }
    }
    std::printf("[vulkan] matmul %s vs kernels::matmul: max error %.2e of sum |w||x| (F32 activations: %.2e)\n",
                tensor::type_name(t), worst, worst_f32);
    EXPECT_GT(worst_f32, 1e-4) << tensor::type_name(t);  // the gap this closes
  }
}

// ---- float ops, against the CPU kernels

TEST_F(VulkanTest, RmsNormMatchesCpu) {
  std::mt19937 rng(7);
  double worst = 0;
  for (int64_t n : {1, 7, 577, 2049}) {
    const int64_t n_rows = 3;
    const std::vector<float> x = gaussian(rng, size_t(n_rows * n), 2.0f), w = gaussian(rng, size_t(n));
    Buffer xb = upload(x), wb = upload(w), ob = alloc(x.size() * 4);
    Commands cmd(*dev_);
    cmd.rmsnorm(ob, xb, wb, n_rows, n, 1e-6f);
    run(cmd);
    std::vector<float> want(x.size());
    for (int64_t r = 0; r < n_rows; ++r) kernels::rmsnorm(&want[r * n], &x[r * n], w.data(), n, 1e-6f);
    worst = std::max(worst, max_rel_error(download(ob, x.size()), want));
  }
  std::printf("[vulkan] rmsnorm: max relative error %.2e\n", worst);
  EXPECT_LT(worst, 1e-5);
}

TEST_F(VulkanTest, SwigluMatchesCpu) {
  std::mt19937 rng(8);
  const int64_t n = 3 * 1024 + 7;
  const std::vector<float> g = gaussian(rng, n, 3.0f), u = gaussian(rng, n);
  Buffer gb = upload(g), ub = upload(u), ob = alloc(size_t(n) * 4);
  Commands cmd(*dev_);
  cmd.swiglu(ob, gb, ub, n);
  run(cmd);
  std::vector<float> want(n);
  kernels::swiglu(want.data(), g.data(), u.data(), n);
  const double err = max_rel_error(download(ob, n), want);
  std::printf("[vulkan] swiglu: max relative error %.2e\n", err);
  EXPECT_LT(err, 1e-5);
}

// Against the tanh form of gelu in float64 (kernels::gelu's formula), with gates past +-10
// (the clamped ends).
TEST_F(VulkanTest, GegluMatchesFloat64Gelu) {
  std::mt19937 rng(17);
  const int64_t n = 2 * 1024 + 5;
  const std::vector<float> g = gaussian(rng, n, 6.0f), u = gaussian(rng, n);
  Buffer gb = upload(g), ub = upload(u), ob = alloc(size_t(n) * 4);
  Commands cmd(*dev_);
  cmd.geglu(ob, gb, ub, n);
  run(cmd);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i], gelu = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
    want[i] = float((x <= -10.0 ? 0.0 : x >= 10.0 ? x : gelu) * u[i]);
  }
  const double err = max_rel_error(download(ob, n), want);
  std::printf("[vulkan] geglu: max relative error %.2e\n", err);
  EXPECT_LT(err, 1e-5);
}

TEST_F(VulkanTest, AddInPlaceIsExact) {
  std::mt19937 rng(14);
  const int64_t n = 1000 + 3;
  const std::vector<float> a = gaussian(rng, n), b = gaussian(rng, n);
  Buffer ab = upload(a), bb = upload(b);
  Commands cmd(*dev_);
  cmd.add(ab, ab, bb, n);  // the residual add: a += b
  run(cmd);
  const std::vector<float> got = download(ab, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << i;
}

TEST_F(VulkanTest, SoftmaxMatchesCpu) {
  std::mt19937 rng(9);
  double worst = 0;
  for (int64_t n : {1, 37, 1001}) {
    const int64_t n_rows = 5;
    const std::vector<float> x = gaussian(rng, size_t(n_rows * n), 4.0f);
    Buffer xb = upload(x);
    Commands cmd(*dev_);
    cmd.softmax(xb, n_rows, n);
    run(cmd);
    std::vector<float> want = x;
    for (int64_t r = 0; r < n_rows; ++r) kernels::softmax(&want[r * n], n);
    worst = std::max(worst, max_rel_error(download(xb, x.size()), want, 1e-6));
  }
  std::printf("[vulkan] softmax: max relative error %.2e\n", worst);
  EXPECT_LT(worst, 1e-5);
}

// Both layouts, full and partial n_rot, tokens at scattered positions.
TEST_F(VulkanTest, RopeMatchesCpu) {
  std::mt19937 rng(10);
  const int n_heads = 3, head_dim = 64;
  const std::vector<int64_t> positions = {0, 5, 17, 1000, 4095};
  const int64_t n_tokens = int64_t(positions.size());
  double worst = 0;
  for (bool neox : {false, true}) {
    for (int n_rot : {64, 32}) {
      std::vector<float> cache(size_t(n_tokens) * n_rot);
      for (int64_t t = 0; t < n_tokens; ++t)
        kernels::rope_cache(&cache[t * n_rot], positions[t], n_rot, 10000.0f, 1.0f, nullptr);
      const std::vector<float> x = gaussian(rng, size_t(n_tokens) * n_heads * head_dim);
      Buffer xb = upload(x), cb = upload(cache);
      Commands cmd(*dev_);
      cmd.rope(xb, cb, n_tokens, n_heads, head_dim, n_rot, neox);
      run(cmd);
      std::vector<float> want = x;
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < n_heads; ++h)
          kernels::rope_apply(&want[(t * n_heads + h) * head_dim], &cache[t * n_rot], n_rot, neox);
      const double err = max_rel_error(download(xb, x.size()), want);
      EXPECT_LT(err, 1e-5) << "neox " << neox << " n_rot " << n_rot;
      worst = std::max(worst, err);
    }
  }
  std::printf("[vulkan] rope: max relative error %.2e\n", worst);
}

// The start of an MLP block recorded as one command buffer (barriers between dependent
// dispatches): h = rmsnorm(x) w_norm; out = down(silu(gate h) * up h), Q4_K weights.
TEST_F(VulkanTest, ChainOfOpsInOneSubmit) {
  std::mt19937 rng(11);
  const int64_t dim = 256, n_ff = 512;
  const std::vector<float> x = gaussian(rng, dim), w_norm = gaussian(rng, dim);
  const Weights gate = random_weights(rng, Type::Q4_K, n_ff, dim), up = random_weights(rng, Type::Q4_K, n_ff, dim);
  const Weights down = random_weights(rng, Type::Q4_K, dim, n_ff);
  Buffer xb = upload(x), nb = upload(w_norm), gw = upload(gate.bytes), uw = upload(up.bytes), dw = upload(down.bytes);
  Buffer h = alloc(dim * 4), g = alloc(n_ff * 4), u = alloc(n_ff * 4), a = alloc(n_ff * 4), out = alloc(dim * 4);
  Commands cmd(*dev_);
  cmd.rmsnorm(h, xb, nb, 1, dim, 1e-5f);
  cmd.matmul(Type::Q4_K, gw, n_ff, dim, h, 1, g);
  cmd.matmul(Type::Q4_K, uw, n_ff, dim, h, 1, u);
  cmd.swiglu(a, g, u, n_ff);
  cmd.matmul(Type::Q4_K, dw, dim, n_ff, a, 1, out);
  run(cmd);

  std::vector<float> hv(dim), gv(n_ff), uv(n_ff), av(n_ff), want(dim);
  kernels::rmsnorm(hv.data(), x.data(), w_norm.data(), dim, 1e-5f);
  auto matvec = [](const Weights& w, int64_t rows, int64_t cols, const std::vector<float>& x, std::vector<float>& y) {
    const std::vector<float> v = cpu_rounded(Type::Q4_K, x, cols);
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0;
      for (int64_t k = 0; k < cols; ++k) dot += double(w.deq[r * cols + k]) * v[k];
      y[r] = float(dot);
    }
  };
  matvec(gate, n_ff, dim, hv, gv);
  matvec(up, n_ff, dim, hv, uv);
  kernels::swiglu(av.data(), gv.data(), uv.data(), n_ff);
  matvec(down, dim, n_ff, av, want);
  const std::vector<float> got = download(out, dim);
  double scale = 0;
  for (float v : want) scale = std::max(scale, double(std::abs(v)));
  double worst = 0;
  for (int64_t i = 0; i < dim; ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / scale);
  std::printf("[vulkan] rmsnorm -> 2 matvec -> swiglu -> matvec: max error %.2e of max |out|\n", worst);
  EXPECT_LT(worst, 1e-5);

  // The same Commands records and submits again.
  cmd.softmax(out, 1, dim);
  run(cmd);
  kernels::softmax(want.data(), dim);
  EXPECT_LT(max_rel_error(download(out, dim), want, 1e-6), 1e-4);
}

}  // namespace
