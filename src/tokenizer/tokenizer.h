// tokenizer.h: text <-> token ids for the model's vocabulary, read from GGUF metadata.
// Supports SentencePiece (tokenizer.ggml.model "llama") and byte-level BPE ("gpt2") with
// the per-model pre-tokenizers named by tokenizer.ggml.pre; encoding matches llama.cpp's
// llama_tokenize token for token (tests/unit/tokenizer_test.cc checks this against golden
// ids made with llama-cpp-python). Also: special-token parsing, BOS/EOS rules per vocab
// type, end-of-generation ids and an incremental UTF-8-safe detokenizer.
// Deliberately not here: WPM/UGM/RWKV vocabularies, llama.cpp's lossy clean_spaces pass
// in detokenization (decode is plain concatenation of pieces), per-token LSTRIP/RSTRIP
// attributes (phi-3 only) and chat templates (chat_template.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "util/status.h"

namespace tokenizer {

struct Vocab;
class Pretokenizer;

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* keys. Fails with a clear message for a GGUF without a
  // tokenizer, an unsupported tokenizer.ggml.model, or malformed/missing arrays.
  static util::Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& f);
  ~Tokenizer();

  // add_special: add BOS (and EOS) as the model's flags say (tokenizer.ggml.add_bos_token,
  // add_eos_token, with llama.cpp's per-type defaults). parse_special: recognise control
  // token strings such as "<|im_start|>" in the text (user-defined tokens are always
  // recognised, as in llama.cpp).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Raw bytes the token stands for (byte-level BPE decoded, SPM "▁" -> space, <0xXX> ->
  // that byte). Control/unknown tokens give "" unless render_special.
  const std::string& piece(int32_t id, bool render_special = false) const;
  // Concatenated pieces, as llama_detokenize(remove_special=false) without clean_spaces:
  // with SPM's add_space_prefix the first token's leading space is dropped (so
  // decode(encode(x, false, ...)) == x; with a leading BOS the space stays).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t n_vocab() const;
  int32_t bos() const;  // -1 if none
  int32_t eos() const;  // -1 if none
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  bool is_eog(int32_t id) const;       // EOS, EOT, <|im_end|>, <|endoftext|>, ... as llama.cpp
  bool is_control(int32_t id) const;   // control or unknown token (hidden unless rendered)
  std::optional<int32_t> find_token(std::string_view text) const;  // exact vocab string
  std::string_view kind() const;       // "spm" or "bpe:<pre>"

 private:
  Tokenizer();
  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<Pretokenizer> pre_;  // BPE only
  std::string kind_;
  void encode_text(std::string_view text, bool first_fragment_after_special,
                   std::vector<int32_t>& out) const;
};

// Incremental detokenizer: push ids one at a time and get back only complete UTF-8. A
// multi-byte character split across tokens is held until it is complete; bytes that can
// never form a valid character come out as U+FFFD, and flush() turns a dangling
// incomplete sequence into U+FFFD. Concatenating all outputs of push() and flush()
// equals decode(ids) whenever that is valid UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false)
      : tok_(tok), render_special_(render_special) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool render_special_;
  bool first_ = true;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

}  // namespace tokenizer
