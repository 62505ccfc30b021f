// huge_pages.h: a CPU node's weight matrices moved out of the mapped model file into
// anonymous memory advised for 2 MiB pages (madvise MADV_HUGEPAGE), once, when the node is
// made. Decode streams every matrix once per token; from the file's page cache (4 KiB
// pages) one core read the 1B shape at about 16 GB/s, from 2 MiB pages about 19-20 (Zen 4,
// BENCHMARKS.md, issue 28): fewer TLB misses and the prefetchers not stopped at every 4 KiB.
// Only matrices that point outside the node's owned buffers (i.e. into the mapped file)
// are copied: re-encoded column slices stay where they are, and so does the token embedding
// (one row read per token); a worker's received slices are not copied either, they are
// received into 2 MiB pages in the first place (huge_page_bytes). Skipped (the node keeps
// the mapped weights) when SHARDLM_HUGE_PAGES=0, when the copy would not fit in the memory
// the kernel calls available (MemAvailable, which counts the file's reclaimable page cache)
// with 1 GiB to spare, or when the mapping fails. Same bytes, so the same results.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "runtime/slicer.h"

namespace runtime {

struct PlacedWeights {
  std::shared_ptr<void> memory;  // the huge-page mapping the copied matrices point into
  NodeModel model;               // slice with those matrices repointed
};

// Null when nothing was copied (see above).
std::unique_ptr<PlacedWeights> place_in_huge_pages(const model::Config& cfg, const NodeModel& slice);

// Where a worker receives its slice, so that it streams it from huge pages as a root
// streams its copied one: the tensors packed one after another (64-byte aligned) into
// buffers of 256 MiB capacity (or one tensor's size, if larger), each reserved and its
// whole 2 MiB-aligned pages advised (MADV_HUGEPAGE) before anything touches it, then grown
// tensor by tensor within that capacity (never moved; a buffer's untouched tail costs no
// memory). Packed, because a tensor alone would lose a partial 2 MiB page at each end, and
// most of a slice's matrices are a few MiB (1B shape on 2 nodes: 48 of 4.7 MiB and 32
// under 1.2 MiB). No advice under SHARDLM_HUGE_PAGES=0.
class HugePageArena {
 public:
  struct Piece {
    uint8_t* data = nullptr;                            // n zero bytes
    std::shared_ptr<const std::vector<uint8_t>> owner;  // the buffer holding them
  };
  Piece take(size_t n);

 private:
  std::shared_ptr<std::vector<uint8_t>> open_;  // the buffer being filled
};

}  // namespace runtime
