// prompt.cc: chat template choice, rendering and tokenization (see prompt.h).
#include "serve/prompt.h"

#include <fstream>
#include <sstream>

namespace serve {

namespace {
const char* kChoices = "--chat-template chatml|llama3|llama2|mistral|qwen2|gemma or --chat-template FILE.jinja";
}

util::Expected<PromptBuilder> PromptBuilder::create(const gguf::File& f, const tokenizer::Tokenizer& tok,
                                                    const std::string& choice) {
  std::string source, what;
  if (choice.empty()) {
    auto s = f.get_string("tokenizer.chat_template");
    if (!s) return PromptBuilder(tok, std::nullopt);
    source = *s;
    what = "the model's chat template";
  } else if (auto b = tokenizer::builtin_chat_template(choice)) {
    source = *b;
    what = "built-in chat template '" + choice + "'";
  } else {
    std::ifstream in(choice, std::ios::binary);
    if (!in) return util::Status::error("--chat-template '" + choice + "' is neither a built-in name (chatml, llama3, "
                                        "llama2, mistral, qwen2, gemma, gemma3, gpt-oss) nor a readable file");
    std::ostringstream ss;
    ss << in.rdbuf();
    source = ss.str();
    what = "chat template file " + choice;
  }
  auto t = tokenizer::ChatTemplate::parse(source);
  if (!t) return util::Status::error(what + " cannot be used: " + t.error() + "; choose another with " + kChoices);
  return PromptBuilder(tok, std::move(*t));
}

std::string PromptBuilder::no_template_error() {
  return std::string("the model has no chat template (tokenizer.chat_template), so it can only complete text "
                     "(/v1/completions, `generate`); for chat, choose a template with ") + kChoices;
}

util::Expected<std::string> PromptBuilder::render(const std::vector<tokenizer::ChatMessage>& messages) const {
  if (!tmpl_) return util::Status::error(no_template_error());
  const std::string bos = tok_->bos() >= 0 ? tok_->piece(tok_->bos(), true) : "";
  const std::string eos = tok_->eos() >= 0 ? tok_->piece(tok_->eos(), true) : "";
  return tmpl_->render(messages, /*add_generation_prompt=*/true, bos, eos);
}

util::Expected<std::vector<int32_t>> PromptBuilder::chat(const std::vector<tokenizer::ChatMessage>& messages) const {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  return chat(msgs, nlohmann::ordered_json::array(), "");
}

util::Expected<std::vector<int32_t>> PromptBuilder::chat(const nlohmann::ordered_json& messages,
                                                         const nlohmann::ordered_json& tools,
                                                         const std::string& prefill) const {
  if (!tmpl_) return util::Status::error(no_template_error());
  nlohmann::ordered_json context = {{"messages", messages}};
  if (!tools.empty()) context["tools"] = tools;
  context["add_generation_prompt"] = true;
  context["bos_token"] = tok_->bos() >= 0 ? tok_->piece(tok_->bos(), true) : "";
  context["eos_token"] = tok_->eos() >= 0 ? tok_->piece(tok_->eos(), true) : "";
  auto text = tmpl_->render_context(context);
  if (!text) return text.status();
  *text += prefill;
  const int32_t bos = tok_->bos();
  const bool has_bos = bos >= 0 && !tok_->piece(bos, true).empty() && text->rfind(tok_->piece(bos, true), 0) == 0;
  return tok_->encode(*text, /*add_special=*/!has_bos, /*parse_special=*/true);
}

const std::string& PromptBuilder::template_source() const {
  static const std::string none;
  return tmpl_ ? tmpl_->source() : none;
}

std::vector<int32_t> PromptBuilder::completion(const std::string& prompt) const {
  return tok_->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace serve
