// unicode.h (internal to tokenizer/): the few UTF-8 facts the tokenizer needs: sequence
// length from a lead byte (llama.cpp's permissive rule), decoding with invalid bytes
// replaced by U+FFFD, encoding, and the GPT-2 byte <-> printable-codepoint map used by
// byte-level BPE vocabularies ("Ġ" = space).
// Deliberately not here: Unicode categories (PCRE2's \p{..} tables are used instead) and
// normalization.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tokenizer {

// Length of the UTF-8 sequence a byte starts, from its high nibble (1 for continuation
// bytes, as llama.cpp's unicode_len_utf8).
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

void append_utf8(uint32_t cpt, std::string& out);

// True if `s` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Decodes like llama.cpp's unicode_cpts_from_utf8 (an invalid byte becomes U+FFFD and
// consumes one byte; overlong forms are accepted) and re-encodes canonically, so the
// result is valid UTF-8. Surrogates and values above U+10FFFF also become U+FFFD.
std::string sanitize_utf8(std::string_view s);

// Length of the complete, valid UTF-8 character at the start of s: 0 if s is a valid but
// incomplete prefix of a character, -1 if s starts with a byte sequence that can never
// become valid.
int utf8_char_status(std::string_view s);

// GPT-2 byte-level map: byte -> UTF-8 of its printable stand-in codepoint.
const std::string& byte_to_bpe_char(uint8_t b);
// Inverse on one codepoint: the byte it stands for, or -1.
int bpe_cpt_to_byte(uint32_t cpt);

}  // namespace tokenizer
