// tensor_test.cc: unit tests of tensor/ (types.h traits, quants.h quantize/dequantize).
// Every type is round-tripped on rows of 1, 3, 31, 33 and 257 blocks against an error
// bound stated relative to the block's max|x|; representable values must survive
// exactly; re-quantizing a dequantized row must be stable where the format allows; zero
// rows, outliers, Q8_1's s and Q8_K's bsums are checked; a few hand-built blocks pin the
// decoders to the documented layouts. Byte equality with ggml / the gguf package is
// checked by tests/py/test_quants.py, not here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/codebook.h"
#include "tensor/quants.h"
#include "tensor/types.h"
#include "util/fp16.h"

namespace tensor {
namespace {

const Type kAllTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1,
                          Type::Q5_0, Type::Q5_1, Type::Q8_0, Type::Q8_1, Type::Q2_K,
                          Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::Q8_K,
                          Type::IQ4_NL, Type::IQ4_XS, Type::MXFP4};
const int kBlockCounts[] = {1, 3, 31, 33, 257};

// Largest allowed |x - dequant(quant(x))| for an element of a block whose max|x| is amax
// (for the float types: relative to |x| itself, see elem_bound). Derivations, with
// e16 = 2^-11 the relative rounding of an fp16 scale:
//   Q8_0/Q8_1: d = amax/127, half a step plus 127 steps of the fp16 rounding of d.
//   Q8_K:      d = amax/127 kept in f32: half a step (plus f32 rounding).
//   Q4_0:      d = amax/8 (signed); the element of opposite sign to the max can be clamped
//              from +8 to +7: one full step, plus 8 fp16 roundings of d.
//   Q5_0:      same with d = amax/16.
//   Q4_1/Q5_1: step (max-min)/nmax <= 2*amax/nmax, half a step, plus the fp16 roundings of
//              d (times nmax) and of m.
//   K-quants:  a sub-block's step is at most 2*amax/nmax (Q4_K: 15, Q5_K: 31) or amax/32
//              (Q6_K); the 6/8-bit quantized sub-scales and mins can shift the grid by up to
//              one more step at the clamped end, so we allow 1.5 steps (Q6_K: 1 step + a
//              rounding of the scale at the clamp: amax/31 + amax/256).
//   Q2_K:      4 levels with a min: step <= 2*amax/3, 1.5 steps (4-bit sub-scales and mins).
//   Q3_K:      levels -4..3 of a signed scale: the end opposite the max clamps at one step
//              (amax/4), plus the 6-bit rounding of the sub-scale (4 * amax/4 / 64) at 1.5x.
//   IQ4_NL:    d ~ amax/127 on the codebook -127..113 (gaps up to 24): the searched scale
//              is within 7/127 of that, so half the widest gap plus the clamp of the short
//              (+113) end: one widest gap, 24 steps of amax/120.
//   IQ4_XS:    IQ4_NL per sub-block, plus the 6-bit rounding of the sub-block's scale
//              (half of max_scale/32, times the largest value 127 = amax/64).
//   MXFP4:     E2M1 values x 2^(floor(log2 amax) - 2): amax/s in [4, 8) clamps to 6, so
//              up to 2 s <= amax/2 (the gaps are at most 2 s as well).
// Plus, for fp16 scales, the absolute rounding of a subnormal fp16 (2^-25) times the
// largest multiplier of the scale (Q6_K's d is often subnormal for small weights).
double block_bound(Type t, double amax) {
  const double e16 = std::ldexp(1.0, -11);
  const double sub = std::ldexp(1.0, -25);
  switch (t) {
    case Type::Q8_0:
    case Type::Q8_1: return amax * (0.5 / 127 + e16) * 1.0001 + 127 * sub;
    case Type::Q8_K: return amax * (0.5 / 127) * 1.0001;
    case Type::Q4_0: return amax * (1.0 / 8 + e16) * 1.0001 + 8 * sub;
    case Type::Q5_0: return amax * (1.0 / 16 + e16) * 1.0001 + 16 * sub;
    case Type::Q4_1: return amax * (1.0 / 15 + 3 * e16) * 1.0001 + 16 * sub;
    case Type::Q5_1: return amax * (1.0 / 31 + 3 * e16) * 1.0001 + 32 * sub;
    case Type::Q2_K: return amax * 1.5 * 2.0 / 3 + (3 + 1) * 15 * sub;
    case Type::Q3_K: return amax * 1.5 * (1.0 / 4 + 1.0 / 16) + 4 * 32 * sub;
    case Type::Q4_K: return amax * 1.5 * 2.0 / 15 + (15 + 1) * 63 * sub;
    case Type::Q5_K: return amax * 1.5 * 2.0 / 31 + (31 + 1) * 63 * sub;
    case Type::Q6_K: return amax * (1.0 / 31 + 1.0 / 256) + 32 * 127 * sub;
    case Type::IQ4_NL: return amax * 24.0 / 120 + 127 * sub;
    case Type::IQ4_XS: return amax * (24.0 / 120 + 1.0 / 64) + 32 * 127 * sub;
    case Type::MXFP4: return amax * 0.5;
    default: return 0;
  }
}

// Bound for the float types, per element (F16: plus half a subnormal step).
double elem_bound(Type t, double x) {
  switch (t) {
    case Type::F32: return 0;
    case Type::F16: return std::fabs(x) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
    case Type::BF16: return std::fabs(x) * std::ldexp(1.0, -8);
    default: return 0;
  }
}

bool is_float_type(Type t) { return t == Type::F32 || t == Type::F16 || t == Type::BF16; }

// Quantizes src (n floats) and dequantizes it again; also checks that the quantizer
// writes exactly row_bytes (canary bytes after the row are left alone).
std::vector<float> round_trip(Type t, const std::vector<float>& src,
                              std::vector<uint8_t>* q_out = nullptr) {
  const int64_t n = static_cast<int64_t>(src.size());
  const size_t rb = row_bytes(t, n);
  std::vector<uint8_t> q(rb + 64, 0xA5);
  quantize_row(t, src.data(), q.data(), n);
  for (size_t i = rb; i < q.size(); ++i) EXPECT_EQ(q[i], 0xA5) << "quantizer overran the row";
  std::vector<float> out(src.size() + 8, 12345.0f);
  dequantize_row(t, q.data(), out.data(), n);
  for (size_t i = src.size(); i < out.size(); ++i) EXPECT_EQ(out[i], 12345.0f);
  out.resize(src.size());
  q.resize(rb);
  if (q_out) *q_out = std::move(q);
  return out;
}

int64_t row_len(Type t, int blocks) { return int64_t(blocks) * traits(t).block_size; }

// Checks |x - y| against the type's bound, block by block. Returns the worst error as a
// fraction of the bound (for diagnostics).
void expect_within_bound(Type t, const std::vector<float>& x, const std::vector<float>& y,
                         const std::string& what) {
  ASSERT_EQ(x.size(), y.size());
  const int bs = traits(t).block_size;
  for (size_t b = 0; b < x.size(); b += bs) {
    double amax = 0;
    for (int j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(double(x[b + j])));
    for (int j = 0; j < bs; ++j) {
      const double err = std::fabs(double(x[b + j]) - double(y[b + j]));
      const double bound = is_float_type(t) ? elem_bound(t, x[b + j]) : block_bound(t, amax);
      ASSERT_TRUE(std::isfinite(y[b + j])) << type_name(t) << " " << what << " at " << b + j;
      ASSERT_LE(err, bound) << type_name(t) << " " << what << " element " << b + j
                            << ": x=" << x[b + j] << " y=" << y[b + j] << " block amax=" << amax;
    }
  }
}

std::vector<float> gaussian(int64_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(TensorTypes, TraitsAndRowBytes) {
  EXPECT_EQ(row_bytes(Type::Q4_0, 64), 36u);
  EXPECT_EQ(row_bytes(Type::Q4_K, 512), 288u);
  EXPECT_EQ(row_bytes(Type::F16, 3), 6u);
  EXPECT_EQ(traits(Type::Q4_1).vec_dot_type, Type::Q8_1);
  EXPECT_EQ(traits(Type::Q6_K).vec_dot_type, Type::Q8_K);
  EXPECT_EQ(type_from_name("q4_k"), Type::Q4_K);
  EXPECT_FALSE(type_from_name("nonsense").has_value());
  EXPECT_FALSE(type_traits(1000).has_value());
}

TEST(TensorQuants, RoundTripWithinBound) {
  for (Type t : kAllTypes) {
    for (int blocks : kBlockCounts) {
      const int64_t n = row_len(t, blocks);
      // Several scales, including tiny and large ones, and a shifted (all-positive) row
      // for the asymmetric types.
      for (float sigma : {1e-3f, 1.0f, 300.0f}) {
        std::vector<float> x = gaussian(n, sigma, 17u * blocks + static_cast<uint32_t>(t));
        expect_within_bound(t, x, round_trip(t, x), "gaussian sigma " + std::to_string(sigma));
        for (float& v : x) v = std::fabs(v) + sigma;
        expect_within_bound(t, x, round_trip(t, x), "positive sigma " + std::to_string(sigma));
      }
    }
  }
}

TEST(TensorQuants, UniformAndMixedScaleBlocks) {
  // Uniform data stresses the clamped ends of the grids; blocks whose sub-blocks differ
  // by 100x stress the K-quants' 6-bit sub-scales.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (Type t : kAllTypes) {
    const int64_t n = row_len(t, 33);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = uni(rng);
    expect_within_bound(t, x, round_trip(t, x), "uniform");
    for (int64_t i = 0; i < n; ++i) x[i] *= (i / 32) % 3 == 0 ? 100.0f : 1.0f;
    expect_within_bound(t, x, round_trip(t, x), "mixed scales");
  }
}

TEST(TensorQuants, ZeroRows) {
  for (Type t : kAllTypes) {
    for (int blocks : kBlockCounts) {
      const std::vector<float> x(static_cast<size_t>(row_len(t, blocks)), 0.0f);
      const std::vector<float> y = round_trip(t, x);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], 0.0f) << type_name(t) << " at " << i;
    }
  }
}

