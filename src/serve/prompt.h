// prompt.h: messages and prompts to tokens for `serve` and `chat`. The chat template is
// the model's tokenizer.chat_template unless --chat-template names a built-in template
// (chatml, llama3, llama2, mistral, qwen2, gemma, gemma3, gpt-oss) or a Jinja file; it is rendered by
// tokenizer/chat_template.h (exactly as Jinja2 renders it) with add_generation_prompt and
// the vocabulary's BOS/EOS strings, then tokenized with special tokens parsed. BOS is added
// only when the vocabulary asks for it and the rendered text does not already start with it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace serve {

class PromptBuilder {
 public:
  // choice: "" (the model's template), a built-in name or a file path. Errors name the
  // problem and --chat-template. A model without a template and no choice (a base model)
  // gives a builder for completions only: chat() then fails with no_template_error().
  static util::Expected<PromptBuilder> create(const gguf::File& f, const tokenizer::Tokenizer& tok,
                                              const std::string& choice);
  bool has_chat() const { return tmpl_.has_value(); }
  static std::string no_template_error();  // names --chat-template
  const std::string& template_source() const;  // "" without a template
  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }

  util::Expected<std::string> render(const std::vector<tokenizer::ChatMessage>& messages) const;
  util::Expected<std::vector<int32_t>> chat(const std::vector<tokenizer::ChatMessage>& messages) const;
  // Messages as JSON (api.h Request::chat_messages: tool_calls, tool_call_id), the tools
  // shown to the model ([] none) and text the assistant's turn is made to start with.
  util::Expected<std::vector<int32_t>> chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                            const std::string& prefill) const;
  // A /v1/completions prompt: the text as is (BOS per the vocabulary), as `generate` does.
  std::vector<int32_t> completion(const std::string& prompt) const;

 private:
  PromptBuilder(const tokenizer::Tokenizer& tok, std::optional<tokenizer::ChatTemplate> t)
      : tok_(&tok), tmpl_(std::move(t)) {}
  const tokenizer::Tokenizer* tok_;
  std::optional<tokenizer::ChatTemplate> tmpl_;
};

}  // namespace serve
