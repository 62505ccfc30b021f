// template_fuzz.cc: libFuzzer target for the chat-template interpreter (tokenizer/jinja_*):
// the input is a template's source (a GGUF file's tokenizer.chat_template or
// --chat-template), parsed and rendered with a conversation that has a system prompt,
// tools, a tool call and its result. Nothing may crash, hang or read out of bounds; a
// template either renders or gets an error with a message. Seeds: tests/data/chat_templates.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "21 C"},
      {"role": "assistant", "content": "<think>ok</think>21 C and clear."},
      {"role": "user", "content": "Thanks!"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})");
  auto t = tokenizer::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) {
    if (t.error().empty()) __builtin_trap();  // every error must say something
    return 0;
  }
  auto out = t->render_context(context);
  if (!out.ok() && out.error().empty()) __builtin_trap();
  return 0;
}
