// jinja_expr_parser.cc: the expression half of the chat-template parser, with Jinja2's
// precedence (condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary <
// postfix, filters, tests), literals, subscripts/slices, calls with keyword arguments.
// Deliberately not here: *args/**kwargs in calls, dotted filter arguments beyond names.
#include "tokenizer/jinja_parser.h"

namespace tokenizer::jinja {

ExprPtr Parser::make_expr(Expr::Kind k) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = cur().line;
  return e;
}

// An expression, or a bare tuple "a, b" where Jinja2 allows one.
ExprPtr Parser::parse_tuple_expr(bool allow_condexpr) {
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

ExprPtr Parser::parse_expression() {
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

ExprPtr Parser::binary(const std::string& op, ExprPtr l, ExprPtr r) {
  auto b = make_expr(Expr::Kind::kBinary);
  b->name = op;
  b->args.push_back(std::move(l));
  b->args.push_back(std::move(r));
  return b;
}

ExprPtr Parser::parse_or() {
  ExprPtr l = parse_and();
  while (is_name("or")) {
    advance();
    l = binary("or", std::move(l), parse_and());
  }
  return l;
}

ExprPtr Parser::parse_and() {
  ExprPtr l = parse_not();
  while (is_name("and")) {
    advance();
    l = binary("and", std::move(l), parse_not());
  }
  return l;
}

ExprPtr Parser::parse_not() {
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

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_math1() {
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    advance();
    l = binary(op, std::move(l), parse_concat());
  }
  return l;
}

ExprPtr Parser::parse_concat() {
  ExprPtr l = parse_math2();
  while (is_op("~")) {
    advance();
    l = binary("~", std::move(l), parse_math2());
  }
  return l;
}

ExprPtr Parser::parse_math2() {
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    advance();
    l = binary(op, std::move(l), parse_pow());
  }
  return l;
}

ExprPtr Parser::parse_pow() {
  ExprPtr l = parse_unary(true);
  while (is_op("**")) {
    advance();
    l = binary("**", std::move(l), parse_unary(true));
  }
  return l;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
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

ExprPtr Parser::parse_subscript(ExprPtr obj) {
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
ExprPtr Parser::parse_call(ExprPtr callee, Expr::Kind kind) {
  auto c = make_expr(kind);
  c->args.push_back(std::move(callee));
  parse_call_args(c.get());
  return c;
}

void Parser::parse_call_args(Expr* c) {
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

ExprPtr Parser::parse_filter_chain(ExprPtr node, bool first_pipe_consumed) {
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

}  // namespace tokenizer::jinja
