// codebook.h: the value tables and the scale decoding of the 4-bit codebook types
// (IQ4_NL, IQ4_XS, MXFP4), shared by tensor/quants_iq4.cc and the kernels: a 4-bit index
// selects one of 16 int8 values, the element is that value times the block's scale.
// Values as ggml-common.h's kvalues_iq4nl and kvalues_mxfp4 (E2M1, doubled).
#pragma once
#include <cstdint>
#include <cstring>

namespace tensor {

inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 (sign, 2-bit exponent, 1-bit mantissa) times 2, so the values are integers.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half the E8M0 scale 2^(e - 127) (ggml's GGML_E8M0_TO_FP32_HALF), the factor of the
// doubled MXFP4 values: 2^(e - 128), subnormal for e < 2. e = 255 is E8M0's NaN code:
// decoded as 2^127 like ggml and the gguf package.
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace tensor
