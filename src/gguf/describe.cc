// describe.cc: print_info, the human-readable dump behind `shardlm inspect`: header facts,
// every metadata key (long arrays abbreviated, long strings cut) and the tensor table.
// Deliberately model-agnostic: it does not interpret keys or tensor names, and it prints
// only what the parsed File holds (no re-reading of the file).
#include <algorithm>
#include <cinttypes>
#include <map>

#include "gguf/gguf.h"

namespace gguf {

namespace {

constexpr size_t kMaxShownItems = 8;    // array elements shown per key
constexpr size_t kMaxShownChars = 120;  // string bytes shown per value
constexpr size_t kTensorsShown = 24;    // tensor rows when not all_tensors

std::string type_label(const Value& v) {
  if (v.type != ValueType::ARRAY) return value_type_name(v.type);
  return std::string("[") + value_type_name(v.elem_type) + "]";
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (uint64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(uint64_t(1) << 30));
  else if (n >= (uint64_t(1) << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(uint64_t(1) << 20));
  else if (n >= 1024) std::snprintf(buf, sizeof buf, "%.2f KiB", n / 1024.0);
  else std::snprintf(buf, sizeof buf, "%" PRIu64 " B", n);
  return buf;
}

}  // namespace

void print_info(const File& f, FILE* out, bool all_tensors) {
  uint64_t total_bytes = 0;
  uint64_t total_elements = 0;
  std::map<std::string, size_t> by_type;
  for (const TensorInfo& t : f.tensors()) {
    total_bytes += t.n_bytes;
    total_elements += static_cast<uint64_t>(t.n_elements());  // may wrap for absurd files
    by_type[tensor::type_name(t.type)]++;
  }

  if (!f.path().empty()) std::fprintf(out, "file:       %s\n", f.path().c_str());
  std::fprintf(out, "format:     GGUF v%u, %zu bytes, alignment %u, data section at byte %" PRIu64 "\n",
               f.version(), f.file_size(), f.alignment(), f.data_offset());
  std::fprintf(out, "tensors:    %zu (%s, %" PRIu64 " elements)", f.tensors().size(),
               human_bytes(total_bytes).c_str(), total_elements);
  const char* sep = ": ";
  for (const auto& [name, n] : by_type) {
    std::fprintf(out, "%s%s x%zu", sep, name.c_str(), n);
    sep = ", ";
  }
  std::fprintf(out, "\n");

  std::fprintf(out, "\nmetadata (%zu keys):\n", f.kv().size());
  size_t key_width = 0;
  for (const auto& [key, value] : f.kv()) key_width = std::max(key_width, key.size());
  key_width = std::min<size_t>(key_width, 48);
  for (const auto& [key, value] : f.kv()) {
    std::fprintf(out, "  %-*s %-10s = %s\n", static_cast<int>(key_width), key.c_str(), type_label(value).c_str(),
                 value.to_string(kMaxShownItems, kMaxShownChars).c_str());
  }

  if (f.tensors().empty()) return;
  std::fprintf(out, "\ntensors:\n");
  size_t name_width = 4;
  for (const TensorInfo& t : f.tensors()) name_width = std::max(name_width, t.name.size());
  std::fprintf(out, "  %5s  %-*s %-8s %-24s %14s %14s\n", "#", static_cast<int>(name_width), "name", "type",
               "shape (ne)", "bytes", "offset");
  const size_t n = f.tensors().size();
  const size_t shown = all_tensors ? n : std::min(n, kTensorsShown);
  for (size_t i = 0; i < shown; ++i) {
    const TensorInfo& t = f.tensors()[i];
    std::fprintf(out, "  %5zu  %-*s %-8s %-24s %14" PRIu64 " %14" PRIu64 "\n", i, static_cast<int>(name_width),
                 t.name.c_str(), tensor::type_name(t.type), shape_string(t.ne).c_str(), t.n_bytes, t.offset);
  }
  if (shown < n) std::fprintf(out, "  ... %zu more tensors (inspect --all-tensors lists them all)\n", n - shown);
}

}  // namespace gguf
