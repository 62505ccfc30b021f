// jinja_eval.cc: walks the parsed template and produces the prompt text. Scoping follows
// Jinja2: top-level set writes the template scope; each for-loop iteration and each macro
// call gets a fresh scope that is dropped afterwards; if-blocks share their parent's scope;
// namespace() objects are shared and mutable. Operators follow Python (and/or return an
// operand, 1 == 1.0, str + int is an error, // and % floor). Undefined prints as "" and is
// falsy, but using it in arithmetic or taking its attributes is an error, as in Jinja2.
// Deliberately not here: caller()/call blocks, recursive loops, loop.changed, autoescape;
// work and output are capped so a hostile template fails instead of exhausting memory.
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"

namespace tokenizer::jinja {
namespace {

constexpr int64_t kMaxSteps = 5'000'000;
constexpr int kMaxCallDepth = 100;

using Frame = std::unordered_map<std::string, Value>;
using FramePtr = std::shared_ptr<Frame>;
using ScopeChain = std::vector<FramePtr>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const Dict& variables) {
    auto root = std::make_shared<Frame>();
    install_globals(*root);
    for (const auto& kv : variables.items) (*root)[kv.first] = kv.second;
    scopes_.push_back(root);
  }

  std::string run(const NodeList& nodes) {
    std::string out;
    out_ = &out;
    Flow f = render_nodes(nodes);
    if (f != Flow::kNormal) throw JinjaError("'break'/'continue' outside of a loop");
    return out;
  }

