// A small Jinja interpreter for chat templates: lexer (text and tags with whitespace control), a
// recursive-descent parser into statement and expression trees, and an evaluator over Python-like
// values. The subset and its semantics follow the Jinja documentation and Hugging Face's
// apply_chat_template environment (trim_blocks, lstrip_blocks, loopcontrols, raise_exception, tojson).
#include "infergate/runtime/server/chat_template.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <variant>

#include "infergate/common/json.h"

namespace infergate::runtime::server {
namespace {

// ---------------------------------------------------------------- values

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, as Python dicts

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kStr, kList, kDict } kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> l;
  std::shared_ptr<Dict> d;

  static Value none() { return make(kNone); }
  static Value boolean(bool v) {
    Value x = make(kBool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = make(kInt);
    x.i = v;
    return x;
  }
  static Value number(double v) {
    Value x = make(kFloat);
    x.f = v;
    return x;
  }
  static Value str(std::string v) {
    Value x = make(kStr);
    x.s = std::move(v);
    return x;
  }
  static Value list(List v = {}) {
    Value x = make(kList);
    x.l = std::make_shared<List>(std::move(v));
    return x;
  }
  static Value dict(Dict v = {}) {
    Value x = make(kDict);
    x.d = std::make_shared<Dict>(std::move(v));
    return x;
  }
  static Value make(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
  const Value* get(std::string_view key) const {
    if (kind != kDict) return nullptr;
    for (const auto& [k, v] : *d) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  void put(const std::string& key, Value v) {
    for (auto& [k, old] : *d) {
      if (k == key) {
        old = std::move(v);
        return;
      }
    }
    d->emplace_back(key, std::move(v));
  }
};

struct RenderError {
  std::string message;
};

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone: return false;
    case Value::kBool: return v.b;
    case Value::kInt: return v.i != 0;
    case Value::kFloat: return v.f != 0;
    case Value::kStr: return !v.s.empty();
    case Value::kList: return !v.l->empty();
    case Value::kDict: return !v.d->empty();
  }
  return false;
}

std::string repr(const Value& v);

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: return "";
    case Value::kNone: return "None";
    case Value::kBool: return v.b ? "True" : "False";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v.f);
      std::string s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case Value::kStr: return v.s;
    case Value::kList:
    case Value::kDict: return repr(v);
  }
  return "";
}

std::string repr(const Value& v) {
  if (v.kind == Value::kStr) return "'" + v.s + "'";
  if (v.kind == Value::kList) {
    std::string out = "[";
    for (size_t k = 0; k < v.l->size(); ++k) out += (k ? ", " : "") + repr((*v.l)[k]);
    return out + "]";
  }
  if (v.kind == Value::kDict) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : *v.d) {
      out += (first ? "'" : ", '") + k + "': " + repr(x);
      first = false;
    }
    return out + "}";
  }
  return to_str(v);
}

Json to_json(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone: return nullptr;
    case Value::kBool: return v.b;
    case Value::kInt: return v.i;
    case Value::kFloat: return v.f;
    case Value::kStr: return v.s;
    case Value::kList: {
      Json a = Json::array();
      for (const auto& x : *v.l) a.push_back(to_json(x));
      return a;
    }
    case Value::kDict: {
      Json o = Json::object();
      for (const auto& [k, x] : *v.d) o[k] = to_json(x);
      return o;
    }
  }
  return nullptr;
}

// Python's json.dumps(x, ensure_ascii=False) spacing: ", " and ": ", insertion order.
std::string python_json(const Value& v, int indent, int depth) {
  auto nl = [&](int d) {
    return indent < 0 ? std::string() : "\n" + std::string(static_cast<size_t>(indent * d), ' ');
  };
  if (v.kind == Value::kList) {
    if (v.l->empty()) return "[]";
    std::string out = "[";
    for (size_t k = 0; k < v.l->size(); ++k) {
      out += (k ? (indent < 0 ? ", " : ",") : "") + nl(depth + 1) + python_json((*v.l)[k], indent, depth + 1);
    }
    return out + nl(depth) + "]";
  }
  if (v.kind == Value::kDict) {
    if (v.d->empty()) return "{}";
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : *v.d) {
      out += (first ? "" : (indent < 0 ? ", " : ",")) + nl(depth + 1) + dump_json(Json(k)) + ": " +
             python_json(x, indent, depth + 1);
      first = false;
    }
    return out + nl(depth) + "}";
  }
  return dump_json(to_json(v));
}

bool equal(const Value& a, const Value& b) {
  auto numeric = [](const Value& v) {
    return v.kind == Value::kInt || v.kind == Value::kFloat || v.kind == Value::kBool;
  };
  if (numeric(a) && numeric(b)) {
    auto num = [](const Value& v) {
      return v.kind == Value::kFloat ? v.f : v.kind == Value::kInt ? double(v.i) : double(v.b);
    };
    return num(a) == num(b);
  }
  if (a.kind != b.kind)
    return (a.kind == Value::kUndefined || a.kind == Value::kNone) &&
           (b.kind == Value::kUndefined || b.kind == Value::kNone) && a.kind == b.kind;
  switch (a.kind) {
    case Value::kStr: return a.s == b.s;
    case Value::kList:
      if (a.l->size() != b.l->size()) return false;
      for (size_t k = 0; k < a.l->size(); ++k) {
        if (!equal((*a.l)[k], (*b.l)[k])) return false;
      }
      return true;
    case Value::kDict: return a.d == b.d;
    default: return true;
  }
}

// ---------------------------------------------------------------- expressions

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;
struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kCond
  } kind;
  Value literal;
  std::string name;           // name, attribute, filter, test, operator
  std::vector<ExprPtr> args;  // operands, elements, call args (positional)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negate = false;  // `is not`
};

