// json_schema.cc: JSON schema -> GBNF (see json_schema.h).
#include "grammar/json_schema.h"

#include <map>
#include <set>
#include <vector>

namespace grammar {

using json = nlohmann::ordered_json;
using util::Status;

namespace {

// Rules every JSON grammar shares.
constexpr const char* kBase = R"(ws ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\""
integer ::= "-"? ([0-9] | [1-9] [0-9]{0,15})
number ::= "-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (pair (ws "," ws pair)* ws)? "}"
pair ::= string ws ":" ws value
array ::= "[" ws (value (ws "," ws value)* ws)? "]"
)";

constexpr const char* kFormats = R"(date ::= [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])
time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
hex ::= [0-9a-fA-F]
uuid ::= hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12}
)";

// A GBNF literal of these bytes.
std::string literal(const std::string& bytes) {
  std::string out = "\"";
  static const char* digits = "0123456789ABCDEF";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// Keywords that only annotate; everything else not handled below is refused.
const std::set<std::string>& annotations() {
  static const std::set<std::string> s = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "strict", "name", "contentMediaType", "contentEncoding"};
  return s;
}

class Converter {
 public:
  // tag: prepended to every rule name (several converters' rules in one grammar).
  explicit Converter(const json& root, std::string tag = "") : root_(root), tag_(std::move(tag)) {}

  // The document's rule (or expression) with its rules appended to *rules; *formats set
  // when the date/time/uuid rules are needed.
  util::Expected<std::string> rules(std::string* rules, bool* formats) {
    auto r = rule_for(root_, "#", "root-value");
    if (!r) return r.status();
    for (const auto& [name, body] : rules_) *rules += name + " ::= " + body + "\n";
    *formats = *formats || formats_;
    return r;
  }

