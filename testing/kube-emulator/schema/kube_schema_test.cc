#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/kube-emulator/schema/cel.h"
#include "testing/kube-emulator/schema/schema.h"

namespace antdt::kubeemu {

void PrintTo(const Cause& c, std::ostream* os) {
  *os << "{" << c.type << ", " << c.field << ", " << c.message << "}";
}

namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

json J(const char* text) { return json::parse(text); }

std::vector<Cause> Validate(const json& schema, json object, const json* old = nullptr) {
  return ValidateCustomResource(schema, object, old);
}

// A schema exercising every keyword; `spec` is where tests put values.
json SpecSchema(const json& spec_props, const json& extra = json::object()) {
  json spec = {{"type", "object"}, {"properties", spec_props}};
  spec.update(extra);
  return {{"type", "object"}, {"properties", {{"spec", spec}}}};
}

// ---- Defaulting and pruning ----

TEST(DefaultsTest, AppliedToMissingAndNullFieldsRecursively) {
  const json schema = SpecSchema(J(R"({
    "replicas": {"type": "integer", "default": 1},
    "policy": {"type": "object", "default": {}, "properties": {
      "name": {"type": "string", "default": "antdt-nd"},
      "window": {"type": "string", "default": "10s"}}},
    "dropped": {"type": "integer"},
    "kept": {"type": "integer", "nullable": true},
    "rules": {"type": "array", "items": {"type": "object", "properties": {
      "windows": {"type": "integer", "default": 1}, "action": {"type": "string"}}}}})"));
  json obj = J(R"({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
    "spec": {"dropped": null, "kept": null, "policy": {"window": "2s"},
             "rules": [{"action": "A"}, {"action": "B", "windows": 3}]}})");
  EXPECT_THAT(ValidateCustomResource(schema, obj, nullptr), IsEmpty());
  EXPECT_EQ(obj["spec"], J(R"({"replicas": 1, "kept": null,
    "policy": {"name": "antdt-nd", "window": "2s"},
    "rules": [{"action": "A", "windows": 1}, {"action": "B", "windows": 3}]})"));

  json absent = J(R"({"spec": {"replicas": null}})");
  EXPECT_THAT(ValidateCustomResource(schema, absent, nullptr), IsEmpty());
  EXPECT_EQ(absent["spec"]["replicas"], 1);  // a null with a default gets the default
  EXPECT_EQ(absent["spec"]["policy"], J(R"({"name": "antdt-nd", "window": "10s"})"));
}

TEST(DefaultsTest, AppliedOnUpdateToo) {
  const json schema = SpecSchema(J(R"({"replicas": {"type": "integer", "default": 1}})"));
  const json old = J(R"({"spec": {"replicas": 5}})");
  json obj = J(R"({"spec": {}})");
  EXPECT_THAT(ValidateCustomResource(schema, obj, &old), IsEmpty());
  EXPECT_EQ(obj["spec"]["replicas"], 1);
}

TEST(PruningTest, DropsUndeclaredFieldsButKeepsPreservedAndRootMeta) {
  const json schema = SpecSchema(J(R"({
    "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
    "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                 "properties": {"known": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}}})"));
  json obj = J(R"({"apiVersion": "antdt.io/v1alpha1", "kind": "AntDTJob",
    "metadata": {"name": "x", "labels": {"a": "b"}, "whatever": 1},
    "extra": true,
    "spec": {"a": {"b": 1, "c": 2}, "unknown": [1],
             "template": {"spec": {"containers": [{"image": "i"}]}, "known": {"x": 1, "y": 2}},
             "labels": {"k": "v"}}})");
  EXPECT_THAT(ValidateCustomResource(schema, obj, nullptr), IsEmpty());
  EXPECT_EQ(obj, J(R"({"apiVersion": "antdt.io/v1alpha1", "kind": "AntDTJob",
    "metadata": {"name": "x", "labels": {"a": "b"}, "whatever": 1},
    "spec": {"a": {"b": 1},
             "template": {"spec": {"containers": [{"image": "i"}]}, "known": {"x": 1}},
             "labels": {"k": "v"}}})"));
}

