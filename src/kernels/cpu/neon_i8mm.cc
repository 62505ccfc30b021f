// neon_i8mm.cc: the i8mm level (Neoverse V1 / Graviton 3, Apple M2 class): compiled with
// -march=armv8.2-a+dotprod+i8mm (CMakeLists.txt), chosen by dispatch.cc only when AT_HWCAP2
// has I8MM, layered over the dotprod table. Only the lane-order prompt GEMMs of Q4_0, Q8_0,
// IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K and IQ4_XS differ: neon_gemm.h's and
// neon_lowbit_lanes.h's smmla tiles (2 rows x 2 columns x 8 elements per
// instruction), the same exact integers and float steps as the sdot ones. Other batches
// and decode rows run the dotprod kernels (vec_dot order keeps 4-element lanes, which
// smmla's 8-element sums cannot give).
#if defined(__aarch64__)
#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "neon_i8mm.cc needs -march=armv8.2-a+dotprod+i8mm"
#endif
#include "kernels/cpu/neon_gemm.h"
#include "kernels/cpu/neon_lowbit_lanes.h"
#include "kernels/cpu/neon_table.h"

namespace kernels::cpu {

const KernelTable& neon_i8mm_table() {
  static const KernelTable table = [] {
    using namespace neon;
    KernelTable t;
    t.matmul[slot(Type::Q4_0)] = matmul_lanes<MmlaQ4_0, true, matmul_q<DecQ4_0, SdotDot>>;
    t.matmul[slot(Type::Q4_1)] = matmul_lanes<MmlaQ4_1, true, matmul_q<DecQ4_1, SdotDot>>;
    t.matmul[slot(Type::Q8_0)] = matmul_lanes<MmlaQ8_0, true, matmul_q<DecQ8_0, SdotDot>>;
    t.matmul[slot(Type::IQ4_NL)] = matmul_lanes<MmlaQ32<GQ32<DecIQ4_NL>>, true, matmul_q<DecIQ4_NL, SdotDot>>;
    t.matmul[slot(Type::MXFP4)] = matmul_lanes<MmlaQ32<GQ32<DecMXFP4>>, true, matmul_q<DecMXFP4, SdotDot>>;
    t.matmul[slot(Type::Q4_K)] = matmul_lanes<MmlaQ4_K, true, matmul_k<KQ4, SdotDot>>;
    t.matmul[slot(Type::Q5_K)] = matmul_lanes<MmlaQ5_K, true, matmul_k<KQ5, SdotDot>>;
    t.matmul[slot(Type::Q6_K)] = matmul_lanes<MmlaQ6_K, true, matmul_k<KQ6, SdotDot>>;
    t.matmul[slot(Type::Q2_K)] = matmul_lanes<MmlaK<GQ2_K>, true, matmul_k<KQ2, SdotDot>>;
    t.matmul[slot(Type::Q3_K)] = matmul_lanes<MmlaK<GQ3_K>, true, matmul_k<KQ3, SdotDot>>;
    t.matmul[slot(Type::IQ4_XS)] = matmul_lanes<MmlaK<GIQ4_XS>, true, matmul_k<KIQ4XS, SdotDot>>;
    return t;
  }();
  return table;
}

}  // namespace kernels::cpu
#endif  // __aarch64__
