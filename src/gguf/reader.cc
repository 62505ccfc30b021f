// reader.cc: parses GGUF v2/v3 from a byte buffer (File::parse) or a mapped file
// (File::open). Every length, count and offset is checked against the bytes left in the
// buffer, with overflow-checked arithmetic, before anything is allocated or read, so a
// corrupt or hostile file gives a Status that names the problem and its byte offset.
// Deliberately not done: llama.cpp's rule that tensor i sits exactly at the running sum
// of the previous padded sizes (we require aligned, in-bounds offsets only), and any
// interpretation of keys or tensor names beyond general.alignment.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf/gguf.h"

namespace gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;
// Smallest encodings, used to reject absurd counts before looping or allocating:
// a key/value is at least an 8-byte key length, a 4-byte type and a 1-byte value;
// a tensor info is at least an 8-byte name length, 4-byte n_dims, 4-byte type, 8-byte offset.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

uint64_t load_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bytes of one element of a fixed-size value type; 0 for STRING/ARRAY/unknown.
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

bool valid_value_type(int32_t t) { return t >= 0 && t <= static_cast<int32_t>(ValueType::FLOAT64); }

// Decodes one fixed-size scalar at p into (u64, i64, f64) by type.
void decode_scalar(ValueType t, const uint8_t* p, uint64_t* u, int64_t* i, double* f) {
  switch (t) {
    case ValueType::UINT8: *u = p[0]; break;
    case ValueType::INT8: *i = static_cast<int8_t>(p[0]); break;
    case ValueType::BOOL: *u = p[0] != 0; break;
    case ValueType::UINT16: *u = load_le(p, 2); break;
    case ValueType::INT16: *i = static_cast<int16_t>(load_le(p, 2)); break;
    case ValueType::UINT32: *u = load_le(p, 4); break;
    case ValueType::INT32: *i = static_cast<int32_t>(load_le(p, 4)); break;
    case ValueType::UINT64: *u = load_le(p, 8); break;
    case ValueType::INT64: *i = static_cast<int64_t>(load_le(p, 8)); break;
    case ValueType::FLOAT32: {
      uint32_t b = static_cast<uint32_t>(load_le(p, 4));
      float v;
      std::memcpy(&v, &b, 4);
      *f = v;
      break;
    }
    case ValueType::FLOAT64: {
      uint64_t b = load_le(p, 8);
      std::memcpy(f, &b, 8);
      break;
    }
    default: break;
  }
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
// a*b and a+b, saturating at UINT64_MAX (for "needs N bytes" bounds that cannot overflow).
uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace

// Cursor over the buffer. `ctx_` names the item being read ("key 'x'", "tensor 'y'") so
// that every error message can say where it happened.
class Parser {
 public:
  Parser(const uint8_t* data, size_t size) : p_(data), size_(size) {}
  util::Status run(File& f);

 private:
  size_t left() const { return size_ - pos_; }

  util::Status corrupt(size_t at, const std::string& what) const {
    return util::Status::error(format("%s (at byte offset %zu)%s; the file is corrupt or not a GGUF file",
                                      what.c_str(), at, where().c_str()));
  }
  util::Status truncated(size_t at, uint64_t need, const char* what) const {
    return util::Status::error(format(
        "file is truncated: %s%s at byte offset %zu needs %" PRIu64 " bytes but only %zu remain "
        "(file size %zu); re-download or re-convert the file",
        what, where().c_str(), at, need, size_ - std::min(at, size_), size_));
  }
  std::string where() const { return ctx_.empty() ? std::string() : " in " + ctx_; }

  // Takes n bytes at the cursor, or fails with a truncation error.
  util::Status take(uint64_t n, const char* what, const uint8_t** out) {
    if (n > left()) return truncated(pos_, n, what);
    *out = p_ + pos_;
    pos_ += static_cast<size_t>(n);
    return {};
  }
  util::Status read_uint(int n, const char* what, uint64_t* v) {
    const uint8_t* b = nullptr;
    RETURN_IF_ERROR(take(static_cast<uint64_t>(n), what, &b));
    *v = load_le(b, n);
    return {};
  }
  util::Status read_string(const char* what, uint64_t max_len, std::string* out);
  util::Status read_value(ValueType t, Value* v);
  util::Status read_array(Value* v);
  util::Status read_kv(File& f, uint64_t index, std::unordered_set<std::string>& seen);
  util::Status read_alignment(File& f);
  util::Status read_tensor_info(uint64_t index, std::unordered_set<std::string>& seen, TensorInfo* t);

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  std::string ctx_;
};

util::Status Parser::read_string(const char* what, uint64_t max_len, std::string* out) {
  const size_t at = pos_;
  uint64_t len = 0;
  RETURN_IF_ERROR(read_uint(8, what, &len));
  if (len > max_len) {
    return corrupt(at, format("%s is %" PRIu64 " bytes long, more than the limit of %" PRIu64, what,
                              len, max_len));
  }
  const uint8_t* b = nullptr;
  RETURN_IF_ERROR(take(len, what, &b));
  out->assign(reinterpret_cast<const char*>(b), static_cast<size_t>(len));
  return {};
}

util::Status Parser::read_value(ValueType t, Value* v) {
  v->type = t;
  if (t == ValueType::STRING) return read_string("string value", kMaxStringLength, &v->str);
  if (t == ValueType::ARRAY) return read_array(v);
  const uint8_t* b = nullptr;
  RETURN_IF_ERROR(take(scalar_size(t), "value", &b));
  decode_scalar(t, b, &v->u64, &v->i64, &v->f64);
  return {};
}

util::Status Parser::read_array(Value* v) {
  const size_t at = pos_;
  uint64_t raw_type = 0, n = 0;
  RETURN_IF_ERROR(read_uint(4, "array element type", &raw_type));
  const int32_t et = static_cast<int32_t>(static_cast<uint32_t>(raw_type));
  if (!valid_value_type(et)) return corrupt(at, format("unknown value type %d for array elements", et));
  const ValueType elem = static_cast<ValueType>(et);
  if (elem == ValueType::ARRAY) {
    return corrupt(at, "nested array (an array of arrays): GGUF readers do not support these");
  }
  v->elem_type = elem;
  const size_t count_at = pos_;
  RETURN_IF_ERROR(read_uint(8, "array length", &n));
  if (n > kMaxArrayElements) {
    return corrupt(count_at, format("array of %" PRIu64 " elements exceeds the limit of %" PRIu64 " elements",
                                    n, kMaxArrayElements));
  }
  // Every element takes at least `min_bytes` (a string at least its 8-byte length), so
  // the count is bounded by the bytes left before anything is reserved.
  const uint64_t min_bytes = elem == ValueType::STRING ? 8 : scalar_size(elem);
  const uint64_t need = sat_mul(n, min_bytes);
  if (need > left()) {
    return truncated(pos_, need, format("array of %" PRIu64 " %s elements", n, value_type_name(elem)).c_str());
  }
  if (elem == ValueType::STRING) {
    v->strs.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      v->strs.emplace_back();
      RETURN_IF_ERROR(read_string("array string", kMaxStringLength, &v->strs.back()));
    }
    return {};
  }
  const uint8_t* b = nullptr;
  RETURN_IF_ERROR(take(need, "array data", &b));
  const size_t es = static_cast<size_t>(min_bytes);
  if (elem == ValueType::FLOAT32 || elem == ValueType::FLOAT64) {
    v->floats.resize(static_cast<size_t>(n));
    for (size_t i = 0; i < n; ++i) {
      uint64_t u = 0;
      int64_t s = 0;
      decode_scalar(elem, b + i * es, &u, &s, &v->floats[i]);
    }
  } else {
    v->ints.resize(static_cast<size_t>(n));
    for (size_t i = 0; i < n; ++i) {
      uint64_t u = 0;
      int64_t s = 0;
      double f = 0;
      decode_scalar(elem, b + i * es, &u, &s, &f);
      // Unsigned elements are stored as their bit pattern (a UINT64 above INT64_MAX wraps).
      v->ints[i] = (elem == ValueType::INT8 || elem == ValueType::INT16 || elem == ValueType::INT32 ||
                    elem == ValueType::INT64) ? s : static_cast<int64_t>(u);
    }
  }
  return {};
}