// What `fieldValidation=Strict` refuses: exactly the fields pruning drops, in
// the API server's strict-decoding spelling, and metadata fields ObjectMeta
// lacks (at the root and in embedded resources), which pruning keeps.
TEST(PruningTest, UnknownFieldsAreWhatPruningDropsAndForeignMetadata) {
  const json schema = SpecSchema(J(R"({
    "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
    "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                 "properties": {"known": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "parts": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
    "pod": {"type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "properties": {"n": {"type": "integer"}}}}}})"));
  const json obj = J(R"({"apiVersion": "antdt.io/v1alpha1", "kind": "AntDTJob",
    "metadata": {"name": "x", "labels": {"a": "b"}, "whatever": 1},
    "extra": true,
    "spec": {"a": {"b": 1, "c": 2}, "unknown": [1],
             "template": {"spec": {"containers": [{"image": "i"}]}, "known": {"x": 1, "y": 2}},
             "labels": {"k": "v"},
             "parts": [{"name": "p"}, {"name": "q", "weight": 2}],
             "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "nick": "n"},
                     "spec": {"n": 1, "m": 2}}}})");
  EXPECT_THAT(UnknownFields(schema, obj),
              ElementsAre("extra", "metadata.whatever", "spec.a.c", "spec.parts[1].weight",
                          "spec.pod.metadata.nick", "spec.pod.spec.m", "spec.template.known.y",
                          "spec.unknown"));
  json pruned = obj;
  EXPECT_THAT(ValidateCustomResource(schema, pruned, nullptr), IsEmpty());
  EXPECT_THAT(UnknownFields(schema, pruned),
              ElementsAre("metadata.whatever", "spec.pod.metadata.nick"));
}

// ---- Validation keywords and the apiserver's messages ----

TEST(ValidationTest, TypeErrors) {
  const json schema = SpecSchema(J(R"({
    "i": {"type": "integer"}, "n": {"type": "number"}, "s": {"type": "string"},
    "b": {"type": "boolean"}, "a": {"type": "array", "items": {"type": "string"}},
    "o": {"type": "object"}})"));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"i": "3"}})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec.i",
                                "Invalid value: \"string\": spec.i in body must be of type "
                                "integer: \"string\""}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"i": 1.5}})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec.i",
                                "Invalid value: \"number\": spec.i in body must be of type "
                                "integer: \"number\""}));
  // A whole float is an integer; an integer is a number.
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"i": 2.0, "n": 3}})")), IsEmpty());
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"b": "true"}})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec.b",
                                "Invalid value: \"string\": spec.b in body must be of type "
                                "boolean: \"string\""}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"a": ["x", 1], "o": []}})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec.a[1]",
                                "Invalid value: \"integer\": spec.a[1] in body must be of type "
                                "string: \"integer\""},
                          Cause{"FieldValueTypeInvalid", "spec.o",
                                "Invalid value: \"array\": spec.o in body must be of type "
                                "object: \"array\""}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"a": [null]}})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec.a[0]",
                                "Invalid value: \"null\": spec.a[0] in body must be of type "
                                "string: \"null\""}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": 7})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec",
                                "Invalid value: \"integer\": spec in body must be of type "
                                "object: \"integer\""}));
}

TEST(ValidationTest, IntOrStringAndNullable) {
  const json schema = SpecSchema(J(R"({
    "port": {"x-kubernetes-int-or-string": true},
    "n": {"type": "string", "nullable": true}})"));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"port": 80, "n": null}})")), IsEmpty());
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"port": "http"}})")), IsEmpty());
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"port": true}})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec.port",
                                "Invalid value: \"boolean\": spec.port in body must be of type "
                                "integer,string: \"boolean\""}));
  json obj = J(R"({"spec": {"n": null}})");
  EXPECT_THAT(ValidateCustomResource(schema, obj, nullptr), IsEmpty());
  EXPECT_TRUE(obj["spec"].contains("n"));  // nullable: the null is kept
}

