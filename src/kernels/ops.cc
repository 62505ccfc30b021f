// ops.cc: the float element-wise and row ops whose result does not depend on SIMD order
// (rmsnorm, add, rope); swiglu and softmax are in ggml_compat.cc. They are a
// small share of the time per token, so one scalar version serves all ISAs (the compiler
// vectorises the simple loops); the order of operations follows ggml so that results
// match llama.cpp closely. Deliberately no quantized math here.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace kernels {

void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void rope_cache(float* cache, int64_t pos, int n_rot, float freq_base, float freq_scale,
                const float* freq_factors) {
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int i0 = 0; i0 < n_rot; i0 += 2) {
    const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
    const float t = freq_scale * (theta / ff);
    cache[i0 + 0] = std::cos(t);
    cache[i0 + 1] = std::sin(t);
    theta *= theta_scale;
  }
}

// ggml_rope_yarn_corr_dims and rope_yarn as GCC compiles ggml's CPU build (-mfma: the mix of
// the two angles and 1 + 0.1 ln(...) contracted to fused multiply-adds).
void rope_cache_yarn(float* cache, int64_t pos, int n_rot, float freq_base, float freq_scale,
                     const float* freq_factors, const Yarn& y) {
  if (y.ext_factor == 0.0f && y.attn_factor == 1.0f) return rope_cache(cache, pos, n_rot, freq_base, freq_scale, freq_factors);
  const auto corr_dim = [&](float n_rot_beta) {
    return float(n_rot) * std::log(float(y.n_ctx_orig) / (n_rot_beta * 2 * float(M_PI))) / (2 * std::log(freq_base));
  };
  const float lo = std::max(0.0f, std::floor(corr_dim(y.beta_fast)));
  const float hi = std::min(float(n_rot - 1), std::ceil(corr_dim(y.beta_slow)));
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int i0 = 0; i0 < n_rot; i0 += 2) {
    const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
    const float extrap = theta / ff;
    const float interp = freq_scale * extrap;
    float t = interp, mscale = y.attn_factor;
    if (y.ext_factor != 0.0f) {
      const float r = (float(i0 / 2) - lo) / std::max(0.001f, hi - lo);
      const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, r))) * y.ext_factor;
      t = std::fma(interp, 1 - ramp_mix, extrap * ramp_mix);
      mscale *= std::fma(std::log(1.0f / freq_scale), 0.1f, 1.0f);
    }
    cache[i0 + 0] = std::cos(t) * mscale;
    cache[i0 + 1] = std::sin(t) * mscale;
    theta *= theta_scale;
  }
}

void rope_apply(float* x, const float* cache, int n_rot, bool neox) {
  const int offset = neox ? n_rot / 2 : 1;
  for (int i0 = 0; i0 < n_rot; i0 += 2) {
    const int ic = neox ? i0 / 2 : i0;
    const float c = cache[i0], s = cache[i0 + 1];
    const float x0 = x[ic], x1 = x[ic + offset];
    // ggml's CPU build contracts these to fused multiply-adds (-march=native, FMA): same here.
    x[ic] = std::fma(x0, c, -(x1 * s));
    x[ic + offset] = std::fma(x0, s, x1 * c);
  }
}

}  // namespace kernels
