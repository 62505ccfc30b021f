// kernels_test.cc: the SIMD kernels against the scalar reference (kernels::ref), for every
// weight type, on odd sizes, for every ISA this CPU supports (set_isa loop), and the
// batched kernels against the matrix x vector path. Not here: the activation quantizers and
// dispatch (kernels_quantize_test.cc), the float ops (ops.cc has its own tests) and timing
// (bench/kernels_bench.cc).
//
// Tolerance: |simd - ref| <= 1e-5 * sum_i |w_i * x_i| (dequantized values, plus the min
// terms of Q4_1/Q5_1). Integer sums are exact in every path, so the only differences come
// from float summation order over at most a few hundred block partials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/kernels.h"
#include "kernels_fixture.h"
#include "lane_order_ref.h"
#include "tensor/quants.h"
#include "tensor/types.h"
#include "util/fp16.h"

namespace kernels {
namespace {

using namespace kernels::test;
using tensor::Type;

const Type kWeightTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0,
                             Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0,
                             Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K,
                             Type::IQ4_NL, Type::IQ4_XS, Type::MXFP4};

Type act_type(Type wt) { return tensor::traits(wt).vec_dot_type; }

uint16_t rand_half(std::mt19937& rng, float lo, float hi) {
  return util::f32_to_fp16(std::uniform_real_distribution<float>(lo, hi)(rng));
}

// Random bytes for a row of type t, then every scale field overwritten with a sane value
// and every int8 quant kept in -127..127 (the range our quantizers produce).
std::vector<uint8_t> random_row(std::mt19937& rng, Type t, int64_t n) {
  std::vector<uint8_t> row(tensor::row_bytes(t, n));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  const int64_t nb = n / block_size(t);
  auto i8 = [&rng] { return static_cast<int8_t>(static_cast<int>(rng() % 255) - 127); };
  switch (t) {
    case Type::F32: {
      auto v = gaussian(rng, n);
      std::memcpy(row.data(), v.data(), n * 4);
      break;
    }
    case Type::F16: case Type::BF16: {
      auto v = gaussian(rng, n);
      auto* p = reinterpret_cast<uint16_t*>(row.data());
      for (int64_t i = 0; i < n; ++i) p[i] = t == Type::F16 ? util::f32_to_fp16(v[i]) : util::f32_to_bf16(v[i]);
      break;
    }
    case Type::Q4_0: for (int64_t b = 0; b < nb; ++b) reinterpret_cast<tensor::BlockQ4_0*>(row.data())[b].d = rand_half(rng, -0.02f, 0.02f); break;
    case Type::Q5_0: for (int64_t b = 0; b < nb; ++b) reinterpret_cast<tensor::BlockQ5_0*>(row.data())[b].d = rand_half(rng, -0.02f, 0.02f); break;
    case Type::Q4_1: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ4_1*>(row.data())[b];
        k.d = rand_half(rng, 0.001f, 0.02f); k.m = rand_half(rng, -0.1f, 0.0f);
      } break;
    case Type::Q5_1: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ5_1*>(row.data())[b];
        k.d = rand_half(rng, 0.001f, 0.02f); k.m = rand_half(rng, -0.2f, 0.0f);
      } break;
    case Type::Q8_0: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ8_0*>(row.data())[b];
        k.d = rand_half(rng, -0.02f, 0.02f);
        for (auto& q : k.qs) q = i8();
      } break;
    case Type::Q8_1: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ8_1*>(row.data())[b];
        const float d = std::uniform_real_distribution<float>(0.001f, 0.02f)(rng);
        int sum = 0;
        for (auto& q : k.qs) { q = i8(); sum += q; }
        k.d = util::f32_to_fp16(d); k.s = util::f32_to_fp16(d * sum);
      } break;
    case Type::Q8_K: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ8_K*>(row.data())[b];
        k.d = std::uniform_real_distribution<float>(0.001f, 0.02f)(rng);
        for (auto& q : k.qs) q = i8();
        for (int j = 0; j < 16; ++j) {
          int s = 0;
          for (int l = 0; l < 16; ++l) s += k.qs[16 * j + l];
          k.bsums[j] = static_cast<int16_t>(s);
        }
      } break;
    case Type::Q2_K: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ2_K*>(row.data())[b];
        k.d = rand_half(rng, 0.0001f, 0.002f); k.dmin = rand_half(rng, 0.0001f, 0.002f);
      } break;
    case Type::Q3_K: for (int64_t b = 0; b < nb; ++b)
        reinterpret_cast<tensor::BlockQ3_K*>(row.data())[b].d = rand_half(rng, -0.002f, 0.002f);
      break;
    case Type::Q4_K: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ4_K*>(row.data())[b];
        k.d = rand_half(rng, 0.0001f, 0.002f); k.dmin = rand_half(rng, 0.0001f, 0.002f);
      } break;
    case Type::Q5_K: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ5_K*>(row.data())[b];
        k.d = rand_half(rng, 0.0001f, 0.002f); k.dmin = rand_half(rng, 0.0001f, 0.002f);
      } break;
    case Type::Q6_K: for (int64_t b = 0; b < nb; ++b) {
        auto& k = reinterpret_cast<tensor::BlockQ6_K*>(row.data())[b];
        k.d = rand_half(rng, -0.0005f, 0.0005f);
        for (auto& s : k.scales) s = i8();
      } break;
    case Type::IQ4_NL: for (int64_t b = 0; b < nb; ++b)
        reinterpret_cast<tensor::BlockIQ4_NL*>(row.data())[b].d = rand_half(rng, -0.02f, 0.02f);
      break;
    case Type::IQ4_XS: for (int64_t b = 0; b < nb; ++b)  // random 6-bit sub-scales
        reinterpret_cast<tensor::BlockIQ4_XS*>(row.data())[b].d = rand_half(rng, -0.0005f, 0.0005f);
      break;
    case Type::MXFP4: for (int64_t b = 0; b < nb; ++b)  // 2^(e - 128) around 2^-8
        reinterpret_cast<tensor::BlockMXFP4*>(row.data())[b].e = static_cast<uint8_t>(112 + rng() % 16);
      break;
    default: ADD_FAILURE() << "no random generator for " << tensor::type_name(t);
  }
  return row;
}

