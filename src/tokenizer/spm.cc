// spm.cc: SentencePiece-style tokenization as llama.cpp's llm_tokenizer_spm_session does
// it: split into UTF-8 characters, repeatedly merge the adjacent pair whose concatenation
// is the vocab token with the highest score (ties: leftmost), then emit each symbol as a
// token, re-splitting through the recorded merges or falling back to <0xXX> byte tokens.
// Deliberately not here: whitespace escaping and the prefix space (tokenizer.cc does it),
// SentencePiece's unigram model (llama.cpp's SPM path is this bigram merge, and we match
// llama.cpp).
#include <queue>
#include <unordered_map>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace tokenizer {
namespace {

struct Symbol {
  int prev, next;
  const char* text;
  size_t n;
};

struct Bigram {
  int left, right;
  float score;
  size_t size;
};

struct BigramLess {  // priority_queue top = highest score, then lowest left
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

class SpmSession {
 public:
  explicit SpmSession(const Vocab& v) : v_(v) {}

  void tokenize(std::string_view text, std::vector<int32_t>& out) {
    size_t offs = 0;
    int index = 0;
    while (offs < text.size()) {
      const size_t len = std::min(utf8_len(static_cast<uint8_t>(text[offs])), text.size() - offs);
      Symbol s{index - 1, offs + len == text.size() ? -1 : index + 1, text.data() + offs, len};
      offs += len;
      ++index;
      symbols_.push_back(s);
    }
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add_bigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[b.left];
      Symbol& r = symbols_[b.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = b.left;
      try_add_bigram(l.prev, b.left);
      try_add_bigram(b.left, l.next);
    }
    if (symbols_.empty()) return;
    for (int i = 0; i != -1; i = symbols_[i].next) resegment(symbols_[i], out);
  }

 private:
  void resegment(const Symbol& s, std::vector<int32_t>& out) {
    const std::string_view text(s.text, s.n);
    const int32_t id = v_.find(text);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    auto p = rev_merge_.find(std::string(text));
    if (p == rev_merge_.end()) {
      for (size_t j = 0; j < s.n; ++j) {
        const int32_t b = v_.byte_to_token(static_cast<uint8_t>(s.text[j]));
        if (b >= 0) out.push_back(b);
      }
      return;
    }
    resegment(symbols_[p->second.first], out);
    resegment(symbols_[p->second.second], out);
  }

  void try_add_bigram(int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view text(symbols_[left].text, symbols_[left].n + symbols_[right].n);
    const int32_t id = v_.find(text);
    if (id < 0) return;
    queue_.push(Bigram{left, right, v_.score[id], text.size()});
    rev_merge_[std::string(text)] = {left, right};
  }

  const Vocab& v_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue_;
  std::unordered_map<std::string, std::pair<int, int>> rev_merge_;
};

}  // namespace

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
  SpmSession(v).tokenize(text, out);
}

}  // namespace tokenizer
