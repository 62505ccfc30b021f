// self_test.cc: the known-answer test each accelerated kernel table passes once at start
// (issue 30 item 4), so that a table built for hardware no session could test cannot give
// wrong answers quietly: dispatch.cc runs it and disables a table that fails, with a
// warning naming it. Four rows of 256 elements of every weight type (fixed seed, quantized
// once per process) times three activation rows of its vec_dot type: the table's
// vec_dot, matmul of one and of three activation rows, and every activation quantizer,
// each against the same entry of the table below. AVX-512 against AVX2 must give the same bits (the same
// integers, the same float order); AVX2 against the scalar reference stays within
// kernels_test's bound (1e-5 of sum |w x|), only the float summation order differing.
// Activations are the reference quantizer's, weights tensor::quantize_row's.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/kernels.h"
#include "tensor/quants.h"
#include "util/fp16.h"

namespace kernels::cpu {
namespace {

constexpr int64_t kN = 256;  // a whole block of every type
constexpr int kRows = 4, kCols = 3;

struct Case {
  tensor::Type type;
  std::vector<uint8_t> w, x;  // kRows weight rows, kCols activation rows
  size_t w_stride = 0, x_stride = 0;
  double mag[kRows * kCols];  // [c * kRows + r]: sum_i |w_i x_i| over dequantized values
};

std::vector<float> gaussian(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = nd(rng);
  return v;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> out;
    std::mt19937 rng(30);
    for (tensor::Type t : kWeightTypes) {
      Case c;
      c.type = t;
      const tensor::Type at = tensor::traits(t).vec_dot_type;
      c.w_stride = tensor::row_bytes(t, kN);
      c.x_stride = tensor::row_bytes(at, kN);
      c.w.resize(c.w_stride * kRows);
      c.x.resize(c.x_stride * kCols);
      std::vector<float> fw(kN * kRows), fx(kN * kCols);
      for (int r = 0; r < kRows; ++r) {
        tensor::quantize_row(t, gaussian(rng, kN).data(), c.w.data() + r * c.w_stride, kN);
        tensor::dequantize_row(t, c.w.data() + r * c.w_stride, fw.data() + r * kN, kN);
      }
      for (int k = 0; k < kCols; ++k) {
        ref::quantize_activation(at, gaussian(rng, kN).data(), c.x.data() + k * c.x_stride, kN);
        tensor::dequantize_row(at, c.x.data() + k * c.x_stride, fx.data() + k * kN, kN);
      }
      for (int k = 0; k < kCols; ++k)
        for (int r = 0; r < kRows; ++r) {
          double s = 1e-30;
          for (int64_t i = 0; i < kN; ++i) s += std::fabs(double(fw[r * kN + i]) * fx[k * kN + i]);
          if (t == tensor::Type::Q4_1 || t == tensor::Type::Q5_1) {  // + 2 |m s| per block, as kernels_test
            const size_t wb = tensor::traits(t).block_bytes;
            for (int64_t b = 0; b < kN / 32; ++b) {
              uint16_t m, sa;
              std::memcpy(&m, c.w.data() + r * c.w_stride + b * wb + 2, 2);
              std::memcpy(&sa, c.x.data() + k * c.x_stride + b * sizeof(tensor::BlockQ8_1) + 2, 2);
              s += 2 * std::fabs(double(util::fp16_to_f32(m)) * util::fp16_to_f32(sa));
            }
          }
          c.mag[k * kRows + r] = s;
        }
      out.push_back(std::move(c));
    }
    return out;
  }();
  return all;
}

bool close(float got, float want, double mag, bool bitwise) {
  if (bitwise) return std::memcmp(&got, &want, sizeof got) == 0;
  return std::isfinite(got) && std::fabs(double(got) - double(want)) <= 1e-5 * mag;
}

}  // namespace

