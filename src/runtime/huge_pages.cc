// huge_pages.cc: a node's mapped weight matrices copied into 2 MiB-page memory (huge_pages.h).
#include "runtime/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace runtime {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

// /proc/meminfo's MemAvailable in bytes; 0 when unknown (then nothing is copied).
size_t mem_available() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  std::fclose(f);
  return size_t(kb) * 1024;
}

bool in_storage(const model::Storage& st, const uint8_t* p) {
  for (const auto& b : st)
    if (b && !b->empty() && p >= b->data() && p < b->data() + b->size()) return true;
  return false;
}

bool huge_pages_off() {
  const char* e = std::getenv("SHARDLM_HUGE_PAGES");
  return e && std::string(e) == "0";
}

}  // namespace

HugePageArena::Piece HugePageArena::take(size_t n) {
  constexpr size_t kCapacity = 128 * kHugePage;
  const auto next = [&] {  // the offset of the next 64-byte aligned address (malloc aligns to 16)
    const uintptr_t base = uintptr_t(open_->data());
    return size_t((base + open_->size() + 63) / 64 * 64 - base);
  };
  if (!open_ || next() + n > open_->capacity()) {
    open_ = std::make_shared<std::vector<uint8_t>>();
    // A fresh mmap at this size: not yet touched. (An impossible n throws, as a vector of n would.)
    open_->reserve(std::max(kCapacity, n > SIZE_MAX - 64 ? n : n + 64));
    const auto lo = (uintptr_t(open_->data()) + kHugePage - 1) / kHugePage * kHugePage;
    const auto hi = (uintptr_t(open_->data()) + open_->capacity()) / kHugePage * kHugePage;
    if (hi > lo && !huge_pages_off()) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);  // advice only
    return take(n);
  }
  const size_t at = next();
  open_->resize(at + n);  // within the capacity: no reallocation, earlier pieces stay put
  return {open_->data() + at, open_};
}

std::unique_ptr<PlacedWeights> place_in_huge_pages(const model::Config& cfg, const NodeModel& slice) {
  if (huge_pages_off()) return nullptr;
  auto out = std::make_unique<PlacedWeights>();
  out->model = slice;
  // Matrices to move, by their first byte (a view shared by two matrices is copied once).
  std::vector<model::Matrix*> todo;
  std::map<const uint8_t*, size_t> extent;  // data -> bytes (the largest view from there)
  TensorVisitor v;
  v.matrix = [&](const std::string&, model::Matrix* m) {
    if (m->data && m->bytes() > 0 && !in_storage(slice.weights.storage, m->data)) {
      todo.push_back(m);
      size_t& b = extent[m->data];
      b = std::max(b, m->bytes());
    }
    return util::ok_status();
  };
  v.vector = [](const std::string&, model::Vector*) { return util::ok_status(); };
  if (!visit_tensors(out->model.weights, cfg.n_layers, v).ok() || todo.empty()) return nullptr;
  std::map<const uint8_t*, size_t> offset;
  size_t total = 0;
  for (const auto& [p, b] : extent) {
    offset[p] = total;
    total += (b + 63) / 64 * 64;
  }
  const size_t len = (total + kHugePage - 1) / kHugePage * kHugePage;
  if (len + (size_t(1) << 30) > mem_available()) return nullptr;
  void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const size_t raw_len = len + kHugePage;
  out->memory = std::shared_ptr<void>(raw, [raw_len](void* p) { munmap(p, raw_len); });
  uint8_t* base = reinterpret_cast<uint8_t*>((uintptr_t(raw) + kHugePage - 1) / kHugePage * kHugePage);
  madvise(base, len, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
  for (const auto& [p, b] : extent) std::memcpy(base + offset[p], p, b);
  for (model::Matrix* m : todo) m->data = base + offset[m->data];
  return out;
}

}  // namespace runtime