 private:
  void install_globals(Frame& g) {
    g["namespace"] = Value::from_function([](CallArgs& a) {
      Value ns = Value::new_dict();
      ns.is_namespace = true;
      if (!a.positional.empty()) {
        if (!a.positional[0].is_dict()) throw JinjaError("namespace() positional argument must be a dict");
        for (const auto& kv : a.positional[0].dict->items) ns.dict->set(kv.first, kv.second);
      }
      for (const auto& kv : a.kwargs) ns.dict->set(kv.first, kv.second);
      return ns;
    });
    g["dict"] = Value::from_function([](CallArgs& a) {
      Value d = Value::new_dict();
      for (const auto& kv : a.kwargs) d.dict->set(kv.first, kv.second);
      return d;
    });
    g["range"] = Value::from_function([](CallArgs& a) {
      std::vector<int64_t> v;
      for (const auto& p : a.positional) {
        if (p.type != Value::Type::kInt && p.type != Value::Type::kBool) throw JinjaError("range() needs integers");
        v.push_back(p.type == Value::Type::kBool ? p.boolean : p.integer);
      }
      if (v.empty() || v.size() > 3 || !a.kwargs.empty()) throw JinjaError("range expected 1 to 3 integer arguments");
      int64_t start = v.size() > 1 ? v[0] : 0, stop = v.size() > 1 ? v[1] : v[0], step = v.size() > 2 ? v[2] : 1;
      if (step == 0) throw JinjaError("range() arg 3 must not be zero");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (out.size() >= kMaxListItems) throw JinjaError("range too big");
        out.push_back(Value::from_int(i));
        if (__builtin_add_overflow(i, step, &i)) break;  // past int64 is past stop
      }
      return Value::from_list(std::move(out));
    });
    g["strftime_now"] = Value::from_function([](CallArgs& a) {
      Value fmt = a.get(0, "format");
      if (!fmt.is_string()) throw JinjaError("strftime_now needs a format string");
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof(buf), fmt.str.c_str(), &tm);
      return Value::from_string(std::string(buf, n));
    });
  }

  void step() {
    if (++steps_ > kMaxSteps) throw JinjaError("template rendering exceeded the work limit");
  }

  void emit(const std::string& s) {
    check_string_size(out_->size() + s.size(), "the rendered template");
    *out_ += s;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::vector<std::string>& targets, const Value& v) {
    Frame& f = *scopes_.back();
    if (targets.size() == 1) {
      f[targets[0]] = v;
      return;
    }
    if (!v.is_list()) throw JinjaError("cannot unpack non-sequence " + v.type_name());
    if (v.list->size() != targets.size())
      throw JinjaError("cannot unpack " + std::to_string(v.list->size()) + " values into " +
                       std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) f[targets[i]] = (*v.list)[i];
  }

  Flow render_nodes(const NodeList& nodes) {
    for (const auto& n : nodes) {
      step();
      Flow f = render_node(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  std::string capture(const NodeList& nodes) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    Flow f = render_nodes(nodes);
    out_ = saved;
    if (f != Flow::kNormal) throw JinjaError("'break'/'continue' outside of a loop");
    return buf;
  }

  Flow render_node(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kText: emit(n.text); return Flow::kNormal;
      case Node::Kind::kOutput: emit(eval(*n.expr).to_str()); return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches)
          if (!cond || eval(*cond).truthy()) return render_nodes(body);
        return Flow::kNormal;
      case Node::Kind::kFor: return render_for(n);
      case Node::Kind::kSet:
        if (!n.attr.empty()) {
          Value ns = lookup(n.targets[0]);
          if (!ns.is_namespace) throw JinjaError("can only assign attributes of a namespace() object, not of '" + n.targets[0] + "'");
          ns.dict->set(n.attr, eval(*n.expr));
        } else {
          assign(n.targets, eval(*n.expr));
        }
        return Flow::kNormal;
      case Node::Kind::kSetBlock: assign(n.targets, Value::from_string(capture(n.body))); return Flow::kNormal;
      case Node::Kind::kMacro: define_macro(n); return Flow::kNormal;
      case Node::Kind::kFilterBlock: {
        std::string body = capture(n.body);
        scopes_.push_back(std::make_shared<Frame>());
        (*scopes_.back())[kFilterBlockInput] = Value::from_string(body);
        Value r = eval(*n.expr);
        scopes_.pop_back();
        emit(r.to_str());
        return Flow::kNormal;
      }
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
      default: throw JinjaError("internal error: unknown node");
    }
  }

  Flow render_for(const Node& n) {
    List items = iterate(eval(*n.expr));
    if (n.loop_filter) {
      List kept;
      for (const Value& item : items) {
        step();
        scopes_.push_back(std::make_shared<Frame>());
        assign(n.targets, item);
        bool keep = eval(*n.loop_filter).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return render_nodes(n.else_body);
    // One loop object and one scope per loop, refreshed each iteration (Jinja2 gives each
    // iteration a fresh scope; clearing the frame has the same effect, cheaper).
    int64_t len = static_cast<int64_t>(items.size());
    auto index = std::make_shared<int64_t>(0);
    Value loop = Value::new_dict();
    Dict& d = *loop.dict;
    const char* kKeys[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                           "depth", "depth0", "previtem", "nextitem"};
    for (const char* k : kKeys) d.items.emplace_back(k, Value::none());
    d.set("cycle", Value::from_function([index](CallArgs& a) {
      if (a.positional.empty()) throw JinjaError("no items for cycling given");
      return a.positional[static_cast<size_t>(*index) % a.positional.size()];
    }));
    auto frame = std::make_shared<Frame>();
    scopes_.push_back(frame);
    Flow f = Flow::kNormal;
    for (int64_t i = 0; i < len && f != Flow::kBreak; ++i) {
      step();
      *index = i;
      frame->clear();
      assign(n.targets, items[static_cast<size_t>(i)]);
      d.items[0].second = Value::from_int(i + 1);
      d.items[1].second = Value::from_int(i);
      d.items[2].second = Value::from_int(len - i);
      d.items[3].second = Value::from_int(len - i - 1);
      d.items[4].second = Value::from_bool(i == 0);
      d.items[5].second = Value::from_bool(i == len - 1);
      d.items[6].second = Value::from_int(len);
      d.items[7].second = Value::from_int(1);
      d.items[8].second = Value::from_int(0);
      d.items[9].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
      d.items[10].second = i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
      (*frame)["loop"] = loop;
      f = render_nodes(n.body);
    }
    scopes_.pop_back();
    return Flow::kNormal;
  }

  void define_macro(const Node& n) {
    const Node* node = &n;
    // Weak references: the macro value lives in one of these frames, and a strong
    // reference back would leak the cycle.
    std::vector<std::weak_ptr<Frame>> closure(scopes_.begin(), scopes_.end());
    (*scopes_.back())[n.name] = Value::from_function([this, node, closure](CallArgs& a) {
      if (a.positional.size() > node->params.size())
        throw JinjaError("macro '" + node->name + "' takes not more than " + std::to_string(node->params.size()) +
                         " argument(s)");
      if (++call_depth_ > kMaxCallDepth) throw JinjaError("macro recursion too deep");
      ScopeChain saved = scopes_;
      scopes_.clear();
      for (const auto& w : closure)
        if (auto f = w.lock()) scopes_.push_back(std::move(f));
      auto frame = std::make_shared<Frame>();
      scopes_.push_back(frame);
      for (size_t i = 0; i < node->params.size(); ++i) {
        Value v = a.get(i, node->params[i]);
        if (v.is_undefined() && node->defaults[i]) v = eval(*node->defaults[i]);
        (*frame)[node->params[i]] = v;
      }
      for (const auto& kv : a.kwargs) {
        bool known = false;
        for (const auto& p : node->params) known = known || p == kv.first;
        if (!known) throw JinjaError("macro '" + node->name + "' takes no keyword argument '" + kv.first + "'");
      }
      std::string text;
      try {
        text = capture(node->body);
      } catch (...) {
        scopes_ = saved;
        --call_depth_;
        throw;
      }
      scopes_ = saved;
      --call_depth_;
      return Value::from_string(text);
    });
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& kv : e.kwargs) a.kwargs.emplace_back(kv.first, eval(*kv.second));
    return a;
  }

  static void require_defined(const Value& v) {
    if (v.is_undefined()) throw JinjaError(v.str.empty() ? "undefined value used in an expression" : v.str);
  }

  Value eval(const Expr& e) {
    step();
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        return Value::from_list(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        Value d = Value::new_dict();
        for (size_t i = 0; i < e.args.size(); ++i) {
          Value k = eval(*e.dict_keys[i]);
          if (!k.is_string()) throw JinjaError("only string keys are supported in dict literals");
          d.dict->set(k.str, eval(*e.args[i]));
        }
        return d;
      }
      case Expr::Kind::kGetAttr: return get_attr(eval(*e.args[0]), e.name);
      case Expr::Kind::kGetItem: {
        Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]));
      }
      case Expr::Kind::kSlice: {
        Value obj = eval(*e.args[0]);
        auto part = [&](int i) { return e.args[i] ? eval(*e.args[i]) : Value::undefined(); };
        return slice_value(obj, part(1), part(2), part(3));
      }
      case Expr::Kind::kCall: {
        Value callee = eval(*e.args[0]);
        require_defined(callee);
        if (callee.type != Value::Type::kFunction) throw JinjaError("'" + callee.type_name() + "' object is not callable");
        CallArgs a = eval_args(e, 1);
        Function f = *callee.func;
        return f(a);
      }
      case Expr::Kind::kFilter: {
        Value subject = eval(*e.args[0]);
        return apply_filter(e.name, subject, eval_args(e, 1));
      }
      case Expr::Kind::kTest: {
        Value subject = eval(*e.args[0]);
        bool r = apply_test(e.name, subject, eval_args(e, 1));
        return Value::from_bool(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::from_bool(!v.truthy());
        require_defined(v);
        if (!v.is_number()) throw JinjaError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.type == Value::Type::kBool ? Value::from_int(v.boolean) : v;
        if (v.type == Value::Type::kFloat) return Value::from_float(-v.number);
        int64_t neg = 0;
        const bool overflow = __builtin_sub_overflow(int64_t(0), v.as_int(), &neg);
        return Value::from_int(exact_int(overflow, neg, "unary '-'"));
      }
      case Expr::Kind::kBinary: return eval_binary(e);
      case Expr::Kind::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value::from_bool(false);
          left = std::move(right);
        }
        return Value::from_bool(true);
      }
      case Expr::Kind::kCondExpr:
        if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("conditional expression had no else branch");
    }
    throw JinjaError("internal error: unknown expression");
  }

  static bool compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return values_equal(l, r);
    if (op == "!=") return !values_equal(l, r);
    if (op == "in" || op == "not in") {
      CallArgs a;
      a.positional.push_back(r);
      if (r.is_undefined()) require_defined(r);
      bool found = apply_test("in", l, a);
      return op == "in" ? found : !found;
    }
    require_defined(l);
    require_defined(r);
    int c = compare_values(l, r);
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    Value l = eval(*e.args[0]);
    if (op == "and") return l.truthy() ? eval(*e.args[1]) : l;
    if (op == "or") return l.truthy() ? l : eval(*e.args[1]);
    Value r = eval(*e.args[1]);
    if (op == "~") {
      std::string a = l.to_str(), b = r.to_str();
      check_string_size(a.size() + b.size(), "'~'");
      return Value::from_string(a + b);
    }
    require_defined(l);
    require_defined(r);
    using T = Value::Type;
    auto type_error = [&]() -> Value {
      throw JinjaError("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'");
    };
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        check_string_size(l.str.size() + r.str.size(), "'+'");
        return Value::from_string(l.str + r.str);
      }
      if (l.is_list() && r.is_list() && l.is_tuple == r.is_tuple) {
        if (l.list->size() + r.list->size() > kMaxListItems) throw JinjaError("'+': the list would exceed 1M items");
        List items = *l.list;
        items.insert(items.end(), r.list->begin(), r.list->end());
        return Value::from_list(std::move(items), l.is_tuple);
      }
      if (l.is_string() || r.is_string())
        throw JinjaError("can only concatenate " + l.type_name() + " (not \"" + r.type_name() + "\") to " + l.type_name());
    }
    if (op == "*" && (l.is_string() || l.is_list() || r.is_string() || r.is_list())) {
      const Value& seq = (l.is_string() || l.is_list()) ? l : r;
      const Value& count = (l.is_string() || l.is_list()) ? r : l;
      if (count.type != T::kInt && count.type != T::kBool) return type_error();
      const int64_t size = static_cast<int64_t>(seq.is_string() ? seq.str.size() : seq.list->size());
      int64_t n = size == 0 ? 0 : std::max<int64_t>(0, count.as_int()), total = 0;  // '' * 10**18 is '' at once
      const size_t most = seq.is_string() ? kMaxStringBytes : kMaxListItems;  // bytes or items
      if (__builtin_mul_overflow(n, size, &total) || total > static_cast<int64_t>(most))
        throw JinjaError("repetition too large");
      if (seq.is_string()) {
        std::string s;
        for (int64_t i = 0; i < n; ++i) s += seq.str;
        return Value::from_string(s);
      }
      List items;
      for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.list->begin(), seq.list->end());
      return Value::from_list(std::move(items), seq.is_tuple);
    }
    if (op == "%" && l.is_string()) throw JinjaError("printf-style '%' string formatting is not supported");
    if (!l.is_number() || !r.is_number()) return type_error();
    bool ints = l.type != T::kFloat && r.type != T::kFloat;
    double x = l.as_double(), y = r.as_double();
    const int64_t a = l.as_int(), b = r.as_int();  // when ints
    int64_t v = 0;
    auto int_result = [&](bool overflow) { return Value::from_int(exact_int(overflow, v, "'" + op + "'")); };
    if (op == "+") return ints ? int_result(__builtin_add_overflow(a, b, &v)) : Value::from_float(x + y);
    if (op == "-") return ints ? int_result(__builtin_sub_overflow(a, b, &v)) : Value::from_float(x - y);
    if (op == "*") return ints ? int_result(__builtin_mul_overflow(a, b, &v)) : Value::from_float(x * y);
    if (op == "**") {
      if (ints && b >= 0) {
        if (a == 0 || a == 1) return Value::from_int(b == 0 ? 1 : a);
        if (a == -1) return Value::from_int(b % 2 ? -1 : 1);
        v = 1;  // |a| >= 2 leaves 64 bits within 63 steps
        for (int64_t i = 0; i < b; ++i)
          if (__builtin_mul_overflow(v, a, &v)) return int_result(true);
        return Value::from_int(v);
      }
      return Value::from_float(std::pow(x, y));
    }
    if (y == 0) throw JinjaError(op == "/" ? "division by zero" : "integer division or modulo by zero");
    if (op == "/") return Value::from_float(x / y);
    if (ints && b == -1) {  // a // -1 = -a (INT64_MIN's leaves 64 bits; the division traps), a % -1 = 0
      if (op == "//") return int_result(__builtin_sub_overflow(int64_t(0), a, &v));
      if (op == "%") return Value::from_int(0);
    }
    if (op == "//") {
      if (ints) {
        int64_t q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        return Value::from_int(q);
      }
      return Value::from_float(std::floor(x / y));
    }
    if (op == "%") {
      if (ints) {
        int64_t m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) m += b;
        return Value::from_int(m);
      }
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::from_float(m);
    }
    return type_error();
  }

  ScopeChain scopes_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

