// jinja_parser.cc: recursive-descent parser from tokens to the statement/expression trees
// of jinja_ast.h, with Jinja2's operator precedence (condexpr < or < and < not < compare <
// +,- < ~ < *,/,//,% < ** < unary < postfix/filters/tests).
// Supported statements: if/elif/else, for (tuple targets, "if" filter, else), set (name,
// tuple, ns.attr, block set), macro, call-less macro invocation, filter blocks, break/
// continue, generation (transparent), raw (in the lexer).
// Deliberately refused with a clear message: extends/block/include/import/from, call
// blocks, with, do, autoescape, recursive loops.
#include "tokenizer/jinja_ast.h"

namespace tokenizer::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting limit so hostile templates cannot overflow the stack

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  NodeList parse_all() {
    std::string end;
    NodeList body = parse_body({}, &end);
    return body;
  }

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
                     "(chatml, llama3, llama2, mistral, qwen2, gemma)");
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
      if (++p_->depth_ > kMaxDepth) p_->fail("template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  // Parses statements until a block tag whose keyword is in `stops`; leaves the parser
  // just after that keyword and stores it in *end. With no stops, parses to EOF.
  NodeList parse_body(const std::vector<std::string>& stops, std::string* end) {
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

  NodePtr make_node(Node::Kind k) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = cur().line;
    return n;
  }

  NodePtr parse_statement(const std::string& kw) {
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

  NodePtr parse_if() {
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

  std::vector<std::string> parse_targets() {
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

  NodePtr parse_for() {
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

  NodePtr parse_set() {
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

  NodePtr parse_macro() {
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

  NodePtr parse_filter_block() {
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

  // ---- expressions ----
  ExprPtr make_expr(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = cur().line;
    return e;
  }

  // An expression, or a bare tuple "a, b" where Jinja2 allows one.
  ExprPtr parse_tuple_expr(bool allow_condexpr = true) {
    ExprPtr first = allow_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto t = make_expr(Expr::Kind::kTuple);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (cur().kind == K::kBlockEnd || cur().kind == K::kVarEnd || is_name("if")) break;
      t->args.push_back(allow_condexpr ? parse_expression() : parse_or());
    }
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      advance();
      auto c = make_expr(Expr::Kind::kCondExpr);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      if (is_name("else")) {
        advance();
        c->args.push_back(parse_expression());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r) {
    auto b = make_expr(Expr::Kind::kBinary);
    b->name = op;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      advance();
      l = binary("or", std::move(l), parse_and());
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      advance();
      l = binary("and", std::move(l), parse_not());
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      auto u = make_expr(Expr::Kind::kUnary);
      advance();
      u->name = "not";
      u->args.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == K::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                                   cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == K::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(Expr::Kind::kCompare);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      advance();
      l = binary(op, std::move(l), parse_concat());
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      advance();
      l = binary("~", std::move(l), parse_math2());
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      advance();
      l = binary(op, std::move(l), parse_pow());
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      advance();
      l = binary("**", std::move(l), parse_unary(true));
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto u = make_expr(Expr::Kind::kUnary);
      u->name = cur().text;
      advance();
      u->args.push_back(parse_unary(false));
      node = std::move(u);
    } else {
      node = parse_postfix(parse_primary());
    }
    if (with_filter) node = parse_filter_chain(std::move(node), false);
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case K::kName: {
        auto e = make_expr(Expr::Kind::kLiteral);
        if (t.text == "true" || t.text == "True") e->literal = Value::from_bool(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::from_bool(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case K::kString: {
        std::string s;
        while (cur().kind == K::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        auto e = make_expr(Expr::Kind::kLiteral);
        e->literal = Value::from_string(std::move(s));
        return e;
      }
      case K::kInt:
      case K::kFloat: {
        auto e = make_expr(Expr::Kind::kLiteral);
        e->literal = t.kind == K::kInt ? Value::from_int(t.integer) : Value::from_float(t.number);
        advance();
        return e;
      }
      case K::kOp:
        if (t.text == "(") {
          advance();
          if (is_op(")")) {
            advance();
            return make_expr(Expr::Kind::kTuple);
          }
          ExprPtr first = parse_expression();
          if (is_op(")")) {
            advance();
            return first;
          }
          auto tup = make_expr(Expr::Kind::kTuple);
          tup->args.push_back(std::move(first));
          while (is_op(",")) {
            advance();
            if (is_op(")")) break;
            tup->args.push_back(parse_expression());
          }
          expect_op(")");
          return tup;
        }
        if (t.text == "[") {
          advance();
          auto l = make_expr(Expr::Kind::kList);
          while (!is_op("]")) {
            if (!l->args.empty()) expect_op(",");
            if (is_op("]")) break;
            l->args.push_back(parse_expression());
          }
          advance();
          return l;
        }
        if (t.text == "{") {
          advance();
          auto d = make_expr(Expr::Kind::kDict);
          while (!is_op("}")) {
            if (!d->args.empty()) expect_op(",");
            if (is_op("}")) break;
            d->dict_keys.push_back(parse_expression());
            expect_op(":");
            d->args.push_back(parse_expression());
          }
          advance();
          return d;
        }
        break;
      default: break;
    }
    fail("expected an expression, got " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        advance();
        auto g = make_expr(Expr::Kind::kGetAttr);
        if (cur().kind == K::kInt) {  // foo.0 is foo[0]
          g->kind = Expr::Kind::kGetItem;
          auto idx = make_expr(Expr::Kind::kLiteral);
          idx->literal = Value::from_int(cur().integer);
          advance();
          g->args.push_back(std::move(node));
          g->args.push_back(std::move(idx));
        } else {
          g->name = expect_name();
          g->args.push_back(std::move(node));
        }
        node = std::move(g);
      } else if (is_op("[")) {
        advance();
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node), Expr::Kind::kCall);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    auto s = make_expr(Expr::Kind::kGetItem);
    s->args.push_back(std::move(obj));
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (is_op(":")) {
        is_slice = true;
        advance();
        if (++n > 2) fail("too many ':' in slice");
        continue;
      }
      if (is_op("]")) break;
      if (parts[n]) fail("expected ':' or ']' in subscript, got " + describe(cur()));
      parts[n] = parse_expression();
    }
    advance();
    if (is_slice) {
      s->kind = Expr::Kind::kSlice;
      for (auto& p : parts) s->args.push_back(std::move(p));
    } else {
      if (!parts[0]) fail("empty subscript");
      s->args.push_back(std::move(parts[0]));
    }
    return s;
  }

  // Parses "(args)" into an expression of `kind` whose args[0] is `callee`.
  ExprPtr parse_call(ExprPtr callee, Expr::Kind kind) {
    auto c = make_expr(kind);
    c->args.push_back(std::move(callee));
    parse_call_args(c.get());
    return c;
  }
  void parse_call_args(Expr* c) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) unsupported("*args/**kwargs in calls");
      if (cur().kind == K::kName && peek().kind == K::kOp && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        c->kwargs.emplace_back(key, parse_expression());
      } else {
        if (!c->kwargs.empty()) fail("positional argument after keyword argument");
        c->args.push_back(parse_expression());
      }
    }
    advance();
  }

  ExprPtr parse_filter_chain(ExprPtr node, bool first_pipe_consumed) {
    while (true) {
      if (first_pipe_consumed || is_op("|")) {
        if (!first_pipe_consumed) advance();
        first_pipe_consumed = false;
        auto f = make_expr(Expr::Kind::kFilter);
        f->name = expect_name();
        while (is_op(".")) {  // dotted filter names
          advance();
          f->name += '.';
          f->name += expect_name();
        }
        f->args.push_back(std::move(node));
        if (is_op("(")) parse_call_args(f.get());
        node = std::move(f);
      } else if (is_name("is")) {
        advance();
        auto t = make_expr(Expr::Kind::kTest);
        if (is_name("not")) {
          t->negated = true;
          advance();
        }
        t->name = expect_name();
        t->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(t.get());
        } else if ((cur().kind == K::kName || cur().kind == K::kString || cur().kind == K::kInt ||
                    cur().kind == K::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(t);
      } else if (is_op("(")) {
        node = parse_call(std::move(node), Expr::Kind::kCall);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

NodeList parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace tokenizer::jinja