TEST(TensorQuants, OneHugeOutlier) {
  // One element 10^4 times the others: its block pays (bound relative to its own
  // max|x|); every other block must keep its own accuracy.
  for (Type t : kAllTypes) {
    for (int blocks : {3, 33}) {
      const int64_t n = row_len(t, blocks);
      std::vector<float> x = gaussian(n, 1.0f, 99u + static_cast<uint32_t>(t));
      x[static_cast<size_t>(n / 2)] = 3.0e4f;
      expect_within_bound(t, x, round_trip(t, x), "outlier");
      x[static_cast<size_t>(n / 2)] = -3.0e4f;
      expect_within_bound(t, x, round_trip(t, x), "negative outlier");
    }
  }
}

// Values on the type's grid: the quantizer must find the grid again, exactly.
std::vector<float> representable_row(Type t, int blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  const int bs = traits(t).block_size;
  std::vector<float> x(static_cast<size_t>(blocks) * bs);
  auto irand = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int b = 0; b < blocks; ++b) {
    float* xb = x.data() + size_t(b) * bs;
    // Power-of-two scales (both signs) keep every product and quotient exact.
    const float d = std::ldexp(irand(0, 1) ? 1.0f : -1.0f, irand(-12, 6));
    switch (t) {
      case Type::F32: xb[0] = std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng); break;
      case Type::F16: xb[0] = util::fp16_to_f32(static_cast<uint16_t>(irand(0, 0x7bff) | irand(0, 1) << 15)); break;
      case Type::BF16: xb[0] = util::bf16_to_f32(static_cast<uint16_t>(irand(0, 0x7f7f) | irand(0, 1) << 15)); break;
      case Type::Q8_0:
      case Type::Q8_1:
      case Type::Q8_K:
        for (int j = 0; j < bs; ++j) xb[j] = d * irand(-126, 126);
        xb[irand(0, bs - 1)] = d * (irand(0, 1) ? 127 : -127);  // sets the scale
        break;
      case Type::Q4_0:
      case Type::Q5_0: {
        const int half = t == Type::Q4_0 ? 8 : 16;
        for (int j = 0; j < bs; ++j) xb[j] = d * irand(-half + 1, half - 1);
        xb[irand(0, bs - 1)] = -half * d;  // the max-magnitude element, mapped to q = 0
        break;
      }
      case Type::Q4_1:
      case Type::Q5_1: {
        const int nmax = t == Type::Q4_1 ? 15 : 31;
        const float m = std::fabs(d) * irand(-64, 64);
        for (int j = 0; j < bs; ++j) xb[j] = std::fabs(d) * irand(0, nmax) + m;
        xb[irand(0, bs / 2 - 1)] = m;                                   // q = 0 present
        xb[irand(bs / 2, bs - 1)] = std::fabs(d) * nmax + m;            // q = nmax present
        break;
      }
      case Type::MXFP4: {  // s times E2M1 values; one element of magnitude 4s or 6s sets e
        const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        for (int j = 0; j < bs; ++j) xb[j] = d * (irand(0, 1) ? 1 : -1) * e2m1[irand(0, 7)];
        xb[irand(0, bs - 1)] = d * (irand(0, 1) ? 4.0f : -6.0f);
        break;
      }
      default: break;
    }
  }
  return x;
}

