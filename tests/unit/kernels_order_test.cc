// kernels_order_test.cc: one arithmetic across architectures. The SIMD matrix x vector
// kernels of x86 (AVX2) and AArch64 (NEON, every level) must give the same bits, so an ARM
// node alone equals an x86 node and a mixed cluster equals one node. Both are checked here,
// bit for bit, against one specification of that arithmetic written from the block layouts
// (not from either kernel): per output, 8 float lanes; a block's integer dot is 8 int32
// lanes, lane k = the products of elements 4k..4k+3 (K-quants: of each 32-element chunk,
// times its scale; the Q6_K bias and Q4_K mins in the lanes noted below); lane k +=
// fma(dw * da, float(lane k)) block by block; the horizontal sum ((l0 + l4) + (l2 + l6)) +
// ((l1 + l5) + (l3 + l7)); then the min terms (Q5_K: one scalar, fused per super-block).
// This is ggml's AVX2 vec_dot (llama.cpp's x86 decode), bit for bit. The low-bit types
// (issue 28): Q2_K / Q3_K / IQ4_XS with 16- or 32-element sub-block scales (Q2_K: 8 lanes
// of mins, fused before the scaled sums; Q3_K: its -4 within each element's lane); IQ4_NL / MXFP4 with ggml's even / odd block accumulators and a fused odd
// last block after the sum. Each architecture runs the half it has
// (x86: avx2; ARM under qemu: neon, dotprod, i8mm). Sizes are odd block counts; batches
// of 1 to 3 columns in vec_dot order (x86's lane-order GEMMs are another contract, see
// kernels_test's MatmulBatchEqualsMatvecBitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "tensor/codebook.h"
#include "tensor/quants.h"
#include "tensor/types.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

namespace kernels {
namespace {

using tensor::Type;
using util::fp16_to_f32;

float hsum8(const float* l) {
  const float x0 = l[0] + l[4], x1 = l[1] + l[5], x2 = l[2] + l[6], x3 = l[3] + l[7];
  return (x0 + x2) + (x1 + x3);
}

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Integer weight e (0..31) of a 32-element block, and its block's d and m.
int q32(Type t, const uint8_t* blk, int e) {
  auto nib = [&](const uint8_t* qs) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; };
  auto bit5 = [&](const uint8_t* qh) { return ((qh[e / 8] >> (e % 8)) & 1) << 4; };
  switch (t) {
    case Type::Q4_0: return nib(blk + 2) - 8;
    case Type::Q4_1: return nib(blk + 4);
    case Type::Q5_0: return (nib(blk + 6) | bit5(blk + 2)) - 16;
    case Type::Q5_1: return nib(blk + 8) | bit5(blk + 4);
    case Type::Q8_0: return static_cast<int8_t>(blk[2 + e]);
    default: return 0;
  }
}

// The 32-element types against Q8_0 / Q8_1 activations.
float spec_q32(Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  const size_t wb = tensor::traits(t).block_bytes;
  const Type at = tensor::traits(t).vec_dot_type;
  const size_t ab = tensor::traits(at).block_bytes, aqs = at == Type::Q8_1 ? 4 : 2;
  const bool has_min = t == Type::Q4_1 || t == Type::Q5_1;
  float lanes[8] = {}, m = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = w + b * wb;
    const uint8_t* a = x + b * ab;
    const float p = fp16_to_f32(u16(blk)) * fp16_to_f32(u16(a));
    for (int k = 0; k < 8; ++k) {
      int s = 0;
      for (int e = 4 * k; e < 4 * k + 4; ++e) s += q32(t, blk, e) * static_cast<int8_t>(a[aqs + e]);
      lanes[k] = std::fma(p, float(s), lanes[k]);
    }
    if (has_min) m = std::fma(fp16_to_f32(u16(blk + 2)), fp16_to_f32(u16(a + 2)), m);
  }
  return has_min ? hsum8(lanes) + m : hsum8(lanes);
}