TEST(ValidationTest, RequiredAndEnum) {
  const json schema = SpecSchema(J(R"({"name": {"type": "string", "enum": ["antdt-nd", "custom"]},
            "count": {"type": "integer", "enum": [1, 2]},
            "records": {"type": "integer"}})"),
                                 J(R"({"required": ["records", "name"]})"));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {}})")),
              ElementsAre(Cause{"FieldValueRequired", "spec.records", "Required value"},
                          Cause{"FieldValueRequired", "spec.name", "Required value"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"records": 1, "name": "x", "count": 3}})")),
              ElementsAre(Cause{"FieldValueNotSupported", "spec.count",
                                "Unsupported value: 3: supported values: \"1\", \"2\""},
                          Cause{"FieldValueNotSupported", "spec.name",
                                "Unsupported value: \"x\": supported values: \"antdt-nd\", "
                                "\"custom\""}));
  const json root_required = {{"type", "object"}, {"required", {"spec"}}};
  EXPECT_THAT(Validate(root_required, J(R"({"metadata": {}})")),
              ElementsAre(Cause{"FieldValueRequired", "spec", "Required value"}));
}

TEST(ValidationTest, NumberBounds) {
  const json schema = SpecSchema(J(R"({
    "replicas": {"type": "integer", "minimum": 1, "maximum": 2147483647},
    "lr": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
    "p": {"type": "integer", "maximum": 100, "exclusiveMaximum": true},
    "ratio": {"type": "number", "minimum": 0.5, "multipleOf": 0.5}})"));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": -2}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.replicas",
                                "Invalid value: -2: spec.replicas in body should be greater than "
                                "or equal to 1"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 3000000000}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.replicas",
                                "Invalid value: 3000000000: spec.replicas in body should be less "
                                "than or equal to 2.147483647e+09"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"lr": 0}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.lr",
                                "Invalid value: 0: spec.lr in body should be greater than 0"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"p": 100}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.p",
                                "Invalid value: 100: spec.p in body should be less than 100"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"ratio": 0.25}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.ratio",
                                "Invalid value: 0.25: spec.ratio in body should be a multiple of "
                                "0.5"},
                          Cause{"FieldValueInvalid", "spec.ratio",
                                "Invalid value: 0.25: spec.ratio in body should be greater than or "
                                "equal to 0.5"}));
  EXPECT_THAT(
      Validate(schema, J(R"({"spec": {"replicas": 1, "lr": 1e-9, "p": 99, "ratio": 1.5}})")),
      IsEmpty());
}

TEST(ValidationTest, StringsAndFormats) {
  const json schema = SpecSchema(J(R"({
    "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
    "window": {"type": "string", "pattern": "^[0-9]+(ms|s)$"},
    "since": {"type": "string", "format": "date-time"},
    "small": {"type": "integer", "format": "int32"}})"));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"name": ""}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.name",
                                "Invalid value: \"\": spec.name in body should be at least 1 chars "
                                "long"},
                          Cause{"FieldValueInvalid", "spec.name",
                                "Invalid value: \"\": spec.name in body should match '^[a-z]+$'"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"name": "abcdef"}})")),
              ElementsAre(Cause{"FieldValueTooLong", "spec.name",
                                "Too long: may not be more than 5 bytes"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"window": "30 sec"}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.window",
                                "Invalid value: \"30 sec\": spec.window in body should match "
                                "'^[0-9]+(ms|s)$'"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"since": "yesterday"}})")),
              ElementsAre(Cause{"FieldValueTypeInvalid", "spec.since",
                                "Invalid value: \"yesterday\": spec.since in body must be of type "
                                "date-time: \"yesterday\""}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"since": "2024-02-30T00:00:00Z"}})")).size(), 1u);
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"small": 2147483648}})")).size(), 1u);
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"name": "ab", "window": "500ms",
      "since": "2024-05-01T12:00:00.123+02:00", "small": -2147483648}})")),
              IsEmpty());
  // maxLength counts characters, not bytes.
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"name": "\u00e9\u00e9"}})")).size(),
              1u);  // pattern only
}

