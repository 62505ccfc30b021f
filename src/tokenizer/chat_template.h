// chat_template.h: renders a model's chat template (the Jinja2 text in the GGUF key
// tokenizer.chat_template, or one chosen with --chat-template) into the prompt string,
// byte-for-byte as Hugging Face / llama-cpp-python render it with Jinja2
// (trim_blocks=True, lstrip_blocks=True, tojson = json.dumps(ensure_ascii=False)).
// The interpreter covers the Jinja2 subset used by the templates of the model families we
// support (ChatML/SmolLM2, Llama 2/3/3.1, Mistral, Qwen 2/2.5/3, Gemma); a template using
// anything else is refused at parse() with a message naming the construct.
// Deliberately not here: tokenization of the result (tokenizer.h), template inheritance
// and includes, autoescape.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace tokenizer {

namespace jinja {
struct Node;
}

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Parses a Jinja template; syntax errors and unsupported constructs give an error that
  // names the problem (and suggests --chat-template for unsupported ones).
  static util::Expected<ChatTemplate> parse(std::string source);

  // Renders with messages, add_generation_prompt, bos_token, eos_token and any extra
  // top-level variables (an object; e.g. {"tools": [...], "enable_thinking": false}).
  util::Expected<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                     const std::string& bos_token, const std::string& eos_token,
                                     const nlohmann::json& extra = {}) const;

  // Renders with every top-level variable given as an insertion-ordered JSON object
  // (messages with tool_calls, tools, ...); raise_exception and the Jinja globals are
  // added. Key order matters for tojson output, hence ordered_json.
  util::Expected<std::string> render_context(const nlohmann::ordered_json& context) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Node>>> nodes_;
};

// Built-in templates by name ("chatml", "llama3", "llama2", "mistral", "qwen2", "gemma", "gemma3",
// "gpt-oss": harmony) for --chat-template NAME; nullopt for an unknown name.
std::optional<std::string> builtin_chat_template(std::string_view name);

}  // namespace tokenizer