TEST(TensorQuants, RepresentableValuesAreExact) {
  // K-quants and IQ4_NL / IQ4_XS are left out: their least-squares search may pick another (equally good or
  // better-in-its-metric) grid, so exactness is not promised by the format.
  for (Type t : {Type::F32, Type::F16, Type::BF16, Type::Q8_0, Type::Q8_1, Type::Q8_K,
                 Type::Q4_0, Type::Q5_0, Type::Q4_1, Type::Q5_1, Type::MXFP4}) {
    for (int blocks : kBlockCounts) {
      const std::vector<float> x = representable_row(t, blocks, 5u * blocks);
      const std::vector<float> y = round_trip(t, x);
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(x[i], y[i]) << type_name(t) << " blocks=" << blocks << " at " << i;
    }
  }
}

TEST(TensorQuants, RequantizeIsStable) {
  // dequant(quant(y)) == y for y = dequant(quant(x)). Holds exactly for the float types
  // and the symmetric fp16-scale types (the max-magnitude element lands on the end of the
  // grid, so the same fp16 scale is recomputed). For the asymmetric and K types the
  // second round trip only has to stay within the bound of the first.
  for (Type t : kAllTypes) {
    const bool exact = t == Type::F32 || t == Type::F16 || t == Type::BF16 ||
                       t == Type::Q8_0 || t == Type::Q8_1 || t == Type::Q4_0 || t == Type::Q5_0 ||
                       t == Type::MXFP4;  // the rounded max stays in [4s, 6s]: same exponent
    for (int blocks : kBlockCounts) {
      const std::vector<float> x = gaussian(row_len(t, blocks), 2.0f, 31u * blocks);
      const std::vector<float> y = round_trip(t, x);
      const std::vector<float> z = round_trip(t, y);
      if (exact) {
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], z[i]) << type_name(t) << " blocks=" << blocks << " at " << i;
      } else {
        expect_within_bound(t, y, z, "requantize");
      }
    }
  }
}