// Quantized data: gaussian floats through tensor::quantize_row (weights) or the
// reference activation quantizer.
std::vector<uint8_t> quantized_row(std::mt19937& rng, Type t, int64_t n, bool activation) {
  std::vector<uint8_t> row(tensor::row_bytes(t, n));
  const auto v = gaussian(rng, n);
  if (activation) ref::quantize_activation(t, v.data(), row.data(), n);
  else tensor::quantize_row(t, v.data(), row.data(), n);
  return row;
}

// sum_i |w_i x_i| over dequantized values, plus |m * s| per block for Q4_1 / Q5_1.
double magnitude(Type wt, int64_t n, const void* w, const void* x) {
  std::vector<float> fw(n), fx(n);
  tensor::dequantize_row(wt, w, fw.data(), n);
  tensor::dequantize_row(act_type(wt), x, fx.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(double(fw[i]) * fx[i]);
  if (wt == Type::Q4_1 || wt == Type::Q5_1) {
    const size_t wb = tensor::traits(wt).block_bytes;
    for (int64_t b = 0; b < n / 32; ++b) {
      uint16_t m, sa;
      std::memcpy(&m, static_cast<const uint8_t*>(w) + b * wb + 2, 2);
      std::memcpy(&sa, static_cast<const uint8_t*>(x) + b * sizeof(tensor::BlockQ8_1) + 2, 2);
      s += 2 * std::fabs(double(util::fp16_to_f32(m)) * util::fp16_to_f32(sa)) + 1e-30;
    }
  }
  return s;
}

constexpr double kRelTol = 1e-5;

std::vector<int64_t> sizes_for(Type wt) {
  const int bs = block_size(wt);
  std::vector<int64_t> out;
  for (int64_t blocks : {1, 31, 33, 257}) out.push_back(blocks * (bs == 1 ? 32 : bs));
  if (bs == 1) {
    for (int64_t n : {1, 7, 31, 33, 257, 1001}) out.push_back(n);  // element tails
  }
  return out;
}

class KernelsPerType : public ::testing::TestWithParam<Type> {};

void check_vec_dot(Type wt, int64_t n, const std::vector<uint8_t>& w, const std::vector<uint8_t>& x,
                   const char* what) {
  const float want = ref::vec_dot(wt, n, w.data(), x.data());
  const double tol = kRelTol * magnitude(wt, n, w.data(), x.data()) + 1e-30;
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    const float got = vec_dot(wt, n, w.data(), x.data());
    EXPECT_NEAR(got, want, tol) << tensor::type_name(wt) << " n=" << n << " isa=" << isa_name(isa) << " " << what;
    if (isa == Isa::kScalar) {
      EXPECT_EQ(got, want);
    }
  }
}

