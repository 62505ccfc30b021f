// jinja_methods.cc: attribute/item access, slicing and iteration of jinja::Value, and the
// Python methods templates call on strings (startswith, split, strip, replace, ...) and
// dicts (items, keys, values, get). Strings are indexed by code point, as in Python.
// Deliberately not here: list/dict mutators (append, update, pop: the sandbox refuses
// them, so do we), str.format, case mapping beyond ASCII.
#include <algorithm>
#include <cctype>

#include "tokenizer/jinja_builtins.h"

namespace tokenizer::jinja {
namespace {

std::u32string strip_chars(const std::u32string& s, const Value& chars, bool left, bool right) {
  std::u32string set;
  bool use_set = chars.is_string();
  if (use_set) set = utf8_decode(chars.str);
  else if (!chars.is_undefined() && !chars.is_none()) throw JinjaError("strip arg must be None or str");
  auto strip_it = [&](char32_t c) { return use_set ? set.find(c) != std::u32string::npos : is_python_space(c); };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip_it(s[b])) ++b;
  if (right)
    while (e > b && strip_it(s[e - 1])) --e;
  return s.substr(b, e - b);
}

Value split_string(const std::string& s, const Value& sep, const Value& maxsplit_v) {
  int64_t maxsplit = maxsplit_v.is_number() ? maxsplit_v.integer : -1;
  List parts;
  if (sep.is_undefined() || sep.is_none()) {
    std::u32string u = utf8_decode(s);
    size_t i = 0;
    while (true) {
      while (i < u.size() && is_python_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        size_t e = u.size();
        while (e > i && is_python_space(u[e - 1])) --e;
        parts.push_back(Value::from_string(utf8_encode(u.substr(i, e - i))));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_python_space(u[j])) ++j;
      parts.push_back(Value::from_string(utf8_encode(u.substr(i, j - i))));
      i = j;
    }
    return Value::from_list(std::move(parts));
  }
  if (!sep.is_string()) throw JinjaError("must be str or None, not " + sep.type_name());
  if (sep.str.empty()) throw JinjaError("empty separator");
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep.str, start);
    if (at == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) break;
    parts.push_back(Value::from_string(s.substr(start, at - start)));
    start = at + sep.str.size();
  }
  parts.push_back(Value::from_string(s.substr(start)));
  return Value::from_list(std::move(parts));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw JinjaError("startswith/endswith argument must be str or a tuple of str");
    if (a.str.size() > s.size()) return false;
    return prefix ? s.compare(0, a.str.size(), a.str) == 0 : s.compare(s.size() - a.str.size(), a.str.size(), a.str) == 0;
  };
  if (affix.is_list()) {
    for (const auto& a : *affix.list)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

std::string ascii_map(std::string s, int (*f)(int)) {
  for (auto& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string python_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = utf8_decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (i < u.size()) out += utf8_encode(u.substr(i, 1));
      check_string_size(out.size(), "replace");
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start) + repl;
    check_string_size(out.size(), "replace");
    start = at + old.size();
    ++n;
  }
  return out + s.substr(start);
}

std::string python_capitalize(const std::string& s) {
  std::string out = ascii_map(s, [](int c) { return std::tolower(c); });
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) out[0] = static_cast<char>(std::toupper(out[0]));
  return out;
}

