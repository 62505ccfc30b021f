// jinja_ast.h: tokens, expression and statement trees of the chat-template interpreter,
// and the entry points of its three stages: lex (jinja_lexer.cc), parse (jinja_parser.cc),
// render (jinja_eval.cc). The subset is what Hugging Face chat templates use; anything
// else is refused at parse time with a message naming the construct.
// Deliberately not here: template inheritance/includes, autoescape, line statements.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace tokenizer::jinja {

struct Token {
  enum class Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Kind kind;
  std::string text;  // text data, name, operator, or the unescaped string literal
  int64_t integer = 0;
  double number = 0.0;
  int line = 1;
};

// Splits a template into text and tag tokens, applying Jinja2's whitespace control with
// trim_blocks=True and lstrip_blocks=True (the Hugging Face / llama-cpp-python settings).
std::vector<Token> lex(const std::string& source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // keys in dict_keys, values in args
    kGetAttr,   // args[0].name
    kGetItem,   // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is [not] name(args[1..])
    kUnary,     // name in {"-", "+", "not"} applied to args[0]
    kBinary,    // args[0] name args[1]; name in + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<ExprPtr> dict_keys;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallMacro, kFilterBlock, kBreak, kContinue };
  Kind kind;
  int line = 0;
  std::string text;                   // kText
  ExprPtr expr;                       // output / set value / for iterable / filter-block filter
  std::vector<std::string> targets;   // for/set targets (more than one = tuple unpacking)
  std::string attr;                   // set ns.attr: targets[0] = "ns", attr = "attr"
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // if/elif (cond) and else (null)
  ExprPtr loop_filter;                // for ... if cond
  NodeList body;
  NodeList else_body;
  std::string name;                   // macro name
  std::vector<std::string> params;    // macro parameters
  std::vector<ExprPtr> defaults;      // per parameter, null when none
};

// The variable a {% filter %} block's body is bound to while its filter chain runs.
inline constexpr const char* kFilterBlockInput = " filter block input";

// Parses tokens into a statement list; throws JinjaError on syntax errors and on
// constructs outside the supported subset.
NodeList parse(const std::vector<Token>& tokens);

// Jinja2's compile-time checks: every filter and test used exists. Throws JinjaError.
void validate(const NodeList& nodes);

// Renders a parsed template with the given top-level variables (which may include
// callables such as raise_exception). Throws JinjaError.
std::string render(const NodeList& nodes, const Dict& variables);

}  // namespace tokenizer::jinja