TEST_P(KernelsPerType, VecDotRandomBlocksMatchesRef) {
  const Type wt = GetParam();
  std::mt19937 rng(1234 + static_cast<int>(wt));
  for (int64_t n : sizes_for(wt)) {
    const auto w = random_row(rng, wt, n);
    const auto x = random_row(rng, act_type(wt), n);
    check_vec_dot(wt, n, w, x, "random blocks");
  }
}

// The reference itself: ref::vec_dot = the dot product of the dequantized rows, summed in
// double, within kRelTol of the magnitude (the reference's integer block sums are exact;
// only its float products and block-order summation round). Q4_1 / Q5_1 are left out:
// their min term uses Q8_1's fp16 s, which is d * sum(q) rounded (2^-11 relative), not
// the dequantized sum.
TEST_P(KernelsPerType, RefVecDotEqualsDequantizedDot) {
  const Type wt = GetParam();
  if (wt == Type::Q4_1 || wt == Type::Q5_1) GTEST_SKIP() << "min term through Q8_1's fp16 s";
  std::mt19937 rng(555 + static_cast<int>(wt));
  for (int64_t n : sizes_for(wt)) {
    for (bool random : {true, false}) {
      const auto w = random ? random_row(rng, wt, n) : quantized_row(rng, wt, n, false);
      const auto x = random ? random_row(rng, act_type(wt), n) : quantized_row(rng, act_type(wt), n, true);
      std::vector<float> fw(n), fx(n);
      tensor::dequantize_row(wt, w.data(), fw.data(), n);
      tensor::dequantize_row(act_type(wt), x.data(), fx.data(), n);
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += double(fw[i]) * fx[i];
      const double tol = kRelTol * magnitude(wt, n, w.data(), x.data()) + 1e-30;
      EXPECT_NEAR(ref::vec_dot(wt, n, w.data(), x.data()), want, tol)
          << tensor::type_name(wt) << " n=" << n << (random ? " random blocks" : " quantized data");
    }
  }
}

TEST_P(KernelsPerType, VecDotQuantizedDataMatchesRef) {
  const Type wt = GetParam();
  std::mt19937 rng(99 + static_cast<int>(wt));
  for (int64_t n : sizes_for(wt)) {
    const auto w = quantized_row(rng, wt, n, false);
    const auto x = quantized_row(rng, act_type(wt), n, true);
    check_vec_dot(wt, n, w, x, "quantized data");
  }
}

TEST_P(KernelsPerType, MatmulMatchesPerRowRef) {
  const Type wt = GetParam();
  const Type at = act_type(wt);
  std::mt19937 rng(7 + static_cast<int>(wt));
  const int64_t n = block_size(wt) == 1 ? 67 : 3 * block_size(wt);
  const int64_t rows = 13, y_stride = rows + 3;
  const size_t row_stride = tensor::row_bytes(wt, n) + 8;  // padded rows
  const size_t xq_stride = activation_bytes(at, n) + 4;
  std::vector<uint8_t> W(rows * row_stride), X(8 * xq_stride);
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = r % 2 ? quantized_row(rng, wt, n, false) : random_row(rng, wt, n);
    std::memcpy(W.data() + r * row_stride, row.data(), row.size());
  }
  for (int64_t b = 0; b < 8; ++b) {
    const auto row = quantized_row(rng, at, n, true);
    std::memcpy(X.data() + b * xq_stride, row.data(), row.size());
  }
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    for (int64_t n_batch : {1, 2, 3, 5, 8}) {
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 13}, {1, 12}, {3, 10}, {5, 6}, {4, 4}}) {
        std::vector<float> y(8 * y_stride, -12345.0f);
        matmul(wt, n, W.data(), row_stride, r0, r1, X.data(), xq_stride, n_batch, y.data(), y_stride);
        for (int64_t b = 0; b < 8; ++b) {
          for (int64_t r = 0; r < y_stride; ++r) {
            const float got = y[b * y_stride + r];
            if (b >= n_batch || r < r0 || r >= r1) {
              EXPECT_EQ(got, -12345.0f) << "wrote outside the range at b=" << b << " r=" << r;
              continue;
            }
            const void* wr = W.data() + r * row_stride;
            const void* xr = X.data() + b * xq_stride;
            const float want = ref::vec_dot(wt, n, wr, xr);
            EXPECT_NEAR(got, want, kRelTol * magnitude(wt, n, wr, xr) + 1e-30)
                << tensor::type_name(wt) << " isa=" << isa_name(isa) << " n_batch=" << n_batch
                << " rows [" << r0 << "," << r1 << ") r=" << r << " b=" << b;
          }
        }
      }
    }
  }
}

