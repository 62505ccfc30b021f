// ref/vec_dot.cc: the scalar reference dot products, one per (weight, activation) pair.
// Integer arithmetic and the order of float operations follow ggml's *_generic functions
// (ggml-cpu/quants.c) so results equal llama.cpp's scalar path bit for bit. This is the
// specification the SIMD kernels are tested against; it is deliberately plain and slow
// (no unrolling, no SIMD, no threading).
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/ref/vec_dot_iq4.h"
#include "util/check.h"
#include "util/fp16.h"

namespace kernels::ref {
namespace {

using namespace tensor;
using util::fp16_to_f32;

float dot_f32(int64_t n, const float* x, const float* y) {
  double sum = 0.0;  // ggml_float accumulation, as ggml_vec_dot_f32's scalar path
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

float dot_f16(int64_t n, const uint16_t* x, const uint16_t* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_f32(x[i]) * fp16_to_f32(y[i]));
  return static_cast<float>(sum);
}

float dot_bf16(int64_t n, const uint16_t* x, const uint16_t* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(util::bf16_to_f32(x[i]) * util::bf16_to_f32(y[i]));
  return static_cast<float>(sum);
}

float dot_q4_0(int64_t n, const BlockQ4_0* x, const BlockQ8_0* y) {
  const int64_t nb = n / kQK;
  float sumf = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int v0 = (x[ib].qs[j] & 0x0F) - 8;
      const int v1 = (x[ib].qs[j] >> 4) - 8;
      sumi0 += v0 * y[ib].qs[j];
      sumi1 += v1 * y[ib].qs[j + kQK / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += sumi * fp16_to_f32(x[ib].d) * fp16_to_f32(y[ib].d);
  }
  return sumf;
}

float dot_q4_1(int64_t n, const BlockQ4_1* x, const BlockQ8_1* y) {
  const int64_t nb = n / kQK;
  float sumf = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi0 += (x[ib].qs[j] & 0x0F) * y[ib].qs[j];
      sumi1 += (x[ib].qs[j] >> 4) * y[ib].qs[j + kQK / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (fp16_to_f32(x[ib].d) * fp16_to_f32(y[ib].d)) * sumi +
            fp16_to_f32(x[ib].m) * fp16_to_f32(y[ib].s);
  }
  return sumf;
}

float dot_q5_0(int64_t n, const BlockQ5_0* x, const BlockQ8_0* y) {
  const int64_t nb = n / kQK;
  float sumf = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, sizeof(qh));
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh_0 = ((qh & (1u << (j + 0))) >> (j + 0)) << 4;
      const uint8_t xh_1 = ((qh & (1u << (j + 16))) >> (j + 12));
      const int32_t x0 = static_cast<int8_t>(((x[ib].qs[j] & 0x0F) | xh_0) - 16);
      const int32_t x1 = static_cast<int8_t>(((x[ib].qs[j] >> 4) | xh_1) - 16);
      sumi0 += x0 * y[ib].qs[j];
      sumi1 += x1 * y[ib].qs[j + kQK / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (fp16_to_f32(x[ib].d) * fp16_to_f32(y[ib].d)) * sumi;
  }
  return sumf;
}

float dot_q5_1(int64_t n, const BlockQ5_1* x, const BlockQ8_1* y) {
  const int64_t nb = n / kQK;
  float sumf = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, sizeof(qh));
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
      const int32_t x0 = (x[ib].qs[j] & 0xF) | xh_0;
      const int32_t x1 = (x[ib].qs[j] >> 4) | xh_1;
      sumi0 += x0 * y[ib].qs[j];
      sumi1 += x1 * y[ib].qs[j + kQK / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (fp16_to_f32(x[ib].d) * fp16_to_f32(y[ib].d)) * sumi +
            fp16_to_f32(x[ib].m) * fp16_to_f32(y[ib].s);
  }
  return sumf;
}

float dot_q8_0(int64_t n, const BlockQ8_0* x, const BlockQ8_0* y) {
  const int64_t nb = n / kQK;
  float sumf = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += x[ib].qs[j] * y[ib].qs[j];
    sumf += sumi * (fp16_to_f32(x[ib].d) * fp16_to_f32(y[ib].d));
  }
  return sumf;
}

