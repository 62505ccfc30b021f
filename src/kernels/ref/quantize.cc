// ref/quantize.cc: the scalar reference activation quantizers (the vec_dot_types: Q8_0,
// Q8_1, Q8_K, F16, BF16, F32). Q8_0 and Q8_1 follow ggml's x86 quantize_row_q8_0/q8_1 (the
// code llama.cpp runs for activations on x86: id = 127 / amax, round half to even), not the
// *_ref weight quantizers (id = 1 / d, round half away from zero): activations rounded the
// other way flip enough int8 values to move SmolLM2's logits by tenths. Q8_K equals
// quantize_row_q8_K_ref (which ggml's x86 build also uses). Written here rather than calling tensor::quantize_row
// so the kernels' specification is self-contained; the tests check both agree. Weight
// quantizers (Q4_0 ... Q6_K) are not here: they live in tensor/.
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "util/check.h"
#include "util/fp16.h"

namespace kernels {

using namespace tensor;

size_t activation_bytes(Type t, int64_t n) {
  CHECK_MSG(t == Type::F32 || t == Type::F16 || t == Type::BF16 || t == Type::Q8_0 ||
                t == Type::Q8_1 || t == Type::Q8_K,
            type_name(t));
  return row_bytes(t, n);
}

namespace ref {
namespace {

// ggml's nearest_int: round to nearest, ties to even (|f| <= 2^22).
int nearest_int(float f) {
  const float val = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &val, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    y[i].d = util::f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    y[i].d = util::f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      y[i].qs[kQK / 2 + j] = static_cast<int8_t>(std::nearbyint(x[kQK / 2 + j] * id));
      sum += y[i].qs[j] + y[i].qs[kQK / 2 + j];
    }
    y[i].s = util::f32_to_fp16(sum * d);
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));  // ggml leaves them stale; we zero
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[j * 16 + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace

void quantize_activation(Type t, const float* x, void* out, int64_t n) {
  CHECK_MSG(n % traits(t).block_size == 0, type_name(t));
  switch (t) {
    case Type::F32: std::memcpy(out, x, n * sizeof(float)); return;
    case Type::F16: {
      auto* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = util::f32_to_fp16(x[i]);
      return;
    }
    case Type::BF16: {
      auto* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = util::f32_to_bf16(x[i]);
      return;
    }
    case Type::Q8_0: quantize_q8_0(x, static_cast<BlockQ8_0*>(out), n); return;
    case Type::Q8_1: quantize_q8_1(x, static_cast<BlockQ8_1*>(out), n); return;
    case Type::Q8_K: quantize_q8_k(x, static_cast<BlockQ8_K*>(out), n); return;
    default: break;
  }
  CHECK_MSG(false, type_name(t));
}

}  // namespace ref
}  // namespace kernels
