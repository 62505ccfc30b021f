// unicode.cc: UTF-8 helpers and the GPT-2 byte map (see unicode.h).
// Deliberately minimal: no tables of Unicode properties live here.
#include "tokenizer/unicode.h"

#include <array>

namespace tokenizer {

void append_utf8(uint32_t cpt, std::string& out) {
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cpt >> 18));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

int utf8_char_status(std::string_view s) {
  if (s.empty()) return 0;
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= s.size()) return 0;
    const auto b = static_cast<uint8_t>(s[i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return -1;
  }
  return static_cast<int>(need);
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = utf8_char_status(s.substr(i));
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  const size_t n = s.size();
  auto cont = [&](size_t k) { return k < n && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80; };
  while (i < n) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    uint32_t cpt = 0xFFFD;
    size_t len = 1;
    if (b0 < 0x80) {
      cpt = b0;
    } else if ((b0 & 0xE0) == 0xC0) {
      if (cont(i + 1)) { cpt = ((b0 & 0x1Fu) << 6) | (s[i + 1] & 0x3F); len = 2; }
    } else if ((b0 & 0xF0) == 0xE0) {
      if (cont(i + 1) && cont(i + 2)) {
        cpt = ((b0 & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3F);
        len = 3;
      }
    } else if ((b0 & 0xF8) == 0xF0) {
      if (cont(i + 1) && cont(i + 2) && cont(i + 3)) {
        cpt = ((b0 & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
              (s[i + 3] & 0x3F);
        len = 4;
      }
    }
    if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) cpt = 0xFFFD;
    append_utf8(cpt, out);
    i += len;
  }
  return out;
}

namespace {

struct ByteMap {
  std::array<std::string, 256> to_char;
  std::array<int16_t, 324> from_cpt;  // codepoints used are < 256 + 68
  ByteMap() {
    from_cpt.fill(-1);
    auto keep = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = keep(b) ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      append_utf8(cpt, to_char[b]);
      from_cpt[cpt] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::string& byte_to_bpe_char(uint8_t b) { return byte_map().to_char[b]; }

int bpe_cpt_to_byte(uint32_t cpt) {
  return cpt < byte_map().from_cpt.size() ? byte_map().from_cpt[cpt] : -1;
}

}  // namespace tokenizer