void validate_expr(const Expr& e) {
  if (e.kind == Expr::Kind::kFilter && !is_known_filter(e.name))
    throw JinjaError("unsupported template construct: no filter named '" + e.name +
                     "' in shardlm's chat-template interpreter; pass another template with --chat-template");
  if (e.kind == Expr::Kind::kTest && !is_known_test(e.name))
    throw JinjaError("unsupported template construct: no test named '" + e.name +
                     "' in shardlm's chat-template interpreter; pass another template with --chat-template");
  for (const auto& a : e.args)
    if (a) validate_expr(*a);
  for (const auto& k : e.dict_keys) validate_expr(*k);
  for (const auto& kv : e.kwargs) validate_expr(*kv.second);
}

}  // namespace

void validate(const NodeList& nodes) {
  for (const auto& n : nodes) {
    if (n->expr) validate_expr(*n->expr);
    if (n->loop_filter) validate_expr(*n->loop_filter);
    for (const auto& d : n->defaults)
      if (d) validate_expr(*d);
    for (const auto& [cond, body] : n->branches) {
      if (cond) validate_expr(*cond);
      validate(body);
    }
    validate(n->body);
    validate(n->else_body);
  }
}

std::string render(const NodeList& nodes, const Dict& variables) { return Renderer(variables).run(nodes); }

}  // namespace tokenizer::jinja