ExprPtr make_expr(Expr::Kind k) {
  auto e = std::make_shared<Expr>();
  e->kind = k;
  return e;
}

struct Tok {
  enum Kind { kName, kNum, kStr, kOp, kEnd } kind;
  std::string text;
  Value value;
};

struct ParseError {
  std::string message;
  bool unsupported = false;
};

std::vector<Tok> lex_expr(std::string_view s) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::kName, std::string(s.substr(i, j - i)), {}});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '_')) {
        if (s[j] == '.') {
          if (j + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[j + 1]))) break;
          is_float = true;
        }
        ++j;
      }
      std::string text(s.substr(i, j - i));
      std::erase(text, '_');
      Tok t{Tok::kNum, text, {}};
      t.value = is_float ? Value::number(std::stod(text)) : Value::integer(std::stoll(text));
      out.push_back(t);
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          ++j;
          switch (s[j]) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case '\\': v += '\\'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            default: v += '\\'; v += s[j];
          }
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) throw ParseError{"unterminated string literal"};
      Tok t{Tok::kStr, "", Value::str(v)};
      out.push_back(t);
      i = j + 1;
      continue;
    }
    static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
    bool matched = false;
    for (const char* op : two) {
      if (s.substr(i, 2) == op) {
        out.push_back({Tok::kOp, op, {}});
        i += 2;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (std::string_view("+-*/%~<>()[]{}.,:|=").find(c) != std::string_view::npos) {
      out.push_back({Tok::kOp, std::string(1, c), {}});
      ++i;
      continue;
    }
    throw ParseError{"unexpected character '" + std::string(1, c) + "' in an expression"};
  }
  out.push_back({Tok::kEnd, "", {}});
  return out;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Tok> toks) : t_(std::move(toks)) {}

  ExprPtr parse() {
    ExprPtr e = conditional();
    return e;
  }
  bool at_end() const { return t_[p_].kind == Tok::kEnd; }
  const Tok& peek() const { return t_[p_]; }
  bool accept_name(std::string_view n) {
    if (t_[p_].kind == Tok::kName && t_[p_].text == n) {
      ++p_;
      return true;
    }
    return false;
  }
  bool accept_op(std::string_view o) {
    if (t_[p_].kind == Tok::kOp && t_[p_].text == o) {
      ++p_;
      return true;
    }
    return false;
  }
  void expect_op(std::string_view o) {
    if (!accept_op(o)) throw ParseError{"expected '" + std::string(o) + "', found '" + describe() + "'"};
  }
  std::string expect_name() {
    if (t_[p_].kind != Tok::kName) throw ParseError{"expected a name, found '" + describe() + "'"};
    return t_[p_++].text;
  }
  std::string describe() const {
    return t_[p_].kind == Tok::kEnd ? "end of tag" : t_[p_].kind == Tok::kStr ? "a string" : t_[p_].text;
  }

  // An expression without the trailing `if ... else` (for `for x in y if cond`).
  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    while (accept_name("or")) l = binary("or", l, and_expr());
    return l;
  }

 private:
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r) {
    auto e = make_expr(Expr::kBinary);
    e->name = std::move(op);
    e->args = {std::move(l), std::move(r)};
    return e;
  }
  ExprPtr conditional() {
    ExprPtr body = or_expr();
    if (accept_name("if")) {
      auto e = make_expr(Expr::kCond);
      ExprPtr cond = or_expr();
      ExprPtr other = accept_name("else") ? conditional() : nullptr;
      e->args = {cond, body, other};
      return e;
    }
    return body;
  }
  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    while (accept_name("and")) l = binary("and", l, not_expr());
    return l;
  }
  ExprPtr not_expr() {
    if (accept_name("not")) {
      auto e = make_expr(Expr::kUnary);
      e->name = "not";
      e->args = {not_expr()};
      return e;
    }
    return comparison();
  }
  ExprPtr comparison() {
    ExprPtr l = concat();
    for (;;) {
      const Tok& t = peek();
      if (t.kind == Tok::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" ||
                                 t.text == "<=" || t.text == ">=")) {
        std::string op = t.text;
        ++p_;
        l = binary(op, l, concat());
      } else if (accept_name("in")) {
        l = binary("in", l, concat());
      } else if (t.kind == Tok::kName && t.text == "not" && t_[p_ + 1].kind == Tok::kName &&
                 t_[p_ + 1].text == "in") {
        p_ += 2;
        l = binary("not in", l, concat());
      } else if (accept_name("is")) {
        auto e = make_expr(Expr::kTest);
        e->negate = accept_name("not");
        e->name = expect_name();
        e->args = {l};
        if (accept_op("(")) {
          call_args(e.get());
        } else if (peek().kind == Tok::kStr || peek().kind == Tok::kNum) {
          e->args.push_back(primary());
        }
        l = e;
      } else {
        return l;
      }
    }
  }
  ExprPtr concat() {
    ExprPtr l = additive();
    while (accept_op("~")) l = binary("~", l, additive());
    return l;
  }
  ExprPtr additive() {
    ExprPtr l = multiplicative();
    for (;;) {
      if (accept_op("+"))
        l = binary("+", l, multiplicative());
      else if (accept_op("-"))
        l = binary("-", l, multiplicative());
      else
        return l;
    }
  }
  ExprPtr multiplicative() {
    ExprPtr l = unary();
    for (;;) {
      if (accept_op("*"))
        l = binary("*", l, unary());
      else if (accept_op("//"))
        l = binary("//", l, unary());
      else if (accept_op("/"))
        l = binary("/", l, unary());
      else if (accept_op("%"))
        l = binary("%", l, unary());
      else
        return l;
    }
  }
  ExprPtr unary() {
    if (accept_op("-")) {
      auto e = make_expr(Expr::kUnary);
      e->name = "-";
      e->args = {unary()};
      return e;
    }
    if (accept_op("+")) return unary();
    return filtered();
  }
  ExprPtr filtered() {
    ExprPtr e = postfix(primary());
    while (accept_op("|")) {
      auto f = make_expr(Expr::kFilter);
      f->name = expect_name();
      f->args = {e};
      if (accept_op("(")) call_args(f.get());
      e = f;
    }
    return e;
  }
  void call_args(Expr* e) {
    if (accept_op(")")) return;
    for (;;) {
      if (peek().kind == Tok::kName && t_[p_ + 1].kind == Tok::kOp && t_[p_ + 1].text == "=") {
        std::string k = t_[p_].text;
        p_ += 2;
        e->kwargs.emplace_back(k, conditional());
      } else {
        e->args.push_back(conditional());
      }
      if (accept_op(")")) return;
      expect_op(",");
    }
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        auto a = make_expr(Expr::kAttr);
        a->name = expect_name();
        a->args = {e};
        e = a;
      } else if (accept_op("[")) {
        ExprPtr a, b, c;
        bool slice = false;
        if (!(peek().kind == Tok::kOp && peek().text == ":")) a = conditional();
        if (accept_op(":")) {
          slice = true;
          if (!(peek().kind == Tok::kOp && (peek().text == "]" || peek().text == ":"))) b = conditional();
          if (accept_op(":") && !(peek().kind == Tok::kOp && peek().text == "]")) c = conditional();
        }
        expect_op("]");
        auto x = make_expr(slice ? Expr::kSlice : Expr::kIndex);
        x->args = {e, a, b, c};
        e = x;
      } else if (accept_op("(")) {
        auto c = make_expr(Expr::kCall);
        c->args = {e};
        call_args(c.get());
        e = c;
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Tok t = peek();
    if (t.kind == Tok::kNum || t.kind == Tok::kStr) {
      ++p_;
      auto e = make_expr(Expr::kLiteral);
      e->literal = t.value;
      // Adjacent string literals concatenate, as in Python.
      while (t.kind == Tok::kStr && peek().kind == Tok::kStr) e->literal.s += t_[p_++].value.s;
      return e;
    }
    if (t.kind == Tok::kName) {
      ++p_;
      auto e = make_expr(Expr::kLiteral);
      if (t.text == "true" || t.text == "True")
        e->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False")
        e->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None")
        e->literal = Value::none();
      else {
        e = make_expr(Expr::kName);
        e->name = t.text;
      }
      return e;
    }
    if (accept_op("(")) {
      ExprPtr e = conditional();
      if (accept_op(",")) {  // a tuple: treated as a list
        auto l = make_expr(Expr::kList);
        l->args.push_back(e);
        while (!accept_op(")")) {
          l->args.push_back(conditional());
          if (!accept_op(",")) {
            expect_op(")");
            break;
          }
        }
        return l;
      }
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto l = make_expr(Expr::kList);
      while (!accept_op("]")) {
        l->args.push_back(conditional());
        if (!accept_op(",")) {
          expect_op("]");
          break;
        }
      }
      return l;
    }
    if (accept_op("{")) {
      auto d = make_expr(Expr::kDict);
      while (!accept_op("}")) {
        d->args.push_back(conditional());
        expect_op(":");
        d->args.push_back(conditional());
        if (!accept_op(",")) {
          expect_op("}");
          break;
        }
      }
      return d;
    }
    throw ParseError{"unexpected '" + describe() + "' in an expression"};
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
};

