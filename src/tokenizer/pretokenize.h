// pretokenize.h (internal to tokenizer/): splits text into words before byte-level BPE,
// with the regex list llama.cpp uses for each tokenizer.ggml.pre family. The regexes run
// one after another, each splitting the pieces the previous one produced (text between
// matches stays a piece), as llama.cpp's unicode_regex_split does. Implemented with PCRE2
// (UTF + UCP, JIT when available); \s and \S are rewritten to llama.cpp's whitespace set.
// Deliberately not here: the byte-level mapping and merges (bpe.cc), special tokens.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"
#include "util/status.h"

namespace tokenizer {

// Maps a tokenizer.ggml.pre string to its family and llama.cpp's flags for it. Returns
// false for names we do not know (the caller falls back to kDefault with a warning).
struct PreInfo {
  PreType type = PreType::kDefault;
  bool ignore_merges = false;
  bool add_bos = false;
};
bool lookup_pre(std::string_view name, PreInfo& info);

class Pretokenizer {
 public:
  static util::Expected<std::unique_ptr<Pretokenizer>> create(PreType type);
  ~Pretokenizer();
  // `text` must be valid UTF-8. Returns [begin, end) byte spans covering all of it.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

 private:
  Pretokenizer() = default;
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace tokenizer
