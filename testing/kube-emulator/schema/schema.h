// Structural-schema handling of custom resources for the kube-apiserver
// emulator: defaulting, pruning, OpenAPI v3 validation with the apiserver's
// error messages, CEL `x-kubernetes-validations`, CRD schema checks, and the
// meta.k8s.io/v1 Table rendering of additionalPrinterColumns.
//
// All functions are pure (no I/O, no clock reads) and thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace antdt::kubeemu {

// One entry of a 422 Status's details.causes. `type` is a metav1.CauseType:
// FieldValueInvalid | FieldValueRequired | FieldValueNotSupported |
// FieldValueTooLong | FieldValueTooMany | FieldValueTypeInvalid |
// FieldValueForbidden | FieldValueDuplicate. `message` is the field error's
// body as the apiserver writes it ("Invalid value: -2: spec.workers.replicas in
// body should be greater than or equal to 1", "Required value", ...), `field`
// its path ("spec.stragglerPolicy.rules[0].threshold").
struct Cause {
  std::string type;
  std::string field;
  std::string message;
};

bool operator==(const Cause& a, const Cause& b);

// For a custom resource written with the openAPIV3Schema `schema`, in place:
//  1. drops `null`s of non-nullable properties, applies `default`s (create and
//     update alike) and prunes fields the schema does not declare, unless
//     under x-kubernetes-preserve-unknown-fields (apiVersion, kind and
//     metadata at the root are always kept; metadata is not pruned);
//  2. validates: type (integer vs number, x-kubernetes-int-or-string),
//     nullable, enum, format (date-time, int32, int64), minLength/maxLength,
//     pattern (std::regex ECMAScript), minimum/maximum (and exclusive),
//     multipleOf, minItems/maxItems, properties, additionalProperties,
//     required, allOf/anyOf/oneOf/not, x-kubernetes-list-type map/set
//     duplicates;
//  3. then, only when step 2 found no type or enum errors (the apiserver's
//     "blocking" errors), evaluates x-kubernetes-validations (CEL); transition
//     rules (those using oldSelf) run only when `old` has the correlated value.
// `old` is the stored object on update, nullptr on create. Returns the causes,
// empty when the object is valid.
std::vector<Cause> ValidateCustomResource(const nlohmann::json& schema, nlohmann::json& object,
                                          const nlohmann::json* old);

// The fields of `object` that its schema does not declare: what pruning would
// drop, named as the API server's strict decoding names them ("spec.foo",
// "spec.workers[0].bar"), and fields of `metadata` that ObjectMeta lacks
// ("metadata.foo"), at the root and in embedded resources. In document order.
std::vector<std::string> UnknownFields(const nlohmann::json& schema, const nlohmann::json& object);

// Checks that a CRD's openAPIV3Schema is structural (types everywhere but
// under x-kubernetes-int-or-string / preserve-unknown-fields, no forbidden
// keywords, metadata restricted to name and generateName, properties and
// additionalProperties exclusive, defaults valid, patterns compile, list-type
// map keys) and that its CEL rules parse and reference declared fields.
// Fields are relative to the schema and start with "openAPIV3Schema" (e.g.
// "openAPIV3Schema.properties[spec].type"); a caller validating a CRD prefixes
// "spec.versions[i].schema.".
std::vector<Cause> ValidateCrdSchema(const nlohmann::json& schema);

// The meta.k8s.io/v1 Table the apiserver returns for
// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`:
// columnDefinitions = Name + the CRD's additionalPrinterColumns (name, type,
// format, description, priority); one row per object, cells = [name, one value
// per column], object = PartialObjectMetadata (apiVersion meta.k8s.io/v1) with
// the object's metadata; metadata.resourceVersion = list_resource_version.
// Column JSONPaths support `.a.b`, `['a']`, `[n]`, `[*]`, `..`-free filters
// `[?(@.k=="v")]` / `!=`; the first match is used. A missing value is a null
// cell (as the apiserver does); date columns render as kubectl ages ("5s",
// "3m10s", "2d") relative to `now_unix_seconds`; string columns print the
// value as text.
nlohmann::json RenderTable(const nlohmann::json& printer_columns,
                           const std::vector<nlohmann::json>& objects,
                           const std::string& list_resource_version, int64_t now_unix_seconds);

// The Table of a built-in kind, with the columns the API server prints for
// it: pods (Name, Ready, Status, Restarts, Age; wide: IP, Node), nodes (Name,
// Status, Roles, Age, Version), services (Name, Type, Cluster-IP,
// External-IP, Port(s), Age), persistentvolumeclaims (Name, Status, Volume,
// Capacity, Access Modes, StorageClass, Age). Null for another resource.
bool HasBuiltinTable(const std::string& resource);
nlohmann::json RenderBuiltinTable(const std::string& resource,
                                  const std::vector<nlohmann::json>& objects,
                                  const std::string& list_resource_version,
                                  int64_t now_unix_seconds);

}  // namespace antdt::kubeemu