// ---------------------------------------------------------------- statements

struct Node;
using Body = std::vector<std::shared_ptr<Node>>;
struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue } kind;
  std::string text;
  ExprPtr expr;                                    // output, set value, for iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // if: (cond or null for else, body)
  std::vector<std::string> vars;                   // for: loop variables; set: target (name or ns, attr)
  ExprPtr filter;                                  // for ... if cond
  Body body, else_body;
};

struct Segment {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;
  size_t offset = 0;
};

// Splits the source into text, {{ }} and {% %} segments, applying '-' whitespace control and
// Hugging Face's trim_blocks (drop the newline after a block tag) and lstrip_blocks (drop the spaces
// before a block tag on its line). Comments disappear (treated as blocks for trimming).
std::vector<Segment> split_template(std::string_view src) {
  std::vector<Segment> segs;
  size_t i = 0;
  bool strip_next = false;  // the previous tag ended with '-'
  bool trim_newline = false;
  while (i <= src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string_view::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open != std::string_view::npos && open + 1 >= src.size()) open = std::string_view::npos;
    std::string text(src.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i));
    bool text_at_line_start = i == 0 || src[i - 1] == '\n';
    if (trim_newline && !text.empty() && text.front() == '\n') {
      text.erase(0, 1);
      text_at_line_start = true;
    }
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    }
    if (open == std::string_view::npos) {
      if (!text.empty()) segs.push_back({Segment::kText, text, i});
      break;
    }
    const char kind = src[open + 1];
    const bool block = kind == '%' || kind == '#';
    const bool minus_left = open + 2 < src.size() && src[open + 2] == '-';
    const bool plus_left = open + 2 < src.size() && src[open + 2] == '+';
    if (minus_left) {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    } else if (block && !plus_left) {
      // lstrip_blocks: spaces and tabs between the start of the line and a block tag go.
      size_t k = text.size();
      while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
      const bool line_start = k > 0 ? text[k - 1] == '\n' : text_at_line_start;
      if (line_start) text.erase(k);
    }
    if (!text.empty()) segs.push_back({Segment::kText, text, i});
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t end = src.find(close, open + 2);
    if (end == std::string_view::npos) {
      throw ParseError{"unclosed '{" + std::string(1, kind) + "' at offset " + std::to_string(open)};
    }
    size_t inner_begin = open + 2 + ((minus_left || plus_left) ? 1 : 0);
    size_t inner_end = end;
    strip_next = inner_end > inner_begin && src[inner_end - 1] == '-';
    if (strip_next) --inner_end;
    if (kind != '#') {
      segs.push_back({kind == '{' ? Segment::kExpr : Segment::kStmt,
                      std::string(src.substr(inner_begin, inner_end - inner_begin)), open});
    }
    trim_newline = block;
    i = end + 2;
  }
  return segs;
}

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse_all() {
    std::string stop;
    Body b = parse_body({}, &stop);
    if (!stop.empty()) throw ParseError{"unexpected {% " + stop + " %}"};
    return b;
  }

 private:
  // Parses nodes until a statement whose keyword is in `stops` (returned in *stopped, its
  // expression parser left in cur_).
  Body parse_body(const std::vector<std::string>& stops, std::string* stopped) {
    Body body;
    while (pos_ < segs_.size()) {
      const Segment& seg = segs_[pos_++];
      if (seg.kind == Segment::kText) {
        auto n = std::make_shared<Node>();
        n->kind = Node::kText;
        n->text = seg.text;
        body.push_back(n);
        continue;
      }
      offset_ = seg.offset;
      ExprParser p(lex_expr(seg.text));
      if (seg.kind == Segment::kExpr) {
        auto n = std::make_shared<Node>();
        n->kind = Node::kOutput;
        n->expr = p.parse();
        if (!p.at_end()) throw ParseError{"unexpected '" + p.describe() + "' in {{ }}"};
        body.push_back(n);
        continue;
      }
      std::string kw = p.expect_name();
      for (const auto& s : stops) {
        if (kw == s) {
          *stopped = kw;
          cur_.emplace(std::move(p));
          return body;
        }
      }
      if (kw == "if") {
        auto n = std::make_shared<Node>();
        n->kind = Node::kIf;
        ExprPtr cond = p.parse();
        for (;;) {
          std::string stop;
          Body b = parse_body({"elif", "else", "endif"}, &stop);
          if (stop.empty()) throw ParseError{"{% if %} without {% endif %}"};
          n->branches.emplace_back(cond, std::move(b));
          if (stop == "endif") break;
          if (stop == "else") {
            std::string s2;
            Body eb = parse_body({"endif"}, &s2);
            if (s2.empty()) throw ParseError{"{% else %} without {% endif %}"};
            n->branches.emplace_back(nullptr, std::move(eb));
            break;
          }
          cond = cur_->parse();
        }
        body.push_back(n);
      } else if (kw == "for") {
        auto n = std::make_shared<Node>();
        n->kind = Node::kFor;
        n->vars.push_back(p.expect_name());
        while (p.accept_op(",")) n->vars.push_back(p.expect_name());
        if (!p.accept_name("in")) throw ParseError{"expected 'in' in {% for %}"};
        n->expr = p.or_expr();
        if (p.accept_name("if")) n->filter = p.or_expr();
        if (p.accept_name("recursive")) throw ParseError{"recursive loops", true};
        std::string stop;
        n->body = parse_body({"else", "endfor"}, &stop);
        if (stop.empty()) throw ParseError{"{% for %} without {% endfor %}"};
        if (stop == "else") {
          std::string s2;
          n->else_body = parse_body({"endfor"}, &s2);
          if (s2.empty()) throw ParseError{"{% for %} without {% endfor %}"};
        }
        body.push_back(n);
      } else if (kw == "set") {
        auto n = std::make_shared<Node>();
        n->kind = Node::kSet;
        n->vars.push_back(p.expect_name());
        if (p.accept_op(".")) n->vars.push_back(p.expect_name());
        if (!p.accept_op("=")) throw ParseError{"block {% set %} (without '=')", true};
        n->expr = p.parse();
        body.push_back(n);
      } else if (kw == "break" || kw == "continue") {
        auto n = std::make_shared<Node>();
        n->kind = kw == "break" ? Node::kBreak : Node::kContinue;
        body.push_back(n);
      } else if (kw == "generation" || kw == "endgeneration") {
        // Hugging Face's assistant-mask markers: no output of their own.
      } else {
        throw ParseError{"{% " + kw + " %}", true};
      }
    }
    return body;
  }

  std::vector<Segment> segs_;
  size_t pos_ = 0;
  size_t offset_ = 0;
  std::optional<ExprParser> cur_;
};

