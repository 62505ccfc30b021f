// validate.cc: tensor::first_bad_scale, the check of a quantized tensor's block scales that
// ggml's ggml_validate_row_data makes (llama.cpp's --check-tensors): every fp16 scale (d,
// and the min / dmin of the asymmetric types) finite, no MXFP4 exponent 0xFF (E8M0's NaN).
// Deliberately only the scales: the quants of every type are valid bit patterns, and the
// float types' values are data, not structure.
#include <cstddef>
#include <cstring>

#include "tensor/quants.h"

namespace tensor {

int64_t first_bad_scale(Type t, const void* data, int64_t n_blocks) {
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t bb = traits(t).block_bytes;
  size_t off[2] = {0, 0};
  int n_off = 1;
  switch (t) {
    case Type::Q4_0: off[0] = offsetof(BlockQ4_0, d); break;
    case Type::Q5_0: off[0] = offsetof(BlockQ5_0, d); break;
    case Type::Q8_0: off[0] = offsetof(BlockQ8_0, d); break;
    case Type::Q4_1: off[0] = offsetof(BlockQ4_1, d); off[1] = offsetof(BlockQ4_1, m); n_off = 2; break;
    case Type::Q5_1: off[0] = offsetof(BlockQ5_1, d); off[1] = offsetof(BlockQ5_1, m); n_off = 2; break;
    case Type::Q2_K: off[0] = offsetof(BlockQ2_K, d); off[1] = offsetof(BlockQ2_K, dmin); n_off = 2; break;
    case Type::Q3_K: off[0] = offsetof(BlockQ3_K, d); break;
    case Type::Q4_K: off[0] = offsetof(BlockQ4_K, d); off[1] = offsetof(BlockQ4_K, dmin); n_off = 2; break;
    case Type::Q5_K: off[0] = offsetof(BlockQ5_K, d); off[1] = offsetof(BlockQ5_K, dmin); n_off = 2; break;
    case Type::Q6_K: off[0] = offsetof(BlockQ6_K, d); break;
    case Type::IQ4_NL: off[0] = offsetof(BlockIQ4_NL, d); break;
    case Type::IQ4_XS: off[0] = offsetof(BlockIQ4_XS, d); break;
    case Type::MXFP4:
      for (int64_t b = 0; b < n_blocks; ++b)
        if (p[b * bb + offsetof(BlockMXFP4, e)] == 0xFF) return b;
      return -1;
    default: return -1;
  }
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int i = 0; i < n_off; ++i) {
      uint16_t h;
      std::memcpy(&h, p + b * bb + off[i], 2);
      if ((h & 0x7C00) == 0x7C00) return b;
    }
  return -1;
}

}  // namespace tensor