TEST(ValidationTest, ArraysAndListTypes) {
  const json schema = SpecSchema(J(R"({
    "actions": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"}},
    "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                   "x-kubernetes-list-map-keys": ["type"],
                   "items": {"type": "object", "required": ["type"],
                             "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}},
    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}})"));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"actions": []}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.actions",
                                "Invalid value: 0: spec.actions in body should have at least 1 "
                                "items"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"actions": [1, 2, 3]}})")),
              ElementsAre(Cause{"FieldValueTooMany", "spec.actions",
                                "Too many: 3: must have at most 2 items"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"conditions": [{"type": "Running", "status": "True"},
                                                     {"type": "Running", "status": "False"}],
                                      "tags": ["a", "a"]}})")),
              ElementsAre(Cause{"FieldValueDuplicate", "spec.conditions[1]",
                                "Duplicate value: map[string]interface {}{\"type\":\"Running\"}"},
                          Cause{"FieldValueDuplicate", "spec.tags[1]", "Duplicate value: \"a\""}));
  EXPECT_THAT(
      Validate(schema, J(R"({"spec": {"conditions": [{"status": "True"}]}})")),
      ElementsAre(Cause{"FieldValueRequired", "spec.conditions[0].type", "Required value"}));
}

TEST(ValidationTest, JunctorsAndMetadataName) {
  json schema = SpecSchema(J(R"({"a": {"type": "integer"}, "b": {"type": "integer"}})"),
                           J(R"({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]})"));
  schema["properties"]["metadata"] = J(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}}})");
  EXPECT_THAT(Validate(schema, J(R"({"metadata": {"name": "ok-1"}, "spec": {"a": 1}})")),
              IsEmpty());
  EXPECT_THAT(Validate(schema, J(R"({"metadata": {"name": "ok"}, "spec": {"a": 1, "b": 2}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec",
                                "Invalid value: \"\": spec in body must validate one and only one "
                                "schema (oneOf)"}));
  EXPECT_THAT(Validate(schema, J(R"({"metadata": {"name": "Bad_Name"}, "spec": {"a": 1}})")),
              ElementsAre(Cause{"FieldValueInvalid", "metadata.name",
                                "Invalid value: \"Bad_Name\": metadata.name in body should match "
                                "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"}));
}

// ---- CEL ----

json Eval(const std::string& expr, const json& self = json::object(), const json* old = nullptr) {
  const cel::ParseResult p = cel::Parse(expr);
  EXPECT_EQ(p.error, "") << expr;
  const json bound = cel::BindValue(json::object(), self);  // 4 -> int64, not uint64
  const cel::EvalResult r = cel::Evaluate(p.program, bound, old);
  if (!r.ok) return "error: " + r.error;
  return r.value;
}

