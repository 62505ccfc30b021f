// gguf.h: reading and writing GGUF files (versions 2 and 3). The reader checks every
// length, count and offset against the file size before using it, so a truncated,
// corrupt or malicious file yields a Status naming the problem, never a crash or a huge
// allocation. Knows nothing about models: tensor names and metadata keys are opaque here.
// Uses tensor/ only for element-type sizes (needed to bound-check tensor data).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/types.h"
#include "util/mmap.h"
#include "util/status.h"

namespace gguf {

enum class ValueType : int32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint64_t kMaxStringLength = uint64_t(1) << 30;
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 30;
constexpr size_t kMaxTensorName = 63;

// One metadata value. Scalars use the field that fits their type (bools in u64);
// arrays hold their element type and count, strings in `strs`, numbers as i64/f64 lists.
struct Value {
  ValueType type = ValueType::UINT8;
  ValueType elem_type = ValueType::UINT8;  // arrays only
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  std::string str;
  // Arrays: exactly one of these is filled, by element type.
  std::vector<std::string> strs;
  std::vector<int64_t> ints;     // all integer and bool element types
  std::vector<double> floats;    // FLOAT32 / FLOAT64 elements
  uint64_t count() const;        // array length (0 for scalars)

  std::optional<int64_t> as_int() const;   // any integer or bool scalar
  std::optional<double> as_float() const;  // any numeric scalar
  // For `inspect`: arrays longer than max_items are abbreviated as
  // `[49152 strings: "<|endoftext|>", "<|im_start|>", ... ]`; strings are quoted and
  // escaped, and cut at max_chars bytes with "..." when max_chars > 0.
  std::string to_string(size_t max_items = 8, size_t max_chars = 0) const;

  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64v(uint64_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value string_array(std::vector<std::string> v);
  static Value f32_array(std::vector<float> v);
  static Value i32_array(std::vector<int32_t> v);
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the contiguous (row) dimension
  tensor::Type type = tensor::Type::F32;
  uint64_t offset = 0;       // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader only)
  int64_t n_elements() const;
  int64_t rows() const;      // product of ne[1..] (1 for 0- and 1-d tensors)
};

class File {
 public:
  // Maps and parses a file. Errors name the path and what is wrong.
  static util::Expected<std::unique_ptr<File>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (used by open and by the fuzzer).
  static util::Expected<std::unique_ptr<File>> parse(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  const std::vector<std::pair<std::string, Value>>& kv() const { return kv_; }
  const Value* find(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  File() = default;
  std::unique_ptr<util::MappedFile> map_;
  std::string path_;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
  friend class Parser;
};

// Streaming writer: metadata and tensor infos first, then each tensor's bytes produced
// on demand (so an 8B-shaped model is written without holding it in memory).
class Writer {
 public:
  // `out` arrives sized to the tensor's n_bytes (contents unspecified); the producer
  // overwrites it and must leave its size at exactly n_bytes (CHECKed).
  using Producer = std::function<void(std::vector<uint8_t>& out)>;
  void set(std::string key, Value v);  // replaces an existing key
  void set_alignment(uint32_t a) { alignment_ = a; }
  // Adds a tensor whose bytes come from `produce`, called once, at write time. Names must
  // be unique and shorter than 64 bytes, ne[0] a multiple of the type's block size (CHECKed).
  void add_tensor(std::string name, std::vector<int64_t> ne, tensor::Type type, Producer produce);
  // Adds a tensor from memory the caller keeps alive until write() returns.
  void add_tensor(std::string name, std::vector<int64_t> ne, tensor::Type type, const void* data);
  // Writes GGUF v3: header, metadata (plus general.alignment if not the default), tensor
  // infos, padding, then each tensor padded to the alignment. I/O errors come back as
  // Status (and the partial file is removed).
  util::Status write(const std::string& path) const;

 private:
  struct Pending {
    std::string name; std::vector<int64_t> ne; tensor::Type type; uint64_t n_bytes;
    Producer produce; const void* data = nullptr;  // exactly one of produce / data
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Pending> tensors_;
  uint32_t alignment_ = kDefaultAlignment;
};

// Prints a human-readable summary for `shardlm inspect`: version, alignment, counts, all
// metadata (long arrays abbreviated, long strings cut with "..."), then the tensor table
// (name, type, shape, bytes, offset); only the first tensors unless all_tensors.
void print_info(const File& f, FILE* out, bool all_tensors);

}  // namespace gguf