TEST(TensorQuants, Q8_1SumField) {
  for (int blocks : kBlockCounts) {
    const std::vector<float> x = gaussian(row_len(Type::Q8_1, blocks), 3.0f, 11u * blocks);
    std::vector<uint8_t> q;
    round_trip(Type::Q8_1, x, &q);
    const auto* b = reinterpret_cast<const BlockQ8_1*>(q.data());
    for (int i = 0; i < blocks; ++i) {
      int sum = 0;
      float amax = 0;
      for (int j = 0; j < kQK; ++j) {
        sum += b[i].qs[j];
        amax = std::max(amax, std::fabs(x[size_t(i) * kQK + j]));
      }
      // s is computed from the f32 scale amax/127, then rounded to fp16.
      EXPECT_EQ(b[i].s, util::f32_to_fp16(static_cast<float>(sum) * (amax / 127)));
      const float s = util::fp16_to_f32(b[i].s);
      const float ds = util::fp16_to_f32(b[i].d) * sum;
      EXPECT_NEAR(s, ds, std::fabs(ds) * 2e-3 + 1e-6);
    }
  }
}

TEST(TensorQuants, Q8_KBlockSums) {
  for (int blocks : {1, 3, 31}) {
    std::vector<float> x = gaussian(row_len(Type::Q8_K, blocks), 1.0f, 3u * blocks);
    std::fill(x.begin(), x.begin() + kQK_K, 0.0f);  // an all-zero super-block too
    std::vector<uint8_t> q;
    round_trip(Type::Q8_K, x, &q);
    const auto* b = reinterpret_cast<const BlockQ8_K*>(q.data());
    EXPECT_EQ(b[0].d, 0.0f);
    for (int i = 0; i < blocks; ++i) {
      for (int g = 0; g < kQK_K / 16; ++g) {
        int sum = 0;
        for (int j = 0; j < 16; ++j) sum += b[i].qs[g * 16 + j];
        EXPECT_EQ(b[i].bsums[g], sum) << "block " << i << " group " << g;
      }
    }
  }
}