util::Status Parser::read_kv(File& f, uint64_t index, std::unordered_set<std::string>& seen) {
  ctx_ = format("metadata entry #%" PRIu64, index);
  const size_t key_at = pos_;
  std::string key;
  RETURN_IF_ERROR(read_string("key", kMaxStringLength, &key));
  if (key.empty()) return corrupt(key_at, "empty metadata key");
  ctx_ = "key '" + key + "'";
  if (!seen.insert(key).second) return corrupt(key_at, "duplicate key '" + key + "'");
  const size_t type_at = pos_;
  uint64_t raw_type = 0;
  RETURN_IF_ERROR(read_uint(4, "value type", &raw_type));
  const int32_t t = static_cast<int32_t>(static_cast<uint32_t>(raw_type));
  if (!valid_value_type(t)) return corrupt(type_at, format("unknown value type %d", t));
  Value v;
  RETURN_IF_ERROR(read_value(static_cast<ValueType>(t), &v));
  f.kv_.emplace_back(std::move(key), std::move(v));
  return {};
}

util::Status Parser::read_alignment(File& f) {
  ctx_.clear();
  const Value* a = f.find("general.alignment");
  if (!a) return {};
  if (a->type != ValueType::UINT32) {
    return util::Status::error(format(
        "general.alignment has type %s; it must be UINT32; the file is corrupt or was written by a "
        "non-conforming tool", value_type_name(a->type)));
  }
  if (a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0) {
    return util::Status::error(format(
        "general.alignment is %" PRIu64 "; it must be a nonzero power of two; the file is corrupt", a->u64));
  }
  f.alignment_ = static_cast<uint32_t>(a->u64);
  return {};
}

