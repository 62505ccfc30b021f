// neon_dotprod.cc: the NEON kernels with the dot-product extension (sdot), compiled with
// -march=armv8.2-a+dotprod (CMakeLists.txt) and chosen by dispatch.cc only when AT_HWCAP
// has ASIMDDP. The decode loops are neon_table.h's, the same as the plain table's; only the
// integer dot differs, and it gives the same int32 lanes. Q4_0, Q8_0, IQ4_NL, MXFP4, Q4_K,
// Q5_K and Q6_K batches in lane order take the packed by-element sdot GEMMs of neon_gemm.h;
// Q2_K, Q3_K and IQ4_XS those of neon_lowbit_lanes.h.
#if defined(__aarch64__)
#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod.cc needs -march=armv8.2-a+dotprod"
#endif
#include "kernels/cpu/neon_gemm.h"
#include "kernels/cpu/neon_lowbit_lanes.h"
#include "kernels/cpu/neon_table.h"

namespace kernels::cpu {

const KernelTable& neon_dotprod_table() {
  static const KernelTable table = [] {
    using namespace neon;
    KernelTable t = fill_table<SdotDot>();
    t.matmul[slot(Type::Q4_0)] = matmul_lanes<SdotQ4_0, false, matmul_q<DecQ4_0, SdotDot>>;
    t.matmul[slot(Type::Q4_1)] = matmul_lanes<SdotQ4_1, false, matmul_q<DecQ4_1, SdotDot>>;
    t.matmul[slot(Type::Q8_0)] = matmul_lanes<SdotQ8_0, false, matmul_q<DecQ8_0, SdotDot>>;
    t.matmul[slot(Type::IQ4_NL)] = matmul_lanes<SdotQ32<GQ32<DecIQ4_NL>>, false, matmul_q<DecIQ4_NL, SdotDot>>;
    t.matmul[slot(Type::MXFP4)] = matmul_lanes<SdotQ32<GQ32<DecMXFP4>>, false, matmul_q<DecMXFP4, SdotDot>>;
    t.matmul[slot(Type::Q4_K)] = matmul_lanes<SdotQ4_K, false, matmul_k<KQ4, SdotDot>>;
    t.matmul[slot(Type::Q5_K)] = matmul_lanes<SdotQ5_K, false, matmul_k<KQ5, SdotDot>>;
    t.matmul[slot(Type::Q6_K)] = matmul_lanes<SdotQ6_K, false, matmul_k<KQ6, SdotDot>>;
    t.matmul[slot(Type::Q2_K)] = matmul_lanes<SdotK<GQ2_K>, false, matmul_k<KQ2, SdotDot>>;
    t.matmul[slot(Type::Q3_K)] = matmul_lanes<SdotK<GQ3_K>, false, matmul_k<KQ3, SdotDot>>;
    t.matmul[slot(Type::IQ4_XS)] = matmul_lanes<SdotK<GIQ4_XS>, false, matmul_k<KIQ4XS, SdotDot>>;
    return t;
  }();
  return table;
}

}  // namespace kernels::cpu
#endif  // __aarch64__