std::string self_test(const KernelTable& t, const KernelTable& ref, bool bitwise) {
  char buf[160];
  for (const Case& c : cases()) {
    const int s = slot(c.type);
    const char* name = tensor::type_name(c.type);
    if (!t.matmul[s] || !t.vec_dot[s] || !ref.matmul[s] || !ref.vec_dot[s]) {
      std::snprintf(buf, sizeof buf, "%s: no kernel", name);
      return buf;
    }
    // Like with like: matmul of kCols and of 1 activation rows, vec_dot (a float type's
    // batches need not sum in vec_dot's order).
    float got[kRows * kCols], want[kRows * kCols], got1[kRows], want1[kRows];
    ref.matmul[s](kN, c.w.data(), c.w_stride, 0, kRows, c.x.data(), c.x_stride, kCols, want, kRows);
    t.matmul[s](kN, c.w.data(), c.w_stride, 0, kRows, c.x.data(), c.x_stride, kCols, got, kRows);
    ref.matmul[s](kN, c.w.data(), c.w_stride, 0, kRows, c.x.data(), c.x_stride, 1, want1, kRows);
    t.matmul[s](kN, c.w.data(), c.w_stride, 0, kRows, c.x.data(), c.x_stride, 1, got1, kRows);
    for (int i = 0; i < kRows * kCols; ++i) {
      const int r = i % kRows, k = i / kRows;
      const uint8_t* w = c.w.data() + r * c.w_stride;
      const uint8_t* x = c.x.data() + k * c.x_stride;
      const struct { const char* what; float got, want; } checks[] = {
          {"matmul of 3", got[i], want[i]},
          {"vec_dot", t.vec_dot[s](kN, w, x), ref.vec_dot[s](kN, w, x)},
          {"matmul of 1", k == 0 ? got1[r] : 0.0f, k == 0 ? want1[r] : 0.0f}};
      for (const auto& ch : checks)
        if (!close(ch.got, ch.want, c.mag[i], bitwise)) {
          std::snprintf(buf, sizeof buf, "%s %s, row %d column %d: %.9g, expected %.9g", name, ch.what, r, k,
                        double(ch.got), double(ch.want));
          return buf;
        }
    }
  }
  std::mt19937 rng(31);
  const std::vector<float> v = gaussian(rng, kN);
  for (tensor::Type at : kActivationTypes) {
    const int s = slot(at);
    if (!t.quantize[s] || !ref.quantize[s]) continue;
    const size_t bytes = tensor::row_bytes(at, kN);
    std::vector<uint8_t> a(bytes), b(bytes);
    ref.quantize[s](v.data(), a.data(), kN);
    t.quantize[s](v.data(), b.data(), kN);
    if (a != b) {
      std::snprintf(buf, sizeof buf, "%s activation quantizer", tensor::type_name(at));
      return buf;
    }
  }
  return "";
}

#if defined(__x86_64__) || defined(_M_X64)
// Here, not in amx.cc: a file compiled with ISA flags holds kernels only (tu_vector.h says why).
std::string amx_self_test(bool emulated) {
  using tensor::Type;
  if (!amx_gemm(Type::Q4_0, emulated)) return "built without AMX support";
  // 35 rows (two 16-row tiles and 3), 37 columns (two 16-column groups and 5); 7 blocks of
  // the 32-element types (block pairs and a tail), 3 Q4_K / Q5_K / Q6_K super-blocks; gaussian
  // values through the quantizers. The reference: the AVX-512 table's lane-order GEMM of the type.
  constexpr int64_t kR = 35, kB = 37;
  struct LaneOrderOn {  // the reference must sum in lane order even under a caller's veto
    bool was = ::kernels::lane_order();
    LaneOrderOn() { ::kernels::set_lane_order(true); }
    ~LaneOrderOn() { ::kernels::set_lane_order(was); }
  } lane_order_on;
  std::mt19937 rng(30);
  for (Type t : {Type::Q4_0, Type::Q4_1, Type::Q8_0, Type::IQ4_NL, Type::MXFP4, Type::Q4_K,
                 Type::Q5_K, Type::Q6_K}) {
    const int64_t n = tensor::traits(t).block_size == 256 ? 3 * 256 : 7 * 32;
    const Type at = tensor::traits(t).vec_dot_type;
    const size_t ws = tensor::row_bytes(t, n), xs = tensor::row_bytes(at, n);
    std::vector<uint8_t> w(ws * kR), x(xs * kB);
    for (int64_t r = 0; r < kR; ++r)
      tensor::quantize_row(t, gaussian(rng, n).data(), w.data() + r * ws, n);
    for (int64_t c = 0; c < kB; ++c)
      ref::quantize_activation(at, gaussian(rng, n).data(), x.data() + c * xs, n);
    std::vector<float> got(size_t(kB * kR), -1.0f), want(size_t(kB * kR), -2.0f);
    avx512_table().matmul[slot(t)](n, w.data(), ws, 0, kR, x.data(), xs, kB, want.data(), kR);
    amx_gemm(t, emulated)(n, w.data(), ws, 0, kR, x.data(), xs, kB, got.data(), kR);
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s AMX GEMM, row %d column %d: %.9g, expected %.9g",
                      tensor::type_name(t), int(i % kR), int(i / kR), double(got[i]),
                      double(want[i]));
        return buf;
      }
  }
  return "";
}
#endif

}  // namespace kernels::cpu
