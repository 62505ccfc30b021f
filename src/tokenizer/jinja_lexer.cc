// jinja_lexer.cc: turns template source into tokens the way Jinja2's lexer does with
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False: newlines normalised
// to "\n", one trailing newline dropped, "{%-"/"-%}" strip, "{%+"/"+%}" keep, a newline
// after "%}"/"#}" removed, indentation before "{%"/"{#" removed, comments dropped, raw
// blocks passed through as text, tag ends only recognised when brackets are balanced.
// Deliberately not here: line statements/comments, custom delimiters, unicode identifiers.
#include <cctype>
#include <cstring>

#include "tokenizer/jinja_ast.h"

namespace tokenizer::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string rstrip_ws(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  return s.substr(0, end);
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) {
    // Normalise \r\n and \r to \n, then drop one trailing newline.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_));
        break;
      }
      std::string text = src_.substr(pos_, tag - pos_);
      char kind = src_[tag + 1];  // '{', '%', '#'
      char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      text = apply_lstrip(text, sign, kind != '{');
      emit_text(text);
      line_ += count_newlines(src_, pos_, tag);
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && try_raw()) {
        // handled
      } else {
        lex_tag(kind == '{');
      }
    }
    push(Token::Kind::kEof, "");
    return std::move(tokens_);
  }

 private:
  static int count_newlines(const std::string& s, size_t from, size_t to) {
    int n = 0;
    for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
    return n;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // Jinja2's OptionalLStrip: "-" strips all trailing whitespace of the text; otherwise,
  // for block and comment tags, whitespace between the last newline (or the start of a
  // line) and the tag is removed.
  std::string apply_lstrip(const std::string& text, char sign, bool lstrip_applies) const {
    if (sign == '-') return rstrip_ws(text);
    if (sign == '+' || !lstrip_applies) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    if (l_pos == text.size()) return text;
    for (size_t i = l_pos; i < text.size(); ++i)
      if (!is_space(text[i])) return text;
    return text.substr(0, l_pos);
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) push(Token::Kind::kText, text);
  }

  void push(Token::Kind kind, std::string text) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  [[noreturn]] void fail(const std::string& msg) const {
    throw JinjaError("template syntax error at line " + std::to_string(line_) + ": " + msg);
  }

  // Consumes an end marker at pos_ ("-%}" plus whitespace, "+%}", "%}" plus one newline).
  bool try_end(const char* marker, bool trim_newline) {
    size_t m = std::strlen(marker);
    if (src_.compare(pos_, 1, "-") == 0 && src_.compare(pos_ + 1, m, marker) == 0) {
      pos_ += 1 + m;
      size_t start = pos_;
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      line_ += count_newlines(src_, start, pos_);
      line_starting_ = pos_ > start && src_[pos_ - 1] == '\n';
      return true;
    }
    if (trim_newline && src_.compare(pos_, 1, "+") == 0 && src_.compare(pos_ + 1, m, marker) == 0) {
      pos_ += 1 + m;
      line_starting_ = false;
      return true;
    }
    if (src_.compare(pos_, m, marker) == 0) {
      pos_ += m;
      line_starting_ = false;
      if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
        ++line_;
        line_starting_ = true;
      }
      return true;
    }
    return false;
  }

  void lex_comment() {
    while (pos_ < src_.size()) {
      if (src_[pos_] == '\n') ++line_;
      if (try_end("#}", true)) return;
      ++pos_;
    }
    fail("missing end of comment tag '#}'");
  }

  // "{% raw %}...{% endraw %}": the body is text, with the endraw tag's whitespace control.
  bool try_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) return false;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    line_ += count_newlines(src_, pos_, p);
    for (size_t q = p; q + 1 < src_.size(); ++q) {
      if (src_[q] != '{' || src_[q + 1] != '%') continue;
      size_t r = q + 2;
      char sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : 0;
      if (sign) ++r;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      line_starting_ = false;
      std::string body = apply_lstrip(src_.substr(p, q - p), sign, true);
      emit_text(body);
      line_ += count_newlines(src_, p, r);
      pos_ = r;
      if (!try_end("%}", true)) fail("malformed endraw tag");
      return true;
    }
    fail("missing '{% endraw %}'");
  }

  void lex_tag(bool is_var) {
    push(is_var ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, "");
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) fail(is_var ? "unterminated '{{' (missing '}}')" : "unterminated '{%' (missing '%}')");
      char c = src_[pos_];
      if (is_space(c)) {
        if (c == '\n') ++line_;
        ++pos_;
        continue;
      }
      if (balance.empty() && try_end(is_var ? "}}" : "%}", !is_var)) {
        push(is_var ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, "");
        return;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        push(Token::Kind::kName, src_.substr(start, pos_ - start));
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                     ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        const char* found = nullptr;
        for (const char* op : kOps) {
          if (src_.compare(pos_, std::strlen(op), op) == 0) {
            found = op;
            break;
          }
        }
        if (!found) fail(std::string("unexpected character '") + c + "'");
        std::string op = found;
        if (op == "{" || op == "(" || op == "[") {
          balance.push_back(op == "{" ? '}' : op == "(" ? ')' : ']');
        } else if (op == "}" || op == ")" || op == "]") {
          if (balance.empty()) fail("unexpected '" + op + "'");
          if (balance.back() != op[0]) fail("unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
          balance.pop_back();
        }
        pos_ += op.size();
        push(Token::Kind::kOp, op);
      }
    }
  }

  void lex_number() {
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        is_float = true;
        digits();
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i)
      if (src_[i] != '_') text += src_[i];
    Token t;
    t.line = line_;
    t.text = text;
    try {
      if (is_float) {
        t.kind = Token::Kind::kFloat;
        t.number = std::stod(text);
      } else {
        t.kind = Token::Kind::kInt;
        t.integer = std::stoll(text);
      }
    } catch (const std::exception&) {
      fail("number out of range: " + text);
    }
    tokens_.push_back(std::move(t));
  }

  // Python "unicode-escape" decoding of a string literal's body.
  void lex_string(char quote) {
    size_t p = pos_ + 1;
    std::u32string out;
    std::string raw;
    while (true) {
      if (p >= src_.size()) fail("unterminated string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        size_t q = p;
        while (q < src_.size() && src_[q] != quote && src_[q] != '\\') ++q;
        out += utf8_decode(std::string_view(src_).substr(p, q - p));
        line_ += count_newlines(src_, p, q);
        p = q;
        continue;
      }
      if (p + 1 >= src_.size()) fail("unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) {
        if (p + n > src_.size()) fail("truncated \\x/\\u escape in string literal");
        char32_t v = 0;
        for (int k = 0; k < n; ++k) {
          char h = src_[p + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad hex escape in string literal");
          v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        p += n;
        return v;
      };
      switch (e) {
        case '\n': ++line_; break;
        case '\\': out += U'\\'; break;
        case '\'': out += U'\''; break;
        case '"': out += U'"'; break;
        case 'a': out += U'\a'; break;
        case 'b': out += U'\b'; break;
        case 'f': out += U'\f'; break;
        case 'n': out += U'\n'; break;
        case 'r': out += U'\r'; break;
        case 't': out += U'\t'; break;
        case 'v': out += U'\v'; break;
        case 'x': out += hex(2); break;
        case 'u': out += hex(4); break;
        case 'U': {
          char32_t v = hex(8);
          if (v > 0x10ffff) fail("\\U escape out of range");
          out += v;
          break;
        }
        case 'N': fail("\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) v = v * 8 + (src_[p++] - '0');
            out += v;
          } else {
            out += U'\\';
            p -= 1;  // keep the character after the backslash as text
          }
      }
    }
    pos_ = p + 1;
    push(Token::Kind::kString, utf8_encode(out));
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace tokenizer::jinja
