#include "testing/kube-emulator/schema/cel.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <regex>
#include <set>
#include <utility>

namespace antdt::kubeemu::cel {

using json = nlohmann::json;

struct Expr {
  enum Kind {
    kLiteral,
    kIdent,
    kSelect,
    kHas,
    kIndex,
    kCall,
    kList,
    kUnary,
    kBinary,
    kCond,
    kMacro
  };
  Kind kind = kLiteral;
  json literal;
  std::string name;   // identifier, field, function, operator, macro variable
  std::string macro;  // kMacro: all | exists | exists_one | map | filter
  std::vector<std::shared_ptr<const Expr>> args;  // kCall: args[0] is the target when has_target
  bool has_target = false;
  int column = 1;
};

namespace {

using ExprPtr = std::shared_ptr<const Expr>;

// ---- Lexer ----

struct Token {
  enum Kind { kEnd, kInt, kUint, kDouble, kString, kIdent, kPunct };
  Kind kind = kEnd;
  std::string text;  // identifier, punctuation or decoded string
  json number;
  int column = 1;
};

struct SyntaxError {
  int column;
  std::string message;
};

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<Token> Lex(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (true) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    Token t;
    t.column = static_cast<int>(i) + 1;
    if (i >= s.size()) {
      out.push_back(t);
      return out;
    }
    const char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      size_t j = i;
      bool is_double = false;
      if (c == '0' && j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X')) {
        j += 2;
        while (j < s.size() && std::isxdigit(static_cast<unsigned char>(s[j]))) ++j;
      } else {
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        if (j < s.size() && s[j] == '.' && j + 1 < s.size() &&
            std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
          is_double = true;
          ++j;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
        if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
          size_t k = j + 1;
          if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
          if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
            is_double = true;
            j = k;
            while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
          }
        }
      }
      const std::string text = s.substr(i, j - i);
      errno = 0;
      if (is_double) {
        t.kind = Token::kDouble;
        t.number = std::strtod(text.c_str(), nullptr);
      } else if (j < s.size() && (s[j] == 'u' || s[j] == 'U')) {
        t.kind = Token::kUint;
        const bool hex = text.size() > 1 && (text[1] == 'x' || text[1] == 'X');
        t.number = static_cast<uint64_t>(std::strtoull(text.c_str(), nullptr, hex ? 16 : 10));
        ++j;
      } else {
        t.kind = Token::kInt;
        const bool hex = text.size() > 1 && (text[1] == 'x' || text[1] == 'X');
        const unsigned long long v = std::strtoull(text.c_str(), nullptr, hex ? 16 : 10);
        // 9223372036854775808 is only valid after a unary minus; keep it as uint.
        if (v > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max())) {
          t.number = static_cast<uint64_t>(v);
        } else {
          t.number = static_cast<int64_t>(v);
        }
      }
      if (errno == ERANGE) throw SyntaxError{t.column, "invalid int literal"};
      t.text = text;
      i = j;
      out.push_back(t);
      continue;
    }
    if (c == '"' || c == '\'') {
      std::string value;
      size_t j = i + 1;
      bool closed = false;
      while (j < s.size()) {
        char d = s[j];
        if (d == c) {
          closed = true;
          ++j;
          break;
        }
        if (d == '\n') break;
        if (d == '\\' && j + 1 < s.size()) {
          const char e = s[j + 1];
          j += 2;
          switch (e) {
            case 'n':
              value += '\n';
              break;
            case 't':
              value += '\t';
              break;
            case 'r':
              value += '\r';
              break;
            case '\\':
              value += '\\';
              break;
            case '\'':
              value += '\'';
              break;
            case '"':
              value += '"';
              break;
            case '`':
              value += '`';
              break;
            case '?':
              value += '?';
              break;
            default:
              throw SyntaxError{static_cast<int>(j) - 1, "invalid escape sequence"};
          }
          continue;
        }
        value += d;
        ++j;
      }
      if (!closed) throw SyntaxError{t.column, "token recognition error: unterminated string"};
      t.kind = Token::kString;
      t.text = value;
      i = j;
      out.push_back(t);
      continue;
    }
    if (IsIdentStart(c)) {
      size_t j = i;
      while (j < s.size() && IsIdentChar(s[j])) ++j;
      t.kind = Token::kIdent;
      t.text = s.substr(i, j - i);
      i = j;
      out.push_back(t);
      continue;
    }
    static const char* const kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
    bool two = false;
    for (const char* op : kTwo) {
      if (s.compare(i, 2, op) == 0) {
        t.kind = Token::kPunct;
        t.text = op;
        i += 2;
        two = true;
        break;
      }
    }
    if (two) {
      out.push_back(t);
      continue;
    }
    if (std::string("<>!+-*/%?:.,()[]{}").find(c) != std::string::npos) {
      t.kind = Token::kPunct;
      t.text = std::string(1, c);
      ++i;
      out.push_back(t);
      continue;
    }
    throw SyntaxError{t.column, std::string("token recognition error at: '") + c + "'"};
  }
}

