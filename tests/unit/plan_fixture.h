// plan_fixture.h: what plan_test.cc and cost_test.cc share: model shapes by their
// dimensions, a plan that must succeed, and equal capacities.
#pragma once
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "plan/plan.h"

namespace plan::test {

using tensor::Type;

inline ModelShape make_shape(const char* name, int D, int L, int H, int G, int F, int V, Type t) {
  ModelShape s;
  s.name = name;
  s.dim = D; s.n_layers = L; s.n_heads = H; s.n_kv_heads = G; s.head_dim = D / H;
  s.n_ff = F; s.n_vocab = V;
  set_all_types(s, t);
  return s;
}
inline ModelShape smollm2(Type t) { return make_shape("smollm2", 576, 30, 9, 3, 1536, 49152, t); }
inline ModelShape llama8b(Type t) { return make_shape("llama3-8b", 4096, 32, 32, 8, 14336, 128256, t); }
inline ModelShape llama70b(Type t) { return make_shape("llama3-70b", 8192, 80, 64, 8, 28672, 128256, t); }
inline ModelShape llama1b(Type t) { return make_shape("llama3.2-1b", 2048, 16, 32, 8, 8192, 128256, t); }

inline Plan must_plan(const ModelShape& s, std::vector<double> caps, bool exact = false) {
  auto p = make_plan(s, caps, exact);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error());
  return std::move(p).value();
}

inline std::vector<double> equal(int n) { return std::vector<double>(n, 1.0); }

}  // namespace plan::test
