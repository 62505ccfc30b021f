// grammar_fuzz.cc: libFuzzer target for what requests send as grammars. The input up to
// the first NUL is a GBNF grammar, or a JSON schema when it starts with '{' (translated,
// and the translation must then parse); the rest is text fed to the recognizer byte by
// byte. Nothing may crash, hang or read out of bounds. The seed nested_plus once took
// minutes a byte (nested repetitions; Grammar::kMaxStacks bounds them now).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  std::string_view spec = in.substr(0, nul), text = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  std::string gbnf(spec);
  if (!spec.empty() && spec[0] == '{') {
    auto js = nlohmann::ordered_json::parse(spec, nullptr, false);
    if (js.is_discarded()) return 0;
    auto g = grammar::json_schema_gbnf(js);
    if (!g) return 0;
    gbnf = *g;
    if (!grammar::Grammar::parse(gbnf).ok()) std::abort();  // a schema's grammar always parses
  }
  auto g = grammar::Grammar::parse(gbnf);
  if (!g) return 0;
  grammar::Matcher m(*g);
  for (char c : text) {
    if (!m.accept(std::string_view(&c, 1))) break;
  }
  return 0;
}
