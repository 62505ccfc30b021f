// tools.h: tool calling in the formats of the templates we support: Hermes (Qwen 2.5/3,
// --chat-template qwen2, any template with <tool_call> tags), Llama 3.1/3.2 (a JSON object
// {"name", "parameters"} as the whole reply, or after <|python_tag|>) and Mistral
// ([TOOL_CALLS] then a JSON array of {"name", "arguments"}), and a generic format for
// templates with none of them (the tools described in the system turn, the reply one JSON
// object {"tool_call": {"name", "arguments"}} or {"response": TEXT}, as llama-server's).
// Per format: the grammar of a forced call (tool_choice "required" or a named function:
// a call of a listed function whose arguments validate under its schema), the reply cut
// into content and tool calls, and a streamed reply's text held back from where a call may
// start, so that tool calls go out as tool_calls deltas, never as content.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace serve {

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
enum class ToolFormat { kNone, kHermes, kLlama3, kMistral, kGeneric };

struct ToolCall {
  std::string id;         // call_... (Mistral: 9 letters and digits, as its template demands)
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

// The format a chat template shows the model tools in (kNone: it does not).
ToolFormat tool_format(const std::string& template_source);
const char* tool_format_name(ToolFormat f);

// GBNF of the reply when it is constrained: a forced call (required: of any of the tools;
// named: of that one) in format f, its arguments a document of the function's parameters
// schema (json_schema.h); with kGeneric and auto, a call or {"response": TEXT}; "" when
// unconstrained (auto, none). The error names the tool whose schema cannot be enforced.
// tools: [{type, function: {name, parameters?}}] as api.h checked them.
util::Expected<std::string> tool_call_gbnf(ToolFormat f, const nlohmann::ordered_json& tools, ToolChoice choice,
                                           const std::string& name);
// kGeneric: the system text describing the tools and the reply's format, and the history
// as a template without tools can render it (an assistant's tool_calls as its JSON reply,
// a tool's result as a user turn).
std::string generic_tool_prompt(const nlohmann::ordered_json& tools, ToolChoice choice);
nlohmann::ordered_json generic_tool_messages(const nlohmann::ordered_json& messages, const std::string& system);
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
