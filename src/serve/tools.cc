// tools.cc: tool calls in the Hermes, Llama 3, Mistral, harmony and generic formats (see tools.h).
#include "serve/tools.h"

#include <random>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"

namespace serve {

using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";
constexpr const char* kMistral = "[TOOL_CALLS]";
constexpr const char* kPythonTag = "<|python_tag|>";

std::string call_id(ToolFormat f) {
  static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::string id = f == ToolFormat::kMistral ? "" : "call_";
  for (int i = 0, n = f == ToolFormat::kMistral ? 9 : 24; i < n; ++i) id += digits[rd() % 62];
  return id;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// One call from its JSON object; false when it is not one.
bool add_call(ToolFormat f, const nlohmann::json& j, std::vector<ToolCall>* calls) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  auto args = j.find("arguments");
  if (args == j.end() && f == ToolFormat::kLlama3) args = j.find("parameters");
  if (name == j.end() || !name->is_string() || args == j.end() || !args->is_object()) return false;
  calls->push_back({call_id(f), name->get<std::string>(), args->dump()});
  return true;
}

nlohmann::json parse_json(const std::string& s) { return nlohmann::json::parse(s, nullptr, false); }

// The generic format's reply: {"tool_call": CALL}, {"tool_calls": [CALL, ...]} or {"response": TEXT}.
bool parse_generic(const std::string& text, ToolReply* r) {
  const auto j = parse_json(text);
  if (!j.is_object() || j.size() != 1) return false;
  if (auto c = j.find("tool_call"); c != j.end()) return add_call(ToolFormat::kGeneric, *c, &r->calls);
  if (auto cs = j.find("tool_calls"); cs != j.end() && cs->is_array() && !cs->empty()) {
    for (const auto& c : *cs)
      if (!add_call(ToolFormat::kGeneric, c, &r->calls)) return r->calls.clear(), false;
    return true;
  }
  if (auto t = j.find("response"); t != j.end() && t->is_string()) {
    r->content = t->get<std::string>();
    return true;
  }
  return false;
}

// harmony's header between the function's name and its arguments: the channel when the
// recipient is in the role header (<|start|>assistant to=functions.NAME<|channel|>commentary
// json<|message|>, as the template writes past calls; a forced call opens the reply so),
// then the content type. auto: the channel may have come before the recipient.
constexpr const char* kHarmonyHeader = "\"<|channel|>commentary\" (\" \" \"<|constrain|>\"? \"json\")? \"<|message|>\"";
constexpr const char* kHarmonyAutoHeader =
    "(\"<|channel|>commentary\")? (\" \" \"<|constrain|>\"? \"json\")? \"<|message|>\"";
constexpr const char* kHarmonyTo = " to=functions.";

// Where the calls of a reply start, or npos.
size_t calls_start(ToolFormat f, const std::string& text) {
  if (f == ToolFormat::kHermes || f == ToolFormat::kHarmony) return text.find(kHermesOpen);
  if (f == ToolFormat::kMistral) return text.find(kMistral);
  const size_t a = text.find_first_not_of(" \t\r\n");  // Llama 3: the whole reply is the call
  if (a != std::string::npos && (text[a] == '{' || text.compare(a, 14, kPythonTag) == 0)) return a;
  return std::string::npos;
}

// The calls of text[at..]; false when they do not parse.
bool parse_calls(ToolFormat f, const std::string& text, size_t at, std::vector<ToolCall>* calls) {
  if (f == ToolFormat::kMistral) {
    const auto j = parse_json(text.substr(at + std::string(kMistral).size()));
    if (!j.is_array() || j.empty()) return false;
    for (const auto& c : j)
      if (!add_call(f, c, calls)) return false;
    return true;
  }
  if (f == ToolFormat::kLlama3) {
    std::string body = trim(text.substr(at));
    if (body.rfind(kPythonTag, 0) == 0) body = body.substr(14);
    if (add_call(f, parse_json(body), calls)) return true;
    calls->clear();  // several calls, separated by ';'
    size_t from = 0;
    for (;;) {
      const size_t semi = body.find(';', from);
      if (!add_call(f, parse_json(body.substr(from, semi == std::string::npos ? semi : semi - from)), calls)) {
        calls->clear();
        return false;
      }
      if (semi == std::string::npos) return true;
      from = semi + 1;
    }
  }
  const std::string open = kHermesOpen, close = kHermesClose;
  while (at != std::string::npos) {
    const size_t body = at + open.size();
    const size_t end = text.find(close, body);
    if (!add_call(f, parse_json(text.substr(body, end == std::string::npos ? end : end - body)), calls)) return false;
    if (end == std::string::npos) break;
    at = text.find(open, end + close.size());
    // Only whitespace may separate calls.
    const std::string gap = text.substr(end + close.size(), at == std::string::npos ? at : at - end - close.size());
    if (gap.find_first_not_of(" \t\r\n") != std::string::npos) return false;
  }
  return true;
}

}  // namespace

