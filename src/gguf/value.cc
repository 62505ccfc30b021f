// value.cc: gguf::Value (one metadata value): type names, numeric accessors, the static
// constructors and the human-readable rendering used by `inspect`.
// Deliberately no I/O and no validation of the bytes a value came from (reader.cc does
// that); to_string is for people, not a serialization format.
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>

#include "gguf/gguf.h"

namespace gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "UNKNOWN";
}

namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}
bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

// Lower-case element name for "[N int32s: ...]".
const char* elem_word(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "value";
}

// Shortest text that reads back to the same number (1e-05 for a float 1e-5, not
// 9.99999974737875e-06).
// Whole numbers below 1e15 print in fixed notation (100000, not 1e+05).
std::string format_float(double v, bool single) {
  char buf[64];
  const auto fmt = (std::fabs(v) < 1e15 && v == std::trunc(v)) ? std::chars_format::fixed
                                                                 : std::chars_format::general;
  std::to_chars_result r = single ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v), fmt)
                                  : std::to_chars(buf, buf + sizeof buf, v, fmt);
  return std::string(buf, r.ptr);
}

// Quotes and escapes a string; when max_chars > 0 and s is longer, cuts it (at a UTF-8
// character boundary) and appends `..." (N bytes)`.
std::string quote(const std::string& s, size_t max_chars) {
  size_t n = s.size();
  bool cut = max_chars > 0 && n > max_chars;
  if (cut) {
    n = max_chars;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // no half chars
  }
  std::string out = "\"";
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\x%02x", c);
          out += esc;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  if (cut) {
    out += "...\" (" + std::to_string(s.size()) + " bytes)";
  } else {
    out += '"';
  }
  return out;
}

std::string int_elem(ValueType t, int64_t v) {
  if (t == ValueType::BOOL) return v ? "true" : "false";
  if (t == ValueType::UINT64) return std::to_string(static_cast<uint64_t>(v));
  return std::to_string(v);
}

}  // namespace

uint64_t Value::count() const {
  if (type != ValueType::ARRAY) return 0;
  if (elem_type == ValueType::STRING) return strs.size();
  if (is_float(elem_type)) return floats.size();
  return ints.size();
}

std::optional<int64_t> Value::as_int() const {
  if (is_signed(type)) return i64;
  if (is_unsigned(type) || type == ValueType::BOOL) {
    if (u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u64);
  }
  return std::nullopt;
}

std::optional<double> Value::as_float() const {
  if (is_float(type)) return f64;
  if (is_signed(type)) return static_cast<double>(i64);
  if (is_unsigned(type)) return static_cast<double>(u64);
  return std::nullopt;
}

std::string Value::to_string(size_t max_items, size_t max_chars) const {
  if (is_unsigned(type)) return std::to_string(u64);
  if (is_signed(type)) return std::to_string(i64);
  if (is_float(type)) return format_float(f64, type == ValueType::FLOAT32);
  if (type == ValueType::BOOL) return u64 ? "true" : "false";
  if (type == ValueType::STRING) return quote(str, max_chars);
  if (type != ValueType::ARRAY) return "<unknown value type>";

  const uint64_t n = count();
  const bool abbreviate = n > max_items;
  const uint64_t shown = abbreviate ? max_items : n;
  std::string out = "[";
  if (abbreviate) out += std::to_string(n) + " " + elem_word(elem_type) + "s: ";
  for (uint64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    if (elem_type == ValueType::STRING) {
      out += quote(strs[i], max_chars);
    } else if (is_float(elem_type)) {
      out += format_float(floats[i], elem_type == ValueType::FLOAT32);
    } else {
      out += int_elem(elem_type, ints[i]);
    }
  }
  if (abbreviate) out += shown > 0 ? ", ... ]" : "... ]";
  else out += "]";
  return out;
}

Value Value::u32(uint32_t v) {
  Value r;
  r.type = ValueType::UINT32;
  r.u64 = v;
  return r;
}

Value Value::i32(int32_t v) {
  Value r;
  r.type = ValueType::INT32;
  r.i64 = v;
  return r;
}

Value Value::u64v(uint64_t v) {
  Value r;
  r.type = ValueType::UINT64;
  r.u64 = v;
  return r;
}

Value Value::f32(float v) {
  Value r;
  r.type = ValueType::FLOAT32;
  r.f64 = v;
  return r;
}

Value Value::boolean(bool v) {
  Value r;
  r.type = ValueType::BOOL;
  r.u64 = v ? 1 : 0;
  return r;
}

Value Value::string(std::string v) {
  Value r;
  r.type = ValueType::STRING;
  r.str = std::move(v);
  return r;
}

Value Value::string_array(std::vector<std::string> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::STRING;
  r.strs = std::move(v);
  return r;
}

Value Value::f32_array(std::vector<float> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::FLOAT32;
  r.floats.assign(v.begin(), v.end());
  return r;
}

Value Value::i32_array(std::vector<int32_t> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::INT32;
  r.ints.assign(v.begin(), v.end());
  return r;
}

}  // namespace gguf