// The K-quants against Q8_K.
float spec_k(Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_K*>(x);
  float v[8] = {}, mm[4] = {}, summs = 0.0f;
  for (int64_t b = 0; b < n / 256; ++b) {
    const tensor::BlockQ8_K& a = xb[b];
    int lanes[8] = {}, mins[4] = {};
    int q[256], scale[8][2];  // scale[j][h]: chunk j, elements 0..15 (h 0) or 16..31
    float d, dmin = 0.0f;
    if (t == Type::Q6_K) {
      const auto& k = reinterpret_cast<const tensor::BlockQ6_K*>(w)[b];
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, i = (e % 128) / 32, l = e % 32;
        const uint8_t lo = k.ql[64 * h + l + 32 * (i % 2)];
        q[e] = (i < 2 ? lo & 15 : lo >> 4) | (((k.qh[32 * h + l] >> (2 * i)) & 3) << 4);  // +32 bias in
      }
      for (int j = 0; j < 8; ++j) scale[j][0] = k.scales[2 * j], scale[j][1] = k.scales[2 * j + 1];
      for (int l = 0; l < 8; ++l)  // lane l carries the bias of scales 2l, 2l + 1
        lanes[l] -= 32 * (k.scales[2 * l] * a.bsums[2 * l] + k.scales[2 * l + 1] * a.bsums[2 * l + 1]);
      d = fp16_to_f32(k.d) * a.d;
    } else {
      const bool five = t == Type::Q5_K;
      const uint8_t* blk = w + b * tensor::traits(t).block_bytes;
      const uint8_t* s = blk + 4;  // scales; then Q5_K's qh, then qs
      const uint8_t* qh = s + 12;
      const uint8_t* qs = five ? qh + 32 : s + 12;
      int sc[8], m[8];
      for (int j = 0; j < 8; ++j) {
        sc[j] = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m[j] = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        scale[j][0] = scale[j][1] = sc[j];
      }
      for (int e = 0; e < 256; ++e) {
        const int j = e / 32, l = e % 32;
        q[e] = ((j % 2) ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 15) + (five ? ((qh[l] >> j) & 1) << 4 : 0);
      }
      for (int p = 0; p < 4; ++p)
        mins[p] = m[2 * p] * (a.bsums[4 * p] + a.bsums[4 * p + 1]) + m[2 * p + 1] * (a.bsums[4 * p + 2] + a.bsums[4 * p + 3]);
      d = fp16_to_f32(u16(blk)) * a.d;
      dmin = -fp16_to_f32(u16(blk + 2)) * a.d;
    }
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 8; ++k) {
        int s = 0;
        for (int e = 32 * j + 4 * k; e < 32 * j + 4 * k + 4; ++e) s += q[e] * a.qs[e];
        lanes[k] += scale[j][k / 4] * s;
      }
    for (int k = 0; k < 8; ++k) v[k] = std::fma(d, float(lanes[k]), v[k]);
    if (t == Type::Q4_K)
      for (int p = 0; p < 4; ++p) mm[p] = std::fma(dmin, float(mins[p]), mm[p]);
    if (t == Type::Q5_K) summs = std::fma(dmin, float(mins[0] + mins[1] + mins[2] + mins[3]), summs);
  }
  if (t == Type::Q4_K) return hsum8(v) + ((mm[0] + mm[2]) + (mm[1] + mm[3]));
  return t == Type::Q5_K ? hsum8(v) + summs : hsum8(v);
}

// The float types: lane k += w * x (fused) over elements 8i + k, the sum, then the tail
// element by element (fused too).
float spec_f(Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  auto val = [t](const uint8_t* p, int64_t i) {
    if (t == Type::F32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    const uint16_t h = u16(p + 2 * i);
    return t == Type::F16 ? fp16_to_f32(h) : util::bf16_to_f32(h);
  };
  float lanes[8] = {};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; ++i) lanes[i % 8] = std::fma(val(w, i), val(x, i), lanes[i % 8]);
  float s = hsum8(lanes);
  for (int64_t i = n8; i < n; ++i) s = std::fma(val(w, i), val(x, i), s);
  return s;
}