  util::Expected<std::string> run(const std::string& prefix = "", const std::string& suffix = "",
                                  const std::string& separator = "", int max_docs = 1) {
    auto r = rule_for(root_, "#", "root-value");
    if (!r) return r.status();
    std::string docs = *r;  // one document, or up to max_docs between separators
    if (max_docs > 1)
      docs += " (" + (separator.empty() ? "" : literal(separator) + " ") + *r + "){0," + std::to_string(max_docs - 1) + "}";
    std::string out = "root ::= " + (prefix.empty() ? "" : literal(prefix) + " ") + docs +
                      (suffix.empty() ? "" : " " + literal(suffix)) + "\n" + kBase;
    if (formats_) out += kFormats;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  static Status fail(const std::string& where, const std::string& what) {
    return Status::error("json_schema at " + where + ": " + what);
  }
  std::string add(const std::string& base, const std::string& body) {
    std::string name;
    for (char c : base) name += (std::isalnum(uint8_t(c)) ? c : '-');
    if (name.empty() || !std::isalpha(uint8_t(name[0]))) name = "s-" + name;
    name = tag_ + name;
    std::string unique = name;
    for (int k = 2; rules_.count(unique) || reserved(unique); ++k) unique = name + "-" + std::to_string(k);
    rules_[unique] = body;
    return unique;
  }
  static bool reserved(const std::string& n) {
    static const std::set<std::string> r = {"root", "ws", "char", "string", "integer", "number", "boolean", "null",
                                            "value", "object", "pair", "array", "date", "time", "hex", "uuid"};
    return r.count(n) > 0;
  }

  // A GBNF expression (a rule name or a parenthesized alternation) for schema s at `where`.
  util::Expected<std::string> rule_for(const json& s, const std::string& where, const std::string& base) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("value");
      return fail(where, "the schema 'false' accepts nothing");
    }
    if (!s.is_object()) return fail(where, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      static const std::set<std::string> handled = {"type", "enum", "const", "properties", "required",
                                                    "additionalProperties", "items", "prefixItems", "minItems",
                                                    "maxItems", "minLength", "maxLength", "format", "anyOf", "oneOf",
                                                    "allOf", "$ref", "minimum", "exclusiveMinimum",
                                                    "unevaluatedProperties", "patternProperties"};
      if (!handled.count(k) && !annotations().count(k))
        return fail(where, "'" + k + "' is not supported by constrained decoding; leave it out of the schema");
    }
    if (const auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) return fail(where, "'$ref' must be a string");
      return ref(it->get<std::string>(), where);
    }
    if (const auto it = s.find("const"); it != s.end()) return literal(it->dump());
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return fail(where + "/enum", "'enum' must be a non-empty array");
      std::string alt;
      for (const json& v : *it) alt += (alt.empty() ? "" : " | ") + literal(v.dump());
      return "(" + alt + ")";
    }
    for (const char* kw : {"anyOf", "oneOf"})
      if (const auto it = s.find(kw); it != s.end()) {
        if (!it->is_array() || it->empty()) return fail(where + "/" + kw, std::string("'") + kw + "' must be a non-empty array");
        std::string alt;
        for (size_t i = 0; i < it->size(); ++i) {
          auto r = rule_for((*it)[i], where + "/" + kw + "/" + std::to_string(i), base);
          if (!r) return r.status();
          alt += (alt.empty() ? "" : " | ") + *r;
        }
        return "(" + alt + ")";
      }
    if (const auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1)
        return fail(where + "/allOf", "'allOf' is supported with exactly one schema; merge the schemas into one");
      return rule_for((*it)[0], where + "/allOf/0", base);
    }
    const auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties") || s.contains("required")) return object(s, where, base);
      if (s.contains("items") || s.contains("prefixItems")) return array(s, where, base);
      return std::string("value");
    }
    if (type->is_array()) {
      if (type->empty()) return fail(where + "/type", "'type' must not be an empty list");
      std::string alt;
      for (const json& t : *type) {
        if (!t.is_string()) return fail(where + "/type", "'type' entries must be strings");
        auto r = typed(s, t.get<std::string>(), where, base);
        if (!r) return r.status();
        alt += (alt.empty() ? "" : " | ") + *r;
      }
      return "(" + alt + ")";
    }
    if (!type->is_string()) return fail(where + "/type", "'type' must be a string or a list of strings");
    return typed(s, type->get<std::string>(), where, base);
  }

  util::Expected<std::string> typed(const json& s, const std::string& t, const std::string& where,
                                    const std::string& base) {
    if (t == "object") return object(s, where, base);
    if (t == "array") return array(s, where, base);
    if (t == "string") return string(s, where, base);
    if (t == "boolean" || t == "null") return t;
    if (t == "integer" || t == "number") {
      const bool has_min = s.contains("minimum"), has_xmin = s.contains("exclusiveMinimum");
      if (!has_min && !has_xmin) return t;
      const json& m = has_min ? s["minimum"] : s["exclusiveMinimum"];
      if (t == "integer" && m.is_number() && !(has_min && has_xmin)) {
        const double v = m.get<double>() + (has_xmin ? 1 : 0);
        if (v == 0) return std::string("([0-9] | [1-9] [0-9]{0,15})");
        if (v == 1) return std::string("([1-9] [0-9]{0,15})");
      }
      return fail(where, "only 'minimum' 0 or 1 of an integer is supported; leave the bound out of the schema");
    }
    return fail(where + "/type", "unknown type '" + t + "'");
  }

  util::Expected<std::string> string(const json& s, const std::string& where, const std::string& base) {
    if (const auto f = s.find("format"); f != s.end()) {
      const std::string fmt = f->is_string() ? f->get<std::string>() : "";
      if (fmt == "date" || fmt == "time" || fmt == "uuid" || fmt == "date-time") {
        formats_ = true;
        return std::string("\"\\\"\" ") + (fmt == "date-time" ? "date \"T\" time" : fmt) + " \"\\\"\"";
      }
      return fail(where + "/format", "format '" + fmt + "' is not supported (date, time, date-time and uuid are)");
    }
    int lo = 0, hi = -1;
    if (s.contains("minLength") && !bound(s["minLength"], &lo)) return fail(where + "/minLength", "must be a count");
    if (s.contains("maxLength") && !bound(s["maxLength"], &hi)) return fail(where + "/maxLength", "must be a count");
    if (hi >= 0 && hi < lo) return fail(where, "'maxLength' is below 'minLength'");
    if (lo == 0 && hi < 0) return std::string("string");
    return add(base, "\"\\\"\" char{" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "} \"\\\"\"");
  }

  static bool bound(const json& v, int* out) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 10000) return false;
    *out = int(v.get<int64_t>());
    return true;
  }

  util::Expected<std::string> object(const json& s, const std::string& where, const std::string& base) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object()) return fail(where + "/properties", "'properties' must be an object");
    std::set<std::string> required;
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return fail(where + "/required", "'required' must be an array of names");
      for (const json& n : *r) {
        if (!n.is_string()) return fail(where + "/required", "'required' must be an array of names");
        required.insert(n.get<std::string>());
      }
    }
    const auto ap = s.find("additionalProperties");
    if (!props && required.empty()) {  // an object with no listed properties
      if (ap != s.end() && ap->is_boolean() && !ap->get<bool>()) return std::string("\"{\" ws \"}\"");
      return std::string("object");
    }
    struct Prop {
      std::string kv;
      bool req;
    };
    std::vector<Prop> list;
    std::vector<std::string> names;
    if (props)
      for (const auto& [k, v] : props->items()) names.push_back(k);
    for (const std::string& r : required)
      if (!props || !props->contains(r)) names.push_back(r);
    for (const std::string& k : names) {
      const json any = true;
      const json& v = props && props->contains(k) ? (*props)[k] : any;
      auto r = rule_for(v, where + "/properties/" + k, base + "-" + k);
      if (!r) return r.status();
      list.push_back({add(base + "-" + k + "-kv", literal(json(k).dump()) + " ws \":\" ws " + *r), required.count(k) > 0});
    }
    // S_i: properties i.. with none written yet; T_i: the same after one was written.
    const size_t n = list.size();
    std::vector<std::string> S(n + 1), T(n + 1);
    T[n] = add(base + "-end", "ws");
    S[n] = "";
    for (size_t i = n; i-- > 0;) {
      const std::string t_next = T[i + 1];
      T[i] = add(base + "-rest", list[i].req ? "ws \",\" ws " + list[i].kv + " " + t_next
                                              : "ws \",\" ws " + list[i].kv + " " + t_next + " | " + t_next);
      const std::string first = list[i].kv + " " + t_next;
      S[i] = add(base + "-first", list[i].req ? first : S[i + 1].empty() ? "(" + first + ")?" : first + " | " + S[i + 1]);
    }
    return add(base, "\"{\" ws " + S[0] + " \"}\"");
  }

  util::Expected<std::string> array(const json& s, const std::string& where, const std::string& base) {
    int lo = 0, hi = -1;
    if (s.contains("minItems") && !bound(s["minItems"], &lo)) return fail(where + "/minItems", "must be a count");
    if (s.contains("maxItems") && !bound(s["maxItems"], &hi)) return fail(where + "/maxItems", "must be a count");
    if (hi >= 0 && hi < lo) return fail(where, "'maxItems' is below 'minItems'");
    if (const auto p = s.find("prefixItems"); p != s.end()) {
      if (!p->is_array() || p->empty()) return fail(where + "/prefixItems", "'prefixItems' must be a non-empty array");
      if (int(p->size()) < lo || (hi >= 0 && int(p->size()) > hi))
        return fail(where, "'prefixItems' with minItems/maxItems other than its length is not supported");
      std::string body = "\"[\" ws";
      for (size_t i = 0; i < p->size(); ++i) {
        auto r = rule_for((*p)[i], where + "/prefixItems/" + std::to_string(i), base + "-" + std::to_string(i));
        if (!r) return r.status();
        body += (i ? " ws \",\" ws " : " ") + *r;
      }
      return add(base, body + " ws \"]\"");
    }
    std::string item = "value";
    if (const auto it = s.find("items"); it != s.end()) {
      auto r = rule_for(*it, where + "/items", base + "-item");
      if (!r) return r.status();
      item = *r;
    }
    if (hi == 0) return std::string("\"[\" ws \"]\"");
    const std::string more = "(ws \",\" ws " + item + "){" + std::to_string(std::max(lo, 1) - 1) + "," +
                             (hi < 0 ? "" : std::to_string(hi - 1)) + "}";
    const std::string items = item + " " + more + " ws";
    return add(base, lo == 0 ? "\"[\" ws (" + items + ")? \"]\"" : "\"[\" ws " + items + " \"]\"");
  }

  util::Expected<std::string> ref(const std::string& r, const std::string& where) {
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    std::string name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"})
      if (r.rfind(prefix, 0) == 0) name = r.substr(std::string(prefix).size());
    const char* section = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    if (name.empty() || !root_.contains(section) || !root_[section].contains(name))
      return fail(where, "'$ref' " + r + " does not name an entry of #/$defs or #/definitions");
    const std::string rule = add("def-" + name, "value");  // placeholder: recursion refers to it
    refs_[r] = rule;
    auto body = rule_for(root_[section][name], r, "def-" + name);
    if (!body) return body.status();
    rules_[rule] = *body;
    return rule;
  }

  const json& root_;
  std::string tag_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  bool formats_ = false;
};

}  // namespace

