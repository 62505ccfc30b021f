// tools.cc: tool calls in the Hermes, Llama 3 and Mistral formats (see tools.h).
#include "serve/tools.h"

#include <random>

#include <nlohmann/json.hpp>

namespace serve {

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

// Where the calls of a reply start, or npos.
size_t calls_start(ToolFormat f, const std::string& text) {
  if (f == ToolFormat::kHermes) return text.find(kHermesOpen);
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

ToolFormat tool_format(const std::string& source) {
  if (source.find("tools") == std::string::npos) return ToolFormat::kNone;
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
    default: return "none";
  }
}

std::string tool_prefill(ToolFormat f, ToolChoice choice, const std::string& name) {
  if (choice != ToolChoice::kRequired && choice != ToolChoice::kNamed) return "";
  const std::string head = choice == ToolChoice::kNamed ? "{\"name\": " + nlohmann::json(name).dump() + ", " : "";
  switch (f) {
    case ToolFormat::kHermes:
      return choice == ToolChoice::kRequired ? "<tool_call>\n" : "<tool_call>\n" + head + "\"arguments\": ";
    case ToolFormat::kMistral:
      return choice == ToolChoice::kRequired ? "[TOOL_CALLS] [" : "[TOOL_CALLS] [" + head + "\"arguments\": ";
    case ToolFormat::kLlama3:
      return choice == ToolChoice::kRequired ? "{\"name\": \"" : head + "\"parameters\": ";
    default: return "";
  }
}

std::string tool_stop(ToolFormat f) { return f == ToolFormat::kHermes ? kHermesClose : ""; }

ToolReply parse_tool_calls(ToolFormat f, const std::string& text) {
  ToolReply r;
  const size_t first = calls_start(f, text);
  if (first == std::string::npos || !parse_calls(f, text, first, &r.calls)) return ToolReply{text, {}};
  r.content = trim(text.substr(0, first));
  return r;
}

std::string ToolStream::push(const std::string& text) {
  held_ += text;
  if (in_call_) return "";
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

ToolReply ToolStream::finish() {
  ToolReply r = parse_tool_calls(f_, shown_ + held_);
  if (r.calls.empty()) {
    r.content = held_;  // the rest, as content
  } else {
    r.content = r.content.size() > shown_.size() ? r.content.substr(shown_.size()) : "";
  }
  return r;
}

}  // namespace serve
