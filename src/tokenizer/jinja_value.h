// jinja_value.h: the value type of the chat-template interpreter (jinja_*.cc), modelled on
// the Python objects Jinja2 hands around: Undefined, None, bool, int, float, str, list,
// tuple, dict (insertion-ordered), namespace and callables. Printing, truthiness, equality
// and tojson follow Python's rules so rendered prompts match Jinja2 byte for byte.
// Deliberately not here: arbitrary-precision ints (int64 only: a result outside is an
// error, exact_int below), unicode case mapping (upper/lower are ASCII), and mutation of
// lists/dicts by templates (the sandbox forbids it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenizer::jinja {

// Every template error (syntax, type, raise_exception) is thrown as JinjaError and turned
// into a util::Status at the ChatTemplate boundary.
class JinjaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An integer result v, or a JinjaError where Python's unbounded int leaves 64 bits
// (overflow: __builtin_*_overflow's answer, taken before the call: the order in which
// arguments are evaluated is unspecified); a wrap would be undefined behaviour.
inline int64_t exact_int(bool overflow, int64_t v, const std::string& op) {
  if (overflow) throw JinjaError("integer overflow in " + op + ": the result does not fit in 64 bits");
  return v;
}

// Bounds on what a template can build (it comes from a downloaded model file): the rendered
// text and any string at most 64 MiB, a list at most 1M items (range()'s bound too).
inline constexpr size_t kMaxStringBytes = 64u << 20;
inline constexpr size_t kMaxListItems = 1'000'000;

// A JinjaError unless a string of n bytes fits under kMaxStringBytes (what: the operation).
inline void check_string_size(size_t n, const char* what) {
  if (n > kMaxStringBytes) throw JinjaError(std::string(what) + ": the string would exceed 64 MiB");
}

struct Value;
struct Dict;
struct CallArgs;
using List = std::vector<Value>;
using Function = std::function<Value(CallArgs&)>;

struct Value {
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Type type = Type::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0.0;
  std::string str;                 // kString; for kUndefined: the name that was missing
  std::shared_ptr<List> list;      // kList (tuples too, see is_tuple)
  std::shared_ptr<Dict> dict;      // kDict (namespaces too, see is_namespace)
  std::shared_ptr<Function> func;  // kFunction
  bool is_tuple = false;
  bool is_namespace = false;

  static Value undefined(std::string hint = {});
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double d);
  static Value from_string(std::string s);
  static Value from_list(List items, bool tuple = false);
  static Value new_dict();
  static Value from_function(Function f);

  bool is_undefined() const { return type == Type::kUndefined; }
  bool is_none() const { return type == Type::kNone; }
  bool is_string() const { return type == Type::kString; }
  bool is_number() const { return type == Type::kInt || type == Type::kFloat || type == Type::kBool; }
  bool is_list() const { return type == Type::kList; }
  bool is_dict() const { return type == Type::kDict; }
  double as_double() const;
  int64_t as_int() const { return type == Type::kBool ? int64_t(boolean) : integer; }  // kBool, kInt

  bool truthy() const;
  // Python str(): what {{ value }} prints. Undefined prints as "".
  std::string to_str() const;
  // Python repr(), used inside containers.
  std::string repr() const;
  // Python type name for error messages ("str", "int", "dict", ...).
  std::string type_name() const;
};

// An insertion-ordered string-keyed dict (Python dict order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
  // The argument named `name` or at position `pos`, else `fallback`.
  Value get(size_t pos, std::string_view name, Value fallback = Value::undefined()) const;
};

bool values_equal(const Value& a, const Value& b);
// Python ordering for < > <= >=; throws for unorderable types.
int compare_values(const Value& a, const Value& b);

Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);
// Python json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...)
// with indent < 0 meaning None.
std::string to_json_text(const Value& v, int indent, const std::string& item_sep,
                         const std::string& key_sep, bool sort_keys);
// Python float repr (shortest round-trip, "1.0", "1e+16", "1e-05").
std::string python_float_repr(double d);

// UTF-8 helpers: strings index, slice and count by code point as Python does.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
bool is_python_space(char32_t c);

}  // namespace tokenizer::jinja
