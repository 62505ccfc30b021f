// pretokenize.cc: llama.cpp's per-family pre-tokenizer regexes, run with PCRE2.
// The regex strings are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe); llama.cpp
// evaluates some with hand-written splitters and others with std::regex on text whose
// non-ASCII codepoints are collapsed to their category. Both agree with a Unicode regex
// engine as long as \s means llama.cpp's whitespace set, which we substitute here.
// Deliberately not here: families whose regexes need llama.cpp-specific handling (Kimi-K2,
// AFMoE digits, Gemma-4 SPM-style BPE); they are not recognised and map to "default".
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include <pcre2.h>

#include <cstring>

#include "tokenizer/unicode.h"
#include "util/check.h"

namespace tokenizer {
namespace {

// llama.cpp's unicode_set_whitespace (the White_Space property), as class items.
constexpr const char* kWhitespaceItems =
    R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

constexpr const char* kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr const char* kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// o200k (gpt-4o, gpt-oss, llama4): llama.cpp's rewrite of tokenizer.json's regex without
// \p{Lu}/\p{Ll} classes, which llama.cpp runs on text whose non-ASCII letters are collapsed
// to one letter: "(?=[\p{L}])([^a-z])" is a letter other than a-z, so every non-ASCII
// letter counts as both upper and lower case there and, identically, here.
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

std::vector<std::string> regexes_for(PreType t) {
  switch (t) {
    case PreType::kLlama3: return {kLlama3};
    case PreType::kQwen2: return {kQwen2};
    case PreType::kSmollm: return {R"(\p{N})", kGpt2};
    case PreType::kGpt2: return {kGpt2};
    case PreType::kGpt4o: return {kGpt4o};
    case PreType::kFalcon:
      return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    case PreType::kDeepseekCoder:
      return {"[\r\n]",
              "\\s?\\p{L}+",
              "\\s?\\p{P}+",
              "[一-龥ࠀ-一가-퟿]+",
              "\\p{N}"};
    case PreType::kDeepseekLlm:  // llama.cpp's list verbatim (UTF-8 literals)
      return {"[\r\n]",
              "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
              "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
              "\\s+$",
              "[一-龥ࠀ-一가-퟿]+",
              "\\p{N}+"};
    case PreType::kDefault:
      return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  return {};
}

// Replaces \s / \S with llama.cpp's whitespace set, inside and outside classes.
std::string rewrite_whitespace(std::string_view re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char e = re[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhitespaceItems) : "[" + std::string(kWhitespaceItems) + "]";
      } else if (e == 'S') {
        CHECK_MSG(!in_class, "\\S inside a class is not supported");
        out += "[^" + std::string(kWhitespaceItems) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// Per-thread match state shared by all patterns (match data sized for the whole match).
struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    md = pcre2_match_data_create(1, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    if (jit_stack) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

struct Pretokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

Pretokenizer::~Pretokenizer() = default;

bool lookup_pre(std::string_view name, PreInfo& info) {
  struct Entry { const char* name; PreType type; bool ignore_merges; bool add_bos; };
  static const Entry kEntries[] = {
      {"default", PreType::kDefault, false, false},
      {"llama3", PreType::kLlama3, true, true}, {"llama-v3", PreType::kLlama3, true, true},
      {"llama-bpe", PreType::kLlama3, true, true}, {"falcon3", PreType::kLlama3, true, true},
      {"falcon-h1", PreType::kLlama3, true, true}, {"pixtral", PreType::kLlama3, true, true},
      {"midm-2.0", PreType::kLlama3, true, true}, {"lfm2", PreType::kLlama3, true, true},
      {"dbrx", PreType::kLlama3, false, false}, {"smaug-bpe", PreType::kLlama3, false, false},
      {"qwen2", PreType::kQwen2, false, false}, {"deepseek-r1-qwen", PreType::kQwen2, false, false},
      {"kormo", PreType::kQwen2, false, false}, {"stablelm2", PreType::kQwen2, false, false},
      {"megrez", PreType::kQwen2, false, false}, {"hunyuan", PreType::kQwen2, false, false},
      {"smollm", PreType::kSmollm, false, false}, {"starcoder", PreType::kSmollm, false, false},
      {"refact", PreType::kSmollm, false, false}, {"command-r", PreType::kSmollm, false, false},
      {"codeshell", PreType::kSmollm, false, false}, {"exaone", PreType::kSmollm, false, false},
      {"minerva-7b", PreType::kSmollm, false, false},
      {"gpt-2", PreType::kGpt2, false, false}, {"phi-2", PreType::kGpt2, false, false},
      {"mpt", PreType::kGpt2, false, false}, {"olmo", PreType::kGpt2, false, false},
      {"jais", PreType::kGpt2, false, false}, {"exaone4", PreType::kGpt2, false, false},
      {"roberta-bpe", PreType::kGpt2, false, false}, {"jina-v1-en", PreType::kGpt2, false, false},
      {"jina-es", PreType::kGpt2, false, false}, {"jina-de", PreType::kGpt2, false, false},
      {"falcon", PreType::kFalcon, false, false},
      {"deepseek-llm", PreType::kDeepseekLlm, false, false},
      {"deepseek-coder", PreType::kDeepseekCoder, false, false},
      {"gpt-4o", PreType::kGpt4o, false, false}, {"llama4", PreType::kGpt4o, false, false},
      {"kanana2", PreType::kGpt4o, false, false}, {"talkie", PreType::kGpt4o, false, false},
      {"minimax-m2", PreType::kGpt4o, false, false},
  };
  for (const Entry& e : kEntries) {
    if (name == e.name) {
      info = PreInfo{e.type, e.ignore_merges, e.add_bos};
      return true;
    }
  }
  return false;
}

util::Expected<std::unique_ptr<Pretokenizer>> Pretokenizer::create(PreType type) {
  std::unique_ptr<Pretokenizer> p(new Pretokenizer());
  for (const std::string& src : regexes_for(type)) {
    const std::string re = rewrite_whitespace(src);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto r = std::make_unique<Regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return util::Status::error("tokenizer: cannot compile pre-tokenizer regex at offset " +
                                 std::to_string(err_off) + ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
    p->regexes_.push_back(std::move(r));
  }
  return p;
}

std::vector<std::pair<size_t, size_t>> Pretokenizer::split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> spans;
  if (text.empty()) return spans;
  spans.emplace_back(0, text.size());
  MatchScratch& s = scratch();
  std::vector<std::pair<size_t, size_t>> next;
  for (const auto& r : regexes_) {
    next.clear();
    next.reserve(spans.size() * 2);
    for (const auto& [b, e] : spans) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + b);
      const size_t len = e - b;
      size_t pos = 0, prev_end = 0;
      while (pos <= len) {
        const int rc = pcre2_match(r->code, subject, len, pos, PCRE2_NO_UTF_CHECK, s.md, s.mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        CHECK_MSG(rc >= 0, "PCRE2 match failed");
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
        const size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // empty match: not produced by llama.cpp's patterns; step over a char
          if (ms >= len) break;
          pos = ms + utf8_len(static_cast<uint8_t>(text[b + ms]));
          continue;
        }
        if (ms > prev_end) next.emplace_back(b + prev_end, b + ms);
        next.emplace_back(b + ms, b + me);
        prev_end = pos = me;
      }
      if (prev_end < len) next.emplace_back(b + prev_end, e);
    }
    spans.swap(next);
  }
  return spans;
}

}  // namespace tokenizer
