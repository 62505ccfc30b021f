// huge_pages_test.cc: HugePageArena (runtime/huge_pages.h), where a worker receives its
// slice: every piece is zeroed, 64-byte aligned, inside its owner's bytes, and never
// moves while later pieces are taken (the tensors already received point into it); small
// pieces share a buffer, a piece larger than a buffer's capacity gets one of its own.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "runtime/huge_pages.h"

namespace {

TEST(HugePageArena, PiecesAreZeroedAlignedDisjointAndStay) {
  runtime::HugePageArena arena;
  struct Got {
    runtime::HugePageArena::Piece p;
    size_t n;
  };
  std::vector<Got> got;
  const size_t sizes[] = {1, 63, 4096, 5u << 20, 0, 1u << 20, 257u << 20, 17, 20u << 20, 3};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const size_t n = sizes[i];
    auto p = arena.take(n);
    ASSERT_NE(p.data, nullptr);
    ASSERT_NE(p.owner, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data) % 64, 0u) << "piece " << i;
    ASSERT_GE(p.data, p.owner->data());
    ASSERT_LE(p.data + n, p.owner->data() + p.owner->size()) << "piece " << i << " past its owner's bytes";
    for (size_t k = 0; k < n; k += 4093) ASSERT_EQ(p.data[k], 0) << "piece " << i;
    for (size_t k = 0; k < n; k += 4093) p.data[k] = uint8_t(i + 1);  // as a received tensor's bytes
    got.push_back({p, n});
  }
  // Every earlier piece still holds its own bytes: nothing moved or overlapped.
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t k = 0; k < got[i].n; k += 4093) ASSERT_EQ(got[i].p.data[k], uint8_t(i + 1)) << "piece " << i;
  std::set<const void*> owners;
  for (const Got& g : got) owners.insert(g.p.owner.get());
  EXPECT_EQ(got[0].p.owner, got[1].p.owner);  // small pieces share a buffer
  // Larger than a buffer: one of its own, sized for it (a small next piece may still fit
  // in its 64 bytes of slack, depending on the allocator's alignment: ASan's differs).
  EXPECT_NE(got[6].p.owner, got[5].p.owner);
  EXPECT_LE(got[6].p.owner->capacity(), sizes[6] + 64);
  EXPECT_LT(owners.size(), got.size());
}

}  // namespace
