// tools.cc: Hermes-format tool calls (see tools.h).
#include "serve/tools.h"

#include <random>

#include <nlohmann/json.hpp>

namespace serve {

namespace {

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";

std::string call_id() {
  static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += digits[rd() % 62];
  return id;
}

}  // namespace

bool template_supports_tools(const std::string& source) {
  return source.find("tools") != std::string::npos && source.find(kOpen) != std::string::npos;
}

std::string tool_prefill(ToolChoice choice, const std::string& name) {
  if (choice == ToolChoice::kRequired) return std::string(kOpen) + "\n";
  if (choice == ToolChoice::kNamed) return std::string(kOpen) + "\n{\"name\": " + nlohmann::json(name).dump() + ", \"arguments\": ";
  return "";
}

ToolReply parse_tool_calls(const std::string& text) {
  ToolReply r;
  const size_t first = text.find(kOpen);
  if (first == std::string::npos) {
    r.content = text;
    return r;
  }
  size_t at = first;
  while (at != std::string::npos) {
    const size_t body = at + std::string(kOpen).size();
    size_t end = text.find(kClose, body);
    const std::string js = text.substr(body, end == std::string::npos ? std::string::npos : end - body);
    const auto j = nlohmann::json::parse(js, nullptr, /*allow_exceptions=*/false);
    auto name = j.is_object() ? j.find("name") : j.end();
    auto args = j.is_object() ? j.find("arguments") : j.end();
    if (!j.is_object() || name == j.end() || !name->is_string() || args == j.end() || !args->is_object())
      return ToolReply{text, {}};
    r.calls.push_back({call_id(), name->get<std::string>(), args->dump()});
    if (end == std::string::npos) break;
    at = text.find(kOpen, end + std::string(kClose).size());
    // Only whitespace may separate calls.
    const std::string gap = text.substr(end + std::string(kClose).size(),
                                        at == std::string::npos ? std::string::npos : at - end - std::string(kClose).size());
    if (gap.find_first_not_of(" \t\r\n") != std::string::npos) return ToolReply{text, {}};
  }
  r.content = text.substr(0, first);
  const size_t last = r.content.find_last_not_of(" \t\r\n");
  r.content.resize(last == std::string::npos ? 0 : last + 1);
  return r;
}

std::string ToolStream::push(const std::string& text) {
  held_ += text;
  if (in_call_) return "";
  const size_t open = held_.find(kOpen);
  size_t keep = open;
  if (open == std::string::npos) {
    // Hold a tail that may be the start of "<tool_call>".
    keep = held_.size();
    const std::string marker = kOpen;
    for (size_t n = std::min(held_.size(), marker.size() - 1); n > 0; --n)
      if (held_.compare(held_.size() - n, n, marker, 0, n) == 0) {
        keep = held_.size() - n;
        break;
      }
  } else {
    in_call_ = true;
  }
  std::string out = held_.substr(0, keep);
  held_.erase(0, keep);
  shown_ += out;
  return out;
}

ToolReply ToolStream::finish() {
  ToolReply r = parse_tool_calls(shown_ + held_);
  if (r.calls.empty()) {
    r.content = held_;  // the rest, as content
  } else {
    r.content = r.content.size() > shown_.size() ? r.content.substr(shown_.size()) : "";
  }
  return r;
}

}  // namespace serve
