// swa_ring.h: the rows a sliding-window layer's KV ring keeps per running request, one rule
// for the cache (model::kv_layer_ctx) and the estimates that size it (plan, memory checks).
#pragma once

#include <algorithm>

namespace util {

// A windowed layer needs its window behind the first row of a batch, the batch's own rows
// after it, and up to 31 rows before the window (masked) so the exact path's sums start on a
// 32-position boundary (model::CpuBackend::attention); rounded up to 64 rows so flash
// attention's tiles of 64 positions never wrap the ring. Never more than ctx.
inline int swa_ring_rows(int n_swa, int ctx, int max_batch) {
  return std::min(ctx, (n_swa + std::max(1, max_batch) + 31 + 63) / 64 * 64);
}

}  // namespace util
