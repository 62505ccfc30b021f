// types.cc: the type traits table.
#include "tensor/types.h"

#include <algorithm>
#include <cctype>

#include "util/check.h"

namespace tensor {

namespace {
struct Entry { uint32_t id; TypeTraits t; };
const Entry kTable[] = {
    {0, {"F32", 1, 4, true, Type::F32}},
    {1, {"F16", 1, 2, true, Type::F16}},
    {2, {"Q4_0", kQK, sizeof(BlockQ4_0), true, Type::Q8_0}},
    {3, {"Q4_1", kQK, sizeof(BlockQ4_1), true, Type::Q8_1}},
    {6, {"Q5_0", kQK, sizeof(BlockQ5_0), true, Type::Q8_0}},
    {7, {"Q5_1", kQK, sizeof(BlockQ5_1), true, Type::Q8_1}},
    {8, {"Q8_0", kQK, sizeof(BlockQ8_0), true, Type::Q8_0}},
    {9, {"Q8_1", kQK, sizeof(BlockQ8_1), false, Type::Q8_1}},
    {10, {"Q2_K", kQK_K, sizeof(BlockQ2_K), true, Type::Q8_K}},
    {11, {"Q3_K", kQK_K, sizeof(BlockQ3_K), true, Type::Q8_K}},
    {12, {"Q4_K", kQK_K, sizeof(BlockQ4_K), true, Type::Q8_K}},
    {13, {"Q5_K", kQK_K, sizeof(BlockQ5_K), true, Type::Q8_K}},
    {14, {"Q6_K", kQK_K, sizeof(BlockQ6_K), true, Type::Q8_K}},
    {15, {"Q8_K", kQK_K, sizeof(BlockQ8_K), false, Type::Q8_K}},
    // Other IQ types: known sizes (so a file holding them can be parsed and reported),
    // unsupported; IQ4_NL, IQ4_XS and MXFP4 are supported.
    {16, {"IQ2_XXS", kQK_K, 66, false, Type::Q8_K}},
    {17, {"IQ2_XS", kQK_K, 74, false, Type::Q8_K}},
    {18, {"IQ3_XXS", kQK_K, 98, false, Type::Q8_K}},
    {19, {"IQ1_S", kQK_K, 50, false, Type::Q8_K}},
    {20, {"IQ4_NL", kQK, sizeof(BlockIQ4_NL), true, Type::Q8_0}},
    {21, {"IQ3_S", kQK_K, 110, false, Type::Q8_K}},
    {22, {"IQ2_S", kQK_K, 82, false, Type::Q8_K}},
    {23, {"IQ4_XS", kQK_K, sizeof(BlockIQ4_XS), true, Type::Q8_K}},
    {24, {"I8", 1, 1, false, Type::F32}},
    {25, {"I16", 1, 2, false, Type::F32}},
    {26, {"I32", 1, 4, false, Type::F32}},
    {27, {"I64", 1, 8, false, Type::F32}},
    {28, {"F64", 1, 8, false, Type::F32}},
    {29, {"IQ1_M", kQK_K, 56, false, Type::Q8_K}},
    {30, {"BF16", 1, 2, true, Type::BF16}},
    {34, {"TQ1_0", kQK_K, 54, false, Type::Q8_K}},
    {35, {"TQ2_0", kQK_K, 66, false, Type::Q8_K}},
    {39, {"MXFP4", kQK, sizeof(BlockMXFP4), true, Type::Q8_0}},
};
}  // namespace

std::optional<TypeTraits> type_traits(uint32_t id) {
  for (const auto& e : kTable)
    if (e.id == id) return e.t;
  return std::nullopt;
}

const TypeTraits& traits(Type t) {
  for (const auto& e : kTable)
    if (e.id == static_cast<uint32_t>(t)) return e.t;
  CHECK_MSG(false, "unknown tensor type");
}

std::optional<Type> type_from_name(std::string_view name) {
  std::string up(name);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& e : kTable)
    if (up == e.t.name && e.t.supported) return static_cast<Type>(e.id);
  return std::nullopt;
}

size_t row_bytes(Type t, int64_t n) {
  const TypeTraits& tr = traits(t);
  CHECK(n % tr.block_size == 0);
  return static_cast<size_t>(n / tr.block_size) * tr.block_bytes;
}

}  // namespace tensor