// The low-bit K types against Q8_K: q[e] the integer weight (Q3_K: -4..3, in the lanes of
// its elements as ggml's AVX2 kernel has it), sc[s] the scale of 16-element sub-block s,
// mn[s] Q2_K's min of sub-block s (per bsum, its own float step before the scaled sums).
float spec_lowbit_k(Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  const auto* xb = reinterpret_cast<const tensor::BlockQ8_K*>(x);
  float v[8] = {};
  for (int64_t b = 0; b < n / 256; ++b) {
    const tensor::BlockQ8_K& a = xb[b];
    int q[256], sc[16], mn[16] = {}, lanes[8] = {}, mins[8] = {};
    float d, dmin = 0.0f;
    if (t == Type::Q2_K || t == Type::Q3_K) {
      const uint8_t* qs = t == Type::Q2_K ? reinterpret_cast<const tensor::BlockQ2_K*>(w)[b].qs
                                          : reinterpret_cast<const tensor::BlockQ3_K*>(w)[b].qs;
      for (int e = 0; e < 256; ++e) q[e] = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    }
    if (t == Type::Q2_K) {
      const auto& k = reinterpret_cast<const tensor::BlockQ2_K*>(w)[b];
      for (int s = 0; s < 16; ++s) sc[s] = k.scales[s] & 15, mn[s] = k.scales[s] >> 4;
      d = fp16_to_f32(k.d) * a.d;
      dmin = -fp16_to_f32(k.dmin) * a.d;
    } else if (t == Type::Q3_K) {
      const auto& k = reinterpret_cast<const tensor::BlockQ3_K*>(w)[b];
      for (int e = 0; e < 256; ++e) q[e] -= ((k.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4;
      for (int s = 0; s < 16; ++s) {  // low 4 bits: byte s (low) or s - 8 (high nibble); high 2: byte 8 + s % 4
        const int lo4 = s < 8 ? k.scales[s] & 15 : k.scales[s - 8] >> 4;
        sc[s] = (lo4 | (((k.scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
      }
      d = fp16_to_f32(k.d) * a.d;
    } else {  // IQ4_XS: one 6-bit scale per 32, codebook values
      const auto& k = reinterpret_cast<const tensor::BlockIQ4_XS*>(w)[b];
      for (int e = 0; e < 256; ++e) {
        const int ib = e / 32, l = e % 32;
        q[e] = tensor::kIQ4NLValues[l < 16 ? k.qs[16 * ib + l] & 15 : k.qs[16 * ib + l - 16] >> 4];
      }
      for (int ib = 0; ib < 8; ++ib)
        sc[2 * ib] = sc[2 * ib + 1] = (((k.scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((k.scales_h >> (2 * ib)) & 3) << 4)) - 32;
      d = fp16_to_f32(k.d) * a.d;
    }
    for (int l = 0; l < 8; ++l) mins[l] = mn[2 * l] * a.bsums[2 * l] + mn[2 * l + 1] * a.bsums[2 * l + 1];
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 8; ++k) {
        int s = 0;
        for (int e = 32 * j + 4 * k; e < 32 * j + 4 * k + 4; ++e) s += q[e] * a.qs[e];
        lanes[k] += sc[2 * j + k / 4] * s;
      }
    if (t == Type::Q2_K)
      for (int k = 0; k < 8; ++k) v[k] = std::fma(dmin, float(mins[k]), v[k]);
    for (int k = 0; k < 8; ++k) v[k] = std::fma(d, float(lanes[k]), v[k]);
  }
  return hsum8(v);
}

// The 32-element codebook types (IQ4_NL: fp16 d; MXFP4: E8M0 exponent) against Q8_0: the
// even blocks into one set of 8 lanes, the odd into another, added lane by lane before the
// sum; an odd last block's whole integer dot after it, one fused multiply-add.
float spec_codebook(Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  const bool mx = t == Type::MXFP4;
  const size_t wb = tensor::traits(t).block_bytes, ab = sizeof(tensor::BlockQ8_0);
  const int8_t* values = mx ? tensor::kMXFP4Values : tensor::kIQ4NLValues;
  const int64_t nb = n / 32;
  float lanes[2][8] = {};
  auto block = [&](int64_t b, int* l8) {
    const uint8_t* blk = w + b * wb;
    const uint8_t* qs = blk + (mx ? 1 : 2);
    const uint8_t* a = x + b * ab;
    for (int k = 0; k < 8; ++k) {
      l8[k] = 0;
      for (int e = 4 * k; e < 4 * k + 4; ++e)
        l8[k] += values[e < 16 ? qs[e] & 15 : qs[e - 16] >> 4] * static_cast<int8_t>(a[2 + e]);
    }
    return (mx ? tensor::e8m0_to_fp32_half(blk[0]) : fp16_to_f32(u16(blk))) * fp16_to_f32(u16(a));
  };
  for (int64_t b = 0; b < nb / 2 * 2; ++b) {
    int l8[8];
    const float p = block(b, l8);
    for (int k = 0; k < 8; ++k) lanes[b % 2][k] = std::fma(p, float(l8[k]), lanes[b % 2][k]);
  }
  float sum8[8];
  for (int k = 0; k < 8; ++k) sum8[k] = lanes[0][k] + lanes[1][k];
  float s = hsum8(sum8);
  if (nb % 2) {
    int l8[8];
    const float p = block(nb - 1, l8);
    int isum = 0;
    for (int k = 0; k < 8; ++k) isum += l8[k];
    s = std::fma(p, float(isum), s);
  }
  return s;
}

float spec(Type t, int64_t n, const uint8_t* w, const uint8_t* x) {
  if (t == Type::F32 || t == Type::F16 || t == Type::BF16) return spec_f(t, n, w, x);
  if (t == Type::Q4_K || t == Type::Q5_K || t == Type::Q6_K) return spec_k(t, n, w, x);
  if (t == Type::Q2_K || t == Type::Q3_K || t == Type::IQ4_XS) return spec_lowbit_k(t, n, w, x);
  if (t == Type::IQ4_NL || t == Type::MXFP4) return spec_codebook(t, n, w, x);
  return spec_q32(t, n, w, x);
}

class KernelsOrder : public ::testing::TestWithParam<Type> {};

TEST_P(KernelsOrder, SimdMatmulEqualsTheOneArithmeticBitwise) {
  const Type wt = GetParam();
  const Type at = tensor::traits(wt).vec_dot_type;
  const int bs = tensor::traits(wt).block_size;
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kNeon, Isa::kNeonDot, Isa::kNeonI8mm})
    if (isa_supported(isa)) isas.push_back(isa);
  if (isas.empty()) GTEST_SKIP() << "no AVX2 or NEON table on this CPU";
  const Isa saved = active_isa();
  std::mt19937 rng(17 + static_cast<int>(wt));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<int64_t> sizes;
  for (int64_t blocks : {1, 2, 3, 33}) sizes.push_back(blocks * (bs == 1 ? 32 : bs));
  if (bs == 1) sizes.insert(sizes.end(), {7, 67, 1001});  // element tails
  for (int64_t n : sizes) {
    const int64_t rows = 6, cols = 3;
    const size_t ws = tensor::row_bytes(wt, n) + 4, xs = activation_bytes(at, n) + 4;
    std::vector<uint8_t> W(rows * ws), X(cols * xs);
    std::vector<float> f(n);
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : f) v = dist(rng) * (r + 1);
      tensor::quantize_row(wt, f.data(), W.data() + r * ws, n);
    }
    for (int64_t c = 0; c < cols; ++c) {
      for (auto& v : f) v = dist(rng);
      ref::quantize_activation(at, f.data(), X.data() + c * xs, n);
    }
    for (Isa isa : isas) {
      set_isa(isa);
      for (int64_t n_batch : {1, 2, 3}) {
        std::vector<float> y(cols * rows, -1.0f);
        matmul(wt, n, W.data(), ws, 0, rows, X.data(), xs, n_batch, y.data(), rows, BatchOrder::kVecDot);
        for (int64_t c = 0; c < n_batch; ++c)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(y[c * rows + r], spec(wt, n, W.data() + r * ws, X.data() + c * xs))
                << tensor::type_name(wt) << " isa=" << isa_name(isa) << " n=" << n << " n_batch=" << n_batch
                << " r=" << r << " c=" << c;
      }
    }
  }
  set_isa(saved);
}

// Flash attention (the tile kernels: scores, online softmax, P.V) is the same arithmetic on
// x86's AVX2 tiles and AArch64's NEON tiles (cpu/attention_neon.cc copies avx2's operations).
// No second specification of it is written here: the output bits of fixed inputs (drawn from
// mt19937's raw integers, the same on every platform) are hashed and compared with the hash
// x86's AVX2 tiles give, recorded below; a change to the AVX2 attention arithmetic must
// record its new hash (the test prints it). Prompt (8 queries) and decode (1 query) rows,
// 2 query heads per KV head, each cache format, head_dim 64, contexts past one 64-key tile.
uint64_t attention_hash(kernels::KvFormat f) {
  std::mt19937 rng(29);
  auto val = [&rng] { return float(int(rng() % 2001) - 1000) / 700.0f; };
  const int hd = 64, n_heads = 4, n_kv = 2, n_ctx = 75;
  const int kv_of_head[n_heads] = {0, 0, 1, 1};
  const size_t rb = kv_row_bytes(f, hd);
  std::vector<uint8_t> k(size_t(n_kv) * n_ctx * rb), v(k.size());
  std::vector<float> row(hd);
  for (size_t r = 0; r < size_t(n_kv) * n_ctx; ++r) {
    for (auto& x : row) x = val();
    kv_store_row(f, row.data(), k.data() + r * rb, hd);
    for (auto& x : row) x = val();
    kv_store_row(f, row.data(), v.data() + r * rb, hd);
  }
  KvHeadView views[n_kv];
  for (int g = 0; g < n_kv; ++g) views[g] = {f, k.data() + size_t(g) * n_ctx * rb, v.data() + size_t(g) * n_ctx * rb, rb};
  uint64_t h = 1469598103934665603ull;
  util::ThreadPool pool(1);
  for (auto [n_q, pos0] : {std::pair<int, int>{8, 67}, {1, 74}, {1, 20}}) {
    std::vector<float> q(size_t(n_q) * n_heads * hd), out(q.size());
    for (auto& x : q) x = val();
    AttentionArgs a{n_q, pos0, n_heads, n_kv, kv_of_head, hd, 0.125f, q.data(), size_t(n_heads) * hd,
                    out.data(), size_t(n_heads) * hd, views};
    flash_attention(a, pool);
    for (float x : out) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      h = (h ^ u) * 1099511628211ull;
    }
  }
  return h;
}

TEST(KernelsOrderAttention, FlashAttentionBitsEqualX86Avx2) {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kNeon, Isa::kNeonDot, Isa::kNeonI8mm})
    if (isa_supported(isa)) isas.push_back(isa);
  if (isas.empty()) GTEST_SKIP() << "no AVX2 or NEON table on this CPU";
  const struct {
    KvFormat f;
    const char* name;
    uint64_t want;  // x86 AVX2 tiles
  } cases[] = {{KvFormat::kF16, "F16", 0x004382a03f884c85ull},
               {KvFormat::kF32, "F32", 0x33304cea25b0dd10ull},
               {KvFormat::kQ8_0, "Q8_0", 0x36e9f52fd1b97207ull}};
  const Isa saved = active_isa();
  for (Isa isa : isas) {
    set_isa(isa);
    for (const auto& c : cases) {
      const uint64_t got = attention_hash(c.f);
      EXPECT_EQ(got, c.want) << c.name << " cache, isa=" << isa_name(isa) << ": hash 0x" << std::hex << got;
    }
  }
  set_isa(saved);
}

