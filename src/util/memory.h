// memory.h: how much physical memory this machine has, for refusing a KV cache that
// cannot fit before allocating it. Deliberately no accounting of what is in use.
#pragma once
#include <unistd.h>

namespace util {

inline double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 1e18;
}

}  // namespace util