TEST(CelTest, OperatorsAndFunctions) {
  const json self = J(R"({"replicas": 4, "lr": 0.5, "name": "antdt-nd", "tags": ["a", "b"],
                          "rules": [{"w": 1}, {"w": 3}], "m": {"k": "v"}})");
  struct Case {
    const char* expr;
    json want;
  };
  const std::vector<Case> cases = {
      {"1 + 2 * 3 - 4 / 2", 5},
      {"7 % 3", 1},
      {"-3 + 1", -2},
      {"1.5 * 2.0", 3.0},
      {"'ab' + \"cd\"", "abcd"},
      {"[1] + [2]", J("[1, 2]")},
      {"1 == 1.0", true},
      {"1 < 1.5", true},
      {"'a' < 'b'", true},
      {"2 >= 3", false},
      {"2 <= 2 && 3 > 2 && 1 != 2", true},
      {"!(1 == 2) || false", true},
      {"true ? 'y' : 'n'", "y"},
      {"self.replicas > 2 ? self.replicas : 0", 4},
      {"has(self.name) && !has(self.missing)", true},
      {"size(self.tags) == 2 && self.tags.size() == 2 && size('héllo') == 5", true},
      {"'a' in self.tags && !('z' in self.tags) && 'k' in self.m", true},
      {"self.rules.all(r, r.w >= 1)", true},
      {"self.rules.exists(r, r.w > 2)", true},
      {"self.rules.exists_one(r, r.w > 0)", false},
      {"self.rules.map(r, r.w * 2)", J("[2, 6]")},
      {"self.rules.filter(r, r.w > 1).size()", 1},
      {"self.name.startsWith('antdt') && self.name.endsWith('-nd') && self.name.contains('dt-')",
       true},
      {"self.name.matches('^antdt-[a-z]+$')", true},
      {"self.tags[1] == 'b' && self.m['k'] == 'v'", true},
      {"int(self.lr * 4.0) == 2 && double(self.replicas) == 4.0 && string(7) == '7'", true},
      {"null == null && self.lr == 0.5", true},
      {"0x10 == 16 && 3u + 4u == 7u", true},
      // Errors: absorbed by && and ||, reported otherwise.
      {"false && self.missing == 1", false},
      {"self.missing == 1 || true", true},
      {"self.missing == 1", "error: no such key: missing"},
      {"1 / 0", "error: division by zero"},
      {"9223372036854775807 + 1", "error: integer overflow"},
      {"self.tags[5]", "error: index out of bounds: 5"},
      {"1 + 1.0", "error: no such overload"},
      {"self.rules.all(r, r.x == 1)", "error: no such key: x"},
  };
  for (const Case& c : cases) EXPECT_EQ(Eval(c.expr, self), c.want) << c.expr;
}

TEST(CelTest, ParseErrorsAndChecks) {
  EXPECT_THAT(cel::Parse("self.a ==").error,
              ::testing::HasSubstr("ERROR: <input>:1:10: Syntax error"));
  EXPECT_NE(cel::Parse("{'a': 1}").error, "");    // map literals: unsupported
  EXPECT_NE(cel::Parse("self.a = 1").error, "");  // a single '='
  EXPECT_NE(cel::Parse("'unterminated").error, "");
  EXPECT_NE(cel::Parse("has(self)").error, "");
  const json schema = J(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "t": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
      "l": {"type": "array", "items": {"type": "object", "properties": {"w": {"type": "integer"}}}}}})");
  auto check = [&](const char* expr) { return cel::Check(cel::Parse(expr).program, schema); };
  EXPECT_EQ(check("self.a > 0 && has(self.t.anything) && self.l.all(x, x.w > 0)"), "");
  EXPECT_EQ(check("self.b > 0"), "ERROR: <input>:1:6: undefined field 'b'");
  EXPECT_EQ(check("self.l.all(x, x.v > 0)"), "ERROR: <input>:1:17: undefined field 'v'");
  EXPECT_EQ(check("other.a > 0"),
            "ERROR: <input>:1:1: undeclared reference to 'other' (in container '')");
  EXPECT_EQ(check("self.a.quantity()"),
            "ERROR: <input>:1:8: undeclared reference to 'quantity' (in container '')");
  EXPECT_EQ(check("size(self.a, 1) > 0"),
            "ERROR: <input>:1:1: found no matching overload for 'size'");
  EXPECT_TRUE(cel::Parse("self.x >= oldSelf.x").program.uses_old_self);
  EXPECT_FALSE(cel::Parse("self.x >= 1").program.uses_old_self);
}

json RuleSchema() {
  return J(R"js({"type": "object", "properties": {"spec": {"type": "object",
    "x-kubernetes-validations": [
      {"rule": "self.batch >= self.replicas", "fieldPath": ".batch",
       "message": "must be >= spec.replicas"},
      {"rule": "self.replicas >= oldSelf.replicas", "reason": "FieldValueForbidden",
       "message": "replicas cannot be decreased"},
      {"rule": "self.replicas != 13"},
      {"rule": "self.replicas != 7", "messageExpression": "'replicas ' + string(self.replicas) + ' is unlucky'"},
      {"rule": "!has(self.mode) || self.mode == 'a' || has(self.extra)", "fieldPath": ".extra",
       "reason": "FieldValueRequired", "message": "required with mode b"}],
    "properties": {"replicas": {"type": "integer", "minimum": 0}, "batch": {"type": "integer"},
                   "mode": {"type": "string", "enum": ["a", "b"]}, "extra": {"type": "string"},
                   "items": {"type": "array", "items": {"type": "object",
                     "x-kubernetes-validations": [{"rule": "self.w < 10", "message": "w too big"}],
                     "properties": {"w": {"type": "number"}}}}}}}})js");
}

