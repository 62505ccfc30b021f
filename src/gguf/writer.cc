// writer.cc: streaming GGUF v3 writer. The header, metadata and tensor infos are encoded
// in memory (they are small), then each tensor's bytes are produced on demand and
// written through a large stdio buffer, so memory stays at about one tensor.
// Deliberately not here: quantization or any knowledge of what tensors mean; misuse by
// the caller (bad names, shapes, value ranges, a producer of the wrong size) is a CHECK,
// only I/O failures are Status.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf/gguf.h"

namespace gguf {

namespace {

constexpr size_t kWriteBuffer = size_t(8) << 20;

// Little-endian encoder into a growing byte string.
class Encoder {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void uint(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  void f32(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    uint(b, 4);
  }
  void f64(double v) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    uint(b, 8);
  }
  void str(const std::string& s) {
    CHECK_MSG(s.size() <= kMaxStringLength, "GGUF string too long");
    uint(s.size(), 8);
    buf_.append(s);
  }
  void pad_to(uint64_t alignment) {
    while (buf_.size() % alignment != 0) u8(0);
  }
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

// Encodes an integer of value type t, CHECKing that it fits.
void encode_int(Encoder& e, ValueType t, int64_t s, uint64_t u, bool from_signed) {
  auto fits_u = [&](uint64_t max) { return from_signed ? (s >= 0 && static_cast<uint64_t>(s) <= max) : u <= max; };
  auto fits_s = [&](int64_t lo, int64_t hi) {
    return from_signed ? (s >= lo && s <= hi)
                       : u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                             static_cast<int64_t>(u) <= hi;
  };
  const uint64_t as_u = from_signed ? static_cast<uint64_t>(s) : u;
  switch (t) {
    case ValueType::UINT8: CHECK_MSG(fits_u(0xFF), "value out of range for UINT8"); e.uint(as_u, 1); break;
    case ValueType::UINT16: CHECK_MSG(fits_u(0xFFFF), "value out of range for UINT16"); e.uint(as_u, 2); break;
    case ValueType::UINT32: CHECK_MSG(fits_u(0xFFFFFFFFu), "value out of range for UINT32"); e.uint(as_u, 4); break;
    case ValueType::UINT64: e.uint(as_u, 8); break;  // arrays keep UINT64 as a bit pattern
    case ValueType::BOOL: CHECK_MSG(fits_u(1), "BOOL must be 0 or 1"); e.uint(as_u, 1); break;
    case ValueType::INT8: CHECK_MSG(fits_s(-128, 127), "value out of range for INT8"); e.uint(as_u, 1); break;
    case ValueType::INT16: CHECK_MSG(fits_s(-32768, 32767), "value out of range for INT16"); e.uint(as_u, 2); break;
    case ValueType::INT32:
      CHECK_MSG(fits_s(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()),
                "value out of range for INT32");
      e.uint(as_u, 4);
      break;
    case ValueType::INT64: CHECK_MSG(fits_s(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()),
                                     "value out of range for INT64");
      e.uint(as_u, 8);
      break;
    default: CHECK_MSG(false, "not an integer value type");
  }
}

bool is_signed_type(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 || t == ValueType::INT64;
}

void encode_value(Encoder& e, const Value& v) {
  e.uint(static_cast<uint32_t>(v.type), 4);
  switch (v.type) {
    case ValueType::STRING: e.str(v.str); return;
    case ValueType::FLOAT32: e.f32(static_cast<float>(v.f64)); return;
    case ValueType::FLOAT64: e.f64(v.f64); return;
    case ValueType::ARRAY: break;
    default: encode_int(e, v.type, v.i64, v.u64, is_signed_type(v.type)); return;
  }
  CHECK_MSG(v.elem_type != ValueType::ARRAY, "nested GGUF arrays are not supported");
  CHECK_MSG(static_cast<int32_t>(v.elem_type) >= 0 && v.elem_type <= ValueType::FLOAT64, "bad element type");
  const uint64_t n = v.count();
  CHECK_MSG(n <= kMaxArrayElements, "GGUF array too long");
  e.uint(static_cast<uint32_t>(v.elem_type), 4);
  e.uint(n, 8);
  if (v.elem_type == ValueType::STRING) {
    for (const std::string& s : v.strs) e.str(s);
  } else if (v.elem_type == ValueType::FLOAT32) {
    for (double f : v.floats) e.f32(static_cast<float>(f));
  } else if (v.elem_type == ValueType::FLOAT64) {
    for (double f : v.floats) e.f64(f);
  } else {
    for (int64_t i : v.ints) encode_int(e, v.elem_type, i, 0, true);
  }
}

uint64_t padded(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// A FILE* with a large buffer; the first failure is remembered and reported once.
class Sink {
 public:
  explicit Sink(const std::string& path) : path_(path), buf_(kWriteBuffer) {
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) {
      st_ = util::Status::error("cannot create '" + path + "': " + std::strerror(errno));
      return;
    }
    opened_ = true;
    std::setvbuf(f_, buf_.data(), _IOFBF, buf_.size());
  }
  ~Sink() {
    if (f_) std::fclose(f_);
  }
  void write(const void* p, size_t n) {
    if (!st_.ok() || n == 0) return;
    if (std::fwrite(p, 1, n, f_) != n) fail("write");
  }
  void zeros(uint64_t n) {
    static const char kZeros[4096] = {};
    while (n > 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZeros));
      write(kZeros, k);
      n -= k;
    }
  }
  // Closes the file; on any failure removes the partial file.
  util::Status finish() {
    if (f_) {
      if (st_.ok() && std::fflush(f_) != 0) fail("flush");
      if (std::fclose(f_) != 0 && st_.ok()) fail("close");
      f_ = nullptr;
    }
    if (!st_.ok() && opened_) std::remove(path_.c_str());
    return st_;
  }

