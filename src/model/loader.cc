// loader.cc: GGUF -> LoadedModel.
#include "model/loader.h"

#include <sys/mman.h>
#include <unistd.h>

namespace model {

namespace {

// Maps every page of m into the process now (from the page cache, or read from disk). An
// MoE layer's experts are read a few at a time, each first touch a page fault inside a
// decode step (measured on the 30B-A3B shape: tens of ms per token for the first thousands
// of tokens); a dense model's pages are all touched by its first token anyway.
void prefault(const Matrix& m) {
  if (!m.data || m.bytes() == 0) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = uintptr_t(m.data) / page * page, e = uintptr_t(m.data) + m.bytes();
#ifdef MADV_POPULATE_READ
  if (madvise(reinterpret_cast<void*>(b), e - b, MADV_POPULATE_READ) == 0) return;
#endif
  const volatile uint8_t* d = m.data;  // older kernels: one read per page
  for (size_t i = 0; i < m.bytes(); i += page - (uintptr_t(m.data) + i) % page) (void)d[i];
}

}  // namespace

util::Expected<std::unique_ptr<LoadedModel>> load_model(const std::string& path) {
  auto file = gguf::File::open(path);
  if (!file) return file.status();
  auto m = std::make_unique<LoadedModel>();
  m->file = std::move(file).value();
  auto cfg = load_config(*m->file);
  if (!cfg) return util::Status::error(path + ": " + cfg.error());
  m->config = std::move(cfg).value();
  auto w = bind_weights(*m->file, m->config, /*check_scales=*/true);
  if (!w) return util::Status::error(path + ": " + w.error());
  m->weights = std::move(w).value();
  if (m->config.moe())
    for (const LayerWeights& l : m->weights.layers)
      for (const Matrix* x : {&l.gate_exps, &l.up_exps, &l.down_exps}) prefault(*x);
  return m;
}

}  // namespace model