std::string python_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (auto& c : out) {
    unsigned char uc = static_cast<unsigned char>(c);
    if (uc >= 0x80) {
      prev_cased = false;
      continue;
    }
    if (std::isalpha(uc)) {
      c = static_cast<char>(prev_cased ? std::tolower(uc) : std::toupper(uc));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string python_strip(const std::string& s, const Value& chars, bool left, bool right) {
  return utf8_encode(strip_chars(utf8_decode(s), chars, left, right));
}

static Value string_method(const std::string& s, const std::string& name) {
  auto bind = [](Function f) { return Value::from_function(std::move(f)); };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return bind([s, prefix](CallArgs& a) { return Value::from_bool(affix_match(s, a.get(0, "prefix"), prefix)); });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return bind([s, l, r](CallArgs& a) { return Value::from_string(python_strip(s, a.get(0, "chars"), l, r)); });
  }
  if (name == "split") return bind([s](CallArgs& a) { return split_string(s, a.get(0, "sep"), a.get(1, "maxsplit")); });
  if (name == "upper") return bind([s](CallArgs&) { return Value::from_string(ascii_map(s, [](int c) { return std::toupper(c); })); });
  if (name == "lower") return bind([s](CallArgs&) { return Value::from_string(ascii_map(s, [](int c) { return std::tolower(c); })); });
  if (name == "capitalize") return bind([s](CallArgs&) { return Value::from_string(python_capitalize(s)); });
  if (name == "title") return bind([s](CallArgs&) { return Value::from_string(python_title(s)); });
  if (name == "replace") {
    return bind([s](CallArgs& a) {
      Value old = a.get(0, "old"), repl = a.get(1, "new"), count = a.get(2, "count");
      if (!old.is_string() || !repl.is_string()) throw JinjaError("replace() arguments must be str");
      return Value::from_string(python_replace(s, old.str, repl.str, count.is_number() ? count.integer : -1));
    });
  }
  if (name == "find" || name == "count") {
    bool find = name == "find";
    return bind([s, find](CallArgs& a) {
      Value sub = a.get(0, "sub");
      if (!sub.is_string()) throw JinjaError("must be str, not " + sub.type_name());
      if (find) {
        size_t at = s.find(sub.str);
        if (at == std::string::npos) return Value::from_int(-1);
        return Value::from_int(static_cast<int64_t>(utf8_decode(s.substr(0, at)).size()));
      }
      if (sub.str.empty()) return Value::from_int(static_cast<int64_t>(utf8_decode(s).size()) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub.str); at != std::string::npos; at = s.find(sub.str, at + sub.str.size())) ++n;
      return Value::from_int(n);
    });
  }
  if (name == "join") {
    return bind([s](CallArgs& a) {
      std::string out;
      List items = iterate(a.get(0, "iterable"));
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string()) throw JinjaError("sequence item " + std::to_string(i) + ": expected str instance");
        if (i) out += s;
        out += items[i].str;
      }
      return Value::from_string(out);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    return bind([s, name](CallArgs&) {
      std::u32string u = utf8_decode(s);
      if (u.empty()) return Value::from_bool(false);
      for (char32_t c : u) {
        bool ok = name == "isspace" ? is_python_space(c)
                  : c >= 0x80      ? name != "isdigit"
                  : name == "isdigit" ? std::isdigit(static_cast<int>(c)) != 0
                  : name == "isalpha" ? std::isalpha(static_cast<int>(c)) != 0
                                      : std::isalnum(static_cast<int>(c)) != 0;
        if (!ok) return Value::from_bool(false);
      }
      return Value::from_bool(true);
    });
  }
  if (name == "format") throw JinjaError("str.format() is not supported by shardlm's chat-template interpreter");
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

static Value dict_method(const Value& d, const std::string& name) {
  auto bind = [](Function f) { return Value::from_function(std::move(f)); };
  if (name == "items") {
    return bind([d](CallArgs&) {
      List out;
      for (const auto& kv : d.dict->items) out.push_back(Value::from_list({Value::from_string(kv.first), kv.second}, true));
      return Value::from_list(std::move(out));
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return bind([d, keys](CallArgs&) {
      List out;
      for (const auto& kv : d.dict->items) out.push_back(keys ? Value::from_string(kv.first) : kv.second);
      return Value::from_list(std::move(out));
    });
  }
  if (name == "get") {
    return bind([d](CallArgs& a) {
      Value key = a.get(0, "key");
      const Value* v = key.is_string() ? d.dict->find(key.str) : nullptr;
      return v ? *v : a.get(1, "default", Value::none());
    });
  }
  return Value::undefined();
}

static bool is_mutator(const std::string& name) {
  static const char* kNames[] = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
                                 "popitem", "sort", "reverse"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.type) {
    case Value::Type::kUndefined:
      throw JinjaError(obj.str.empty() ? "attribute '" + name + "' of an undefined value" : obj.str);
    case Value::Type::kString: return string_method(obj.str, name);
    case Value::Type::kDict: {
      if (obj.is_namespace) {
        const Value* v = obj.dict->find(name);
        return v ? *v : Value::undefined("namespace has no attribute '" + name + "'");
      }
      if (is_mutator(name)) throw JinjaError("access to dict method '" + name + "' is unsafe (immutable sandbox)");
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Type::kList:
      if (is_mutator(name)) throw JinjaError("access to list method '" + name + "' is unsafe (immutable sandbox)");
      return Value::undefined("'list object' has no attribute '" + name + "'");
    default: {
      std::string msg = "'";
      msg += obj.type_name();
      return Value::undefined(msg + " object' has no attribute '" + name + "'");
    }
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw JinjaError(obj.str.empty() ? "subscript of an undefined value" : obj.str);
  if (obj.is_list() || obj.is_string()) {
    if (key.type == Value::Type::kInt || key.type == Value::Type::kBool) {
      int64_t i = key.type == Value::Type::kBool ? key.boolean : key.integer;
      if (obj.is_list()) {
        int64_t n = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("list index out of range");
        return (*obj.list)[static_cast<size_t>(i)];
      }
      std::u32string u = utf8_decode(obj.str);
      int64_t n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("string index out of range");
      return Value::from_string(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
    }
    if (key.is_string()) return get_attr(obj, key.str);
    return Value::undefined();
  }
  if (obj.is_dict() && !obj.is_namespace) {
    if (key.is_string()) {
      const Value* v = obj.dict->find(key.str);
      if (v) return *v;
      return get_attr(obj, key.str);
    }
    return Value::undefined();
  }
  if (key.is_string()) return get_attr(obj, key.str);
  return Value::undefined();
}

// Python slice.indices(): clamp start/stop for a sequence of length n.
static void slice_indices(int64_t n, const Value& start_v, const Value& stop_v, int64_t step, int64_t* start,
                          int64_t* stop) {
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  auto as_int = [](const Value& v) -> int64_t {
    if (v.type == Value::Type::kInt) return v.integer;
    if (v.type == Value::Type::kBool) return v.boolean;
    throw JinjaError("slice indices must be integers or None");
  };
  int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
  auto clamp = [&](int64_t x) {
    if (x < 0) {
      x += n;
      if (x < lo) x = lo;
    } else if (x > hi) {
      x = hi;
    }
    return x;
  };
  *start = given(start_v) ? clamp(as_int(start_v)) : (step < 0 ? hi : lo);
  *stop = given(stop_v) ? clamp(as_int(stop_v)) : (step < 0 ? lo : hi);
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  int64_t step = 1;
  if (!step_v.is_undefined() && !step_v.is_none()) {
    if (step_v.type != Value::Type::kInt) throw JinjaError("slice indices must be integers or None");
    step = step_v.integer;
  }
  if (step == 0) throw JinjaError("slice step cannot be zero");
  auto pick = [&](int64_t n, auto&& take) {
    int64_t start, stop;
    slice_indices(n, start_v, stop_v, step, &start, &stop);
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {  // a step past int64 is past stop
      take(static_cast<size_t>(i));
      if (__builtin_add_overflow(i, step, &i)) break;
    }
  };
  if (obj.is_list()) {
    List out;
    pick(static_cast<int64_t>(obj.list->size()), [&](size_t i) { out.push_back((*obj.list)[i]); });
    return Value::from_list(std::move(out), obj.is_tuple);
  }
  if (obj.is_string()) {
    std::u32string u = utf8_decode(obj.str), out;
    pick(static_cast<int64_t>(u.size()), [&](size_t i) { out += u[i]; });
    return Value::from_string(utf8_encode(out));
  }
  if (obj.is_undefined()) throw JinjaError(obj.str.empty() ? "slice of an undefined value" : obj.str);
  throw JinjaError("'" + obj.type_name() + "' object is not subscriptable");
}

List iterate(const Value& obj) {
  switch (obj.type) {
    case Value::Type::kUndefined: return {};
    case Value::Type::kList: return *obj.list;
    case Value::Type::kDict: {
      if (obj.is_namespace) break;
      List keys;
      for (const auto& kv : obj.dict->items) keys.push_back(Value::from_string(kv.first));
      return keys;
    }
    case Value::Type::kString: {
      List chars;
      for (char32_t c : utf8_decode(obj.str)) chars.push_back(Value::from_string(utf8_encode(std::u32string(1, c))));
      return chars;
    }
    default: break;
  }
  throw JinjaError("'" + obj.type_name() + "' object is not iterable");
}

int64_t length_of(const Value& obj) {
  switch (obj.type) {
    case Value::Type::kUndefined: return 0;
    case Value::Type::kString: return static_cast<int64_t>(utf8_decode(obj.str).size());
    case Value::Type::kList: return static_cast<int64_t>(obj.list->size());
    case Value::Type::kDict:
      if (!obj.is_namespace) return static_cast<int64_t>(obj.dict->items.size());
      break;
    default: break;
  }
  throw JinjaError("object of type '" + obj.type_name() + "' has no len()");
}

}  // namespace tokenizer::jinja
