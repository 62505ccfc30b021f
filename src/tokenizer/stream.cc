// stream.cc: StreamDecoder, the incremental detokenizer for streaming generation. It
// releases text only at UTF-8 character boundaries so a client never sees half of a
// multi-byte character (emoji are often split over several byte tokens).
// Deliberately not here: any buffering beyond one incomplete character, stop-string
// handling (the caller's job).
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tokenizer {
namespace {
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}

std::string StreamDecoder::push(int32_t id) {
  const std::string& p = tok_.piece(id, render_special_);
  size_t skip = 0;
  if (first_) {
    // Same first-token space rule as Tokenizer::decode.
    if (tok_.add_space_prefix() && !p.empty() && p[0] == ' ') skip = 1;
    first_ = false;
  }
  pending_.append(p, skip, std::string::npos);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = utf8_char_status(std::string_view(pending_).substr(i));
    if (n > 0) {
      out.append(pending_, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else if (n < 0) {
      out += kReplacement;  // can never complete: replace the offending byte
      ++i;
    } else {
      break;  // incomplete character at the end: hold it
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  if (!pending_.empty()) out = kReplacement;
  pending_.clear();
  return out;
}

}  // namespace tokenizer
