// jinja_parser.h: the recursive-descent parser class shared by jinja_parser.cc
// (statements) and jinja_expr_parser.cc (expressions). Private to the interpreter.
// Deliberately not here: the public entry point (jinja_ast.h's parse()).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace tokenizer::jinja {

constexpr int kMaxParseDepth = 200;  // nesting limit so hostile templates cannot overflow the stack

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  NodeList parse_all();

 private:
  using K = Token::Kind;

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().kind == K::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == K::kName && cur().text == n; }

  [[noreturn]] void fail(const std::string& msg) const {
    throw JinjaError("template syntax error at line " + std::to_string(cur().line) + ": " + msg);
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw JinjaError("unsupported template construct at line " + std::to_string(cur().line) + ": " + what +
                     " is not supported by shardlm's chat-template interpreter; pass a simpler template "
                     "with --chat-template FILE or a built-in one with --chat-template NAME "
                     "(chatml, llama3, llama2, mistral, qwen2, gemma, gemma3, gpt-oss)");
  }

  std::string describe(const Token& t) const {
    switch (t.kind) {
      case K::kEof: return "end of template";
      case K::kVarEnd: return "'}}'";
      case K::kBlockEnd: return "'%}'";
      case K::kText: return "text";
      case K::kString: return "string literal";
      default: return "'" + t.text + "'";
    }
  }

  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().kind != K::kName) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != K::kBlockEnd) fail("expected '%}', got " + describe(cur()));
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth) p_->fail("template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };


  // ---- statements (jinja_parser.cc) ----
  // Parses statements until a block tag whose keyword is in `stops`; leaves the parser
  // just after that keyword and stores it in *end. With no stops, parses to EOF.
  NodeList parse_body(const std::vector<std::string>& stops, std::string* end);
  NodePtr make_node(Node::Kind k);
  NodePtr parse_statement(const std::string& kw);
  NodePtr parse_if();
  std::vector<std::string> parse_targets();
  NodePtr parse_for();
  NodePtr parse_set();
  NodePtr parse_macro();
  NodePtr parse_filter_block();

  // ---- expressions (jinja_expr_parser.cc) ----
  ExprPtr make_expr(Expr::Kind k);
  // An expression, or a bare tuple "a, b" where Jinja2 allows one.
  ExprPtr parse_tuple_expr(bool allow_condexpr = true);
  ExprPtr parse_expression();
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr obj);
  // Parses "(args)" into an expression of `kind` whose args[0] is `callee`.
  ExprPtr parse_call(ExprPtr callee, Expr::Kind kind);
  void parse_call_args(Expr* c);
  ExprPtr parse_filter_chain(ExprPtr node, bool first_pipe_consumed);

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace tokenizer::jinja