TEST(CelRulesTest, MessagesReasonsAndFieldPaths) {
  const json schema = RuleSchema();
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 4, "batch": 8}})")), IsEmpty());
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 4, "batch": 2}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.batch",
                                "Invalid value: \"object\": must be >= spec.replicas"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 13, "batch": 20}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec",
                                "Invalid value: \"object\": failed rule: self.replicas != 13"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 7, "batch": 20}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec",
                                "Invalid value: \"object\": replicas 7 is unlucky"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 1, "batch": 2, "mode": "b"}})")),
              ElementsAre(Cause{"FieldValueRequired", "spec.extra",
                                "Required value: required with mode b"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 1, "batch": 2,
                                              "items": [{"w": 1}, {"w": 12}]}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec.items[1]",
                                "Invalid value: \"object\": w too big"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"batch": 2}})")),
              ElementsAre(Cause{"FieldValueInvalid", "spec",
                                "Invalid value: \"object\": no such key: replicas evaluating rule: "
                                "self.batch >= self.replicas"},
                          Cause{"FieldValueInvalid", "spec",
                                "Invalid value: \"object\": no such key: replicas evaluating rule: "
                                "self.replicas != 13"},
                          Cause{"FieldValueInvalid", "spec",
                                "Invalid value: \"object\": no such key: replicas evaluating rule: "
                                "self.replicas != 7"}));
}

TEST(CelRulesTest, TransitionRulesRunOnlyOnUpdate) {
  const json schema = RuleSchema();
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 2, "batch": 8}})")), IsEmpty());
  const json old = J(R"({"spec": {"replicas": 4, "batch": 8}})");
  EXPECT_THAT(
      Validate(schema, J(R"({"spec": {"replicas": 2, "batch": 8}})"), &old),
      ElementsAre(Cause{"FieldValueForbidden", "spec", "Forbidden: replicas cannot be decreased"}));
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 5, "batch": 8}})"), &old), IsEmpty());
  const json old_without_spec = J(R"({"metadata": {}})");
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": 2, "batch": 8}})"), &old_without_spec),
              IsEmpty());
}

TEST(CelRulesTest, SkippedWhenSchemaValidationHasTypeErrors) {
  const json schema = RuleSchema();
  EXPECT_THAT(
      Validate(schema, J(R"({"spec": {"replicas": "x", "batch": 0}})")),
      ElementsAre(Cause{"FieldValueTypeInvalid", "spec.replicas",
                        "Invalid value: \"string\": spec.replicas in body must be of type integer: "
                        "\"string\""},
                  Cause{"FieldValueInvalid", "",
                        "Invalid value: \"null\": some validation rules were not checked because "
                        "the object was invalid; correct the existing errors to complete "
                        "validation"}));
  // A minimum violation is not blocking: the rules still run.
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"replicas": -1, "batch": -2}})")).size(), 2u);
}

TEST(CelRulesTest, NumbersUnderTypeNumberAreDoubles) {
  const json schema = J(R"({"type": "object", "properties": {"spec": {"type": "object",
    "x-kubernetes-validations": [{"rule": "self.a / 2.0 == 1.5", "message": "a/2"}],
    "properties": {"a": {"type": "number"}}}}})");
  EXPECT_THAT(Validate(schema, J(R"({"spec": {"a": 3}})")), IsEmpty());
}

// ---- CRD schema checks ----

TEST(CrdSchemaTest, AcceptsAStructuralSchema) {
  json schema = RuleSchema();
  schema["properties"]["metadata"] =
      J(R"({"type": "object", "properties": {"name": {"type": "string"}}})");
  EXPECT_THAT(ValidateCrdSchema(schema), IsEmpty());
}