const char* const kHarmonyCallClose = "}\n</tool_call>";

std::string harmony_call_open(const std::string& name) {
  return std::string(kHermesOpen) + "\n{\"name\": " + nlohmann::json(name).dump() + ", \"arguments\": ";
}

ToolFormat tool_format(const std::string& source) {
  if (source.find("tools") == std::string::npos) return ToolFormat::kNone;
  if (source.find("<|channel|>") != std::string::npos && source.find("functions.") != std::string::npos &&
      source.find(" to=") != std::string::npos)
    return ToolFormat::kHarmony;
  if (source.find(kHermesOpen) != std::string::npos) return ToolFormat::kHermes;
  if (source.find(kMistral) != std::string::npos) return ToolFormat::kMistral;
  if (source.find(kPythonTag) != std::string::npos ||
      (source.find("<|start_header_id|>") != std::string::npos && source.find("\"parameters\"") != std::string::npos))
    return ToolFormat::kLlama3;
  return ToolFormat::kNone;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes: return "Hermes <tool_call>";
    case ToolFormat::kLlama3: return "Llama 3 JSON";
    case ToolFormat::kMistral: return "Mistral [TOOL_CALLS]";
    case ToolFormat::kGeneric: return "generic JSON (tools in the system turn)";
    case ToolFormat::kHarmony: return "harmony (commentary to=functions.NAME)";
    default: return "none";
  }
}

util::Expected<std::string> tool_call_gbnf(ToolFormat f, const ojson& tools, ToolChoice choice, const std::string& name,
                                           bool parallel) {
  const bool forced = choice == ToolChoice::kRequired || choice == ToolChoice::kNamed;
  if (choice == ToolChoice::kNone || f == ToolFormat::kNone) return std::string();
  if (f == ToolFormat::kHarmony) {
    // " to=functions." NAME header ARGUMENTS; one call (<|call|> ends the turn), the same
    // grammar forced (from the reply's start, right after the prompt's <|start|>assistant)
    // and auto (from the trigger " to=functions.").
    std::vector<grammar::SchemaBranch> branches;
    for (size_t i = 0; i < tools.size(); ++i) {
      const ojson& fn = tools[i]["function"];
      if (choice == ToolChoice::kNamed && fn["name"] != name) continue;
      const ojson params = fn.contains("parameters") ? fn["parameters"] : ojson{{"type", "object"}};
      if (auto g = grammar::json_schema_gbnf(params); !g)
        return util::Status::error("tools[" + std::to_string(i) + "].function.parameters: " + g.status().message());
      branches.push_back({fn["name"].get<std::string>(), forced ? kHarmonyHeader : kHarmonyAutoHeader, params});
    }
    return grammar::json_schema_choice_gbnf(kHarmonyTo, branches);
  }
  // One call's object per tool: {"name": NAME, "arguments" (Llama: "parameters"): its schema}.
  ojson calls = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& fn = tools[i]["function"];
    if (choice == ToolChoice::kNamed && fn["name"] != name) continue;
    const ojson params = fn.contains("parameters") ? fn["parameters"] : ojson{{"type", "object"}};
    const char* key = f == ToolFormat::kLlama3 ? "parameters" : "arguments";
    const ojson call = {{"type", "object"},
                        {"properties", {{"name", {{"const", fn["name"]}}}, {key, params}}},
                        {"required", {"name", key}}};
    // Each tool's schema alone first, so an error names the tool and its own pointer.
    if (auto g = grammar::json_schema_gbnf(params); !g)
      return util::Status::error("tools[" + std::to_string(i) + "].function.parameters: " + g.status().message());
    calls.push_back(call);
  }
  ojson schema = calls.size() == 1 ? calls[0] : ojson{{"anyOf", calls}};
  const int most = parallel ? kMaxParallelCalls : 1;
  const std::string open = std::string(kHermesOpen) + "\n", close = std::string("\n") + kHermesClose;
  switch (f) {
    case ToolFormat::kHermes: return grammar::json_schema_gbnf(schema, open, close + "\n" + open, close, most);
    case ToolFormat::kMistral: return grammar::json_schema_gbnf(schema, std::string(kMistral) + " [", ", ", "]", most);
    case ToolFormat::kLlama3: return grammar::json_schema_gbnf(schema, "", "; ", "", most);
    default: break;
  }
  ojson reply = {{"type", "object"}, {"properties", {{"tool_call", schema}}}, {"required", {"tool_call"}}};
  if (parallel)
    reply = {{"anyOf", {reply, {{"type", "object"},
                                {"properties", {{"tool_calls", {{"type", "array"}, {"items", schema},
                                                                {"minItems", 1}, {"maxItems", most}}}}},
                                {"required", {"tool_calls"}}}}}};
  if (!forced) {
    const ojson text = {{"type", "object"}, {"properties", {{"response", {{"type", "string"}}}}}, {"required", {"response"}}};
    reply = reply.contains("anyOf") ? ojson{{"anyOf", {reply["anyOf"][0], reply["anyOf"][1], text}}}
                                    : ojson{{"anyOf", {reply, text}}};
  }
  return grammar::json_schema_gbnf(reply);
}

