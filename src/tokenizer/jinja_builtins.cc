// jinja_builtins.cc: the Jinja2 filters and tests chat templates use, each following the
// jinja2.filters / jinja2.tests function of the same name; tojson follows Hugging Face's
// override (json.dumps with ensure_ascii=False, keys in insertion order).
// Deliberately not here: format, truncate, wordwrap, urlize, xmlattr, batch, slice,
// groupby, pprint — a template using one is refused at parse time as an unknown filter.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "tokenizer/jinja_builtins.h"

namespace tokenizer::jinja {
namespace {

const std::set<std::string>& filter_names() {
  static const std::set<std::string> kNames = {
      "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
      "forceescape", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
      "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string",
      "sum", "title", "tojson", "trim", "unique", "upper", "wordcount"};
  return kNames;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> kNames = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float",
      "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne",
      "none", "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper", "==", "!=", "<",
      "<=", ">", ">="};
  return kNames;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Looks up "a.b.0" style attribute paths as Jinja2's make_attrgetter does.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value::from_int(std::stoll(part))) : get_item(cur, Value::from_string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string lower_ascii(std::string s) {
  for (auto& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

// Sort key with Jinja2's case_sensitive=False default.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::from_string(lower_ascii(v.str));
  return v;
}

CallArgs rest_args(const CallArgs& args, size_t from) {
  CallArgs out;
  for (size_t i = from; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.kwargs = args.kwargs;
  return out;
}

Value select_like(const Value& seq, const CallArgs& args, bool by_attr, bool keep) {
  List out;
  std::string attr;
  size_t test_pos = 0;
  if (by_attr) {
    Value a = args.get(0, "attribute");
    if (!a.is_string()) throw JinjaError("selectattr/rejectattr need an attribute name");
    attr = a.str;
    test_pos = 1;
  }
  Value test = test_pos < args.positional.size() ? args.positional[test_pos] : Value::undefined();
  CallArgs test_args = rest_args(args, test_pos + 1);
  test_args.kwargs.clear();
  for (const Value& item : iterate(seq)) {
    Value subject = by_attr ? attr_path(item, attr) : item;
    bool ok = test.is_undefined() ? subject.truthy()
                                  : (test.is_string() ? apply_test(test.str, subject, test_args)
                                                      : throw JinjaError("test name must be a string"));
    if (ok == keep) out.push_back(item);
  }
  return Value::from_list(std::move(out));
}

// A finite float truncated as Python's int() does, clamped to int64 (Python's int has no
// bound; a cast of an out-of-range double is undefined behaviour).
int64_t truncate(double d) {
  constexpr double kTwo63 = 9223372036854775808.0;
  if (d >= kTwo63) return std::numeric_limits<int64_t>::max();
  if (d < -kTwo63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

int64_t to_int(const Value& v, int64_t fallback) {
  switch (v.type) {
    case Value::Type::kBool: return v.boolean;
    case Value::Type::kInt: return v.integer;
    case Value::Type::kFloat: return std::isfinite(v.number) ? truncate(v.number) : fallback;
    case Value::Type::kString:
      try {
        size_t used = 0;
        std::string s = python_strip(v.str, Value::undefined(), true, true);
        int64_t r = std::stoll(s, &used);
        if (used == s.size()) return r;
        double d = std::stod(s, &used);
        return used == s.size() && std::isfinite(d) ? truncate(d) : fallback;
      } catch (const std::exception&) {
        return fallback;
      }
    default: return fallback;
  }
}

}  // namespace

bool is_known_filter(const std::string& name) { return filter_names().count(name) > 0; }
bool is_known_test(const std::string& name) { return test_names().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  auto str_of = [](const Value& x) { return x.to_str(); };
  if (name == "default" || name == "d") {
    bool boolean = args.get(1, "boolean", Value::from_bool(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return args.get(0, "default_value", Value::from_string(""));
    return v;
  }
  if (name == "length" || name == "count") return Value::from_int(length_of(v));
  if (name == "string") return Value::from_string(str_of(v));
  if (name == "safe") return v;
  if (name == "trim") return Value::from_string(python_strip(str_of(v), args.get(0, "chars"), true, true));
  if (name == "upper" || name == "lower") {
    std::string s = str_of(v);
    for (auto& c : s)
      if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(name == "upper" ? std::toupper(c) : std::tolower(c));
    return Value::from_string(s);
  }
  if (name == "capitalize") return Value::from_string(python_capitalize(str_of(v)));
  if (name == "title") return Value::from_string(python_title(str_of(v)));
  if (name == "escape" || name == "e" || name == "forceescape") return Value::from_string(html_escape(str_of(v)));
  if (name == "replace") {
    Value old = args.get(0, "old"), repl = args.get(1, "new"), count = args.get(2, "count");
    return Value::from_string(python_replace(str_of(v), str_of(old), str_of(repl), count.is_number() ? count.integer : -1));
  }
  if (name == "tojson") {
    // Python's json.dumps: an integer (or bool) indent; 0 and below give newlines only.
    Value indent_v = args.get(1, "indent");
    if (indent_v.type == Value::Type::kFloat) throw JinjaError("tojson indent must be an integer");
    const int64_t indent64 = indent_v.is_number() ? std::max<int64_t>(0, indent_v.as_int()) : -1;
    if (indent64 > 64) throw JinjaError("tojson indent too large");
    const int indent = static_cast<int>(indent64);
    std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
    Value seps = args.get(2, "separators");
    if (seps.is_list() && seps.list->size() == 2) {
      item_sep = (*seps.list)[0].to_str();
      key_sep = (*seps.list)[1].to_str();
    }
    if (args.get(0, "ensure_ascii").truthy()) throw JinjaError("tojson(ensure_ascii=true) is not supported");
    return Value::from_string(to_json_text(v, indent, item_sep, key_sep, args.get(3, "sort_keys").truthy()));
  }
  if (name == "join") {
    Value attr = args.get(1, "attribute");
    std::string sep = str_of(args.get(0, "d", Value::from_string(""))), out;
    List items = iterate(v);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      out += str_of(attr.is_string() ? attr_path(items[i], attr.str) : items[i]);
      check_string_size(out.size(), "join");
    }
    return Value::from_string(out);
  }
  if (name == "first" || name == "last") {
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::from_list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::from_list({});
    if (!v.is_dict() || v.is_namespace) throw JinjaError("Can only get item pairs from a mapping.");
    List out;
    for (const auto& kv : v.dict->items) out.push_back(Value::from_list({Value::from_string(kv.first), kv.second}, true));
    return Value::from_list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw JinjaError("dictsort expects a mapping");
    bool cs = args.get(0, "case_sensitive").truthy();
    Value by = args.get(1, "by", Value::from_string("key"));
    bool rev = args.get(2, "reverse").truthy();
    int pos = by.is_string() && by.str == "value" ? 1 : 0;
    List out;
    for (const auto& kv : v.dict->items) out.push_back(Value::from_list({Value::from_string(kv.first), kv.second}, true));
    std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
      int c = compare_values(sort_key((*a.list)[pos], cs), sort_key((*b.list)[pos], cs));
      return rev ? c > 0 : c < 0;
    });
    return Value::from_list(std::move(out));
  }
  if (name == "select" || name == "reject") return select_like(v, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select_like(v, args, true, name == "selectattr");
  if (name == "map") {
    List out;
    Value attr = args.get(99, "attribute");
    if (attr.is_string()) {
      Value dflt = args.get(99, "default");
      for (const Value& item : iterate(v)) {
        Value r = attr_path(item, attr.str);
        out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
      }
    } else {
      if (args.positional.empty() || !args.positional[0].is_string()) throw JinjaError("map needs a filter name or attribute=");
      std::string f = args.positional[0].str;
      if (!is_known_filter(f)) throw JinjaError("No filter named '" + f + "'");
      CallArgs fa = rest_args(args, 1);
      for (const Value& item : iterate(v)) out.push_back(apply_filter(f, item, fa));
    }
    return Value::from_list(std::move(out));
  }
  if (name == "unique" || name == "sort" || name == "min" || name == "max") {
    bool sort = name == "sort";
    bool cs = args.get(sort ? 1 : 0, "case_sensitive").truthy();
    Value attr = args.get(sort ? 2 : 1, "attribute");
    auto key = [&](const Value& x) { return sort_key(attr.is_string() ? attr_path(x, attr.str) : x, cs); };
    List items = iterate(v);
    if (name == "unique") {
      List out, seen;
      for (const Value& item : items) {
        Value k = key(item);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::from_list(std::move(out));
    }
    if (sort) {
      bool rev = args.get(0, "reverse").truthy();
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        int c = compare_values(key(a), key(b));
        return rev ? c > 0 : c < 0;
      });
      return Value::from_list(std::move(items));
    }
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      int c = compare_values(key(items[i]), key(items[best]));
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = utf8_decode(v.str);
      std::reverse(u.begin(), u.end());
      return Value::from_string(utf8_encode(u));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::from_list(std::move(items));
  }
  if (name == "sum") {
    Value attr = args.get(0, "attribute");
    Value total = args.get(1, "start", Value::from_int(0));
    for (const Value& item : iterate(v)) {
      Value x = attr.is_string() ? attr_path(item, attr.str) : item;
      if (!x.is_number() || !total.is_number()) throw JinjaError("sum supports numbers only");
      if (x.type == Value::Type::kFloat || total.type == Value::Type::kFloat) total = Value::from_float(total.as_double() + x.as_double());
      else {
        int64_t t = 0;
        const bool overflow = __builtin_add_overflow(total.as_int(), x.as_int(), &t);
        total = Value::from_int(exact_int(overflow, t, "sum"));
      }
    }
    return total;
  }
  if (name == "int") return Value::from_int(to_int(v, to_int(args.get(0, "default", Value::from_int(0)), 0)));
  if (name == "float") {
    if (v.is_number()) return Value::from_float(v.as_double());
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string s = python_strip(v.str, Value::undefined(), true, true);
        double d = std::stod(s, &used);
        if (used == s.size()) return Value::from_float(d);
      } catch (const std::exception&) {
      }
    }
    Value d = args.get(0, "default", Value::from_float(0.0));
    return d.is_number() ? Value::from_float(d.as_double()) : d;
  }
  if (name == "abs") {
    if (v.type == Value::Type::kFloat) return Value::from_float(std::fabs(v.number));
    if (v.is_number()) {
      int64_t neg = 0;
      const int64_t i = v.as_int();
      const bool overflow = __builtin_sub_overflow(int64_t(0), i, &neg);
      return Value::from_int(i >= 0 ? i : exact_int(overflow, neg, "abs"));
    }
    throw JinjaError("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") {
    int64_t precision = args.get(0, "precision", Value::from_int(0)).integer;
    std::string method = args.get(1, "method", Value::from_string("common")).to_str();
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_double() * scale;
    double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value::from_float(r / scale);
  }
  if (name == "wordcount") {
    Value words = get_attr(Value::from_string(str_of(v)), "split");
    CallArgs none;
    return Value::from_int(length_of((*words.func)(none)));
  }
  if (name == "center") {
    int64_t width = args.get(0, "width", Value::from_int(80)).integer;
    std::u32string u = utf8_decode(str_of(v));
    if (width <= static_cast<int64_t>(u.size()) || width > (1 << 20)) return Value::from_string(str_of(v));
    size_t total = static_cast<size_t>(width) - u.size();
    size_t left = total / 2 + (total & static_cast<size_t>(width) & 1);
    return Value::from_string(std::string(left, ' ') + str_of(v) + std::string(total - left, ' '));
  }
  if (name == "indent") {
    Value w = args.get(0, "width", Value::from_int(4));
    std::string ind = w.is_string() ? w.str : std::string(static_cast<size_t>(std::clamp<int64_t>(w.integer, 0, 1024)), ' ');
    bool first = args.get(1, "first").truthy(), blank = args.get(2, "blank").truthy();
    std::string s = str_of(v) + "\n";
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) lines.push_back(s.substr(start, nl - start));
    std::string rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + ((blank || !lines[i].empty()) ? ind + lines[i] : lines[i]);
    return Value::from_string(first ? ind + rv : rv);
  }
  if (name == "attr") {
    Value a = args.get(0, "name");
    return a.is_string() ? get_attr(v, a.str) : Value::undefined();
  }
  throw JinjaError("No filter named '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  using T = Value::Type;
  Value arg = args.get(0, "other");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.type == T::kBool;
  if (name == "true") return v.type == T::kBool && v.boolean;
  if (name == "false") return v.type == T::kBool && !v.boolean;
  if (name == "integer") return v.type == T::kInt;
  if (name == "float") return v.type == T::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace;
  if (name == "iterable") return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace) || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace) || v.is_undefined();
  if (name == "callable") return v.type == T::kFunction;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    std::string s = v.to_str();
    bool cased = false;
    for (char c : s) {
      if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
      cased = cased || std::isalpha(static_cast<unsigned char>(c));
    }
    return cased;
  }
  if (name == "odd" || name == "even") {
    if (v.type != T::kInt && v.type != T::kBool) throw JinjaError("odd/even need an integer");
    int64_t x = v.type == T::kBool ? v.boolean : v.integer;
    return ((x % 2 + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    Value n = args.get(0, "num");
    if (!n.is_number() || n.as_double() == 0) throw JinjaError("divisibleby needs a non-zero number");
    return std::fmod(v.as_double(), n.as_double()) == 0;
  }
  if (name == "sameas") {
    if (v.type != arg.type) return false;
    if (v.is_list()) return v.list == arg.list;
    if (v.is_dict()) return v.dict == arg.dict;
    return values_equal(v, arg);
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg);
  if (name == "ne" || name == "!=") return !values_equal(v, arg);
  if (name == "lt" || name == "lessthan" || name == "<") return compare_values(v, arg) < 0;
  if (name == "le" || name == "<=") return compare_values(v, arg) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_values(v, arg) > 0;
  if (name == "ge" || name == ">=") return compare_values(v, arg) >= 0;
  if (name == "in") {
    Value seq = args.get(0, "seq");
    if (seq.is_string()) {
      if (!v.is_string()) throw JinjaError("'in <string>' requires string as left operand");
      return seq.str.find(v.str) != std::string::npos;
    }
    if (seq.is_dict()) return v.is_string() && seq.dict->find(v.str) != nullptr;
    for (const Value& x : iterate(seq))
      if (values_equal(x, v)) return true;
    return false;
  }
  throw JinjaError("No test named '" + name + "'");
}

}  // namespace tokenizer::jinja
