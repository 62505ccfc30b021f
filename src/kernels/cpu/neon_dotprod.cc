// neon_dotprod.cc: the NEON kernels with the dot-product extension (sdot), compiled with
// -march=armv8.2-a+dotprod (CMakeLists.txt) and chosen by dispatch.cc only when AT_HWCAP
// has ASIMDDP. The loops are neon_table.h's, the same as the plain table's; only the
// integer dot differs, and it gives the same int32 lanes.
#if defined(__aarch64__)
#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod.cc needs -march=armv8.2-a+dotprod"
#endif
#include "kernels/cpu/neon_table.h"

namespace kernels::cpu {

const KernelTable& neon_dotprod_table() {
  static const KernelTable table = neon::fill_table<neon::SdotDot>();
  return table;
}

}  // namespace kernels::cpu
#endif  // __aarch64__
