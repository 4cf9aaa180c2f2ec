// A small evaluator for the subset of CEL (github.com/google/cel-spec) that
// CRD `x-kubernetes-validations` rules use: literals (int, uint `1u`, double,
// string, bool, null, lists), `self`, `oldSelf`, field selection, indexing,
// `has(a.b)`, `size()`, `== != < <= > >=`, `&& || !`, `? :`, `+ - * / %`,
// `in`, the `all`, `exists`, `exists_one`, `map` and `filter` macros,
// `startsWith`, `endsWith`, `contains`, `matches` and the `int()`, `double()`,
// `string()` conversions. Values are nlohmann::json (objects are CEL maps).
// Semantics follow CEL: `&&`/`||` absorb errors ("false && error" is false),
// arithmetic does not mix int and double, comparisons and equality do.
// Not thread-hostile: parsed programs are immutable and may be shared.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace antdt::kubeemu::cel {

struct Expr;  // the parsed expression (opaque)

struct Program {
  std::shared_ptr<const Expr> expr;
  bool uses_old_self = false;  // a transition rule: evaluated only on update
};

struct ParseResult {
  Program program;    // set when error is empty
  std::string error;  // "ERROR: <input>:1:7: Syntax error: ..."
};

ParseResult Parse(const std::string& text);

// Checks identifiers (self, oldSelf, macro variables), functions and their
// arities, and the fields selected from `self` against `self_schema` (an
// OpenAPI v3 schema node): "undefined field 'x'". Returns "" when fine, else
// an error formatted like cel-go's ("ERROR: <input>:1:6: undefined field 'x'").
std::string Check(const Program& program, const nlohmann::json& self_schema);

struct EvalResult {
  bool ok = false;       // false: a runtime error (no such key, overflow, ...)
  nlohmann::json value;  // the result when ok
  std::string error;     // e.g. "no such key: replicas", "no such overload"
};

// Evaluates with `self` (and `oldSelf` when `old_self` is not null) bound.
// Integers in `self` that the schema types as `number` must already be
// doubles (see BindValue).
EvalResult Evaluate(const Program& program, const nlohmann::json& self,
                    const nlohmann::json* old_self);

// The CEL view of a JSON value under `schema`: non-negative integers become
// int64 (not uint64), integers under `type: number` become doubles.
nlohmann::json BindValue(const nlohmann::json& schema, const nlohmann::json& value);

// CEL equality of two JSON values: numbers by value across int, uint and
// double (NaN equals nothing), lists element-wise, maps key-wise. Schema
// validation uses it for `enum` too.
bool ValuesEqual(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace antdt::kubeemu::cel
