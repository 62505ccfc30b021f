// toy_model.h: a synthetic model file of a named shape (model::shape_by_name: "toy",
// "toy-qwen3", "llama3.2-1b", ...) in the test process's scratch directory (scratch.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "model/synthetic.h"
#include "scratch.h"
#include "tensor/quants.h"

namespace shardlm_test {

// Writes the model (matrices of `type`, weights drawn from `seed`) to "<shape>_<type>.gguf"
// and returns its path; a failure is a test failure here.
inline std::string toy_model(const std::string& shape, tensor::Type type, uint64_t seed) {
  const std::string path = scratch_path(shape + "_" + tensor::type_name(type) + ".gguf");
  const auto s = model::shape_by_name(shape);
  EXPECT_TRUE(s.has_value()) << "no model shape " << shape;
  if (!s) return path;
  const util::Status st = model::write_synthetic_model(path, *s, type, seed);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

}  // namespace shardlm_test