// ---- Parser (recursive descent over CEL's grammar) ----

const std::set<std::string> kReserved = {
    "as",  "break", "const",   "continue",  "else",   "for", "function", "if",   "import",
    "let", "loop",  "package", "namespace", "return", "var", "void",     "while"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  ExprPtr ParseAll() {
    ExprPtr e = ParseExpr();
    if (Peek().kind != Token::kEnd) Fail(Peek(), "extraneous input '" + Peek().text + "'");
    return e;
  }

 private:
  const Token& Peek() const { return toks_[pos_]; }
  Token Next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool IsPunct(const char* p) const { return Peek().kind == Token::kPunct && Peek().text == p; }
  bool IsIdent(const char* p) const { return Peek().kind == Token::kIdent && Peek().text == p; }
  [[noreturn]] static void Fail(const Token& t, const std::string& msg) {
    throw SyntaxError{t.column, msg};
  }
  void Expect(const char* p) {
    if (!IsPunct(p)) {
      const std::string got = Peek().kind == Token::kEnd ? "<EOF>" : Peek().text;
      Fail(Peek(), "mismatched input '" + got + "' expecting '" + p + "'");
    }
    Next();
  }
  static ExprPtr Make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

  ExprPtr ParseExpr() {
    ExprPtr cond = ParseOr();
    if (!IsPunct("?")) return cond;
    Token q = Next();
    ExprPtr a = ParseOr();
    Expect(":");
    ExprPtr b = ParseExpr();
    Expr e;
    e.kind = Expr::kCond;
    e.column = q.column;
    e.args = {cond, a, b};
    return Make(std::move(e));
  }

  ExprPtr Binary(const Token& op, ExprPtr l, ExprPtr r) {
    Expr e;
    e.kind = Expr::kBinary;
    e.name = op.text;
    e.column = op.column;
    e.args = {std::move(l), std::move(r)};
    return Make(std::move(e));
  }

  ExprPtr ParseOr() {
    ExprPtr l = ParseAnd();
    while (IsPunct("||")) {
      Token op = Next();
      l = Binary(op, l, ParseAnd());
    }
    return l;
  }
  ExprPtr ParseAnd() {
    ExprPtr l = ParseRelation();
    while (IsPunct("&&")) {
      Token op = Next();
      l = Binary(op, l, ParseRelation());
    }
    return l;
  }
  ExprPtr ParseRelation() {
    ExprPtr l = ParseAddition();
    while (IsPunct("==") || IsPunct("!=") || IsPunct("<") || IsPunct("<=") || IsPunct(">") ||
           IsPunct(">=") || IsIdent("in")) {
      Token op = Next();
      l = Binary(op, l, ParseAddition());
    }
    return l;
  }
  ExprPtr ParseAddition() {
    ExprPtr l = ParseMultiplication();
    while (IsPunct("+") || IsPunct("-")) {
      Token op = Next();
      l = Binary(op, l, ParseMultiplication());
    }
    return l;
  }
  ExprPtr ParseMultiplication() {
    ExprPtr l = ParseUnary();
    while (IsPunct("*") || IsPunct("/") || IsPunct("%")) {
      Token op = Next();
      l = Binary(op, l, ParseUnary());
    }
    return l;
  }
  ExprPtr ParseUnary() {
    if (IsPunct("!") || IsPunct("-")) {
      Token op = Next();
      // -<int literal> is a literal (so that -9223372036854775808 parses).
      if (op.text == "-" && (Peek().kind == Token::kInt || Peek().kind == Token::kDouble)) {
        Token n = Next();
        Expr lit;
        lit.kind = Expr::kLiteral;
        lit.column = op.column;
        if (n.kind == Token::kDouble) {
          lit.literal = -n.number.get<double>();
        } else if (n.number.is_number_unsigned()) {
          const uint64_t u = n.number.get<uint64_t>();
          if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) {
            Fail(n, "invalid int literal");
          }
          lit.literal = static_cast<int64_t>(0 - u);
        } else {
          lit.literal = -n.number.get<int64_t>();
        }
        return ParseMemberSuffix(Make(std::move(lit)));
      }
      Expr e;
      e.kind = Expr::kUnary;
      e.name = op.text;
      e.column = op.column;
      e.args = {ParseUnary()};
      return Make(std::move(e));
    }
    return ParseMemberSuffix(ParsePrimary());
  }

  std::vector<ExprPtr> ParseArgs(const char* close) {
    std::vector<ExprPtr> args;
    if (IsPunct(close)) {
      Next();
      return args;
    }
    while (true) {
      args.push_back(ParseExpr());
      if (IsPunct(",")) {
        Next();
        if (IsPunct(close)) break;  // trailing comma
        continue;
      }
      break;
    }
    Expect(close);
    return args;
  }

  ExprPtr ParseMemberSuffix(ExprPtr operand) {
    while (true) {
      if (IsPunct(".")) {
        Next();
        if (Peek().kind != Token::kIdent)
          Fail(Peek(), "mismatched input '" + Peek().text + "' expecting IDENTIFIER");
        Token id = Next();
        if (IsPunct("(")) {
          Next();
          static const std::set<std::string> kMacros = {"all", "exists", "exists_one", "map",
                                                        "filter"};
          if (kMacros.count(id.text) != 0) {
            Expr m;
            m.kind = Expr::kMacro;
            m.macro = id.text;
            m.column = id.column;
            if (Peek().kind != Token::kIdent) Fail(Peek(), "argument must be a simple name");
            m.name = Next().text;
            Expect(",");
            ExprPtr body = ParseExpr();
            Expect(")");
            m.args = {operand, body};
            operand = Make(std::move(m));
            continue;
          }
          Expr call;
          call.kind = Expr::kCall;
          call.name = id.text;
          call.column = id.column;
          call.has_target = true;
          call.args.push_back(operand);
          for (ExprPtr& a : ParseArgs(")")) call.args.push_back(std::move(a));
          operand = Make(std::move(call));
          continue;
        }
        Expr sel;
        sel.kind = Expr::kSelect;
        sel.name = id.text;
        sel.column = id.column;
        sel.args = {operand};
        operand = Make(std::move(sel));
        continue;
      }
      if (IsPunct("[")) {
        Token b = Next();
        Expr idx;
        idx.kind = Expr::kIndex;
        idx.column = b.column;
        idx.args = {operand, ParseExpr()};
        Expect("]");
        operand = Make(std::move(idx));
        continue;
      }
      return operand;
    }
  }

  ExprPtr ParsePrimary() {
    const Token t = Peek();
    Expr e;
    e.column = t.column;
    switch (t.kind) {
      case Token::kInt:
      case Token::kUint:
      case Token::kDouble:
        Next();
        if (t.kind == Token::kInt && t.number.is_number_unsigned()) Fail(t, "invalid int literal");
        e.kind = Expr::kLiteral;
        e.literal = t.number;
        return Make(std::move(e));
      case Token::kString:
        Next();
        e.kind = Expr::kLiteral;
        e.literal = t.text;
        return Make(std::move(e));
      case Token::kIdent: {
        Next();
        if (t.text == "true" || t.text == "false") {
          e.kind = Expr::kLiteral;
          e.literal = t.text == "true";
          return Make(std::move(e));
        }
        if (t.text == "null") {
          e.kind = Expr::kLiteral;
          e.literal = nullptr;
          return Make(std::move(e));
        }
        if (t.text == "in" || kReserved.count(t.text) != 0) {
          Fail(t, "reserved identifier: " + t.text);
        }
        if (IsPunct("(")) {
          Next();
          if (t.text == "has") {
            std::vector<ExprPtr> args = ParseArgs(")");
            if (args.size() != 1 || args[0]->kind != Expr::kSelect) {
              Fail(t, "invalid argument to has() macro");
            }
            e.kind = Expr::kHas;
            e.name = args[0]->name;
            e.args = {args[0]->args[0]};
            return Make(std::move(e));
          }
          e.kind = Expr::kCall;
          e.name = t.text;
          e.args = ParseArgs(")");
          return Make(std::move(e));
        }
        e.kind = Expr::kIdent;
        e.name = t.text;
        return Make(std::move(e));
      }
      case Token::kPunct:
        if (t.text == "(") {
          Next();
          ExprPtr inner = ParseExpr();
          Expect(")");
          return inner;
        }
        if (t.text == "[") {
          Next();
          e.kind = Expr::kList;
          e.args = ParseArgs("]");
          return Make(std::move(e));
        }
        if (t.text == "{") Fail(t, "map literals are not supported");
        Fail(t, "mismatched input '" + t.text + "' expecting an expression");
      case Token::kEnd:
        Fail(t, "mismatched input '<EOF>' expecting an expression");
    }
    Fail(t, "unexpected token");
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
};