// ---------------------------------------------------------------- evaluation

class Renderer {
 public:
  explicit Renderer(std::map<std::string, Value> globals) { scopes_.push_back(std::move(globals)); }

  void render(const Body& body, std::string& out) {
    for (const auto& n : body) {
      if (loop_signal_) return;
      switch (n->kind) {
        case Node::kText: out += n->text; break;
        case Node::kOutput: out += to_str(eval(*n->expr)); break;
        case Node::kIf:
          for (const auto& [cond, b] : n->branches) {
            if (!cond || truthy(eval(*cond))) {
              render(b, out);
              break;
            }
          }
          break;
        case Node::kFor: render_for(*n, out); break;
        case Node::kSet: {
          Value v = eval(*n->expr);
          if (n->vars.size() == 2) {
            Value* ns = lookup(n->vars[0]);
            if (!ns || ns->kind != Value::kDict)
              throw RenderError{"cannot set attribute of '" + n->vars[0] + "'"};
            ns->put(n->vars[1], v);
          } else {
            scopes_.back()[n->vars[0]] = v;
          }
          break;
        }
        case Node::kBreak: loop_signal_ = 1; return;
        case Node::kContinue: loop_signal_ = 2; return;
      }
    }
  }

 private:
  Value* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  List items_of(const Value& v) {
    if (v.kind == Value::kList) return *v.l;
    if (v.kind == Value::kDict) {
      List keys;
      for (const auto& [k, x] : *v.d) keys.push_back(Value::str(k));
      return keys;
    }
    if (v.kind == Value::kStr) {
      List chars;
      for (char c : v.s) chars.push_back(Value::str(std::string(1, c)));
      return chars;
    }
    if (v.kind == Value::kUndefined || v.kind == Value::kNone) return {};
    throw RenderError{"cannot iterate over " + repr(v)};
  }