TEST(CrdSchemaTest, ReportsNonStructuralSchemas) {
  const json schema = J(R"({"type": "object", "properties": {
    "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
    "spec": {"type": "object", "additionalProperties": {"type": "string"},
             "properties": {"a": {}, "b": {"type": "array"},
                            "c": {"type": "strin"},
                            "d": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
                            "e": {"type": "string", "pattern": "([a-z"},
                            "f": {"type": "integer", "default": "x"},
                            "g": {"type": "object", "$ref": "#/definitions/x"},
                            "h": {"type": "array", "x-kubernetes-list-type": "map",
                                  "items": {"type": "object", "properties": {"k": {"type": "string"}}},
                                  "x-kubernetes-list-map-keys": ["k"]}}}}})");
  const std::vector<Cause> causes = ValidateCrdSchema(schema);
  std::vector<std::string> fields;
  for (const Cause& c : causes) fields.push_back(c.field);
  EXPECT_THAT(fields,
              ::testing::UnorderedElementsAre(
                  "openAPIV3Schema.properties[metadata]",
                  "openAPIV3Schema.properties[spec].additionalProperties",
                  "openAPIV3Schema.properties[spec].properties[a].type",
                  "openAPIV3Schema.properties[spec].properties[b].items",
                  "openAPIV3Schema.properties[spec].properties[c].type",
                  "openAPIV3Schema.properties[spec].properties[d].uniqueItems",
                  "openAPIV3Schema.properties[spec].properties[e].pattern",
                  "openAPIV3Schema.properties[spec].properties[f].default",
                  "openAPIV3Schema.properties[spec].properties[g].$ref",
                  "openAPIV3Schema.properties[spec].properties[h].x-kubernetes-list-map-keys[0]"));
  EXPECT_THAT(causes,
              ::testing::Contains(Cause{"FieldValueRequired",
                                        "openAPIV3Schema.properties[spec].properties[a].type",
                                        "Required value: must not be empty for specified "
                                        "object fields"}));
  EXPECT_THAT(ValidateCrdSchema(J(R"({"properties": {}})")),
              ElementsAre(Cause{"FieldValueRequired", "openAPIV3Schema.type",
                                "Required value: must not be empty at the root"}));
}

TEST(CrdSchemaTest, ReportsBadRules) {
  const json schema = J(R"({"type": "object", "properties": {"spec": {"type": "object",
    "properties": {"a": {"type": "integer"},
                   "l": {"type": "array", "items": {"type": "object",
                         "properties": {"w": {"type": "integer"}},
                         "x-kubernetes-validations": [{"rule": "self.w >= oldSelf.w"}]}}},
    "x-kubernetes-validations": [
      {"rule": "self.a >"},
      {"rule": "self.b == 1"},
      {"rule": "self.a.quantity() > 1"},
      {"rule": "{'a': 1} == self.a"},
      {"rule": "self.a > 1", "reason": "Because"},
      {"rule": "self.a > 1", "fieldPath": ".nope"},
      {"rule": ""}]}}})");
  const std::vector<Cause> causes = ValidateCrdSchema(schema);
  std::vector<std::string> fields;
  for (const Cause& c : causes) fields.push_back(c.field);
  const std::string base = "openAPIV3Schema.properties[spec].x-kubernetes-validations";
  EXPECT_THAT(fields, ElementsAre(base + "[0].rule", base + "[1].rule", base + "[2].rule",
                                  base + "[3].rule", base + "[4].reason", base + "[5].fieldPath",
                                  base + "[6].rule",
                                  "openAPIV3Schema.properties[spec].properties[l].items."
                                  "x-kubernetes-validations[0].rule"));
  EXPECT_EQ(causes[1].message,
            "Invalid value: \"self.b == 1\": compilation failed: ERROR: <input>:1:6: undefined "
            "field 'b'");
}

// ---- Table ----

