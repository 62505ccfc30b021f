// bpe.cc: byte-level BPE merging of one pre-tokenized word, as llama.cpp's
// llm_tokenizer_bpe_session: symbols start as UTF-8 characters of the byte-mapped word,
// the adjacent pair with the lowest merge rank (ties: leftmost) is merged until no ranked
// pair remains; each final symbol is a token or falls back to single-byte tokens. With
// ignore_merges (Llama 3) a word that is already a token is emitted whole.
// Deliberately not here: pre-tokenization, the byte mapping itself, special tokens.
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace tokenizer {
namespace {

struct Symbol {
  int prev, next;
  size_t off, n;  // byte range in the word
};

struct Bigram {
  int left, right;
  int rank;
  size_t size;
};

struct BigramGreater {  // priority_queue top = lowest rank, then lowest left
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

void bpe_encode_word(const Vocab& v, std::string_view word, std::vector<int32_t>& out) {
  if (word.empty()) return;
  if (v.ignore_merges) {
    const int32_t id = v.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  thread_local std::string scratch;
  symbols.clear();
  for (size_t off = 0; off < word.size();) {
    const size_t len = std::min(utf8_len(static_cast<uint8_t>(word[off])), word.size() - off);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{index - 1, off + len == word.size() ? -1 : index + 1, off, len});
    off += len;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  auto add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const int rank = v.bpe_rank(word.substr(l.off, l.n), word.substr(r.off, r.n), scratch);
    if (rank < 0) return;
    queue.push(Bigram{left, right, rank, l.n + r.n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Symbols only grow, so an unchanged total size means the pair is still current.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    add_bigram(l.prev, b.left);
    add_bigram(b.left, l.next);
  }
  for (const Symbol& s : symbols) {
    if (s.n == 0) continue;
    const std::string_view text = word.substr(s.off, s.n);
    const int32_t id = v.find(text);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // llama.cpp looks up each byte of the mapped text as a one-character token.
    for (char c : text) {
      const int32_t b = v.find(std::string_view(&c, 1));
      if (b >= 0) out.push_back(b);
    }
  }
}

}  // namespace tokenizer
