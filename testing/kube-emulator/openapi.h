// The OpenAPI documents the emulator publishes, built from the kinds it
// serves: /openapi/v2 (JSON, or gnostic protobuf as kubectl asks for it) and
// /openapi/v3 (an index of group-versions, then one document each).
//
// What clients take from them:
//  - kubectl (1.24+) sends `fieldValidation=Strict` on writes to a kind whose
//    PATCH operation lists that query parameter (the v3 document, else v2),
//    and validates nothing itself; for any other kind it validates the object
//    against the v2 definition carrying the kind's
//    `x-kubernetes-group-version-kind`, and skips kinds with none.
//  - kubectl 1.20 validates against the v2 definitions only.
//  - `kubectl explain` reads the definitions.
// Custom resources are published with their CRD's schema and advertise
// fieldValidation: the emulator checks their fields (UnknownFields in
// schema.h). Built-in kinds are stored schemaless, so they get paths but no
// definition and no fieldValidation: no client or server check claims what
// the emulator does not do.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace antdt::kubeemu {

// One served kind at one version.
struct ApiKind {
  std::string group;  // "" for the core group
  std::string version;
  std::string kind;
  std::string plural;
  bool namespaced = true;
  std::vector<std::string> verbs;  // as discovery lists them
  bool status_subresource = false;
  const nlohmann::json* schema = nullptr;  // openAPIV3Schema; null: schemaless built-in
};

// "api/v1" or "apis/GROUP/VERSION": a group-version's key in the v3 index.
std::string OpenApiV3Key(const std::string& group, const std::string& version);

// The Swagger 2.0 document of every kind.
nlohmann::json OpenApiV2(const std::vector<ApiKind>& kinds);

// `OpenApiV2()`'s document as the gnostic openapi.v2.Document protobuf
// (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), or "" when
// the emulator was built without gnostic's OpenAPIv2.proto.
std::string OpenApiV2Protobuf(const nlohmann::json& document);

// The OpenAPI 3.0 document of one group-version's kinds.
nlohmann::json OpenApiV3(const std::vector<ApiKind>& kinds, const std::string& group,
                         const std::string& version);

// /openapi/v3: {"paths": {KEY: {"serverRelativeURL": "/openapi/v3/KEY?hash=H"}}},
// H changing whenever that group-version's document does.
nlohmann::json OpenApiV3Index(const std::vector<ApiKind>& kinds);

}  // namespace antdt::kubeemu