// Unpacks the 8 6-bit scales and 8 6-bit mins of a Q4_K / Q5_K block (get_scale_min_k4).
void scales_mins_k4(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = s[j] & 63;
      m[j] = s[j + 4] & 63;
    } else {
      sc[j] = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
  }
}

// The shared tail of the K-quant dot products: aux8 holds the 256 weight quants, the
// integer sums run in 8 lanes exactly as ggml's generic code.
struct KAccum {
  float sums[8] = {};
  void add(const int8_t* aux8, const int8_t* q8, const int* scale_of_16, float d) {
    int32_t aux32[8] = {};
    for (int j = 0; j < kQK_K / 16; ++j) {
      const int scale = scale_of_16[j];
      for (int h = 0; h < 2; ++h) {
        int16_t aux16[8];
        for (int l = 0; l < 8; ++l) aux16[l] = static_cast<int16_t>(q8[l] * aux8[l]);
        for (int l = 0; l < 8; ++l) aux32[l] += scale * aux16[l];
        q8 += 8;
        aux8 += 8;
      }
    }
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
  }
  float total(float sumf) const {
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
  }
};

// Q4_K has no qh; Q5_K's is read through this accessor so one template serves both.
uint8_t get_qh(const BlockQ4_K&, int) { return 0; }
uint8_t get_qh(const BlockQ5_K& b, int l) { return b.qh[l]; }

template <class Block>
float dot_q45_k(int64_t n, const Block* x, const BlockQ8_K* y, bool five_bit) {
  const int64_t nb = n / kQK_K;
  KAccum acc;
  float sumf = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t aux8[kQK_K];
    const uint8_t* q4 = x[i].qs;
    int8_t* a = aux8;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(q4[l] & 0xF);
      if (five_bit) for (int l = 0; l < 32; ++l) a[l] += (get_qh(x[i], l) & m) ? 16 : 0;
      a += 32;
      m <<= 1;
      for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(q4[l] >> 4);
      if (five_bit) for (int l = 0; l < 32; ++l) a[l] += (get_qh(x[i], l) & m) ? 16 : 0;
      a += 32;
      m <<= 1;
      q4 += 32;
    }
    uint8_t sc[8], mn[8];
    scales_mins_k4(x[i].scales, sc, mn);
    int sumi = 0;
    for (int j = 0; j < kQK_K / 16; ++j) sumi += y[i].bsums[j] * mn[j / 2];
    int scale_of_16[16];
    for (int j = 0; j < 16; ++j) scale_of_16[j] = sc[j / 2];
    acc.add(aux8, y[i].qs, scale_of_16, fp16_to_f32(x[i].d) * y[i].d);
    const float dmin = fp16_to_f32(x[i].dmin) * y[i].d;
    sumf -= dmin * sumi;
  }
  return acc.total(sumf);
}