std::vector<grammar::Trigger> tool_triggers(ToolFormat f, ToolChoice choice) {
  if (choice != ToolChoice::kAuto) return {};
  switch (f) {
    case ToolFormat::kHermes: return {{kHermesOpen, false}};
    case ToolFormat::kMistral: return {{kMistral, false}};
    case ToolFormat::kLlama3: return {{"{", true}};
    case ToolFormat::kHarmony: return {{kHarmonyTo, false}};
    default: return {};
  }
}

std::string generic_tool_prompt(const ojson& tools, ToolChoice choice) {
  ojson list = ojson::array();
  for (const ojson& t : tools) list.push_back(t["function"]);
  std::string s = "You can call these tools (JSON schemas of their arguments):\n" + list.dump(2) +
                  "\n\nReply with one JSON object: {\"tool_call\": {\"name\": TOOL, \"arguments\": {...}}}";
  if (choice == ToolChoice::kAuto) s += " to call a tool, or {\"response\": \"your answer\"} to answer in text";
  return s + ".";
}

bool has_tool_turns(const ojson& messages) {
  for (const ojson& m : messages)
    if (m["role"] == "tool" || (m.contains("tool_calls") && !m["tool_calls"].empty())) return true;
  return false;
}

ojson generic_tool_messages(const ojson& messages, const std::string& system) {
  ojson out = ojson::array();
  bool has_system = !messages.empty() && messages[0]["role"] == "system";
  if (!has_system && !system.empty()) out.push_back({{"role", "system"}, {"content", system}});
  for (const ojson& m : messages) {
    ojson c = m;
    if (c["role"] == "system" && out.empty() && !system.empty()) {
      c["content"] = c["content"].get<std::string>() + "\n\n" + system;
    } else if (c["role"] == "assistant" && c.contains("tool_calls") && !c["tool_calls"].empty()) {
      ojson calls = ojson::array();
      for (const ojson& t : c["tool_calls"]) calls.push_back(t["function"]);
      c = {{"role", "assistant"},
           {"content", calls.size() == 1 ? ojson{{"tool_call", calls[0]}}.dump() : ojson{{"tool_calls", calls}}.dump()}};
    } else if (c["role"] == "tool") {
      c = {{"role", "user"}, {"content", ojson{{"tool_response", {{"id", m.value("tool_call_id", "")},
                                                                  {"content", m["content"]}}}}.dump()}};
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string tool_stop(ToolFormat f) { return f == ToolFormat::kHermes ? kHermesClose : ""; }

ToolReply parse_tool_calls(ToolFormat f, const std::string& text) {
  ToolReply r;
  if (f == ToolFormat::kGeneric) return parse_generic(text, &r) ? r : ToolReply{text, {}};
  const size_t first = calls_start(f, text);
  if (first == std::string::npos || !parse_calls(f, text, first, &r.calls)) return ToolReply{text, {}};
  r.content = trim(text.substr(0, first));
  return r;
}

std::string ToolStream::push(const std::string& text) {
  held_ += text;
  if (in_call_ || f_ == ToolFormat::kGeneric) return "";  // generic: the reply is one JSON object
  size_t keep = held_.size();
  if (f_ == ToolFormat::kLlama3) {
    // The reply's first characters decide: a call, or content from then on.
    if (!plain_) {
      const size_t a = held_.find_first_not_of(" \t\r\n");
      if (a == std::string::npos) return "";
      const std::string tag = kPythonTag;
      const size_t n = std::min(held_.size() - a, tag.size());
      if (held_[a] == '{' || held_.compare(a, n, tag, 0, n) == 0) {
        in_call_ = held_[a] == '{' || n == tag.size();
        return "";
      }
      plain_ = true;
    }
  } else {
    const std::string marker = f_ == ToolFormat::kMistral ? kMistral : kHermesOpen;
    const size_t open = held_.find(marker);
    if (open != std::string::npos) {
      in_call_ = true;
      keep = open;
    } else {  // hold a tail that may be the start of the marker
      for (size_t n = std::min(held_.size(), marker.size() - 1); n > 0; --n)
        if (held_.compare(held_.size() - n, n, marker, 0, n) == 0) {
          keep = held_.size() - n;
          break;
        }
    }
  }
  std::string out = held_.substr(0, keep);
  held_.erase(0, keep);
  shown_ += out;
  return out;
}

namespace {

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// After `"key"` at s[at..]: the position past `: ` and the value's first byte, or npos
// when the text is not there (yet).
size_t value_at(const std::string& s, size_t at, size_t key_size) {
  size_t i = skip_space(s, at + key_size);
  if (i >= s.size() || s[i] != ':') return std::string::npos;
  i = skip_space(s, i + 1);
  return i < s.size() ? i : std::string::npos;
}

// The end (past the closing quote) of the JSON string starting at s[at], or npos.
size_t string_end(const std::string& s, size_t at) {
  for (size_t i = at + 1; i < s.size(); ++i) {
    if (s[i] == '\\') ++i;
    else if (s[i] == '"') return i + 1;
  }
  return std::string::npos;
}

}  // namespace

std::vector<ToolDelta> ToolStream::deltas() {
  std::vector<ToolDelta> out;
  if (!in_call_ && f_ != ToolFormat::kGeneric) return out;
  const std::string& s = held_;
  for (;;) {
    if (!in_args_) {  // {"name": NAME, "arguments" (or "parameters"): {...}}, name first (as the grammar writes it)
      const size_t n = s.find("\"name\"", scan_);
      if (n == std::string::npos) return out;
      const size_t v = value_at(s, n, 6);
      if (v == std::string::npos || s[v] != '"') return out;
      const size_t e = string_end(s, v);
      if (e == std::string::npos) return out;
      const auto name = parse_json(s.substr(v, e - v));
      size_t a = s.find(f_ == ToolFormat::kLlama3 ? "\"parameters\"" : "\"arguments\"", e);
      if (a == std::string::npos) return out;
      const size_t o = value_at(s, a, f_ == ToolFormat::kLlama3 ? 12 : 11);
      if (o == std::string::npos || s[o] != '{' || !name.is_string()) return out;
      ids_.push_back(call_id(f_));
      waiting_.push_back({int(ids_.size()) - 1, true, ids_.back(), name.get<std::string>(), ""});
      partial_.push_back({ids_.back(), name.get<std::string>(), ""});
      in_args_ = true;
      in_str_ = esc_ = false;
      depth_ = 0;
      scan_ = o;
    }
    size_t i = scan_;  // the arguments' text up to where their object closes
    for (; i < s.size() && in_args_; ++i) {
      const char c = s[i];
      if (in_str_) {
        if (esc_) esc_ = false;
        else if (c == '\\') esc_ = true;
        else if (c == '"') in_str_ = false;
      } else if (c == '"') {
        in_str_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        in_args_ = false;
      }
    }
    if (i > scan_) {
      waiting_.push_back({int(ids_.size()) - 1, false, "", "", s.substr(scan_, i - scan_)});
      partial_.back().arguments += waiting_.back().arguments;
    }
    scan_ = i;
    if (!in_args_) closed_++;
    // The first call goes out as it comes; a later one once whole, so that a reply cut
    // inside an optional further call never shows it (finish()).
    if (!in_args_ || ids_.size() == 1) {
      out.insert(out.end(), waiting_.begin(), waiting_.end());
      waiting_.clear();
    }
    if (in_args_) return out;
  }
}

ToolReply ToolStream::finish() {
  deltas();  // the calls begun
  ToolReply r;
  if (f_ == ToolFormat::kGeneric) {
    r = parse_tool_calls(f_, held_);  // nothing was shown
  } else {
    r = parse_tool_calls(f_, shown_ + held_);
    if (r.calls.empty()) {
      r.content = held_;  // the rest, as content
    } else {
      r.content = r.content.size() > shown_.size() ? r.content.substr(shown_.size()) : "";
    }
  }
  if (r.calls.empty() && !partial_.empty()) {
    // Cut short (max_tokens) inside the first call: that call, its arguments cut off, as
    // OpenAI answers a reply cut inside a call (the text before it was shown).
    // A further call cut off is dropped: the calls before it are a whole reply.
    r = ToolReply{"", partial_};
    if (closed_ > 0) {
      r.calls.resize(closed_);
      for (ToolCall& c : r.calls)
        if (const auto j = parse_json(c.arguments); j.is_object()) c.arguments = j.dump();
    } else {
      r.cut = true;
    }
  }
  for (size_t i = 0; i < r.calls.size() && i < ids_.size(); ++i) r.calls[i].id = ids_[i];
  return r;
}

}  // namespace serve
