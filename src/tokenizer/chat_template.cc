// chat_template.cc: the ChatTemplate boundary — runs the lexer/parser/validator once at
// parse(), renders with the variables Hugging Face passes (messages, add_generation_prompt,
// bos_token, eos_token, raise_exception, extras), and turns interpreter exceptions into
// util::Status messages. Deliberately not here: the interpreter itself (jinja_*.cc).
#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_ast.h"

namespace tokenizer {

util::Expected<ChatTemplate> ChatTemplate::parse(std::string source) {
  try {
    auto nodes = std::make_shared<jinja::NodeList>(jinja::parse(jinja::lex(source)));
    jinja::validate(*nodes);
    ChatTemplate t;
    t.source_ = std::move(source);
    t.nodes_ = std::move(nodes);
    return t;
  } catch (const jinja::JinjaError& e) {
    return util::Status::error(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {
    return util::Status::error(std::string("chat template: internal error while parsing: ") + e.what());
  }
}

util::Expected<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                                 const std::string& bos_token, const std::string& eos_token,
                                                 const nlohmann::json& extra) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  context["messages"] = std::move(msgs);
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  if (!extra.is_null()) {
    if (!extra.is_object()) return util::Status::error("chat template: extra variables must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = nlohmann::ordered_json(*it);
  }
  return render_context(context);
}

util::Expected<std::string> ChatTemplate::render_context(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return util::Status::error("chat template: the render context must be a JSON object");
  try {
    jinja::Dict vars;
    vars.set("raise_exception", jinja::Value::from_function([](jinja::CallArgs& a) -> jinja::Value {
      throw jinja::JinjaError("raise_exception: " + a.get(0, "message").to_str());
    }));
    for (auto it = context.begin(); it != context.end(); ++it) vars.set(it.key(), jinja::from_json(*it));
    return jinja::render(*nodes_, vars);
  } catch (const jinja::JinjaError& e) {
    return util::Status::error(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {
    return util::Status::error(std::string("chat template: internal error while rendering: ") + e.what());
  }
}

}  // namespace tokenizer
