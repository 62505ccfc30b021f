// shaders.h: the SPIR-V of shaders/*.comp, compiled by glslc at build time and embedded by
// a source file CMake generates (shaders.cmake). Typed shaders (matvec, matmul) have one
// entry per weight type, named "<shader>_<type>" ("matvec_q4_k").
#pragma once
#include <cstddef>
#include <cstdint>

namespace kernels::vulkan {

struct ShaderCode {
  const char* name;
  const uint32_t* words;
  size_t n_words;
};
extern const ShaderCode kShaders[];
extern const size_t kNumShaders;

}  // namespace kernels::vulkan