// ---- hand-built blocks: the decoders against the documented layouts ----

TEST(TensorDequant, Q4_0NibbleOrder) {
  BlockQ4_0 b{};
  b.d = util::f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  float y[32];
  dequantize_row(Type::Q4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8));            // low nibbles: elements 0..15
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8));  // high nibbles: elements 16..31
  }
}

TEST(TensorDequant, Q5_1HighBits) {
  BlockQ5_1 b{};
  b.d = util::f32_to_fp16(0.25f);
  b.m = util::f32_to_fp16(-1.0f);
  const uint32_t qh = 0x80000001u;  // bit 0 -> element 0, bit 31 -> element 31
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = 0x21;  // low 1, high 2
  float y[32];
  dequantize_row(Type::Q5_1, &b, y, 32);
  EXPECT_EQ(y[0], 0.25f * 17 - 1.0f);
  EXPECT_EQ(y[1], 0.25f * 1 - 1.0f);
  EXPECT_EQ(y[16], 0.25f * 2 - 1.0f);
  EXPECT_EQ(y[31], 0.25f * 18 - 1.0f);
}

TEST(TensorDequant, Q4_KScalePacking) {
  // Sub-block j gets scale j+1 and min 40+j (values >= 16 exercise the high 2 bits).
  BlockQ4_K b{};
  b.d = util::f32_to_fp16(1.0f);
  b.dmin = util::f32_to_fp16(0.5f);
  for (int j = 0; j < 8; ++j) {
    const uint8_t sc = static_cast<uint8_t>(j + 1 + (j >= 4 ? 40 : 0)), m = static_cast<uint8_t>(40 + j);
    if (j < 4) {
      b.scales[j] = sc;
      b.scales[j + 4] = m;
    } else {
      b.scales[j + 4] = static_cast<uint8_t>((sc & 0xF) | (m & 0xF) << 4);
      b.scales[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
      b.scales[j] |= static_cast<uint8_t>((m >> 4) << 6);
    }
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = 0x73;  // q = 3 in even sub-blocks, 7 in odd ones
  std::vector<float> y(256);
  dequantize_row(Type::Q4_K, &b, y.data(), 256);
  for (int j = 0; j < 8; ++j) {
    const float sc = static_cast<float>(j + 1 + (j >= 4 ? 40 : 0)), m = static_cast<float>(40 + j);
    const float q = j % 2 == 0 ? 3.0f : 7.0f;
    EXPECT_EQ(y[32 * j + 5], sc * q - 0.5f * m) << "sub-block " << j;
  }
}

TEST(TensorDequant, Q6_KLayout) {
  BlockQ6_K b{};
  b.d = util::f32_to_fp16(0.125f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  // Element 64*h2 + ... of the first half: q = 32 + 5 for l = 3 of each quarter.
  const int l = 3;
  b.ql[l] = 0x5 | 0x6 << 4;       // q1 low = 5 (elem 3), q3 low = 6 (elem 67)
  b.ql[l + 32] = 0x7 | 0x8 << 4;  // q2 low = 7 (elem 35), q4 low = 8 (elem 99)
  b.qh[l] = 2 | 1 << 2 | 3 << 4 | 0 << 6;
  std::vector<float> y(256);
  dequantize_row(Type::Q6_K, &b, y.data(), 256);
  EXPECT_EQ(y[3], 0.125f * (0 - 8) * ((5 | 2 << 4) - 32));
  EXPECT_EQ(y[35], 0.125f * (2 - 8) * ((7 | 1 << 4) - 32));
  EXPECT_EQ(y[67], 0.125f * (4 - 8) * ((6 | 3 << 4) - 32));
  EXPECT_EQ(y[99], 0.125f * (6 - 8) * ((8 | 0 << 4) - 32));
  EXPECT_EQ(y[128 + 3], 0.125f * (8 - 8) * (0 - 32));  // second half uses scales 8..15
}

TEST(TensorDequant, Q2_KLayout) {
  // Sub-block s: scale s % 16, min 15 - s; element 128h + 32k + l from bits 2k of qs[32h + l].
  BlockQ2_K b{};
  b.d = util::f32_to_fp16(0.5f);
  b.dmin = util::f32_to_fp16(0.25f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<uint8_t>(s | (15 - s) << 4);
  b.qs[5] = 1 | 2 << 2 | 3 << 4 | 0 << 6;  // elements 5, 37, 69, 101
  b.qs[32 + 20] = 3 << 6;                  // element 128 + 96 + 20 = 244
  std::vector<float> y(256);
  dequantize_row(Type::Q2_K, &b, y.data(), 256);
  auto want = [](int s, int q) { return 0.5f * s * q - 0.25f * (15 - s); };
  EXPECT_EQ(y[5], want(0, 1));
  EXPECT_EQ(y[37], want(2, 2));
  EXPECT_EQ(y[69], want(4, 3));
  EXPECT_EQ(y[101], want(6, 0));
  EXPECT_EQ(y[244], want(15, 3));
  EXPECT_EQ(y[243], want(15, 0));
}

TEST(TensorDequant, Q3_KLayout) {
  // Sub-block s gets the 6-bit scale 2s + 1 (values >= 16 exercise the high 2 bits in
  // scales[8..11]); element e's high bit is bit e / 32 of hmask[e % 32] (set: no -4).
  BlockQ3_K b{};
  b.d = util::f32_to_fp16(0.25f);
  for (int s = 0; s < 16; ++s) {
    const int v = 2 * s + 1;
    if (s < 8) b.scales[s] = static_cast<uint8_t>(b.scales[s] | (v & 0xF));
    else b.scales[s - 8] = static_cast<uint8_t>(b.scales[s - 8] | (v & 0xF) << 4);
    b.scales[8 + s % 4] = static_cast<uint8_t>(b.scales[8 + s % 4] | (v >> 4) << (2 * (s / 4)));
  }
  b.qs[7] = 3 | 1 << 2;       // element 7: q 3, element 39: q 1
  b.hmask[7] = 1 | 1 << 5;    // high bit of elements 7 and 5*32 + 7 = 167
  std::vector<float> y(256);
  dequantize_row(Type::Q3_K, &b, y.data(), 256);
  auto want = [](int s, int q) { return 0.25f * (2 * s + 1 - 32) * q; };
  EXPECT_EQ(y[7], want(0, 3));
  EXPECT_EQ(y[39], want(2, 1 - 4));
  EXPECT_EQ(y[167], want(10, 0));
  EXPECT_EQ(y[168], want(10, -4));
  EXPECT_EQ(y[255], want(15, -4));
}

TEST(TensorDequant, IQ4_NLCodebookAndExtremeScales) {
  // Element j < 16 from the low nibble of qs[j], j + 16 from its high nibble; value table
  // ggml's kvalues_iq4nl. Scales: fp16 max, the smallest subnormal, negative, zero.
  for (float d : {0.5f, 65504.0f, std::ldexp(1.0f, -24), -3.0f, 0.0f}) {
    BlockIQ4_NL b{};
    b.d = util::f32_to_fp16(d);
    ASSERT_EQ(util::fp16_to_f32(b.d), d);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
    float y[32];
    dequantize_row(Type::IQ4_NL, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], d * float(kIQ4NLValues[j])) << d << " " << j;
      EXPECT_EQ(y[j + 16], d * float(kIQ4NLValues[15 - j])) << d << " " << j;
    }
    EXPECT_EQ(y[0], d * -127.0f);
    EXPECT_EQ(y[15], d * 113.0f);
  }
}

TEST(TensorDequant, IQ4_XSScalePacking) {
  // Sub-block ib: 6-bit ls = (scales_l[ib / 2] nibble ib % 2) | (scales_h bits 2ib..2ib+1)
  // << 4, element = d * (ls - 32) * value. ls runs over 0 (-32), 63 (+31) and 32 (0).
  const int ls[8] = {0, 63, 32, 1, 17, 48, 33, 31};
  BlockIQ4_XS b{};
  b.d = util::f32_to_fp16(0.25f);
  for (int ib = 0; ib < 8; ++ib) {
    b.scales_l[ib / 2] = static_cast<uint8_t>(b.scales_l[ib / 2] | (ls[ib] & 0xF) << 4 * (ib % 2));
    b.scales_h = static_cast<uint16_t>(b.scales_h | (ls[ib] >> 4) << 2 * ib);
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | (15 - i % 16) << 4);
  std::vector<float> y(256);
  dequantize_row(Type::IQ4_XS, &b, y.data(), 256);
  for (int ib = 0; ib < 8; ++ib)
    for (int j = 0; j < 16; ++j) {
      const float dl = 0.25f * float(ls[ib] - 32);
      EXPECT_EQ(y[32 * ib + j], dl * kIQ4NLValues[j]) << ib << " " << j;
      EXPECT_EQ(y[32 * ib + 16 + j], dl * kIQ4NLValues[15 - j]) << ib << " " << j;
    }
  // fp16 max with the largest multipliers: -32 * -127 * 65504 is finite in f32.
  b.d = util::f32_to_fp16(65504.0f);
  dequantize_row(Type::IQ4_XS, &b, y.data(), 256);
  EXPECT_EQ(y[0], 65504.0f * -32.0f * -127.0f);
  EXPECT_EQ(y[32 + 15], 65504.0f * 31.0f * 113.0f);
}

TEST(TensorDequant, MXFP4ExponentsAndValues) {
  // element = 2^(e - 128) * doubled E2M1 value; e < 2 subnormal, e = 255 (E8M0's NaN code)
  // decodes as 2^127 as in ggml, so 12 * 2^127 overflows to inf.
  const int8_t e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int e : {0, 1, 2, 100, 127, 128, 254, 255}) {
    BlockMXFP4 b{};
    b.e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
    float y[32];
    dequantize_row(Type::MXFP4, &b, y, 32);
    const float s = std::ldexp(1.0f, e - 128);
    ASSERT_NE(s, 0.0f);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], s * e2m1x2[j]) << "e=" << e << " j=" << j;
      EXPECT_EQ(y[j + 16], s * e2m1x2[15 - j]) << "e=" << e << " j=" << j;
    }
  }
  EXPECT_EQ(e8m0_to_fp32_half(128), 1.0f);
  EXPECT_EQ(e8m0_to_fp32_half(0), std::ldexp(1.0f, -128));
  BlockMXFP4 inf_block{};
  inf_block.e = 255;
  inf_block.qs[0] = 7;  // 12 * 2^127
  float y[32];
  dequantize_row(Type::MXFP4, &inf_block, y, 32);
  EXPECT_EQ(y[0], INFINITY);
}

