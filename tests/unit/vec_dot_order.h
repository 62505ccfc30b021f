// vec_dot_order.h: a scope in which every matmul sums in vec_dot order (kernels.h; what
// --exact-batches asks of the runtime), for tests of batch-split invariance whose weight
// types (Q8_0, Q4_0, the K-quants) would otherwise sum batches of 4+ rows in lane order.
#pragma once
#include "kernels/kernels.h"

namespace shardlm_test {

struct VecDotOrder {
  VecDotOrder() { kernels::set_lane_order(false); }
  ~VecDotOrder() { kernels::set_lane_order(true); }
  VecDotOrder(const VecDotOrder&) = delete;
  VecDotOrder& operator=(const VecDotOrder&) = delete;
};

}  // namespace shardlm_test