bool MentionsOldSelf(const Expr& e) {
  if (e.kind == Expr::kIdent && e.name == "oldSelf") return true;
  for (const ExprPtr& a : e.args) {
    if (MentionsOldSelf(*a)) return true;
  }
  return false;
}

std::string FormatError(int column, const std::string& msg) {
  return "ERROR: <input>:1:" + std::to_string(column) + ": " + msg;
}

// ---- Checker ----

class Checker {
 public:
  explicit Checker(const json& self_schema) : self_schema_(self_schema) {}

  // The schema of `e` when known (nullptr: dynamic). Throws SyntaxError.
  const json* Check(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral:
        return nullptr;
      case Expr::kIdent:
        if (e.name == "self" || e.name == "oldSelf") return &self_schema_;
        for (auto it = vars_.rbegin(); it != vars_.rend(); ++it) {
          if (it->first == e.name) return it->second;
        }
        throw SyntaxError{e.column, "undeclared reference to '" + e.name + "' (in container '')"};
      case Expr::kSelect:
      case Expr::kHas:
        return Field(Check(*e.args[0]), e.name, e.column);
      case Expr::kIndex: {
        const json* s = Check(*e.args[0]);
        Check(*e.args[1]);
        if (s != nullptr && s->contains("items")) return &(*s)["items"];
        if (s != nullptr && s->contains("additionalProperties") &&
            (*s)["additionalProperties"].is_object()) {
          return &(*s)["additionalProperties"];
        }
        return nullptr;
      }
      case Expr::kCall:
        return Call(e);
      case Expr::kMacro: {
        const json* range = Check(*e.args[0]);
        const json* elem = nullptr;
        if (range != nullptr && range->contains("items")) elem = &(*range)["items"];
        vars_.emplace_back(e.name, elem);
        Check(*e.args[1]);
        vars_.pop_back();
        return nullptr;
      }
      case Expr::kList:
      case Expr::kUnary:
      case Expr::kBinary:
      case Expr::kCond:
        for (const ExprPtr& a : e.args) Check(*a);
        return nullptr;
    }
    return nullptr;
  }

 private:
  static const json* Field(const json* s, const std::string& name, int column) {
    if (s == nullptr) return nullptr;
    if (s->contains("properties") && (*s)["properties"].contains(name)) {
      return &(*s)["properties"][name];
    }
    if (s->contains("additionalProperties") && (*s)["additionalProperties"].is_object()) {
      return &(*s)["additionalProperties"];
    }
    if (s->value("x-kubernetes-preserve-unknown-fields", false) ||
        s->value("x-kubernetes-int-or-string", false) || !s->contains("type")) {
      return nullptr;
    }
    if (s->value("type", "") != "object") {
      throw SyntaxError{column,
                        "type '" + s->value("type", "") + "' does not support field selection"};
    }
    throw SyntaxError{column, "undefined field '" + name + "'"};
  }

  const json* Call(const Expr& e) {
    struct Sig {
      const char* name;
      bool target;
      size_t args;  // besides the target
    };
    static const Sig kSigs[] = {
        {"size", false, 1},    {"size", true, 0},    {"startsWith", true, 1}, {"endsWith", true, 1},
        {"contains", true, 1}, {"matches", true, 1}, {"int", false, 1},       {"double", false, 1},
        {"string", false, 1},  {"uint", false, 1}};
    const size_t n = e.args.size() - (e.has_target ? 1 : 0);
    bool known = false;
    for (const Sig& sig : kSigs) {
      if (e.name != sig.name) continue;
      known = true;
      if (sig.target == e.has_target && sig.args == n) {
        for (const ExprPtr& a : e.args) Check(*a);
        return nullptr;
      }
    }
    if (!known)
      throw SyntaxError{e.column, "undeclared reference to '" + e.name + "' (in container '')"};
    throw SyntaxError{e.column, "found no matching overload for '" + e.name + "'"};
  }

  const json& self_schema_;
  std::vector<std::pair<std::string, const json*>> vars_;
};