TEST(TensorQuants, MXFP4ExponentFromMax) {
  // e = floor(log2(amax)) - 2 + 127; amax 6 -> e 127 (s = 1); 8 -> e 128 and 8 is 4 s;
  // a block of 7s clamps to 6.
  for (auto [amax, e] : {std::pair<float, int>{6.0f, 127}, {8.0f, 128}, {7.0f, 127}, {0.75f, 124}}) {
    std::vector<float> x(32, 0.0f);
    x[3] = -amax;
    std::vector<uint8_t> q;
    const std::vector<float> y = round_trip(Type::MXFP4, x, &q);
    EXPECT_EQ(reinterpret_cast<const BlockMXFP4*>(q.data())->e, e) << amax;
    if (amax == 7.0f) EXPECT_EQ(y[3], -6.0f);
    else EXPECT_EQ(y[3], -amax);
  }
}

// ---- first_bad_scale: the loader's check of the block scales ----

TEST(TensorValidate, FirstBadScaleFindsNanAndInfScales) {
  // Per type: the byte offsets of its fp16 scale fields in a block (d, then min / dmin).
  const std::vector<std::pair<Type, std::vector<size_t>>> fields = {
      {Type::Q4_0, {0}}, {Type::Q5_0, {0}}, {Type::Q8_0, {0}}, {Type::Q4_1, {0, 2}}, {Type::Q5_1, {0, 2}},
      {Type::Q2_K, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}}, {Type::Q3_K, {offsetof(BlockQ3_K, d)}},
      {Type::Q4_K, {0, 2}}, {Type::Q5_K, {0, 2}}, {Type::Q6_K, {offsetof(BlockQ6_K, d)}},
      {Type::IQ4_NL, {0}}, {Type::IQ4_XS, {0}}};
  for (const auto& [t, offs] : fields) {
    const int blocks = 5;
    const std::vector<float> x = gaussian(row_len(t, blocks), 1.0f, 3u);
    std::vector<uint8_t> q;
    round_trip(t, x, &q);
    EXPECT_EQ(first_bad_scale(t, q.data(), blocks), -1) << type_name(t);
    for (size_t off : offs)
      for (uint16_t bad : {uint16_t(0x7E00), uint16_t(0x7C00), uint16_t(0xFC00)}) {  // NaN, +inf, -inf
        std::vector<uint8_t> c = q;
        std::memcpy(c.data() + 3 * traits(t).block_bytes + off, &bad, 2);
        EXPECT_EQ(first_bad_scale(t, c.data(), blocks), 3) << type_name(t) << " offset " << off;
        EXPECT_EQ(first_bad_scale(t, c.data(), 3), -1) << type_name(t);  // only the blocks asked about
      }
  }
  // MXFP4: exponent 0xFF is E8M0's NaN; 0xFE (2^126 halves) is a valid scale.
  std::vector<uint8_t> q;
  round_trip(Type::MXFP4, gaussian(row_len(Type::MXFP4, 4), 1.0f, 4u), &q);
  EXPECT_EQ(first_bad_scale(Type::MXFP4, q.data(), 4), -1);
  q[2 * sizeof(BlockMXFP4)] = 0xFE;
  EXPECT_EQ(first_bad_scale(Type::MXFP4, q.data(), 4), -1);
  q[2 * sizeof(BlockMXFP4)] = 0xFF;
  EXPECT_EQ(first_bad_scale(Type::MXFP4, q.data(), 4), 2);
  const float f[2] = {NAN, INFINITY};  // float types: values are data, never refused here
  EXPECT_EQ(first_bad_scale(Type::F32, f, 2), -1);
}

}  // namespace
}  // namespace tensor
