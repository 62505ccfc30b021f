// vocab.h (internal to tokenizer/): the vocabulary as llama.cpp sees it after loading a
// GGUF: token strings, scores, attributes (llama_token_attr bits, including llama.cpp's
// auto-detected control/EOG tokens), BPE merge ranks, special ids and flags, and the
// piece cache used for decoding. Also the two merge algorithms (SPM, BPE) that work on it.
// Deliberately not here: pre-tokenization (pretokenize.h) and the public API (tokenizer.h).
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"
#include "util/status.h"

namespace tokenizer {

// Same bit values as llama.cpp's llama_token_attr.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

enum class VocabType { kSpm, kBpe };

// Pre-tokenizer families (regex lists in pretokenize.cc); names follow llama.cpp.
enum class PreType { kDefault, kLlama3, kQwen2, kSmollm, kGpt2, kFalcon, kDeepseekLlm, kDeepseekCoder, kGpt4o };

// Transparent hashing so lookups by string_view do not allocate.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocab {
  VocabType type = VocabType::kSpm;
  PreType pre_type = PreType::kDefault;
  std::string pre_name;  // tokenizer.ggml.pre as written (or "default")

  std::vector<std::string> text;   // [n_vocab] token strings as stored
  std::vector<float> score;        // [n_vocab]
  std::vector<uint32_t> attr;      // [n_vocab] TokenAttr bits
  TokenMap token_to_id;            // last id wins for duplicate strings (as llama.cpp)
  TokenMap merge_rank;             // "left\xFFright" -> rank (BPE)

  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, unk_id = -1;
  int32_t fim_pad_id = -1, fim_rep_id = -1, fim_sep_id = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false, ignore_merges = false;
  std::set<int32_t> eog_ids;

  std::vector<int32_t> special_cache;  // control/user-defined/unknown ids, longest first
  std::vector<std::string> pieces;     // [n_vocab] token_to_piece(id, special=true)

  int32_t n_vocab() const { return static_cast<int32_t>(text.size()); }
  int32_t find(std::string_view s) const {
    auto it = token_to_id.find(s);
    return it == token_to_id.end() ? -1 : it->second;
  }
  int32_t bpe_rank(std::string_view left, std::string_view right, std::string& scratch) const;
  int32_t byte_to_token(uint8_t b) const;  // -1 if the vocab has no token for the byte
};

// Loads and post-processes (auto-detected special tokens, EOG set, piece cache).
util::Status load_vocab(const gguf::File& f, Vocab& v);

// SentencePiece: `text` already has spaces escaped to U+2581 (and the prefix space).
void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);
// Byte-level BPE of one pre-tokenized word, already mapped through the GPT-2 byte map.
void bpe_encode_word(const Vocab& v, std::string_view word, std::vector<int32_t>& out);

}  // namespace tokenizer
