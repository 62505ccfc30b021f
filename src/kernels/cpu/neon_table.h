// neon_table.h: private to kernels/cpu: fill_table<Dot>(), the NEON table's weight types for
// one integer-dot policy. Included by neon.cc (MullDot, plain Advanced SIMD) and by
// neon_dotprod.cc (SdotDot, compiled with +dotprod), so the two levels share one set of
// tested loops: every weight type the x86 tables hold.
#pragma once
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/neon_kquants.h"
#include "kernels/cpu/neon_lowbit.h"
#include "kernels/cpu/neon_tiles.h"

namespace kernels::cpu::neon {
namespace {

template <class Dot>
KernelTable fill_table() {
  KernelTable t;
  auto set = [&t](Type type, VecDotFn v, MatmulFn m) {
    t.vec_dot[slot(type)] = v;
    t.matmul[slot(type)] = m;
  };
  set(Type::F32, vec_dot_f<DecF32>, matmul_f<DecF32>);
  set(Type::F16, vec_dot_f<DecF16>, matmul_f<DecF16>);
  set(Type::BF16, vec_dot_f<DecBF16>, matmul_f<DecBF16>);
  set(Type::Q4_0, vec_dot_q<DecQ4_0, Dot>, matmul_q<DecQ4_0, Dot>);
  set(Type::Q4_1, vec_dot_q<DecQ4_1, Dot>, matmul_q<DecQ4_1, Dot>);
  set(Type::Q5_0, vec_dot_q<DecQ5_0, Dot>, matmul_q<DecQ5_0, Dot>);
  set(Type::Q5_1, vec_dot_q<DecQ5_1, Dot>, matmul_q<DecQ5_1, Dot>);
  set(Type::Q8_0, vec_dot_q<DecQ8_0, Dot>, matmul_q<DecQ8_0, Dot>);
  set(Type::Q4_K, vec_dot_k<KQ4, Dot>, matmul_k<KQ4, Dot>);
  set(Type::Q5_K, vec_dot_k<KQ5, Dot>, matmul_k<KQ5, Dot>);
  set(Type::Q6_K, vec_dot_k<KQ6, Dot>, matmul_k<KQ6, Dot>);
  set(Type::Q2_K, vec_dot_k<KQ2, Dot>, matmul_k<KQ2, Dot>);
  set(Type::Q3_K, vec_dot_k<KQ3, Dot>, matmul_k<KQ3, Dot>);
  set(Type::IQ4_XS, vec_dot_k<KIQ4XS, Dot>, matmul_k<KIQ4XS, Dot>);
  set(Type::IQ4_NL, vec_dot_q<DecIQ4_NL, Dot>, matmul_q<DecIQ4_NL, Dot>);
  set(Type::MXFP4, vec_dot_q<DecMXFP4, Dot>, matmul_q<DecMXFP4, Dot>);
  return t;
}

}  // namespace
}  // namespace kernels::cpu::neon