float dot_q6_k(int64_t n, const BlockQ6_K* x, const BlockQ8_K* y) {
  const int64_t nb = n / kQK_K;
  KAccum acc;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t aux8[kQK_K];
    const uint8_t* q4 = x[i].ql;
    const uint8_t* qh = x[i].qh;
    int8_t* a = aux8;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        a[l + 0] = static_cast<int8_t>((q4[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        a[l + 32] = static_cast<int8_t>((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        a[l + 64] = static_cast<int8_t>((q4[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        a[l + 96] = static_cast<int8_t>((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
      a += 128;
      q4 += 64;
      qh += 32;
    }
    int scale_of_16[16];
    for (int j = 0; j < 16; ++j) scale_of_16[j] = x[i].scales[j];
    acc.add(aux8, y[i].qs, scale_of_16, fp16_to_f32(x[i].d) * y[i].d);
  }
  return acc.total(0.0f);
}

// Q2_K: per super-block one integer sum of sc_s * (int dot of sub-block s) and one of
// m_s * bsums[s], then sumf += dall * isum - dmin * summs (ggml_vec_dot_q2_K_q8_K_generic).
float dot_q2_k(int64_t n, const BlockQ2_K* x, const BlockQ8_K* y) {
  const int64_t nb = n / kQK_K;
  float sumf = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q2 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    const uint8_t* sc = x[i].scales;
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
    const float dall = y[i].d * fp16_to_f32(x[i].d);
    const float dmin = y[i].d * fp16_to_f32(x[i].dmin);
    int isum = 0;
    int is = 0;
    for (int k = 0; k < kQK_K / 128; ++k, q2 += 32) {
      for (int shift = 0; shift < 8; shift += 2, q8 += 32) {
        for (int half = 0; half < 2; ++half) {
          const int d = sc[is++] & 0xF;
          int isuml = 0;
          for (int l = 16 * half; l < 16 * half + 16; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
          isum += d * isuml;
        }
      }
    }
    sumf += dall * isum - dmin * summs;
  }
  return sumf;
}

// Q3_K: the 256 quants in -4..3 and the 16 scales - 32, through KAccum's 8 lanes
// (ggml_vec_dot_q3_K_q8_K_generic).
float dot_q3_k(int64_t n, const BlockQ3_K* x, const BlockQ8_K* y) {
  const int64_t nb = n / kQK_K;
  KAccum acc;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t aux8[kQK_K];
    const uint8_t* q3 = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    int8_t* a = aux8;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K; j += 128, q3 += 32) {
      for (int shift = 0; shift < 8; shift += 2, a += 32, m = static_cast<uint8_t>(m << 1))
        for (int l = 0; l < 32; ++l)
          a[l] = static_cast<int8_t>(((q3[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
    }
    int scale_of_16[16];
    for (int j = 0; j < 16; ++j) {
      const uint8_t* s = x[i].scales;
      const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
      scale_of_16[j] = (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    }
    acc.add(aux8, y[i].qs, scale_of_16, fp16_to_f32(x[i].d) * y[i].d);
  }
  return acc.total(0.0f);
}

}  // namespace

float vec_dot(Type wt, int64_t n, const void* w, const void* xq) {
  CHECK_MSG(n % traits(wt).block_size == 0, type_name(wt));
  switch (wt) {
    case Type::F32: return dot_f32(n, static_cast<const float*>(w), static_cast<const float*>(xq));
    case Type::F16:
      return dot_f16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(xq));
    case Type::BF16:
      return dot_bf16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(xq));
    case Type::Q4_0:
      return dot_q4_0(n, static_cast<const BlockQ4_0*>(w), static_cast<const BlockQ8_0*>(xq));
    case Type::Q4_1:
      return dot_q4_1(n, static_cast<const BlockQ4_1*>(w), static_cast<const BlockQ8_1*>(xq));
    case Type::Q5_0:
      return dot_q5_0(n, static_cast<const BlockQ5_0*>(w), static_cast<const BlockQ8_0*>(xq));
    case Type::Q5_1:
      return dot_q5_1(n, static_cast<const BlockQ5_1*>(w), static_cast<const BlockQ8_1*>(xq));
    case Type::Q8_0:
      return dot_q8_0(n, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(xq));
    case Type::Q2_K:
      return dot_q2_k(n, static_cast<const BlockQ2_K*>(w), static_cast<const BlockQ8_K*>(xq));
    case Type::Q3_K:
      return dot_q3_k(n, static_cast<const BlockQ3_K*>(w), static_cast<const BlockQ8_K*>(xq));
    case Type::Q4_K:
      return dot_q45_k(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(xq), false);
    case Type::Q5_K:
      return dot_q45_k(n, static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(xq), true);
    case Type::Q6_K:
      return dot_q6_k(n, static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(xq));
    case Type::IQ4_NL:
      return dot_iq4_nl(n, static_cast<const BlockIQ4_NL*>(w), static_cast<const BlockQ8_0*>(xq));
    case Type::IQ4_XS:
      return dot_iq4_xs(n, static_cast<const BlockIQ4_XS*>(w), static_cast<const BlockQ8_K*>(xq));
    case Type::MXFP4:
      return dot_mxfp4(n, static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(xq));
    default: break;
  }
  CHECK_MSG(false, type_name(wt));
}

}  // namespace kernels::ref
