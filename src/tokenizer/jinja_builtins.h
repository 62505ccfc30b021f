// jinja_builtins.h: what the chat-template interpreter can do to a value — attribute and
// item access, slicing, Python str/dict methods (jinja_methods.cc), Jinja2 filters and
// tests (jinja_builtins.cc). Each follows the Python/Jinja2 function of the same name.
// Deliberately not here: anything that mutates a value (Jinja2's sandbox refuses it too),
// string formatting with % or format().
#pragma once
#include <string>

#include "tokenizer/jinja_value.h"

namespace tokenizer::jinja {

// obj.name (Jinja2's environment.getattr: attribute first, then item). Throws for
// attribute access on an undefined value.
Value get_attr(const Value& obj, const std::string& name);
// obj[key] (environment.getitem: item first, then attribute for string keys).
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python semantics; parts may be undefined (omitted).
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Iterates obj as Python would (list items, dict keys, string characters); undefined
// iterates as empty.
List iterate(const Value& obj);
// len(obj) for strings (code points), lists and dicts.
int64_t length_of(const Value& obj);

// Python str methods shared by filters and methods.
std::string python_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::string python_capitalize(const std::string& s);
std::string python_title(const std::string& s);
std::string python_strip(const std::string& s, const Value& chars, bool left, bool right);

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, const CallArgs& args);

}  // namespace tokenizer::jinja