util::Status Parser::read_tensor_info(uint64_t index, std::unordered_set<std::string>& seen, TensorInfo* t) {
  ctx_ = format("tensor info #%" PRIu64, index);
  const size_t name_at = pos_;
  RETURN_IF_ERROR(read_string("tensor name", kMaxTensorName, &t->name));
  ctx_ = "tensor '" + t->name + "'";
  if (!seen.insert(t->name).second) return corrupt(name_at, "duplicate tensor name '" + t->name + "'");

  const size_t dims_at = pos_;
  uint64_t n_dims = 0;
  RETURN_IF_ERROR(read_uint(4, "n_dims", &n_dims));
  if (n_dims > kMaxDims) {
    return corrupt(dims_at, format("n_dims = %" PRIu64 " but at most %u dimensions are allowed", n_dims, kMaxDims));
  }
  uint64_t n_elements = 1;
  for (uint64_t d = 0; d < n_dims; ++d) {
    const size_t ne_at = pos_;
    uint64_t raw = 0;
    RETURN_IF_ERROR(read_uint(8, "dimension", &raw));
    const int64_t ne = static_cast<int64_t>(raw);
    if (ne < 0) return corrupt(ne_at, format("ne[%" PRIu64 "] = %" PRId64 " is negative", d, ne));
    if (mul_overflows(n_elements, static_cast<uint64_t>(ne), &n_elements) ||
        n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return corrupt(ne_at, "element count overflows int64 (shape is absurdly large)");
    }
    t->ne.push_back(ne);
  }

  const size_t type_at = pos_;
  uint64_t raw_type = 0;
  RETURN_IF_ERROR(read_uint(4, "tensor type", &raw_type));
  const std::optional<tensor::TypeTraits> tr = tensor::type_traits(static_cast<uint32_t>(raw_type));
  if (!tr) {
    return corrupt(type_at, format("unknown tensor type id %d (newer than this reader, or corrupt)",
                                   static_cast<int32_t>(static_cast<uint32_t>(raw_type))));
  }
  t->type = static_cast<tensor::Type>(raw_type);
  const int64_t ne0 = t->ne.empty() ? 1 : t->ne[0];
  if (ne0 % tr->block_size != 0) {
    return corrupt(type_at, format("ne[0] = %" PRId64 " is not a multiple of the %s block size %d", ne0,
                                   tr->name, tr->block_size));
  }
  // ne[0] is a multiple of the block size, so the blocks divide the element count exactly.
  if (mul_overflows(n_elements / static_cast<uint64_t>(tr->block_size), tr->block_bytes, &t->n_bytes)) {
    return corrupt(type_at, "tensor byte size overflows 64 bits (shape is absurdly large)");
  }
  RETURN_IF_ERROR(read_uint(8, "tensor offset", &t->offset));
  return {};
}