// ---- Evaluator ----

struct Val {
  json v;
  std::string err;  // non-empty: an error value
  bool IsErr() const { return !err.empty(); }
};

Val Err(std::string e) { return Val{json(), std::move(e)}; }
Val Ok(json v) { return Val{std::move(v), ""}; }
const char kNoOverload[] = "no such overload";

bool IsInt(const json& j) { return j.is_number_integer() && !j.is_number_unsigned(); }
bool IsUint(const json& j) { return j.is_number_unsigned(); }
bool IsNum(const json& j) { return j.is_number(); }

double AsDouble(const json& j) {
  if (j.is_number_float()) return j.get<double>();
  if (j.is_number_unsigned()) return static_cast<double>(j.get<uint64_t>());
  return static_cast<double>(j.get<int64_t>());
}

// -1, 0, 1; numbers compare across int, uint and double.
int CompareNumbers(const json& a, const json& b) {
  if (IsInt(a) && IsInt(b)) {
    const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (IsUint(a) && IsUint(b)) {
    const uint64_t x = a.get<uint64_t>(), y = b.get<uint64_t>();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (!a.is_number_float() && !b.is_number_float()) {  // int vs uint
    if (IsInt(a)) return a.get<int64_t>() < 0 ? -1 : CompareNumbers(json(a.get<uint64_t>()), b);
    return b.get<int64_t>() < 0 ? 1 : CompareNumbers(a, json(b.get<uint64_t>()));
  }
  const double x = AsDouble(a), y = AsDouble(b);
  return x < y ? -1 : (x > y ? 1 : 0);
}

bool Equal(const json& a, const json& b) {
  if (IsNum(a) && IsNum(b)) {
    if ((a.is_number_float() && std::isnan(a.get<double>())) ||
        (b.is_number_float() && std::isnan(b.get<double>()))) {
      return false;
    }
    return CompareNumbers(a, b) == 0;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!Equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto jt = b.find(it.key());
      if (jt == b.end() || !Equal(it.value(), *jt)) return false;
    }
    return true;
  }
  return a == b;
}

int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class Evaluator {
 public:
  Evaluator(const json& self, const json* old_self) : self_(self), old_self_(old_self) {}

  Val Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral:
        return Ok(e.literal);
      case Expr::kIdent:
        for (auto it = vars_.rbegin(); it != vars_.rend(); ++it) {
          if (it->first == e.name) return Ok(*it->second);
        }
        if (e.name == "self") return Ok(self_);
        if (e.name == "oldSelf") {
          if (old_self_ == nullptr) return Err("no such attribute: oldSelf");
          return Ok(*old_self_);
        }
        return Err("no such attribute: " + e.name);
      case Expr::kSelect: {
        Val o = Eval(*e.args[0]);
        if (o.IsErr()) return o;
        if (!o.v.is_object()) return Err(kNoOverload);
        auto it = o.v.find(e.name);
        if (it == o.v.end()) return Err("no such key: " + e.name);
        return Ok(*it);
      }
      case Expr::kHas: {
        Val o = Eval(*e.args[0]);
        if (o.IsErr()) return o;
        if (!o.v.is_object()) return Err(kNoOverload);
        return Ok(o.v.contains(e.name));
      }
      case Expr::kIndex: {
        Val o = Eval(*e.args[0]);
        if (o.IsErr()) return o;
        Val i = Eval(*e.args[1]);
        if (i.IsErr()) return i;
        if (o.v.is_array()) {
          if (!i.v.is_number_integer()) return Err(kNoOverload);
          const int64_t k =
              IsUint(i.v) ? static_cast<int64_t>(i.v.get<uint64_t>()) : i.v.get<int64_t>();
          if (k < 0 || k >= static_cast<int64_t>(o.v.size())) {
            return Err("index out of bounds: " + std::to_string(k));
          }
          return Ok(o.v[static_cast<size_t>(k)]);
        }
        if (o.v.is_object()) {
          if (!i.v.is_string()) return Err(kNoOverload);
          auto it = o.v.find(i.v.get<std::string>());
          if (it == o.v.end()) return Err("no such key: " + i.v.get<std::string>());
          return Ok(*it);
        }
        return Err(kNoOverload);
      }
      case Expr::kList: {
        json list = json::array();
        for (const ExprPtr& a : e.args) {
          Val v = Eval(*a);
          if (v.IsErr()) return v;
          list.push_back(std::move(v.v));
        }
        return Ok(std::move(list));
      }
      case Expr::kUnary: {
        Val v = Eval(*e.args[0]);
        if (v.IsErr()) return v;
        if (e.name == "!") {
          if (!v.v.is_boolean()) return Err(kNoOverload);
          return Ok(!v.v.get<bool>());
        }
        if (IsInt(v.v)) {
          const int64_t x = v.v.get<int64_t>();
          if (x == std::numeric_limits<int64_t>::min()) return Err("integer overflow");
          return Ok(-x);
        }
        if (v.v.is_number_float()) return Ok(-v.v.get<double>());
        return Err(kNoOverload);
      }
      case Expr::kCond: {
        Val c = Eval(*e.args[0]);
        if (c.IsErr()) return c;
        if (!c.v.is_boolean()) return Err(kNoOverload);
        return Eval(*e.args[c.v.get<bool>() ? 1 : 2]);
      }
      case Expr::kBinary:
        return Binary(e);
      case Expr::kCall:
        return Call(e);
      case Expr::kMacro:
        return Macro(e);
    }
    return Err(kNoOverload);
  }

 private:
  Val Logic(const Expr& e) {
    const bool is_and = e.name == "&&";
    Val l = Eval(*e.args[0]);
    if (!l.IsErr() && !l.v.is_boolean()) return Err(kNoOverload);
    if (!l.IsErr() && l.v.get<bool>() != is_and) return l;  // short circuit
    Val r = Eval(*e.args[1]);
    if (!r.IsErr() && !r.v.is_boolean()) return Err(kNoOverload);
    if (!r.IsErr() && r.v.get<bool>() != is_and) return r;  // absorbs an error on the left
    if (l.IsErr()) return l;
    return r;
  }

  Val Binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "&&" || op == "||") return Logic(e);
    Val l = Eval(*e.args[0]);
    if (l.IsErr()) return l;
    Val r = Eval(*e.args[1]);
    if (r.IsErr()) return r;
    const json& a = l.v;
    const json& b = r.v;
    if (op == "==") return Ok(Equal(a, b));
    if (op == "!=") return Ok(!Equal(a, b));
    if (op == "in") {
      if (b.is_array()) {
        for (const json& x : b) {
          if (Equal(a, x)) return Ok(true);
        }
        return Ok(false);
      }
      if (b.is_object() && a.is_string()) return Ok(b.contains(a.get<std::string>()));
      return Err(kNoOverload);
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c = 0;
      if (IsNum(a) && IsNum(b)) {
        if ((a.is_number_float() && std::isnan(a.get<double>())) ||
            (b.is_number_float() && std::isnan(b.get<double>()))) {
          return Ok(false);
        }
        c = CompareNumbers(a, b);
      } else if (a.is_string() && b.is_string()) {
        const int x = a.get<std::string>().compare(b.get<std::string>());
        c = x < 0 ? -1 : (x > 0 ? 1 : 0);
      } else if (a.is_boolean() && b.is_boolean()) {
        c = static_cast<int>(a.get<bool>()) - static_cast<int>(b.get<bool>());
      } else {
        return Err(kNoOverload);
      }
      if (op == "<") return Ok(c < 0);
      if (op == "<=") return Ok(c <= 0);
      if (op == ">") return Ok(c > 0);
      return Ok(c >= 0);
    }
    // Arithmetic: both operands of the same numeric type (CEL does not mix them).
    if (op == "+" && a.is_string() && b.is_string()) {
      return Ok(a.get<std::string>() + b.get<std::string>());
    }
    if (op == "+" && a.is_array() && b.is_array()) {
      json out = a;
      for (const json& x : b) out.push_back(x);
      return Ok(std::move(out));
    }
    if (IsInt(a) && IsInt(b)) {
      const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
      int64_t z = 0;
      if (op == "+" && !__builtin_add_overflow(x, y, &z)) return Ok(z);
      if (op == "-" && !__builtin_sub_overflow(x, y, &z)) return Ok(z);
      if (op == "*" && !__builtin_mul_overflow(x, y, &z)) return Ok(z);
      if (op == "/" || op == "%") {
        if (y == 0) return Err(op == "/" ? "division by zero" : "modulus by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) return Err("integer overflow");
        return Ok(op == "/" ? x / y : x % y);
      }
      return Err("integer overflow");
    }
    if (IsUint(a) && IsUint(b)) {
      const uint64_t x = a.get<uint64_t>(), y = b.get<uint64_t>();
      uint64_t z = 0;
      if (op == "+" && !__builtin_add_overflow(x, y, &z)) return Ok(z);
      if (op == "-" && !__builtin_sub_overflow(x, y, &z)) return Ok(z);
      if (op == "*" && !__builtin_mul_overflow(x, y, &z)) return Ok(z);
      if (op == "/" || op == "%") {
        if (y == 0) return Err(op == "/" ? "division by zero" : "modulus by zero");
        return Ok(op == "/" ? x / y : x % y);
      }
      return Err("unsigned integer overflow");
    }
    if (a.is_number_float() && b.is_number_float()) {
      const double x = a.get<double>(), y = b.get<double>();
      if (op == "+") return Ok(x + y);
      if (op == "-") return Ok(x - y);
      if (op == "*") return Ok(x * y);
      if (op == "/") return Ok(x / y);
    }
    return Err(kNoOverload);
  }

  Val Call(const Expr& e) {
    std::vector<json> args;
    for (const ExprPtr& a : e.args) {
      Val v = Eval(*a);
      if (v.IsErr()) return v;
      args.push_back(std::move(v.v));
    }
    const std::string& f = e.name;
    if (f == "size" && args.size() == 1) {
      const json& x = args[0];
      if (x.is_string()) return Ok(CodePoints(x.get<std::string>()));
      if (x.is_array() || x.is_object()) return Ok(static_cast<int64_t>(x.size()));
      return Err(kNoOverload);
    }
    if ((f == "startsWith" || f == "endsWith" || f == "contains" || f == "matches") &&
        args.size() == 2 && args[0].is_string() && args[1].is_string()) {
      const std::string s = args[0].get<std::string>();
      const std::string t = args[1].get<std::string>();
      if (f == "startsWith") return Ok(s.compare(0, t.size(), t) == 0);
      if (f == "endsWith") {
        return Ok(s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0);
      }
      if (f == "contains") return Ok(s.find(t) != std::string::npos);
      try {
        return Ok(std::regex_search(s, std::regex(t, std::regex::ECMAScript)));
      } catch (const std::regex_error&) {
        return Err("invalid regular expression: " + t);
      }
    }
    if (f == "int" && args.size() == 1) {
      const json& x = args[0];
      if (IsInt(x)) return Ok(x);
      if (IsUint(x)) {
        if (x.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Err("integer overflow");
        }
        return Ok(static_cast<int64_t>(x.get<uint64_t>()));
      }
      if (x.is_number_float()) {
        const double d = x.get<double>();
        if (!(d > -9.2233720368547758e18 && d < 9.2233720368547758e18)) {
          return Err("integer overflow");
        }
        return Ok(static_cast<int64_t>(d));
      }
      if (x.is_string()) {
        const std::string s = x.get<std::string>();
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE)
          return Err("string to int conversion error");
        return Ok(static_cast<int64_t>(v));
      }
      return Err(kNoOverload);
    }
    if (f == "uint" && args.size() == 1) {
      const json& x = args[0];
      if (IsUint(x)) return Ok(x);
      if (IsInt(x)) {
        if (x.get<int64_t>() < 0) return Err("unsigned integer overflow");
        return Ok(static_cast<uint64_t>(x.get<int64_t>()));
      }
      return Err(kNoOverload);
    }
    if (f == "double" && args.size() == 1) {
      const json& x = args[0];
      if (IsNum(x)) return Ok(AsDouble(x));
      if (x.is_string()) {
        const std::string s = x.get<std::string>();
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0') return Err("string to double conversion error");
        return Ok(d);
      }
      return Err(kNoOverload);
    }
    if (f == "string" && args.size() == 1) {
      const json& x = args[0];
      if (x.is_string()) return Ok(x);
      if (x.is_number_integer()) return Ok(x.dump());
      if (x.is_boolean()) return Ok(x.get<bool>() ? "true" : "false");
      if (x.is_number_float()) return Ok(x.dump());
      return Err(kNoOverload);
    }
    return Err(kNoOverload);
  }

  Val Macro(const Expr& e) {
    Val range = Eval(*e.args[0]);
    if (range.IsErr()) return range;
    std::vector<json> elems;
    if (range.v.is_array()) {
      for (const json& x : range.v) elems.push_back(x);
    } else if (range.v.is_object()) {
      for (auto it = range.v.begin(); it != range.v.end(); ++it) elems.emplace_back(it.key());
    } else {
      return Err(kNoOverload);
    }
    const std::string& m = e.macro;
    json mapped = json::array();
    int64_t trues = 0;
    std::string first_err;
    for (const json& x : elems) {
      vars_.emplace_back(e.name, &x);
      Val v = Eval(*e.args[1]);
      vars_.pop_back();
      if (m == "map") {
        if (v.IsErr()) return v;
        mapped.push_back(std::move(v.v));
        continue;
      }
      if (v.IsErr()) {
        if (m == "filter" || m == "exists_one") return v;
        if (first_err.empty()) first_err = v.err;
        continue;
      }
      if (!v.v.is_boolean()) return Err(kNoOverload);
      const bool b = v.v.get<bool>();
      if (m == "all" && !b) return Ok(false);
      if (m == "exists" && b) return Ok(true);
      if (b) ++trues;
      if (m == "filter" && b) mapped.push_back(x);
    }
    if (m == "map" || m == "filter") return Ok(std::move(mapped));
    if (m == "exists_one") return Ok(trues == 1);
    if (!first_err.empty()) return Err(first_err);
    return Ok(m == "all");
  }

  const json& self_;
  const json* old_self_;
  std::vector<std::pair<std::string, const json*>> vars_;
};

}  // namespace

