// tools.h: tool calling in the formats of the templates we support: Hermes (Qwen 2.5/3,
// --chat-template qwen2, any template with <tool_call> tags), Llama 3.1/3.2 (a JSON object
// {"name", "parameters"} as the whole reply, or after <|python_tag|>) and Mistral
// ([TOOL_CALLS] then a JSON array of {"name", "arguments"}). Per format: what the
// assistant turn starts with for tool_choice "required" or a named function (a prefill
// after the generation prompt), the reply cut into content and tool calls, and a streamed
// reply's text held back from where a call may start, so that tool calls go out as
// tool_calls deltas, never as content.
// Deliberately no JSON schema checks of the arguments (that is structured output's job).
#pragma once
#include <string>
#include <vector>

namespace serve {

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
enum class ToolFormat { kNone, kHermes, kLlama3, kMistral };

struct ToolCall {
  std::string id;         // call_... (Mistral: 9 letters and digits, as its template demands)
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

// The format a chat template shows the model tools in (kNone: it does not).
ToolFormat tool_format(const std::string& template_source);
const char* tool_format_name(ToolFormat f);

// The text the assistant's turn is made to start with: "" (auto, none), the start of a call
// (required) or the call's head up to its arguments (named).
std::string tool_prefill(ToolFormat f, ToolChoice choice, const std::string& name);
// A stop string that ends a forced call ("" when the end of the turn does).
std::string tool_stop(ToolFormat f);

// The reply (prefill included) as content (the text before the first call) and the calls;
// when any call is not {"name": STRING, "arguments" (or Llama's "parameters"): OBJECT}
// JSON, no calls and the whole text as content.
struct ToolReply {
  std::string content;
  std::vector<ToolCall> calls;
};
ToolReply parse_tool_calls(ToolFormat f, const std::string& text);

// A streamed reply's text: push() returns what may be shown as content now; from where a
// call starts (or may start) on, the text is held for finish().
class ToolStream {
 public:
  ToolStream(ToolFormat f, std::string prefill) : f_(f), held_(std::move(prefill)) {}
  std::string push(const std::string& text);
  // The reply as a whole: parse_tool_calls of everything pushed (and the prefill), with
  // content only what push() did not return yet.
  ToolReply finish();

 private:
  ToolFormat f_;
  std::string shown_, held_;
  bool in_call_ = false, plain_ = false;  // a call started; (Llama 3) the reply is content
};

}  // namespace serve
