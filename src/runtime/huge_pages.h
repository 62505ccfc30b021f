// huge_pages.h: a CPU node's weight matrices moved out of the mapped model file into
// anonymous memory advised for 2 MiB pages (madvise MADV_HUGEPAGE), once, when the node is
// made. Decode streams every matrix once per token; from the file's page cache (4 KiB
// pages) one core read the 1B shape at about 16 GB/s, from 2 MiB pages about 19-20 (Zen 4,
// BENCHMARKS.md, issue 28): fewer TLB misses and the prefetchers not stopped at every 4 KiB.
// Only matrices that point outside the node's owned buffers (i.e. into the mapped file)
// are copied: received slices and re-encoded column slices stay where they are, and so does
// the token embedding (one row read per token). Skipped (the node keeps the mapped weights)
// when SHARDLM_HUGE_PAGES=0, when the copy would not fit in the memory the kernel calls
// available (MemAvailable, which counts the file's reclaimable page cache) with 1 GiB to
// spare, or when the mapping fails. Same bytes, so the same results.
#pragma once
#include <memory>

#include "model/config.h"
#include "runtime/slicer.h"

namespace runtime {

struct PlacedWeights {
  std::shared_ptr<void> memory;  // the huge-page mapping the copied matrices point into
  NodeModel model;               // slice with those matrices repointed
};

// Null when nothing was copied (see above).
std::unique_ptr<PlacedWeights> place_in_huge_pages(const model::Config& cfg, const NodeModel& slice);

}  // namespace runtime