// The batched (prompt) kernels must give every output element exactly the value the
// matrix x vector path gives it (the path whose arithmetic matches ggml's vec_dot, checked
// bit for bit against llama.cpp by the golden tests): same float operations in the same
// order, only scheduled differently. The exceptions are Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL,
// MXFP4, Q2_K, Q3_K and IQ4_XS on AVX2 / AVX-512 / NEON with 4 or more
// columns, which sum in lane order (as llama.cpp's repacked GEMMs): those outputs must equal
// lane_ref::lane_order() (lane_order_ref.h) exactly instead. Batches cover the GEMM tiles' column tails
// and, with 321 blocks per row, several column chunks; row ranges cover partial row tiles
// (8-row lane tiles included). 321 blocks: Q8_0's rows (10914 bytes) pass
// kPrefetchL1TileBytes, so its matrix x vector takes the prefetching path for long rows.
TEST_P(KernelsPerType, MatmulBatchEqualsMatvecBitwise) {
  const Type wt = GetParam();
  const Type at = act_type(wt);
  std::mt19937 rng(31 + static_cast<int>(wt));
  const int64_t n = block_size(wt) == 256 ? 5 * 256 : 321 * 32;
  const int64_t rows = 13, max_batch = 40;
  // Padded rows, off the SIMD alignment but on the block structs' natural one (4 bytes:
  // F32 values, Q8_K's float scale), as in a GGUF file or a slice.
  const size_t row_stride = tensor::row_bytes(wt, n) + 4;
  const size_t xq_stride = activation_bytes(at, n) + 12;
  std::vector<uint8_t> W(rows * row_stride), X(max_batch * xq_stride);
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = quantized_row(rng, wt, n, false);
    std::memcpy(W.data() + r * row_stride, row.data(), row.size());
  }
  for (int64_t b = 0; b < max_batch; ++b) {
    const auto row = quantized_row(rng, at, n, true);
    std::memcpy(X.data() + b * xq_stride, row.data(), row.size());
  }
  IsaGuard guard;
  struct LaneOrderGuard {
    ~LaneOrderGuard() { set_lane_order(true); }
  } lane_guard;
  for (Isa isa : supported_isas()) {
    for (bool lane_on : {true, false}) {  // set_lane_order(false): every type in vec_dot order
      set_isa(isa);
      set_lane_order(lane_on);
      for (int64_t n_batch : {2, 3, 4, 5, 6, 7, 9, 40}) {
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 13}, {1, 12}, {3, 10}, {5, 6}, {2, 11}}) {
          std::vector<float> y(max_batch * rows, -1.0f), want(rows, -1.0f);
          matmul(wt, n, W.data(), row_stride, r0, r1, X.data(), xq_stride, n_batch, y.data(), rows);
          const bool lanes = lane_on && n_batch >= 4 && lane_ref::simd_lanes(wt) && isa != Isa::kScalar;
          for (int64_t b = 0; b < n_batch; ++b) {
            matmul(wt, n, W.data(), row_stride, r0, r1, X.data() + b * xq_stride, xq_stride, 1, want.data(), rows);
            if (lanes)
              for (int64_t r = r0; r < r1; ++r) {
                const uint8_t* wr = W.data() + r * row_stride;
                const uint8_t* xr = X.data() + b * xq_stride;
                const float vd = want[r];  // the lane formula sums the same products as vec_dot
                const float lane = lane_ref::lane_order(wt, n, wr, xr);
                ASSERT_LE(std::fabs(double(lane) - vd), 1e-5 * magnitude(wt, n, wr, xr))
                    << tensor::type_name(wt) << " r=" << r;
                want[r] = lane;
              }
            for (int64_t r = r0; r < r1; ++r)
              ASSERT_EQ(y[b * rows + r], want[r]) << tensor::type_name(wt) << " isa=" << isa_name(isa)
                                                  << " lane order " << lane_on << " n_batch=" << n_batch
                                                  << " rows [" << r0 << "," << r1 << ") r=" << r << " b=" << b;
          }
        }
      }
    }
  }
}