  void render_for(const Node& n, std::string& out) {
    List all = items_of(eval(*n.expr));
    scopes_.emplace_back();
    List items;
    for (auto& item : all) {
      if (n.filter) {
        bind(n, item);
        if (!truthy(eval(*n.filter))) continue;
      }
      items.push_back(item);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      bind(n, items[static_cast<size_t>(k)]);
      Dict loop = {{"index", Value::integer(k + 1)},
                   {"index0", Value::integer(k)},
                   {"revindex", Value::integer(len - k)},
                   {"revindex0", Value::integer(len - k - 1)},
                   {"first", Value::boolean(k == 0)},
                   {"last", Value::boolean(k == len - 1)},
                   {"length", Value::integer(len)},
                   {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value()},
                   {"nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value()}};
      scopes_.back()["loop"] = Value::dict(std::move(loop));
      render(n.body, out);
      if (loop_signal_ == 1) {
        loop_signal_ = 0;
        break;
      }
      loop_signal_ = 0;
    }
    scopes_.pop_back();
    if (items.empty()) render(n.else_body, out);
  }

  void bind(const Node& n, const Value& item) {
    if (n.vars.size() == 1) {
      scopes_.back()[n.vars[0]] = item;
      return;
    }
    List parts = items_of(item);
    if (parts.size() != n.vars.size()) throw RenderError{"cannot unpack " + repr(item)};
    for (size_t k = 0; k < parts.size(); ++k) scopes_.back()[n.vars[k]] = parts[k];
  }

  static double num(const Value& v, const char* op) {
    if (v.kind == Value::kInt) return static_cast<double>(v.i);
    if (v.kind == Value::kFloat) return v.f;
    if (v.kind == Value::kBool) return v.b;
    throw RenderError{std::string("unsupported operand for ") + op + ": " + repr(v)};
  }

  Value arith(const std::string& op, const Value& a, const Value& b) {
    if (op == "+") {
      if (a.kind == Value::kStr && b.kind == Value::kStr) return Value::str(a.s + b.s);
      if (a.kind == Value::kList && b.kind == Value::kList) {
        List l = *a.l;
        l.insert(l.end(), b.l->begin(), b.l->end());
        return Value::list(std::move(l));
      }
    }
    if (op == "*" && a.kind == Value::kStr && b.kind == Value::kInt) {
      std::string s;
      for (int64_t k = 0; k < b.i; ++k) s += a.s;
      return Value::str(s);
    }
    const bool ints = (a.kind == Value::kInt || a.kind == Value::kBool) &&
                      (b.kind == Value::kInt || b.kind == Value::kBool);
    const double x = num(a, op.c_str()), y = num(b, op.c_str());
    if (op == "+") return ints ? Value::integer(static_cast<int64_t>(x + y)) : Value::number(x + y);
    if (op == "-") return ints ? Value::integer(static_cast<int64_t>(x - y)) : Value::number(x - y);
    if (op == "*") return ints ? Value::integer(static_cast<int64_t>(x * y)) : Value::number(x * y);
    if (y == 0) throw RenderError{"division by zero"};
    if (op == "/") return Value::number(x / y);
    if (op == "//")
      return ints ? Value::integer(static_cast<int64_t>(std::floor(x / y)))
                  : Value::number(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return ints ? Value::integer(static_cast<int64_t>(m)) : Value::number(m);
    }
    throw RenderError{"unknown operator " + op};
  }

  bool contains(const Value& hay, const Value& needle) {
    if (hay.kind == Value::kStr) {
      if (needle.kind != Value::kStr) throw RenderError{"'in <string>' needs a string"};
      return hay.s.find(needle.s) != std::string::npos;
    }
    if (hay.kind == Value::kList) {
      for (const auto& x : *hay.l) {
        if (equal(x, needle)) return true;
      }
      return false;
    }
    if (hay.kind == Value::kDict) return needle.kind == Value::kStr && hay.get(needle.s) != nullptr;
    if (hay.kind == Value::kUndefined || hay.kind == Value::kNone) return false;
    throw RenderError{"'in' needs a string, list or mapping"};
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral: return e.literal;
      case Expr::kName: {
        Value* v = lookup(e.name);
        return v ? *v : Value();
      }
      case Expr::kList: {
        List l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return Value::list(std::move(l));
      }
      case Expr::kDict: {
        Value d = Value::dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2)
          d.put(to_str(eval(*e.args[k])), eval(*e.args[k + 1]));
        return d;
      }
      case Expr::kAttr: {
        Value obj = eval(*e.args[0]);
        if (const Value* v = obj.get(e.name)) return *v;
        return Value();
      }
      case Expr::kIndex: {
        Value obj = eval(*e.args[0]);
        Value key = eval(*e.args[1]);
        if (obj.kind == Value::kDict) {
          const Value* v = obj.get(to_str(key));
          return v ? *v : Value();
        }
        if ((obj.kind == Value::kList || obj.kind == Value::kStr) && key.kind == Value::kInt) {
          const int64_t n = obj.kind == Value::kList ? static_cast<int64_t>(obj.l->size())
                                                     : static_cast<int64_t>(obj.s.size());
          int64_t k = key.i < 0 ? key.i + n : key.i;
          if (k < 0 || k >= n) return Value();
          return obj.kind == Value::kList ? (*obj.l)[static_cast<size_t>(k)]
                                          : Value::str(std::string(1, obj.s[static_cast<size_t>(k)]));
        }
        return Value();
      }
      case Expr::kSlice: return slice(e);
      case Expr::kCall: return call(e);
      case Expr::kFilter: return filter(e);
      case Expr::kTest: {
        bool r = test(e);
        return Value::boolean(e.negate ? !r : r);
      }
      case Expr::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.kind == Value::kInt) return Value::integer(-v.i);
        return Value::number(-num(v, "-"));
      }
      case Expr::kBinary: {
        const std::string& op = e.name;
        if (op == "and") {
          Value a = eval(*e.args[0]);
          return truthy(a) ? eval(*e.args[1]) : a;
        }
        if (op == "or") {
          Value a = eval(*e.args[0]);
          return truthy(a) ? a : eval(*e.args[1]);
        }
        Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        if (op == "~") return Value::str(to_str(a) + to_str(b));
        if (op == "==") return Value::boolean(equal(a, b));
        if (op == "!=") return Value::boolean(!equal(a, b));
        if (op == "in") return Value::boolean(contains(b, a));
        if (op == "not in") return Value::boolean(!contains(b, a));
        if (op == "<" || op == ">" || op == "<=" || op == ">=") {
          int c;
          if (a.kind == Value::kStr && b.kind == Value::kStr)
            c = a.s.compare(b.s);
          else {
            double x = num(a, op.c_str()), y = num(b, op.c_str());
            c = x < y ? -1 : x > y ? 1 : 0;
          }
          return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
        }
        return arith(op, a, b);
      }
      case Expr::kCond: {
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value();
      }
    }
    return Value();
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    const int64_t n = obj.kind == Value::kList  ? static_cast<int64_t>(obj.l->size())
                      : obj.kind == Value::kStr ? static_cast<int64_t>(obj.s.size())
                                                : -1;
    if (n < 0) throw RenderError{"cannot slice " + repr(obj)};
    auto opt = [&](const ExprPtr& x, int64_t dflt) {
      if (!x) return dflt;
      Value v = eval(*x);
      if (v.kind == Value::kNone) return dflt;
      if (v.kind != Value::kInt) throw RenderError{"slice indices must be integers"};
      return v.i;
    };
    int64_t step = opt(e.args[3], 1);
    if (step == 0) throw RenderError{"slice step cannot be zero"};
    auto clamp = [&](int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; };
    int64_t start = opt(e.args[1], step > 0 ? 0 : n - 1), stop = opt(e.args[2], step > 0 ? n : -n - 1);
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    List l;
    std::string s;
    if (step > 0) {
      start = clamp(start, 0, n);
      stop = clamp(stop, 0, n);
      for (int64_t k = start; k < stop; k += step) {
        if (obj.kind == Value::kList)
          l.push_back((*obj.l)[static_cast<size_t>(k)]);
        else
          s += obj.s[static_cast<size_t>(k)];
      }
    } else {
      start = clamp(start, -1, n - 1);
      stop = clamp(stop, -1, n - 1);
      for (int64_t k = start; k > stop; k += step) {
        if (obj.kind == Value::kList)
          l.push_back((*obj.l)[static_cast<size_t>(k)]);
        else
          s += obj.s[static_cast<size_t>(k)];
      }
    }
    return obj.kind == Value::kList ? Value::list(std::move(l)) : Value::str(std::move(s));
  }

  Value kwarg(const Expr& e, std::string_view name, size_t pos, Value dflt) {
    for (const auto& [k, x] : e.kwargs) {
      if (k == name) return eval(*x);
    }
    if (pos < e.args.size()) return eval(*e.args[pos]);
    return dflt;
  }

  static std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, en = s.size();
    auto in = [&](char c) {
      return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0
                           : chars.find(c) != std::string::npos;
    };
    if (left)
      while (b < en && in(s[b])) ++b;
    if (right)
      while (en > b && in(s[en - 1])) --en;
    return s.substr(b, en - b);
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::kName) {
      const std::string& f = callee.name;
      if (f == "raise_exception")
        throw RenderError{e.args.size() > 1 ? to_str(eval(*e.args[1])) : "raise_exception"};
      if (f == "namespace" || f == "dict") {
        Value d = Value::dict();
        for (const auto& [k, x] : e.kwargs) d.put(k, eval(*x));
        return d;
      }
      if (f == "range") {
        std::vector<int64_t> a;
        for (size_t k = 1; k < e.args.size(); ++k) {
          Value v = eval(*e.args[k]);
          if (v.kind != Value::kInt) throw RenderError{"range() needs integers"};
          a.push_back(v.i);
        }
        int64_t start = 0, stop = 0, step = 1;
        if (a.size() == 1)
          stop = a[0];
        else if (a.size() >= 2) {
          start = a[0];
          stop = a[1];
          if (a.size() == 3) step = a[2];
        }
        if (step == 0 || (stop - start) / step > 100000) throw RenderError{"range() too large"};
        List l;
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) l.push_back(Value::integer(k));
        return Value::list(std::move(l));
      }
      if (f == "strftime_now") {
        std::time_t t = std::time(nullptr);
        std::tm tm{};
        gmtime_r(&t, &tm);
        char buf[128];
        std::string fmt = e.args.size() > 1 ? to_str(eval(*e.args[1])) : "%Y-%m-%d";
        size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
        return Value::str(std::string(buf, n));
      }
      throw RenderError{"unknown function '" + f + "'"};
    }
    if (callee.kind != Expr::kAttr) throw RenderError{"only functions and methods can be called"};
    Value obj = eval(*callee.args[0]);
    const std::string& m = callee.name;
    auto arg = [&](size_t k) { return k + 1 < e.args.size() ? eval(*e.args[k + 1]) : Value(); };
    if (obj.kind == Value::kStr) {
      const std::string& s = obj.s;
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        Value c = arg(0);
        return Value::str(strip(s, c.kind == Value::kStr ? c.s : "", m != "rstrip", m != "lstrip"));
      }
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r)
          c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                             : std::tolower(static_cast<unsigned char>(c)));
        return Value::str(r);
      }
      if (m == "title" || m == "capitalize") {
        std::string r = s;
        bool start = true;
        for (size_t k = 0; k < r.size(); ++k) {
          unsigned char c = static_cast<unsigned char>(r[k]);
          r[k] = static_cast<char>(start ? std::toupper(c) : std::tolower(c));
          start = m == "title" ? !std::isalpha(c) : false;
        }
        return Value::str(r);
      }
      if (m == "startswith" || m == "endswith") {
        std::string x = to_str(arg(0));
        bool r = m == "startswith"
                     ? s.rfind(x, 0) == 0
                     : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
        return Value::boolean(r);
      }
      if (m == "split") {
        Value sep = arg(0);
        List parts;
        if (sep.kind != Value::kStr) {
          size_t k = 0;
          while (k < s.size()) {
            while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
            size_t j = k;
            while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            if (j > k) parts.push_back(Value::str(s.substr(k, j - k)));
            k = j;
          }
        } else {
          if (sep.s.empty()) throw RenderError{"empty separator"};
          size_t k = 0;
          for (;;) {
            size_t j = s.find(sep.s, k);
            parts.push_back(Value::str(s.substr(k, j == std::string::npos ? std::string::npos : j - k)));
            if (j == std::string::npos) break;
            k = j + sep.s.size();
          }
        }
        return Value::list(std::move(parts));
      }
      if (m == "replace") {
        std::string from = to_str(arg(0)), to = to_str(arg(1)), r;
        if (from.empty()) return obj;
        size_t k = 0;
        for (;;) {
          size_t j = s.find(from, k);
          if (j == std::string::npos) break;
          r += s.substr(k, j - k) + to;
          k = j + from.size();
        }
        return Value::str(r + s.substr(k));
      }
      if (m == "format") throw RenderError{"str.format is not supported"};
    }
    if (obj.kind == Value::kDict) {
      if (m == "get") {
        const Value* v = obj.get(to_str(arg(0)));
        return v ? *v : (e.args.size() > 2 ? arg(1) : Value::none());
      }
      if (m == "items" || m == "keys" || m == "values") {
        List l;
        for (const auto& [k, x] : *obj.d) {
          if (m == "items")
            l.push_back(Value::list({Value::str(k), x}));
          else if (m == "keys")
            l.push_back(Value::str(k));
          else
            l.push_back(x);
        }
        return Value::list(std::move(l));
      }
    }
    throw RenderError{"unsupported method '" + m + "' on " + repr(obj)};
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.args[0]);
    const std::string& f = e.name;
    auto arg = [&](size_t k, Value dflt = Value()) {
      return k + 1 < e.args.size() ? eval(*e.args[k + 1]) : dflt;
    };
    if (f == "trim") return Value::str(strip(to_str(v), "", true, true));
    if (f == "length" || f == "count") {
      if (v.kind == Value::kStr) return Value::integer(static_cast<int64_t>(v.s.size()));
      if (v.kind == Value::kList) return Value::integer(static_cast<int64_t>(v.l->size()));
      if (v.kind == Value::kDict) return Value::integer(static_cast<int64_t>(v.d->size()));
      if (v.kind == Value::kUndefined) return Value::integer(0);
      throw RenderError{"length of " + repr(v)};
    }
    if (f == "tojson") {
      Value indent = kwarg(e, "indent", 1, Value());
      return Value::str(python_json(v, indent.kind == Value::kInt ? static_cast<int>(indent.i) : -1, 0));
    }
    if (f == "upper" || f == "lower") {
      std::string r = to_str(v);
      for (char& c : r)
        c = static_cast<char>(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                           : std::tolower(static_cast<unsigned char>(c)));
      return Value::str(r);
    }
    if (f == "string") return Value::str(to_str(v));
    if (f == "safe") return v;
    if (f == "int") {
      if (v.kind == Value::kInt) return v;
      if (v.kind == Value::kFloat) return Value::integer(static_cast<int64_t>(v.f));
      try {
        return Value::integer(std::stoll(to_str(v)));
      } catch (...) {
        return Value::integer(0);
      }
    }
    if (f == "default" || f == "d") {
      Value dflt = arg(0, Value::str(""));
      bool boolean = truthy(arg(1, Value::boolean(false)));
      if (v.kind == Value::kUndefined || (boolean && !truthy(v))) return dflt;
      return v;
    }
    if (f == "join") {
      std::string sep = to_str(arg(0, Value::str(""))), out;
      List items = items_of(v);
      for (size_t k = 0; k < items.size(); ++k) out += (k ? sep : "") + to_str(items[k]);
      return Value::str(out);
    }
    if (f == "first" || f == "last") {
      List items = items_of(v);
      if (items.empty()) return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "list") return Value::list(items_of(v));
    if (f == "items") {
      if (v.kind != Value::kDict) throw RenderError{"items of " + repr(v)};
      List l;
      for (const auto& [k, x] : *v.d) l.push_back(Value::list({Value::str(k), x}));
      return Value::list(std::move(l));
    }
    if (f == "replace") {
      std::string s = to_str(v), from = to_str(arg(0)), to = to_str(arg(1)), r;
      if (from.empty()) return Value::str(s);
      size_t k = 0;
      for (;;) {
        size_t j = s.find(from, k);
        if (j == std::string::npos) break;
        r += s.substr(k, j - k) + to;
        k = j + from.size();
      }
      return Value::str(r + s.substr(k));
    }
    if (f == "capitalize") {
      std::string s = to_str(v);
      for (size_t k = 0; k < s.size(); ++k)
        s[k] = static_cast<char>(k ? std::tolower(static_cast<unsigned char>(s[k]))
                                   : std::toupper(static_cast<unsigned char>(s[k])));
      return Value::str(s);
    }
    if (f == "selectattr" || f == "rejectattr") {
      // selectattr("attr") / selectattr("attr", "equalto", value)
      std::string attr = to_str(arg(0));
      Value test_name = arg(1);
      Value operand = arg(2);
      List out;
      for (const auto& item : items_of(v)) {
        const Value* a = item.get(attr);
        Value av = a ? *a : Value();
        bool ok = test_name.kind == Value::kUndefined ? truthy(av)
                  : (test_name.s == "equalto" || test_name.s == "eq" || test_name.s == "==")
                      ? equal(av, operand)
                  : test_name.s == "defined" ? av.kind != Value::kUndefined
                                             : throw RenderError{"selectattr test '" + test_name.s + "'"};
        if (ok == (f == "selectattr")) out.push_back(item);
      }
      return Value::list(std::move(out));
    }
    throw RenderError{"unknown filter '" + f + "'"};
  }

  bool test(const Expr& e) {
    Value v = eval(*e.args[0]);
    const std::string& t = e.name;
    if (t == "defined") return v.kind != Value::kUndefined;
    if (t == "undefined") return v.kind == Value::kUndefined;
    if (t == "none") return v.kind == Value::kNone;
    if (t == "string") return v.kind == Value::kStr;
    if (t == "number") return v.kind == Value::kInt || v.kind == Value::kFloat;
    if (t == "integer") return v.kind == Value::kInt;
    if (t == "float") return v.kind == Value::kFloat;
    if (t == "boolean") return v.kind == Value::kBool;
    if (t == "true") return v.kind == Value::kBool && v.b;
    if (t == "false") return v.kind == Value::kBool && !v.b;
    if (t == "mapping") return v.kind == Value::kDict;
    if (t == "sequence" || t == "iterable")
      return v.kind == Value::kList || v.kind == Value::kStr || v.kind == Value::kDict;
    if (t == "odd" || t == "even") {
      if (v.kind != Value::kInt) throw RenderError{"'" + t + "' test on " + repr(v)};
      return (v.i % 2 != 0) == (t == "odd");
    }
    if (t == "equalto" || t == "eq" || t == "sameas") return e.args.size() > 1 && equal(v, eval(*e.args[1]));
    throw RenderError{"unknown test '" + t + "'"};
  }

  std::vector<std::map<std::string, Value>> scopes_;
  int loop_signal_ = 0;  // 1 break, 2 continue
};

}  // namespace

