// jinja_value.cc: Python-compatible behaviour of jinja::Value — str()/repr() text, float
// repr, truthiness, ==/< semantics, JSON in (nlohmann) and out (json.dumps), UTF-8 code
// points. Deliberately not here: filters, tests and methods (jinja_builtins.cc).
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tokenizer::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.str = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.type = Type::kNone;
  return v;
}
Value Value::from_bool(bool b) {
  Value v;
  v.type = Type::kBool;
  v.boolean = b;
  return v;
}
Value Value::from_int(int64_t i) {
  Value v;
  v.type = Type::kInt;
  v.integer = i;
  return v;
}
Value Value::from_float(double d) {
  Value v;
  v.type = Type::kFloat;
  v.number = d;
  return v;
}
Value Value::from_string(std::string s) {
  Value v;
  v.type = Type::kString;
  v.str = std::move(s);
  return v;
}
Value Value::from_list(List items, bool tuple) {
  Value v;
  v.type = Type::kList;
  v.list = std::make_shared<List>(std::move(items));
  v.is_tuple = tuple;
  return v;
}
Value Value::new_dict() {
  Value v;
  v.type = Type::kDict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::from_function(Function f) {
  Value v;
  v.type = Type::kFunction;
  v.func = std::make_shared<Function>(std::move(f));
  return v;
}

double Value::as_double() const {
  switch (type) {
    case Type::kBool: return boolean ? 1.0 : 0.0;
    case Type::kInt: return static_cast<double>(integer);
    case Type::kFloat: return number;
    default: throw JinjaError("expected a number, got " + type_name());
  }
}

bool Value::truthy() const {
  switch (type) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return boolean;
    case Type::kInt: return integer != 0;
    case Type::kFloat: return number != 0.0;
    case Type::kString: return !str.empty();
    case Type::kList: return !list->empty();
    case Type::kDict: return is_namespace || !dict->items.empty();
    case Type::kFunction: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (type) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return is_tuple ? "tuple" : "list";
    case Type::kDict: return is_namespace ? "Namespace" : "dict";
    case Type::kFunction: return "function";
  }
  return "?";
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  int exp = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  return sign + out;
}

static std::string repr_string(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string Value::to_str() const {
  switch (type) {
    case Type::kUndefined: return "";
    case Type::kString: return str;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (type) {
    case Type::kUndefined: return "";
    case Type::kNone: return "None";
    case Type::kBool: return boolean ? "True" : "False";
    case Type::kInt: return std::to_string(integer);
    case Type::kFloat: return python_float_repr(number);
    case Type::kString: return repr_string(str);
    case Type::kList: {
      std::string out = is_tuple ? "(" : "[";
      for (size_t i = 0; i < list->size(); ++i) {
        if (i) out += ", ";
        out += (*list)[i].repr();
      }
      if (is_tuple && list->size() == 1) out += ",";
      return out + (is_tuple ? ")" : "]");
    }
    case Type::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict->items.size(); ++i) {
        if (i) out += ", ";
        out += repr_string(dict->items[i].first) + ": " + dict->items[i].second.repr();
      }
      out += "}";
      return is_namespace ? "<Namespace " + out + ">" : out;
    }
    case Type::kFunction: return "<function>";
  }
  return "";
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& kv : items) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t pos, std::string_view name, Value fallback) const {
  for (const auto& kv : kwargs)
    if (kv.first == name) return kv.second;
  if (pos < positional.size()) return positional[pos];
  return fallback;
}

bool values_equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.type != T::kFloat && b.type != T::kFloat) {
      int64_t x = a.type == T::kBool ? a.boolean : a.integer;
      int64_t y = b.type == T::kBool ? b.boolean : b.integer;
      return x == y;
    }
    return a.as_double() == b.as_double();
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case T::kUndefined:
    case T::kNone: return true;
    case T::kString: return a.str == b.str;
    case T::kList:
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!values_equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case T::kDict:
      if (a.is_namespace || b.is_namespace) return a.dict == b.dict;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* other = b.dict->find(kv.first);
        if (!other || !values_equal(kv.second, *other)) return false;
      }
      return true;
    case T::kFunction: return a.func == b.func;
    default: return false;
  }
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type == Value::Type::kInt && b.type == Value::Type::kInt)
      return a.integer < b.integer ? -1 : (a.integer > b.integer ? 1 : 0);
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) return a.str.compare(b.str) < 0 ? -1 : (a.str == b.str ? 0 : 1);
  if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i) {
      if (values_equal((*a.list)[i], (*b.list)[i])) continue;
      return compare_values((*a.list)[i], (*b.list)[i]);
    }
    return a.list->size() < b.list->size() ? -1 : (a.list->size() > b.list->size() ? 1 : 0);
  }
  throw JinjaError("'<' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
}

template <typename J>
static Value from_json_impl(const J& j) {
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value::from_bool(j.template get<bool>());
  if (j.is_number_float()) return Value::from_float(j.template get<double>());
  if (j.is_number_unsigned()) return Value::from_int(static_cast<int64_t>(j.template get<uint64_t>()));
  if (j.is_number_integer()) return Value::from_int(j.template get<int64_t>());
  if (j.is_string()) return Value::from_string(j.template get<std::string>());
  if (j.is_array()) {
    List items;
    for (const auto& e : j) items.push_back(from_json_impl(e));
    return Value::from_list(std::move(items));
  }
  Value d = Value::new_dict();
  for (auto it = j.begin(); it != j.end(); ++it) d.dict->items.emplace_back(it.key(), from_json_impl(*it));
  return d;
}
Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

static void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

static void json_dump(const Value& v, int indent, int level, const std::string& item_sep,
                      const std::string& key_sep, bool sort_keys, std::string& out) {
  using T = Value::Type;
  auto newline = [&](int lvl) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.type) {
    case T::kNone: out += "null"; return;
    case T::kBool: out += v.boolean ? "true" : "false"; return;
    case T::kInt: out += std::to_string(v.integer); return;
    case T::kFloat:
      if (std::isnan(v.number)) out += "NaN";
      else if (std::isinf(v.number)) out += v.number < 0 ? "-Infinity" : "Infinity";
      else out += python_float_repr(v.number);
      return;
    case T::kString: json_string(v.str, out); return;
    case T::kList:
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_dump((*v.list)[i], indent, level + 1, item_sep, key_sep, sort_keys, out);
      }
      newline(level);
      out += "]";
      return;
    case T::kDict: {
      if (v.is_namespace) break;
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += "{";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_string(items[i]->first, out);
        out += key_sep;
        json_dump(items[i]->second, indent, level + 1, item_sep, key_sep, sort_keys, out);
      }
      newline(level);
      out += "}";
      return;
    }
    default: break;
  }
  throw JinjaError("Object of type " + v.type_name() + " is not JSON serializable");
}

std::string to_json_text(const Value& v, int indent, const std::string& item_sep,
                         const std::string& key_sep, bool sort_keys) {
  std::string out;
  json_dump(v, indent, 0, item_sep, key_sep, sort_keys, out);
  return out;
}

// Invalid bytes decode to U+DC80..U+DCFF (Python's surrogateescape) so they round-trip.
std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
               (cp >= 0xd800 && cp <= 0xdfff)))
      ok = false;
    if (!ok) {
      out += static_cast<char32_t>(0xdc00 + c);
      ++i;
    } else {
      out += cp;
      i += len;
    }
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xdc80 && cp <= 0xdcff) {
      out += static_cast<char>(cp - 0xdc00);
    } else if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

}  // namespace tokenizer::jinja
