// gguf_fuzz.cc: libFuzzer target for the GGUF reader. Every input must either parse or
// give a non-empty error Status; on success everything a consumer could touch (values,
// tensor bytes, the block scales the loader checks, the `inspect` printout) is read, so
// ASan/UBSan catch any bound the parser forgot. Deliberately no writing: the writer trusts its caller and CHECKs instead.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "gguf/gguf.h"
#include "tensor/quants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FILE* devnull = std::fopen("/dev/null", "w");
  auto parsed = gguf::File::parse(data, size);
  if (!parsed.ok()) {
    if (parsed.error().empty()) __builtin_trap();  // every error must say something
    return 0;
  }
  const gguf::File& f = **parsed;
  uint64_t sum = 0;  // read by the volatile store below, so nothing is optimized away
  for (const auto& [key, value] : f.kv()) {
    sum += key.size() + value.count() + value.to_string(16, 64).size();
    if (auto i = value.as_int()) sum += static_cast<uint64_t>(*i);
    if (f.find(key) != &value) __builtin_trap();  // keys are unique
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.offset % f.alignment() != 0) __builtin_trap();
    if (t.n_bytes > 0) sum += t.data[0] + t.data[t.n_bytes - 1];  // in bounds (ASan checks)
    sum += static_cast<uint64_t>(t.n_elements()) + static_cast<uint64_t>(t.rows());
    sum += tensor::row_bytes(t.type, t.ne.empty() ? 1 : t.ne[0]);
    const auto& tr = tensor::traits(t.type);  // the loader's scale check reads every block
    if (tr.block_size > 1) sum += static_cast<uint64_t>(tensor::first_bad_scale(t.type, t.data, int64_t(t.n_bytes / tr.block_bytes)));
  }
  if (devnull) gguf::print_info(f, devnull, true);
  volatile uint64_t sink = sum;
  (void)sink;
  return 0;
}