// The lane-order GEMMs of Q2_K, Q3_K and IQ4_XS (x86: avx2_lowbit_lanes.h; NEON:
// neon_lowbit_lanes.h, the plain table's row_k) over several column chunks: at 24
// super-blocks a row NEON's chunks are 16 columns, so 33 columns are 16 + 16 + a one-column
// tail; rows [1, 10) of 11 (a full 8-row tile and a one-row one) written into a wider
// stride. Every output equals lane_ref::low_bit to the bit on every SIMD table, and nothing
// outside the range is written.
TEST(KernelsLowBitLanes, ColumnChunksEqualLaneOrder) {
  IsaGuard guard;
  std::mt19937 rng(29);
  const int64_t n = 24 * 256, rows = 11, r0 = 1, r1 = 10, batch = 33, ys = rows + 2;
  for (Type wt : {Type::Q2_K, Type::Q3_K, Type::IQ4_XS}) {
    const size_t ws = tensor::row_bytes(wt, n), xs = tensor::row_bytes(act_type(wt), n);
    std::vector<uint8_t> W, X;
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = quantized_row(rng, wt, n, false);
      W.insert(W.end(), row.begin(), row.end());
    }
    for (int64_t b = 0; b < batch; ++b) {
      const auto row = quantized_row(rng, act_type(wt), n, true);
      X.insert(X.end(), row.begin(), row.end());
    }
    std::vector<float> want(size_t(batch * ys), -7.0f);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t r = r0; r < r1; ++r) want[size_t(b * ys + r)] = lane_ref::low_bit(wt, n, &W[r * ws], &X[b * xs]);
    for (Isa isa : supported_isas()) {
      if (isa == Isa::kScalar) continue;
      set_isa(isa);
      std::vector<float> y(size_t(batch * ys), -7.0f);
      matmul(wt, n, W.data(), ws, r0, r1, X.data(), xs, batch, y.data(), ys);
      for (int64_t i = 0; i < batch * ys; ++i)
        ASSERT_EQ(y[size_t(i)], want[size_t(i)])
            << tensor::type_name(wt) << " isa=" << isa_name(isa) << " column " << i / ys << " row " << i % ys;
    }
  }
}

// Q4_K's and Q5_K's lane tiles sum several byte products in int16 before the scales (x86:
// 8 maddubs for Q4_K, 4 for Q5_K, whose quants reach 31): at the extremes (every quant 15 /
// 31, activations all 127 or all -127 by super-block, scales and mins 63) the batch must
// still equal the lane-order reference to the bit on every SIMD table (a saturated int16
// would not).
TEST(KernelsKQuantLanes, ExtremeQuantsEqualLaneOrder) {
  IsaGuard guard;
  const int64_t n = 3 * 256, rows = 9, batch = 5;
  for (Type wt : {Type::Q4_K, Type::Q5_K}) {
    const size_t ws = tensor::row_bytes(wt, n), xs = tensor::row_bytes(Type::Q8_K, n);
    std::vector<uint8_t> W(ws * rows, 0xFF), X(xs * batch);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < n / 256; ++b) {  // d and dmin 1/1024; every other byte 0xFF
        uint16_t* dd = reinterpret_cast<uint16_t*>(&W[r * ws + b * (ws / (n / 256))]);
        dd[0] = dd[1] = util::f32_to_fp16(1.0f / 1024);
      }
    for (int64_t c = 0; c < batch; ++c)
      for (int64_t b = 0; b < n / 256; ++b) {
        auto& a = reinterpret_cast<tensor::BlockQ8_K*>(&X[c * xs])[b];
        const int8_t v = (b + c) % 2 ? 127 : -127;
        a.d = 0.01f;
        for (auto& q : a.qs) q = v;
        for (auto& s : a.bsums) s = int16_t(16 * v);
      }
    std::vector<float> want(size_t(batch * rows));
    for (int64_t c = 0; c < batch; ++c)
      for (int64_t r = 0; r < rows; ++r)
        want[size_t(c * rows + r)] = lane_ref::lane_order(wt, n, &W[r * ws], &X[c * xs]);
    for (Isa isa : supported_isas()) {
      if (isa == Isa::kScalar) continue;
      set_isa(isa);
      std::vector<float> y(size_t(batch * rows), -7.0f);
      matmul(wt, n, W.data(), ws, 0, rows, X.data(), xs, batch, y.data(), rows);
      for (int64_t i = 0; i < batch * rows; ++i)
        ASSERT_EQ(y[size_t(i)], want[size_t(i)]) << tensor::type_name(wt) << " isa=" << isa_name(isa) << " i=" << i;
    }
#if defined(__x86_64__)
    if (const cpu::MatmulFn gemm = cpu::amx_gemm(wt, /*emulated=*/true);
        gemm && isa_supported(Isa::kAvx512)) {
      std::vector<float> y(size_t(batch * rows), -7.0f);
      gemm(n, W.data(), ws, 0, rows, X.data(), xs, batch, y.data(), rows);
      for (int64_t i = 0; i < batch * rows; ++i)
        ASSERT_EQ(y[size_t(i)], want[size_t(i)]) << tensor::type_name(wt) << " emulated AMX i=" << i;
    }
#endif
  }
}