struct ChatTemplate::Program {
  Body body;
};

Result<ChatTemplate> ChatTemplate::compile(std::string_view source) {
  try {
    TemplateParser parser(split_template(source));
    auto program = std::make_shared<Program>();
    program->body = parser.parse_all();
    ChatTemplate t;
    t.program_ = std::move(program);
    return t;
  } catch (const ParseError& e) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(e.unsupported ? "the chat template uses " : "the chat template is malformed: ") +
                     e.message +
                     (e.unsupported ? ", which this runtime's template interpreter does not support" : ""),
                 e.unsupported ? "UnsupportedChatTemplate" : "InvalidChatTemplate");
  } catch (const std::exception& e) {
    return Error(ErrorCode::kInvalidArgument, std::string("the chat template is malformed: ") + e.what(),
                 "InvalidChatTemplate");
  }
}

ChatTemplate ChatTemplate::chatml() {
  auto t = compile(
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
      "endif %}");
  ChatTemplate out = std::move(t).value();
  out.fallback_ = true;
  return out;
}

Result<std::string> ChatTemplate::render(const ChatTemplateContext& context) const {
  List messages;
  for (const auto& m : context.messages) {
    messages.push_back(Value::dict({{"role", Value::str(m.role)}, {"content", Value::str(m.content)}}));
  }
  std::map<std::string, Value> globals = {
      {"messages", Value::list(std::move(messages))},
      {"add_generation_prompt", Value::boolean(context.add_generation_prompt)},
      {"bos_token", Value::str(context.bos_token)},
      {"eos_token", Value::str(context.eos_token)},
      {"tools", Value::none()},
      {"documents", Value::none()},
  };
  try {
    Renderer r(std::move(globals));
    std::string out;
    r.render(program_->body, out);
    return out;
  } catch (const RenderError& e) {
    return Error(ErrorCode::kInvalidArgument, "chat template: " + e.message, "ChatTemplateError");
  } catch (const std::exception& e) {
    return Error(ErrorCode::kInvalidArgument, std::string("chat template: ") + e.what(), "ChatTemplateError");
  }
}

}  // namespace infergate::runtime::server