TEST(RenderTableTest, ColumnsCellsAndAges) {
  const json columns = J(R"([
    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Running\")].status"},
    {"name": "Workers", "type": "string", "jsonPath": ".status.workers.summary"},
    {"name": "Progress", "type": "integer", "description": "Percent done", "jsonPath": ".status.progress.percent"},
    {"name": "First", "type": "string", "priority": 1, "jsonPath": ".status.workerInstances[0].node"},
    {"name": "Nodes", "type": "string", "jsonPath": ".status.workerInstances[*].node"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])");
  const int64_t now = 1714564800;  // 2024-05-01T12:00:00Z
  const json a = J(R"({"apiVersion": "antdt.io/v1alpha1", "kind": "AntDTJob",
    "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5",
                 "creationTimestamp": "2024-05-01T11:59:55Z"},
    "spec": {"big": true},
    "status": {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "False"}],
               "workers": {"summary": "3/4"}, "progress": {"percent": 42.0},
               "workerInstances": [{"node": "n1"}, {"node": "n2"}]}})");
  const json b = J(R"({"metadata": {"name": "b", "creationTimestamp": "2024-04-28T10:00:00Z"}})");
  const json table = RenderTable(columns, {a, b}, "17", now);
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["apiVersion"], "meta.k8s.io/v1");
  EXPECT_EQ(table["metadata"], J(R"({"resourceVersion": "17"})"));
  ASSERT_EQ(table["columnDefinitions"].size(), 7u);
  EXPECT_EQ(table["columnDefinitions"][0]["name"], "Name");
  EXPECT_EQ(table["columnDefinitions"][0]["format"], "name");
  EXPECT_EQ(table["columnDefinitions"][1],
            J(R"({"name": "Ready", "type": "string", "format": "", "priority": 0,
                  "description": "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type==\"Running\")].status"})"));
  EXPECT_EQ(table["columnDefinitions"][3]["description"], "Percent done");
  EXPECT_EQ(table["columnDefinitions"][4]["priority"], 1);
  ASSERT_EQ(table["rows"].size(), 2u);
  EXPECT_EQ(table["rows"][0]["cells"], J(R"(["a", "False", "3/4", 42, "n1", "n1", "5s"])"));
  EXPECT_EQ(table["rows"][1]["cells"], J(R"(["b", null, null, null, null, null, "3d2h"])"));
  EXPECT_EQ(table["rows"][0]["object"],
            J(R"({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                  "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5",
                               "creationTimestamp": "2024-05-01T11:59:55Z"}})"));
  EXPECT_EQ(RenderTable(columns, {}, "9", now)["rows"], json::array());
}

TEST(RenderTableTest, KubectlAges) {
  const json columns =
      J(R"([{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])");
  const int64_t now = 1714564800;  // 2024-05-01T12:00:00Z
  auto age = [&](const char* ts) {
    json o = {{"metadata", {{"name", "x"}, {"creationTimestamp", ts}}}};
    return RenderTable(columns, {o}, "1", now)["rows"][0]["cells"][1];
  };
  EXPECT_EQ(age("2024-05-01T12:00:00Z"), "0s");
  EXPECT_EQ(age("2024-05-01T11:58:01Z"), "119s");
  EXPECT_EQ(age("2024-05-01T11:57:00Z"), "3m");
  EXPECT_EQ(age("2024-05-01T11:56:50Z"), "3m10s");
  EXPECT_EQ(age("2024-05-01T11:45:00Z"), "15m");
  EXPECT_EQ(age("2024-05-01T07:30:00Z"), "4h30m");
  EXPECT_EQ(age("2024-04-30T12:00:00Z"), "24h");
  EXPECT_EQ(age("2024-04-29T12:00:00Z"), "2d");
  EXPECT_EQ(age("2024-03-01T12:00:00Z"), "61d");
  EXPECT_EQ(age("2021-05-01T12:00:00Z"), "3y1d");
  EXPECT_EQ(age("2024-05-01T14:00:00+02:00"), "0s");
  EXPECT_EQ(age("2024-05-01T12:00:05Z"), "<invalid>");  // in the future
  EXPECT_EQ(age("not a time"), "<invalid>");
}

}  // namespace
}  // namespace antdt::kubeemu
