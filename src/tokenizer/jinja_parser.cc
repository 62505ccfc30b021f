// jinja_parser.cc: the statement half of the chat-template parser (tokens to the trees of
// jinja_ast.h); expressions are in jinja_expr_parser.cc.
// Supported statements: if/elif/else, for (tuple targets, "if" filter, else), set (name,
// tuple, ns.attr, block set), macro, call-less macro invocation, filter blocks, break/
// continue, generation (transparent), raw (in the lexer).
// Deliberately refused with a clear message: extends/block/include/import/from, call
// blocks, with, do, autoescape, recursive loops.
#include "tokenizer/jinja_parser.h"

namespace tokenizer::jinja {

NodeList Parser::parse_all() {
  std::string end;
  NodeList body = parse_body({}, &end);
  return body;
}

// Parses statements until a block tag whose keyword is in `stops`; leaves the parser
// just after that keyword and stores it in *end. With no stops, parses to EOF.
NodeList Parser::parse_body(const std::vector<std::string>& stops, std::string* end) {
  DepthGuard guard(this);
  NodeList out;
  while (true) {
    const Token& t = cur();
    if (t.kind == K::kEof) {
      if (!stops.empty()) fail("unexpected end of template; expected '{% " + stops.front() + " %}' (unclosed block)");
      return out;
    }
    if (t.kind == K::kText) {
      auto n = make_node(Node::Kind::kText);
      n->text = t.text;
      out.push_back(std::move(n));
      advance();
    } else if (t.kind == K::kVarBegin) {
      advance();
      auto n = make_node(Node::Kind::kOutput);
      n->expr = parse_tuple_expr();
      if (cur().kind != K::kVarEnd) fail("expected '}}', got " + describe(cur()));
      advance();
      out.push_back(std::move(n));
    } else if (t.kind == K::kBlockBegin) {
      advance();
      if (cur().kind != K::kName) fail("expected a statement name after '{%', got " + describe(cur()));
      std::string kw = cur().text;
      for (const auto& s : stops) {
        if (kw == s) {
          advance();
          *end = kw;
          return out;
        }
      }
      out.push_back(parse_statement(kw));
    } else {
      fail("unexpected " + describe(t));
    }
  }
}

NodePtr Parser::make_node(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  n->line = cur().line;
  return n;
}

NodePtr Parser::parse_statement(const std::string& kw) {
  advance();  // the keyword
  if (kw == "if") return parse_if();
  if (kw == "for") return parse_for();
  if (kw == "set") return parse_set();
  if (kw == "macro") return parse_macro();
  if (kw == "filter") return parse_filter_block();
  if (kw == "break" || kw == "continue") {
    auto n = make_node(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue);
    expect_block_end();
    return n;
  }
  if (kw == "generation") {  // Hugging Face's assistant-mask marker: renders its body
    expect_block_end();
    std::string end;
    auto n = make_node(Node::Kind::kIf);
    auto cond = std::make_unique<Expr>();
    cond->kind = Expr::Kind::kLiteral;
    cond->literal = Value::from_bool(true);
    NodeList body = parse_body({"endgeneration"}, &end);
    expect_block_end();
    n->branches.emplace_back(std::move(cond), std::move(body));
    return n;
  }
  static const char* kRefused[] = {"extends", "block", "include", "import", "from", "call", "with",
                                   "do", "autoescape", "trans", "pluralize"};
  for (const char* r : kRefused)
    if (kw == r) unsupported("'{% " + kw + " %}'");
  static const char* kStray[] = {"endif", "endfor", "else", "elif", "endmacro", "endset", "endfilter",
                                 "endgeneration", "endraw"};
  for (const char* s : kStray)
    if (kw == s) fail("unexpected '{% " + kw + " %}' with no matching opening tag");
  fail("unknown statement '{% " + kw + " %}'");
}

NodePtr Parser::parse_if() {
  auto n = make_node(Node::Kind::kIf);
  ExprPtr cond = parse_tuple_expr();
  expect_block_end();
  while (true) {
    std::string end;
    NodeList body = parse_body({"elif", "else", "endif"}, &end);
    n->branches.emplace_back(std::move(cond), std::move(body));
    if (end == "elif") {
      cond = parse_tuple_expr();
      expect_block_end();
      continue;
    }
    if (end == "else") {
      expect_block_end();
      NodeList else_body = parse_body({"endif"}, &end);
      n->branches.emplace_back(nullptr, std::move(else_body));
    }
    expect_block_end();
    return n;
  }
}

std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names;
  bool paren = is_op("(");
  if (paren) advance();
  names.push_back(expect_name());
  while (is_op(",")) {
    advance();
    if (cur().kind != K::kName) break;
    names.push_back(expect_name());
  }
  if (paren) expect_op(")");
  return names;
}

NodePtr Parser::parse_for() {
  auto n = make_node(Node::Kind::kFor);
  n->targets = parse_targets();
  if (!is_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
  advance();
  n->expr = parse_tuple_expr(/*allow_condexpr=*/false);
  if (is_name("if")) {
    advance();
    n->loop_filter = parse_expression();
  }
  if (is_name("recursive")) unsupported("recursive for loops");
  expect_block_end();
  std::string end;
  n->body = parse_body({"else", "endfor"}, &end);
  if (end == "else") {
    expect_block_end();
    n->else_body = parse_body({"endfor"}, &end);
  }
  expect_block_end();
  return n;
}

NodePtr Parser::parse_set() {
  auto n = make_node(Node::Kind::kSet);
  std::string first = expect_name();
  if (is_op(".")) {
    advance();
    n->targets = {first};
    n->attr = expect_name();
  } else {
    n->targets = {first};
    while (is_op(",")) {
      advance();
      if (cur().kind != K::kName) break;
      n->targets.push_back(expect_name());
    }
  }
  if (is_op("=")) {
    advance();
    n->expr = parse_tuple_expr();
    expect_block_end();
    return n;
  }
  if (n->targets.size() != 1 || !n->attr.empty()) fail("expected '=' in set statement");
  n->kind = Node::Kind::kSetBlock;
  if (is_op("|")) unsupported("filters on block set");
  expect_block_end();
  std::string end;
  n->body = parse_body({"endset"}, &end);
  expect_block_end();
  return n;
}

NodePtr Parser::parse_macro() {
  auto n = make_node(Node::Kind::kMacro);
  n->name = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!n->params.empty()) expect_op(",");
    if (is_op(")")) break;
    n->params.push_back(expect_name());
    if (is_op("=")) {
      advance();
      n->defaults.push_back(parse_expression());
    } else {
      n->defaults.push_back(nullptr);
    }
  }
  advance();
  expect_block_end();
  std::string end;
  n->body = parse_body({"endmacro"}, &end);
  if (cur().kind == K::kName) advance();  // optional macro name after endmacro
  expect_block_end();
  return n;
}

NodePtr Parser::parse_filter_block() {
  auto n = make_node(Node::Kind::kFilterBlock);
  auto placeholder = std::make_unique<Expr>();
  placeholder->kind = Expr::Kind::kName;
  placeholder->name = kFilterBlockInput;
  n->expr = parse_filter_chain(std::move(placeholder), /*first_pipe_consumed=*/true);
  expect_block_end();
  std::string end;
  n->body = parse_body({"endfilter"}, &end);
  expect_block_end();
  return n;
}

NodeList parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace tokenizer::jinja