std::string json_object_gbnf() { return std::string("root ::= object\n") + kBase; }

util::Expected<std::string> json_schema_gbnf(const json& schema) { return Converter(schema).run(); }
util::Expected<std::string> json_schema_gbnf(const json& schema, const std::string& prefix, const std::string& suffix) {
  return Converter(schema).run(prefix, suffix);
}

util::Expected<std::string> json_schema_gbnf(const json& schema, const std::string& prefix, const std::string& separator,
                                             const std::string& suffix, int max_docs) {
  return Converter(schema).run(prefix, suffix, separator, max_docs);
}

util::Expected<std::string> json_schema_choice_gbnf(const std::string& prefix, const std::vector<SchemaBranch>& branches) {
  if (branches.empty()) return Status::error("json_schema_choice_gbnf: no branches");
  std::string alts, rules;
  bool formats = false;
  for (size_t i = 0; i < branches.size(); ++i) {
    const SchemaBranch& b = branches[i];
    std::string tag = "b";
    tag += std::to_string(i);
    tag += '-';
    auto r = Converter(b.schema, tag).rules(&rules, &formats);
    if (!r) return r.status();
    if (i) alts += " | ";
    alts += literal(b.lead);
    if (!b.middle.empty()) alts += " " + b.middle;
    alts += " ";
    alts += *r;
  }
  std::string out = "root ::= ";
  if (!prefix.empty()) out += literal(prefix) + " ";
  out += "(" + alts + ")\n";
  out += kBase;
  if (formats) out += kFormats;
  return out + rules;
}

}  // namespace grammar