// The AMX GEMMs (kernels/cpu/amx.cc: Q4_0, Q4_1, Q8_0, IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K) run on their C++ model
// of the tile instructions, which checks each tile shape as the CPU would: every output equals
// lane_order() to the bit, on odd row ranges, block counts (Q4_0's
// block pairs and tail) and batches (column tails; two column chunks at 4096 x 250). The
// epilogues are AVX-512: skipped without it. On a CPU with AMX the hardware forms are
// checked at start-up (dispatch.cc, in a child process).
#if defined(__x86_64__)
TEST(KernelsAmx, EmulatedGemmsEqualLaneOrder) {
  if (!cpu::amx_gemm(Type::Q4_0, /*emulated=*/true)) GTEST_SKIP() << "built without AMX support";
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512: the AMX GEMMs' model not run";
  EXPECT_EQ(cpu::amx_self_test(/*emulated=*/true), "");
  std::mt19937 rng(33);
  struct Shape { Type t; int64_t n, rows, r0, r1, batch; };
  for (const Shape& sh : {Shape{Type::Q4_0, 32, 5, 0, 5, 4}, Shape{Type::Q4_0, 64, 16, 0, 16, 16},
                          Shape{Type::Q4_0, 96, 35, 1, 34, 17}, Shape{Type::Q4_0, 224, 20, 3, 20, 33},
                          Shape{Type::Q4_0, 4096, 17, 0, 17, 250}, Shape{Type::Q4_1, 32, 5, 0, 5, 4},
                          Shape{Type::Q4_1, 224, 35, 1, 34, 17}, Shape{Type::Q4_1, 4096, 17, 0, 17, 250},
                          Shape{Type::Q8_0, 96, 35, 1, 34, 17},
                          Shape{Type::Q8_0, 4096, 17, 0, 17, 250}, Shape{Type::IQ4_NL, 224, 20, 3, 20, 33},
                          Shape{Type::MXFP4, 96, 35, 1, 34, 17}, Shape{Type::Q4_K, 256, 5, 0, 5, 4},
                          Shape{Type::Q4_K, 768, 35, 2, 33, 37}, Shape{Type::Q4_K, 4096, 17, 0, 17, 250},
                          Shape{Type::Q5_K, 256, 5, 0, 5, 4}, Shape{Type::Q5_K, 768, 35, 2, 33, 37},
                          Shape{Type::Q6_K, 256, 5, 0, 5, 4}, Shape{Type::Q6_K, 768, 35, 2, 33, 37},
                          Shape{Type::Q6_K, 4096, 17, 0, 17, 250}}) {
    const cpu::MatmulFn gemm = cpu::amx_gemm(sh.t, /*emulated=*/true);
    ASSERT_NE(gemm, nullptr) << tensor::type_name(sh.t);
    const size_t ws = tensor::row_bytes(sh.t, sh.n), xs = tensor::row_bytes(act_type(sh.t), sh.n);
    std::vector<uint8_t> W, X;
    for (int64_t r = 0; r < sh.rows; ++r) {
      const auto row = quantized_row(rng, sh.t, sh.n, false);
      W.insert(W.end(), row.begin(), row.end());
    }
    for (int64_t b = 0; b < sh.batch; ++b) {
      const auto row = quantized_row(rng, act_type(sh.t), sh.n, true);
      X.insert(X.end(), row.begin(), row.end());
    }
    const int64_t ys = sh.rows + 3;  // a stride wider than the rows: nothing written past r1
    std::vector<float> y(size_t(sh.batch * ys), -7.0f);
    gemm(sh.n, W.data(), ws, sh.r0, sh.r1, X.data(), xs, sh.batch, y.data(), ys);
    for (int64_t b = 0; b < sh.batch; ++b)
      for (int64_t r = 0; r < ys; ++r) {
        const uint8_t* wr = W.data() + std::min(r, sh.rows - 1) * ws;
        const uint8_t* xr = X.data() + b * xs;
        const float want = r < sh.r0 || r >= sh.r1 ? -7.0f : lane_ref::lane_order(sh.t, sh.n, wr, xr);
        ASSERT_EQ(y[size_t(b * ys + r)], want) << tensor::type_name(sh.t) << " n=" << sh.n << " rows [" << sh.r0
                                               << "," << sh.r1 << ") r=" << r << " batch " << sh.batch << " b=" << b;
      }
  }
}
#endif