 private:
  void fail(const char* op) {
    st_ = util::Status::error("cannot " + std::string(op) + " '" + path_ + "': " + std::strerror(errno) +
                              " (is the disk full?)");
  }
  std::string path_;
  std::vector<char> buf_;
  FILE* f_ = nullptr;
  bool opened_ = false;  // we created (truncated) the file, so we may remove it on failure
  util::Status st_;
};

}  // namespace

void Writer::set(std::string key, Value v) {
  CHECK_MSG(!key.empty(), "GGUF keys must be non-empty");
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::add_tensor(std::string name, std::vector<int64_t> ne, tensor::Type type, Producer produce) {
  CHECK_MSG(name.size() <= kMaxTensorName, "tensor name must be shorter than 64 bytes");
  CHECK_MSG(ne.size() <= 4, "at most 4 dimensions");
  for (const Pending& p : tensors_) CHECK_MSG(p.name != name, "duplicate tensor name");
  const tensor::TypeTraits& tr = tensor::traits(type);
  uint64_t n_elements = 1;
  for (int64_t d : ne) {
    CHECK_MSG(d >= 0, "negative dimension");
    CHECK_MSG(!__builtin_mul_overflow(n_elements, static_cast<uint64_t>(d), &n_elements) &&
                  n_elements <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
              "element count overflows");
  }
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  CHECK_MSG(ne0 % tr.block_size == 0, "ne[0] must be a multiple of the type's block size");
  uint64_t n_bytes = 0;
  CHECK(!__builtin_mul_overflow(n_elements / tr.block_size, tr.block_bytes, &n_bytes));
  tensors_.push_back(Pending{std::move(name), std::move(ne), type, n_bytes, std::move(produce), nullptr});
}

void Writer::add_tensor(std::string name, std::vector<int64_t> ne, tensor::Type type, const void* data) {
  add_tensor(std::move(name), std::move(ne), type, Producer());
  tensors_.back().data = data;
  CHECK_MSG(data != nullptr || tensors_.back().n_bytes == 0, "tensor data is null");
}

util::Status Writer::write(const std::string& path) const {
  // Alignment: an explicit general.alignment key wins over the default.
  uint64_t alignment = alignment_;
  bool emit_alignment_key = false;
  auto key_it = std::find_if(kv_.begin(), kv_.end(), [](const auto& kv) { return kv.first == "general.alignment"; });
  if (key_it != kv_.end()) {
    CHECK_MSG(key_it->second.type == ValueType::UINT32, "general.alignment must be UINT32");
    CHECK_MSG(alignment_ == kDefaultAlignment || alignment_ == key_it->second.u64,
              "set_alignment disagrees with the general.alignment key");
    alignment = key_it->second.u64;
  } else {
    emit_alignment_key = alignment_ != kDefaultAlignment;
  }
  CHECK_MSG(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two");

  Encoder e;
  e.uint(0x46554747, 4);  // "GGUF"
  e.uint(3, 4);
  e.uint(tensors_.size(), 8);
  e.uint(kv_.size() + (emit_alignment_key ? 1 : 0), 8);
  for (const auto& [key, value] : kv_) {
    e.str(key);
    encode_value(e, value);
  }
  if (emit_alignment_key) {
    e.str("general.alignment");
    encode_value(e, Value::u32(static_cast<uint32_t>(alignment)));
  }
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    e.str(t.name);
    e.uint(t.ne.size(), 4);
    for (int64_t d : t.ne) e.uint(static_cast<uint64_t>(d), 8);
    e.uint(static_cast<uint32_t>(t.type), 4);
    e.uint(offset, 8);
    offset += padded(t.n_bytes, alignment);
  }
  if (!tensors_.empty()) e.pad_to(alignment);

  Sink sink(path);
  sink.write(e.bytes().data(), e.bytes().size());
  std::vector<uint8_t> buf;  // reused: holds one produced tensor at a time
  for (const Pending& t : tensors_) {
    const uint8_t* bytes = static_cast<const uint8_t*>(t.data);
    if (t.produce) {
      buf.resize(t.n_bytes);
      t.produce(buf);
      CHECK_MSG(buf.size() == t.n_bytes, "tensor producer must fill exactly n_bytes");
      bytes = buf.data();
    }
    sink.write(bytes, t.n_bytes);
    sink.zeros(padded(t.n_bytes, alignment) - t.n_bytes);
  }
  return sink.finish();
}

}  // namespace gguf
