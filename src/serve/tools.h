// tools.h: tool calling in the Hermes format (Qwen 2.5/3, --chat-template qwen2, and any
// template that shows tools with <tool_call> tags): what the assistant turn starts with for
// tool_choice "required" or a named function (a prefill after the generation prompt), the
// reply cut into content and tool calls, and a streamed reply's text held back from the
// first <tool_call> on, so that tool calls go out as tool_calls deltas, never as content.
// Deliberately no JSON schema checks of the arguments (that is structured output's job).
#pragma once
#include <string>
#include <vector>

namespace serve {

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ToolCall {
  std::string id;         // call_...
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

// Whether a chat template shows the model tools in the format parse_tool_calls reads.
bool template_supports_tools(const std::string& template_source);

// The text the assistant's turn is made to start with: "" (auto, none), "<tool_call>\n"
// (required) or the call's head up to its arguments (named).
std::string tool_prefill(ToolChoice choice, const std::string& name);

// The reply (prefill included) as content (the text before the first <tool_call>) and
// the calls; when any call is not {"name": STRING, "arguments": OBJECT} JSON, no calls and
// the whole text as content.
struct ToolReply {
  std::string content;
  std::vector<ToolCall> calls;
};
ToolReply parse_tool_calls(const std::string& text);

// A streamed reply's text: push() returns what may be shown as content now; from a
// <tool_call> on (or a possible start of one at the end) the text is held for finish().
class ToolStream {
 public:
  explicit ToolStream(std::string prefill) : held_(std::move(prefill)) {}
  std::string push(const std::string& text);
  // The reply as a whole: parse_tool_calls of everything pushed (and the prefill), with
  // content only what push() did not return yet.
  ToolReply finish();

 private:
  std::string shown_, held_;
  bool in_call_ = false;
};

}  // namespace serve