// The 512-bit K-quant matrix x vector (kernels/cpu/avx512_wide.h) against the 256-bit one
// of the same table, to the bit: vec_dot, matrix x vector on odd row ranges (four rows'
// reduction and the tail) and a small batch, for 1, 3 and 17 super-blocks, with extreme
// activations (127 / -127 blocks) among gaussian ones. Whichever width this CPU measured
// faster is the one in use; both must give the same bits.
#if defined(__x86_64__)
TEST(KernelsAvx512, WideKQuantFormsEqualNarrow) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512: the 512-bit K-quant forms not run";
  const cpu::KernelTable& narrow = cpu::avx512_table_of_width(256);
  const cpu::KernelTable& wide = cpu::avx512_table_of_width(512);
  std::mt19937 rng(512);
  for (Type t : {Type::Q4_K, Type::Q5_K, Type::Q6_K})
    for (int64_t n : {256, 768, 17 * 256}) {
      const int64_t rows = 11, batch = 3;
      const size_t ws = tensor::row_bytes(t, n), xs = tensor::row_bytes(act_type(t), n);
      std::vector<uint8_t> W, X;
      for (int64_t r = 0; r < rows; ++r) {
        const auto row = quantized_row(rng, t, n, false);
        W.insert(W.end(), row.begin(), row.end());
      }
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<float> v(static_cast<size_t>(n));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = b == 2 && i < 256 ? (i % 2 ? 3.0f : -3.0f) : nd(rng);
        std::vector<uint8_t> row(xs);
        ref::quantize_activation(act_type(t), v.data(), row.data(), n);
        X.insert(X.end(), row.begin(), row.end());
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < batch; ++b) {
          const float a = narrow.vec_dot[cpu::slot(t)](n, &W[r * ws], &X[b * xs]);
          const float c = wide.vec_dot[cpu::slot(t)](n, &W[r * ws], &X[b * xs]);
          ASSERT_EQ(std::memcmp(&a, &c, sizeof a), 0) << tensor::type_name(t) << " n=" << n << " r=" << r << " b=" << b
                                                       << ": " << a << " vs " << c;
        }
      for (int64_t nb : {int64_t(1), batch}) {
        std::vector<float> ya(size_t(nb * rows), -7.0f), yc(size_t(nb * rows), -7.0f);
        narrow.matmul[cpu::slot(t)](n, W.data(), ws, 1, rows, X.data(), xs, nb, ya.data(), rows);
        wide.matmul[cpu::slot(t)](n, W.data(), ws, 1, rows, X.data(), xs, nb, yc.data(), rows);
        ASSERT_EQ(std::memcmp(ya.data(), yc.data(), ya.size() * sizeof(float)), 0)
            << tensor::type_name(t) << " n=" << n << " batch " << nb;
      }
    }
}
#endif

INSTANTIATE_TEST_SUITE_P(AllTypes, KernelsPerType, ::testing::ValuesIn(kWeightTypes),
                         [](const auto& info) { return std::string(tensor::type_name(info.param)); });

}  // namespace
}  // namespace kernels
