// tools.h: tool calling in the formats of the templates we support: Hermes (Qwen 2.5/3,
// --chat-template qwen2, any template with <tool_call> tags), Llama 3.1/3.2 (a JSON object
// {"name", "parameters"} as the whole reply, or after <|python_tag|>) and Mistral
// ([TOOL_CALLS] then a JSON array of {"name", "arguments"}), gpt-oss's harmony (a
// commentary message to=functions.NAME whose body is the arguments, ended by <|call|>; the
// template shows the tools as a TypeScript namespace in the developer message), and a generic format for
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

#include "grammar/trigger.h"
#include "util/status.h"

namespace serve {

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
enum class ToolFormat { kNone, kHermes, kLlama3, kMistral, kGeneric, kHarmony };

struct ToolCall {
  std::string id;         // call_... (Mistral: 9 letters and digits, as its template demands)
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

// The format a chat template shows the model tools in (kNone: it does not).
ToolFormat tool_format(const std::string& template_source);
const char* tool_format_name(ToolFormat f);

// GBNF of the reply's calls: a forced call (required: of any of the tools; named: of that
// one) in format f, its arguments a document of the function's parameters schema
// (json_schema.h); parallel: 1 to kMaxParallelCalls of them. With auto the same calls,
// applied from the format's opening marker on (tool_triggers); with kGeneric and auto, a
// call or {"response": TEXT} from the start; "" with none. The error names the tool whose
// schema cannot be enforced. tools: [{type, function: {name, parameters?}}] as api.h
// checked them.
constexpr int kMaxParallelCalls = 4;
util::Expected<std::string> tool_call_gbnf(ToolFormat f, const nlohmann::ordered_json& tools, ToolChoice choice,
                                           const std::string& name, bool parallel = false);
// Where auto's grammar starts (a call's opening marker); none: the grammar holds from the
// reply's start (forced calls, and the generic format's reply).
std::vector<grammar::Trigger> tool_triggers(ToolFormat f, ToolChoice choice);
// kGeneric: the system text describing the tools and the reply's format, and the history
// as a template without tools can render it (an assistant's tool_calls as its JSON reply,
// a tool's result as a user turn; `system` empty: the history alone, for a request that
// sends no tools but continues a conversation that called some).
std::string generic_tool_prompt(const nlohmann::ordered_json& tools, ToolChoice choice);
nlohmann::ordered_json generic_tool_messages(const nlohmann::ordered_json& messages, const std::string& system);
// Whether a history holds a tool call or a tool's result.
bool has_tool_turns(const nlohmann::ordered_json& messages);
// A stop string that ends a forced call ("" when the end of the turn does).
std::string tool_stop(ToolFormat f);

// The reply (prefill included) as content (the text before the first call) and the calls;
// when any call is not {"name": STRING, "arguments" (or Llama's "parameters"): OBJECT}
// JSON, no calls and the whole text as content.
struct ToolReply {
  std::string content;
  std::vector<ToolCall> calls;
  bool cut = false;  // the reply ended (max_tokens) inside its first call: calls[0]'s arguments are unfinished
};
ToolReply parse_tool_calls(ToolFormat f, const std::string& text);

// kHarmony: HarmonySplitter (harmony.h) reads the calls out of the harmony markup and
// hands ToolStream and parse_tool_calls each one as Hermes text, <tool_call>\n{"name":
// NAME, "arguments": BODY}\n</tool_call>, which they read as kHermes.
std::string harmony_call_open(const std::string& name);
extern const char* const kHarmonyCallClose;

// A piece of a streamed call, as OpenAI streams tool calls: the first of a call carries its
// id and name (arguments ""), the others fragments of the arguments' text.
struct ToolDelta {
  int index = 0;    // the call's, in the reply
  bool first = false;
  std::string id, name, arguments;
};

// A streamed reply's text: push() returns what may be shown as content now; from where a
// call starts (or may start) on, the text is held for finish(). The held text is read as
// it comes for calls' names and arguments (deltas()), which a grammar keeps well formed.
class ToolStream {
 public:
  ToolStream(ToolFormat f, std::string prefill) : f_(f), held_(std::move(prefill)) {}
  std::string push(const std::string& text);
  // The pieces of calls found in the text pushed since the last call.
  std::vector<ToolDelta> deltas();
  // The reply as a whole: parse_tool_calls of everything pushed (and the prefill), with
  // content only what push() did not return yet; calls already begun in deltas() keep
  // those ids. A reply cut short (max_tokens) inside its first call gives that call, its
  // arguments cut off (as OpenAI does; cut set); inside a further call (parallel calls),
  // the whole calls before it (deltas() shows a further call only once it is whole).
  ToolReply finish();

 private:
  ToolFormat f_;
  std::string shown_, held_;
  bool in_call_ = false, plain_ = false;  // a call started; (Llama 3) the reply is content
  // deltas(): where held_ is read up to, whether inside a call's arguments (their nesting
  // depth, inside a string, after a backslash), and the calls begun.
  size_t scan_ = 0;
  bool in_args_ = false, in_str_ = false, esc_ = false;
  int depth_ = 0;
  std::vector<std::string> ids_;
  std::vector<ToolCall> partial_;  // the calls begun, as far as written
  size_t closed_ = 0;              // of them, whose arguments are whole
  std::vector<ToolDelta> waiting_; // a further call's deltas, held until it is whole
};

}  // namespace serve