util::Status Parser::run(File& f) {
  // Header.
  if (size_ < 4) {
    return util::Status::error(format("not a GGUF file: it is only %zu bytes long (a GGUF file starts with "
                                      "the 4 bytes \"GGUF\")", size_));
  }
  const uint32_t magic = static_cast<uint32_t>(load_le(p_, 4));
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) {
      const char c = static_cast<char>(p_[i]);
      shown += (c >= 0x20 && c < 0x7F) ? c : '?';
    }
    return util::Status::error(format("not a GGUF file: it starts with \"%s\" (0x%08x), expected \"GGUF\"; "
                                      "convert the model to GGUF first", shown.c_str(), magic));
  }
  pos_ = 4;
  uint64_t version = 0;
  RETURN_IF_ERROR(read_uint(4, "version", &version));
  if (version == 0) return corrupt(4, "GGUF version 0 is invalid");
  if ((version & 0xFFFF) == 0) {
    return util::Status::error(format(
        "the file is big-endian (its version field reads 0x%08" PRIx64 "); shardlm reads only little-endian "
        "GGUF: convert it on a little-endian machine", version));
  }
  if (version == 1) {
    return util::Status::error("GGUF version 1 is no longer supported; re-convert the model with a current "
                               "llama.cpp convert script (writes version 3)");
  }
  if (version > 3) {
    return util::Status::error(format("GGUF version %" PRIu64 " is newer than this reader supports (2 and 3); "
                                      "update shardlm", version));
  }
  f.version_ = static_cast<uint32_t>(version);
  uint64_t n_tensors = 0, n_kv = 0;
  RETURN_IF_ERROR(read_uint(8, "tensor count", &n_tensors));
  RETURN_IF_ERROR(read_uint(8, "metadata count", &n_kv));
  if (n_tensors > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return corrupt(8, format("tensor count %" PRId64 " is negative", static_cast<int64_t>(n_tensors)));
  }
  if (n_kv > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return corrupt(16, format("metadata count %" PRId64 " is negative", static_cast<int64_t>(n_kv)));
  }
  const uint64_t min_kv = sat_mul(n_kv, kMinKvBytes);
  if (min_kv > left()) return truncated(pos_, min_kv, format("%" PRIu64 " metadata entries", n_kv).c_str());
  const uint64_t min_total = sat_add(min_kv, sat_mul(n_tensors, kMinTensorInfoBytes));
  if (min_total > left()) {
    return truncated(pos_, min_total,
                     format("%" PRIu64 " metadata entries and %" PRIu64 " tensor infos", n_kv, n_tensors).c_str());
  }

  // Metadata.
  std::unordered_set<std::string> seen;
  // Counts are bounded by the file size (checked above); the reservations are also capped,
  // since a Value is much larger than its smallest encoding.
  f.kv_.reserve(static_cast<size_t>(std::min<uint64_t>(n_kv, 1024)));
  for (uint64_t i = 0; i < n_kv; ++i) RETURN_IF_ERROR(read_kv(f, i, seen));
  RETURN_IF_ERROR(read_alignment(f));

  // Tensor infos.
  seen.clear();
  f.tensors_.reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, 4096)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    f.tensors_.emplace_back();
    RETURN_IF_ERROR(read_tensor_info(i, seen, &f.tensors_.back()));
  }
  ctx_.clear();

  // Data section: starts at the next multiple of the alignment. Vocab-only files
  // (no tensors) may end right after the metadata, without padding.
  if (n_tensors == 0) {
    f.data_offset_ = pos_;
    return {};
  }
  const uint64_t a = f.alignment_;
  const uint64_t data_offset = (static_cast<uint64_t>(pos_) + a - 1) / a * a;
  if (data_offset > size_) {
    return truncated(pos_, data_offset - pos_, "padding before the tensor data");
  }
  f.data_offset_ = data_offset;
  const uint64_t data_size = size_ - data_offset;
  for (TensorInfo& t : f.tensors_) {
    ctx_ = "tensor '" + t.name + "'";
    if (t.offset % a != 0) {
      return util::Status::error(format(
          "tensor '%s' has data offset %" PRIu64 ", not a multiple of the alignment %" PRIu64
          "; the file is corrupt", t.name.c_str(), t.offset, a));
    }
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return util::Status::error(format(
          "file is truncated: tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64 ", file offset %" PRIu64
          ") extends past the end of the file (%zu bytes); re-download or re-convert the file",
          t.name.c_str(), t.n_bytes, t.offset, data_offset + std::min(t.offset, UINT64_MAX - data_offset), size_));
    }
    t.data = p_ + data_offset + t.offset;
  }
  return {};
}

util::Expected<std::unique_ptr<File>> File::parse(const uint8_t* data, size_t size) {
  std::unique_ptr<File> f(new File());
  f->size_ = size;
  Parser p(data, size);
  util::Status st = p.run(*f);
  if (!st.ok()) return st;
  return f;
}

util::Expected<std::unique_ptr<File>> File::open(const std::string& path) {
  auto map = util::MappedFile::open(path);
  if (!map.ok()) return map.status();
  auto parsed = parse((*map)->data(), (*map)->size());
  if (!parsed.ok()) return util::Status::error("cannot load GGUF file '" + path + "': " + parsed.error());
  std::unique_ptr<File> f = std::move(parsed).value();
  f->map_ = std::move(*map);
  f->path_ = path;
  return f;
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::STRING) return std::nullopt;
  return v->str;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_int() : std::nullopt;
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_float() : std::nullopt;
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::BOOL) return std::nullopt;
  return v->u64 != 0;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

// Saturate instead of overflowing: callers compare against the file's size, and a
// corrupt header may hold any dimensions.
int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne)
    if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  return n;
}

int64_t TensorInfo::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i)
    if (__builtin_mul_overflow(n, ne[i], &n)) return INT64_MAX;
  return n;
}

}  // namespace gguf