ParseResult Parse(const std::string& text) {
  ParseResult r;
  try {
    Parser p(Lex(text));
    r.program.expr = p.ParseAll();
    r.program.uses_old_self = MentionsOldSelf(*r.program.expr);
  } catch (const SyntaxError& e) {
    r.error = FormatError(e.column, "Syntax error: " + e.message);
    r.program = Program{};
  }
  return r;
}

std::string Check(const Program& program, const json& self_schema) {
  if (program.expr == nullptr) return "no program";
  try {
    Checker c(self_schema);
    c.Check(*program.expr);
  } catch (const SyntaxError& e) {
    return FormatError(e.column, e.message);
  }
  return "";
}

EvalResult Evaluate(const Program& program, const json& self, const json* old_self) {
  EvalResult r;
  if (program.expr == nullptr) {
    r.error = "no program";
    return r;
  }
  Evaluator ev(self, old_self);
  Val v = ev.Eval(*program.expr);
  r.ok = !v.IsErr();
  r.value = std::move(v.v);
  r.error = std::move(v.err);
  return r;
}

json BindValue(const json& schema, const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    const bool number = schema.is_object() && schema.value("type", "") == "number";
    if (number) return static_cast<double>(u);
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(u);
    }
    return value;
  }
  if (value.is_number_integer()) {
    if (schema.is_object() && schema.value("type", "") == "number") {
      return static_cast<double>(value.get<int64_t>());
    }
    return value;
  }
  static const json kEmpty = json::object();
  if (value.is_array()) {
    const json& items = schema.is_object() && schema.contains("items") ? schema["items"] : kEmpty;
    json out = json::array();
    for (const json& x : value) out.push_back(BindValue(items, x));
    return out;
  }
  if (value.is_object()) {
    json out = json::object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      const json* s = &kEmpty;
      if (schema.is_object() && schema.contains("properties") &&
          schema["properties"].contains(it.key())) {
        s = &schema["properties"][it.key()];
      } else if (schema.is_object() && schema.contains("additionalProperties") &&
                 schema["additionalProperties"].is_object()) {
        s = &schema["additionalProperties"];
      }
      out[it.key()] = BindValue(*s, it.value());
    }
    return out;
  }
  return value;
}

bool ValuesEqual(const json& a, const json& b) { return Equal(a, b); }

}  // namespace antdt::kubeemu::cel
