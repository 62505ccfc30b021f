// tokenizer.cc: the public Tokenizer: loading, special-token partitioning (llama.cpp's
// tokenizer_st_partition), BOS/EOS handling, dispatch to SPM or pre-tokenizer + BPE, and
// decoding through the piece cache.
// Deliberately not here: the merge algorithms (spm.cc, bpe.cc), regexes (pretokenize.cc),
// and the clean_spaces detokenizer pass (lossy; decode is plain concatenation).
#include "tokenizer/tokenizer.h"

#include <string.h>  // memmem (glibc/BSD)

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace tokenizer {
namespace {

// A piece of the input: raw text [off, off+len) or one special token.
struct Fragment {
  int32_t token;  // -1 for text
  size_t off, len;
};

// Splits text fragments at every occurrence of each special token, longest tokens first,
// exactly as llama.cpp does (so overlapping candidates resolve the same way).
std::vector<Fragment> partition(const Vocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const int32_t id : v.special_cache) {
    if (!parse_special && (v.attr[id] & (kAttrControl | kAttrUnknown))) continue;
    const std::string& st = v.text[id];
    next.clear();
    bool changed = false;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off, len = f.len;
      while (len > 0) {
        // memmem (two-way search) stays linear on inputs like "<<<<..." where a naive
        // search would compare every "<|...|>" token at every position.
        const void* hit = memmem(text.data() + off, len, st.data(), st.size());
        if (!hit) break;
        const size_t m = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
        changed = true;
        if (m > off) next.push_back({-1, off, m - off});
        next.push_back({id, 0, 0});
        const size_t end = m + st.size();
        len = off + len - end;
        off = end;
      }
      if (len > 0) next.push_back({-1, off, len});
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

util::Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& f) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->vocab_ = std::make_unique<Vocab>();
  RETURN_IF_ERROR(load_vocab(f, *t->vocab_));
  if (t->vocab_->type == VocabType::kBpe) {
    auto pre = Pretokenizer::create(t->vocab_->pre_type);
    if (!pre.ok()) return pre.status();
    t->pre_ = std::move(pre).value();
    t->kind_ = "bpe:" + t->vocab_->pre_name;
  } else {
    t->kind_ = "spm";
  }
  return t;
}

void Tokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  const Vocab& v = *vocab_;
  if (v.type == VocabType::kSpm) {
    std::string escaped;
    escaped.reserve(text.size() + 16);
    if (v.add_space_prefix && after_special) escaped += "\xE2\x96\x81";
    for (char c : text) {
      if (c == ' ') escaped += "\xE2\x96\x81";
      else escaped += c;
    }
    spm_encode(v, escaped, out);
    return;
  }
  // Byte-level BPE: llama.cpp decodes to codepoints (invalid bytes -> U+FFFD) first.
  std::string clean;
  if (!is_valid_utf8(text)) {
    clean = sanitize_utf8(text);
    text = clean;
  }
  std::string word;
  for (const auto& [b, e] : pre_->split(text)) {
    word.clear();
    for (size_t i = b; i < e; ++i) word += byte_to_bpe_char(static_cast<uint8_t>(text[i]));
    bpe_encode_word(v, word, out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Vocab& v = *vocab_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v.add_bos) out.push_back(v.bos_id);
  bool prev_special = true;  // SPM: prefix a space at the start and after special tokens
  for (const Fragment& f : partition(v, text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
    } else {
      encode_text(text.substr(f.off, f.len), prev_special, out);
      prev_special = false;
    }
  }
  if (add_special && v.add_eos) out.push_back(v.eos_id);
  return out;
}

const std::string& Tokenizer::piece(int32_t id, bool render_special) const {
  static const std::string kEmpty;
  if (id < 0 || id >= vocab_->n_vocab()) return kEmpty;
  if (!render_special && (vocab_->attr[id] & (kAttrControl | kAttrUnknown))) return kEmpty;
  return vocab_->pieces[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool strip_space = vocab_->add_space_prefix;
  for (const int32_t id : ids) {
    const std::string& p = piece(id, render_special);
    if (strip_space && !p.empty() && p[0] == ' ') out.append(p, 1);
    else out += p;
    strip_space = false;  // only the very first token (llama_detokenize's lstrip)
  }
  return out;
}

int32_t Tokenizer::n_vocab() const { return vocab_->n_vocab(); }
int32_t Tokenizer::bos() const { return vocab_->bos_id; }
int32_t Tokenizer::eos() const { return vocab_->eos_id; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
bool Tokenizer::add_eos() const { return vocab_->add_eos; }
bool Tokenizer::add_space_prefix() const { return vocab_->add_space_prefix; }
bool Tokenizer::is_eog(int32_t id) const { return vocab_->eog_ids.count(id) > 0; }
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_->n_vocab() && (vocab_->attr[id] & (kAttrControl | kAttrUnknown));
}
std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = vocab_->find(text);
  if (id < 0) return std::nullopt;
  return id;
}
std::string_view Tokenizer::kind() const { return kind_; }

}  // namespace tokenizer
