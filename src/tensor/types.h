// types.h: element types (ggml ids, as stored in GGUF), their block layouts and traits.
// The block structs are byte-exact with ggml-common.h (static_asserts below); they are
// only ever read from / written to memory that holds them in that layout, never sent
// over the network as raw structs. Deliberately no arithmetic here: see tensor/quants.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tensor {

enum class Type : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30,
  IQ4_NL = 20, IQ4_XS = 23, MXFP4 = 39,  // the 4-bit codebook types (tensor/quants_iq4.cc)
};

constexpr int kQK = 32;    // block size of the 32-element types
constexpr int kQK_K = 256; // super-block size of the K-quants
constexpr int kKScaleSize = 12;

struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[kQK]; };  // s = d * sum(qs)
// Q2_K: 16 sub-blocks of 16; scales[j] = 4-bit scale | 4-bit min << 4; 2-bit quants.
struct BlockQ2_K { uint8_t scales[kQK_K / 16]; uint8_t qs[kQK_K / 4]; uint16_t d, dmin; };
// Q3_K: 16 sub-blocks of 16; 6-bit signed (+32) scales packed in 12 bytes; 2 low bits in
// qs, the third in hmask (set means no -4).
struct BlockQ3_K { uint8_t hmask[kQK_K / 8]; uint8_t qs[kQK_K / 4]; uint8_t scales[kKScaleSize]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[kKScaleSize]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K {
  uint16_t d, dmin; uint8_t scales[kKScaleSize]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[kQK_K]; int16_t bsums[kQK_K / 16]; };
// Codebook types: a 4-bit index into a table of 16 int8 values (tensor/quants_iq4.cc).
struct BlockIQ4_NL { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockIQ4_XS { uint16_t d, scales_h; uint8_t scales_l[kQK_K / 64]; uint8_t qs[kQK_K / 2]; };
struct BlockMXFP4 { uint8_t e; uint8_t qs[kQK / 2]; };  // e: E8M0 exponent
// IQ4_XS sub-block ib's signed scale: the 6-bit ls (scales_l's nibble ib, scales_h's bit
// pair ib as bits 4-5) minus 32; the weight is d * iq4_xs_scale * kIQ4NLValues[index].
inline int iq4_xs_scale(const BlockIQ4_XS& b, int ib) {
  return (((b.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b.scales_h >> 2 * ib) & 3) << 4)) - 32;
}

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);

struct TypeTraits {
  const char* name;
  int block_size;       // elements per block (1 for float types)
  size_t block_bytes;   // bytes per block
  bool supported;       // we can dequantize and multiply it
  Type vec_dot_type;    // what activations are quantized to for a dot product with it
};

// Traits of a type id; nullopt for ids we do not know at all.
std::optional<TypeTraits> type_traits(uint32_t id);
const TypeTraits& traits(Type t);  // CHECKs that t is known
inline const char* type_name(Type t) { return traits(t).name; }
std::optional<Type> type_from_name(std::string_view name);  // "q4_0", "Q4_K", "f16"...

// Bytes of one row of n elements; n must be a multiple of the block size.
size_t row_bytes(Type t, int64_t n);

}  // namespace tensor