// ggml_compat.cc's float ops (SwiGLU, softmax, log_sum_exp, the F16 / F32 dots of the exact
// attention path, the V x p sums): each SIMD table's version (AVX2; NEON at every level)
// equals the scalar one, which performs the AVX2 operations lane by lane, to the bit. Odd
// sizes (tails past the groups of 8 / 32) and exponents past ggml_v_expf's fast range.
TEST(KernelsOrderFloatOps, SimdEqualsScalarBitwise) {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kNeon, Isa::kNeonDot, Isa::kNeonI8mm})
    if (isa_supported(isa)) isas.push_back(isa);
  if (isas.empty()) GTEST_SKIP() << "no AVX2 or NEON table on this CPU";
  std::mt19937 rng(29);
  auto bits_of = [](const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * 4);
    return b;
  };
  // All the ops' outputs for one table, as one vector of floats.
  auto run = [](Isa isa, const std::vector<float>& x, const std::vector<float>& y, const std::vector<uint16_t>& h,
                const std::vector<uint16_t>& p, int64_t n) {
    set_isa(isa);
    std::vector<float> out(static_cast<size_t>(n)), all;
    swiglu(out.data(), x.data(), y.data(), n);
    all.insert(all.end(), out.begin(), out.end());
    for (const std::vector<float>* v : {&x, &y}) {  // y: no dominant term, so every lane sum shows
      std::vector<float> sm(*v);
      softmax(sm.data(), n);
      all.insert(all.end(), sm.begin(), sm.end());
      const float sink = 3.0f;
      sm = *v;
      softmax(sm.data(), n, &sink);
      all.insert(all.end(), sm.begin(), sm.end());
      all.push_back(log_sum_exp(v->data(), n));
    }
    all.push_back(dot_f32(x.data(), y.data(), n));
    all.push_back(dot_f16(h.data(), h.data() + n, n));
    for (int hd : {8, 64, 12}) {  // 12: no SIMD path on either architecture
      std::vector<float> o(static_cast<size_t>(hd));
      weighted_sum_f16(h.data(), size_t(hd), p.data(), n * 2 / hd, hd, o.data());
      all.insert(all.end(), o.begin(), o.end());
    }
    return all;
  };
  const Isa saved = active_isa();
  for (int64_t n : {1, 7, 8, 31, 32, 33, 100, 257, 1000}) {
    std::uniform_real_distribution<float> wide(-150.0f, 150.0f), narrow(-4.0f, 4.0f);
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = i % 3 == 0 ? wide(rng) : narrow(rng);  // exp(-150) .. exp(150): ggml_v_expf's slow lanes
      y[size_t(i)] = narrow(rng);
    }
    std::vector<uint16_t> h(static_cast<size_t>(2 * n)), p(static_cast<size_t>(2 * n));
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = util::f32_to_fp16(narrow(rng));
      p[i] = i % 5 == 0 ? 0 : util::f32_to_fp16(std::fabs(narrow(rng)) / 4);  // some zero probabilities
    }
    const std::vector<uint32_t> want = bits_of(run(Isa::kScalar, x, y, h, p, n));
    for (Isa isa : isas) {
      const std::vector<uint32_t> got = bits_of(run(isa, x, y, h, p, n));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "isa=" << isa_name(isa) << " n=" << n << " output " << i;
    }
  }
  set_isa(saved);
}

INSTANTIATE_TEST_SUITE_P(SimdTypes, KernelsOrder,
                         ::testing::Values(Type::F32, Type::F16, Type::BF16, Type::Q4_0, Type::Q4_1, Type::Q5_0,
                                           Type::Q5_1, Type::Q8_0, Type::Q4_K, Type::Q5_K, Type::Q6_K,
                                           Type::Q2_K, Type::Q3_K, Type::IQ4_XS, Type::IQ4_NL, Type::MXFP4),
                         [](const auto& info) { return std::string(tensor::type_name(info.param)); });

}  // namespace
}  // namespace kernels
