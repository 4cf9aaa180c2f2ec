#include "testing/kube-emulator/openapi.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#ifdef ANTDT_HAVE_GNOSTIC
#include "openapiv2/OpenAPIv2.pb.h"
#endif

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;

bool Flag(const json& s, const char* key) {
  auto it = s.find(key);
  return it != s.end() && it->is_boolean() && it->get<bool>();
}

// "antdt.io", "v1alpha1", "AntDTJob" -> "io.antdt.v1alpha1.AntDTJob", the
// name the API server gives a custom resource's definition.
std::string DefinitionName(const ApiKind& k) {
  std::vector<std::string> parts = absl::StrSplit(k.group, '.');
  std::reverse(parts.begin(), parts.end());
  return absl::StrCat(absl::StrJoin(parts, "."), ".", k.version, ".", k.kind);
}

json Gvk(const ApiKind& k) {
  return {{"group", k.group}, {"version", k.version}, {"kind", k.kind}};
}

// "antdt.io" -> "AntdtIo", "v1alpha1" -> "V1alpha1": an operationId's parts.
std::string Camel(const std::string& text) {
  std::string out;
  bool upper = true;
  for (char c : text) {
    if (c == '.' || c == '-') {
      upper = true;
      continue;
    }
    out += upper ? absl::ascii_toupper(static_cast<unsigned char>(c)) : c;
    upper = false;
  }
  return out;
}

std::string CollectionPath(const ApiKind& k) {
  return absl::StrCat("/", k.group.empty() ? "api" : "apis/" + k.group, "/", k.version,
                      k.namespaced ? "/namespaces/{namespace}/" : "/", k.plural);
}

bool Has(const ApiKind& k, const char* verb) {
  return std::find(k.verbs.begin(), k.verbs.end(), verb) != k.verbs.end();
}

// One operation per (path, method) the kind serves. `v3` shapes parameters
// and responses for OpenAPI 3.0, else Swagger 2.0.
struct Op {
  const char* method;  // "get", "post", ...
  const char* verb;    // "list", "create", ... (operationId, x-kubernetes-action)
  bool write;
};

json QueryParameter(const char* name, const char* description, bool v3) {
  json p = {{"name", name}, {"in", "query"}, {"description", description}, {"uniqueItems", true}};
  if (v3) {
    p["schema"] = {{"type", "string"}};
  } else {
    p["type"] = "string";
  }
  return p;
}

json Operation(const ApiKind& k, const Op& op, bool item, bool v3) {
  std::string id = absl::StrCat(op.verb, Camel(k.group.empty() ? "core" : k.group),
                                Camel(k.version), k.namespaced ? "Namespaced" : "", k.kind,
                                item || std::string(op.verb) != "list" ? "" : "List");
  json o = {{"operationId", id},
            {"x-kubernetes-action", op.verb},
            {"x-kubernetes-group-version-kind", Gvk(k)},
            {"parameters", json::array()}};
  json ok = {{"description", "OK"}};
  if (v3 && k.schema != nullptr && std::string(op.method) != "delete") {
    ok["content"]["application/json"]["schema"] = {
        {"$ref", "#/components/schemas/" + DefinitionName(k)}};
  }
  o["responses"] = {{std::string(op.method) == "post" ? "201" : "200", ok}};
  if (!v3) o["produces"] = {"application/json", "application/yaml"};
  if (op.write) {
    o["parameters"].push_back(QueryParameter(
        "dryRun", "When present, indicates that modifications should not be persisted.", v3));
    o["parameters"].push_back(QueryParameter(
        "fieldManager", "A name associated with the actor making these changes.", v3));
    if (k.schema != nullptr) {
      o["parameters"].push_back(QueryParameter(
          "fieldValidation",
          "How the server handles fields the schema does not declare: Ignore, Warn (default) "
          "or Strict.",
          v3));
    }
  }
  if (std::string(op.method) == "patch") {
    std::vector<std::string> types = {"application/json-patch+json", "application/merge-patch+json",
                                      "application/apply-patch+yaml"};
    if (!v3) o["consumes"] = types;
    o["parameters"].push_back(
        QueryParameter("force", "Force is going to \"force\" Apply requests.", v3));
  }
  if (std::string(op.verb) == "list") {
    for (const char* p : {"labelSelector", "fieldSelector", "resourceVersion", "watch"}) {
      o["parameters"].push_back(QueryParameter(p, p, v3));
    }
  }
  return o;
}

json PathParameter(const char* name, bool v3) {
  json p = {{"name", name}, {"in", "path"}, {"required", true}, {"uniqueItems", true}};
  p["description"] = std::string(name) == "name" ? "name of the object"
                                                 : "object name and auth scope, such as for teams "
                                                   "and projects";
  if (v3) {
    p["schema"] = {{"type", "string"}};
  } else {
    p["type"] = "string";
  }
  return p;
}

void AddPaths(const ApiKind& k, bool v3, json& paths) {
  const std::string collection = CollectionPath(k);
  std::vector<std::pair<std::string, std::vector<Op>>> items = {
      {collection, {{"get", "list", false}, {"post", "create", true}}},
      {collection + "/{name}",
       {{"get", "get", false},
        {"put", "replace", true},
        {"patch", "patch", true},
        {"delete", "delete", false}}}};
  if (k.status_subresource) {
    items.push_back({collection + "/{name}/status",
                     {{"get", "get", false}, {"put", "replace", true}, {"patch", "patch", true}}});
  }
  for (const auto& [path, ops] : items) {
    json item = json::object();
    const bool named = path != collection;
    for (const Op& op : ops) {
      const char* need = op.verb == std::string("replace") ? "update" : op.verb;
      if (!Has(k, need)) continue;
      item[op.method] = Operation(k, op, named, v3);
    }
    if (item.empty()) continue;
    item["parameters"] = json::array();
    if (named) item["parameters"].push_back(PathParameter("name", v3));
    if (k.namespaced) item["parameters"].push_back(PathParameter("namespace", v3));
    paths[path] = item;
  }
}

// A structural schema as Swagger 2.0 can say it (what the API server
// publishes for a CRD in /openapi/v2): no nullable, anyOf/oneOf/allOf/not,
// defaults or enums; a value that may be anything (preserved unknown fields,
// int-or-string, nullable) has no type; a field with a default is not
// required, since the server fills it in.
json V2Schema(const json& s) {
  json out = json::object();
  if (!s.is_object()) return out;
  if (s.contains("description") && s["description"].is_string()) {
    out["description"] = s["description"];
  }
  if (Flag(s, "x-kubernetes-preserve-unknown-fields") || Flag(s, "x-kubernetes-int-or-string") ||
      Flag(s, "nullable")) {
    return out;
  }
  const std::string type = s.value("type", "");
  if (type.empty()) return out;
  out["type"] = type;
  if (s.contains("format") && s["format"].is_string()) out["format"] = s["format"];
  if (type == "array" && s.contains("items") && s["items"].is_object()) {
    out["items"] = V2Schema(s["items"]);
  }
  if (type != "object") return out;
  if (s.contains("properties") && s["properties"].is_object() && !s["properties"].empty()) {
    for (auto p = s["properties"].begin(); p != s["properties"].end(); ++p) {
      out["properties"][p.key()] = V2Schema(*p);
    }
    if (s.contains("required") && s["required"].is_array()) {
      for (const json& r : s["required"]) {
        if (!r.is_string()) continue;
        const json& p = s["properties"].value(r.get<std::string>(), json::object());
        if (p.is_object() && !p.contains("default")) out["required"].push_back(r);
      }
    }
  } else if (s.contains("additionalProperties") && s["additionalProperties"].is_object()) {
    out["additionalProperties"] = V2Schema(s["additionalProperties"]);
  }
  return out;
}

// The top of a custom resource's definition: apiVersion, kind and metadata
// are the API server's, whatever the CRD declares for them.
json WithTypeMeta(json schema, const ApiKind& k) {
  if (!schema.is_object()) schema = json::object();
  schema["type"] = "object";
  schema["properties"]["apiVersion"] = {
      {"type", "string"},
      {"description", "APIVersion defines the versioned schema of this representation."}};
  schema["properties"]["kind"] = {
      {"type", "string"},
      {"description", "Kind is a string value representing the REST resource."}};
  schema["properties"]["metadata"] = {{"type", "object"},
                                      {"description", "Standard object's metadata."}};
  schema["x-kubernetes-group-version-kind"] = json::array({Gvk(k)});
  return schema;
}

std::string Hash(const std::string& text) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016zX", std::hash<std::string>{}(text));
  return buf;
}

#ifdef ANTDT_HAVE_GNOSTIC
namespace oa = openapi::v2;

void ToExtension(const std::string& name, const json& value, oa::NamedAny* out) {
  out->set_name(name);
  out->mutable_value()->set_yaml(value.dump());  // JSON is YAML
}

void ToSchema(const json& s, oa::Schema* out) {
  if (s.contains("$ref")) out->set__ref(s["$ref"].get<std::string>());
  if (s.contains("description")) out->set_description(s["description"].get<std::string>());
  if (s.contains("format")) out->set_format(s["format"].get<std::string>());
  if (s.contains("type")) out->mutable_type()->add_value(s["type"].get<std::string>());
  if (s.contains("items")) ToSchema(s["items"], out->mutable_items()->add_schema());
  if (s.contains("properties")) {
    for (auto p = s["properties"].begin(); p != s["properties"].end(); ++p) {
      oa::NamedSchema* named = out->mutable_properties()->add_additional_properties();
      named->set_name(p.key());
      ToSchema(*p, named->mutable_value());
    }
  }
  if (s.contains("additionalProperties")) {
    ToSchema(s["additionalProperties"], out->mutable_additional_properties()->mutable_schema());
  }
  for (const json& r : s.value("required", json::array())) out->add_required(r.get<std::string>());
  for (auto e = s.begin(); e != s.end(); ++e) {
    if (e.key().rfind("x-", 0) == 0) ToExtension(e.key(), *e, out->add_vendor_extension());
  }
}

void ToParameter(const json& p, oa::ParametersItem* out) {
  oa::NonBodyParameter* nb = out->mutable_parameter()->mutable_non_body_parameter();
  if (p["in"] == "path") {
    oa::PathParameterSubSchema* q = nb->mutable_path_parameter_sub_schema();
    q->set_required(true);
    q->set_in("path");
    q->set_name(p["name"].get<std::string>());
    q->set_description(p.value("description", ""));
    q->set_type("string");
    q->set_unique_items(true);
  } else {
    oa::QueryParameterSubSchema* q = nb->mutable_query_parameter_sub_schema();
    q->set_in("query");
    q->set_name(p["name"].get<std::string>());
    q->set_description(p.value("description", ""));
    q->set_type("string");
    q->set_unique_items(true);
  }
}

void ToOperation(const json& o, oa::Operation* out) {
  out->set_operation_id(o.value("operationId", ""));
  for (const json& c : o.value("consumes", json::array())) out->add_consumes(c.get<std::string>());
  for (const json& c : o.value("produces", json::array())) out->add_produces(c.get<std::string>());
  for (const json& p : o.value("parameters", json::array())) {
    ToParameter(p, out->add_parameters());
  }
  for (auto r = o["responses"].begin(); r != o["responses"].end(); ++r) {
    oa::NamedResponseValue* named = out->mutable_responses()->add_response_code();
    named->set_name(r.key());
    named->mutable_value()->mutable_response()->set_description(r->value("description", ""));
  }
  for (auto e = o.begin(); e != o.end(); ++e) {
    if (e.key().rfind("x-", 0) == 0) ToExtension(e.key(), *e, out->add_vendor_extension());
  }
}
#endif

}  // namespace

std::string OpenApiV3Key(const std::string& group, const std::string& version) {
  return group.empty() ? "api/" + version : absl::StrCat("apis/", group, "/", version);
}

json OpenApiV2(const std::vector<ApiKind>& kinds) {
  json doc = {{"swagger", "2.0"},
              {"info", {{"title", "Kubernetes"}, {"version", "v1.30.0-antdt-emulator"}}},
              {"paths", json::object()},
              {"definitions", json::object()}};
  for (const ApiKind& k : kinds) {
    AddPaths(k, false, doc["paths"]);
    if (k.schema != nullptr) {
      json def = V2Schema(WithTypeMeta(*k.schema, k));
      def["x-kubernetes-group-version-kind"] = json::array({Gvk(k)});
      doc["definitions"][DefinitionName(k)] = def;
    }
  }
  return doc;
}

std::string OpenApiV2Protobuf(const json& document) {
#ifdef ANTDT_HAVE_GNOSTIC
  oa::Document doc;
  doc.set_swagger(document.value("swagger", "2.0"));
  doc.mutable_info()->set_title(document["info"].value("title", ""));
  doc.mutable_info()->set_version(document["info"].value("version", ""));
  for (auto p = document["paths"].begin(); p != document["paths"].end(); ++p) {
    oa::NamedPathItem* named = doc.mutable_paths()->add_path();
    named->set_name(p.key());
    oa::PathItem* item = named->mutable_value();
    const std::vector<std::pair<const char*, std::function<oa::Operation*()>>> methods = {
        {"get", [item] { return item->mutable_get(); }},
        {"put", [item] { return item->mutable_put(); }},
        {"post", [item] { return item->mutable_post(); }},
        {"delete", [item] { return item->mutable_delete_(); }},
        {"patch", [item] { return item->mutable_patch(); }}};
    for (const auto& [method, make] : methods) {
      if (p->contains(method)) ToOperation((*p)[method], make());
    }
    for (const json& param : p->value("parameters", json::array())) {
      ToParameter(param, item->add_parameters());
    }
  }
  for (auto d = document["definitions"].begin(); d != document["definitions"].end(); ++d) {
    oa::NamedSchema* named = doc.mutable_definitions()->add_additional_properties();
    named->set_name(d.key());
    ToSchema(*d, named->mutable_value());
  }
  return doc.SerializeAsString();
#else
  (void)document;
  return "";
#endif
}

json OpenApiV3(const std::vector<ApiKind>& kinds, const std::string& group,
               const std::string& version) {
  json doc = {{"openapi", "3.0.0"},
              {"info", {{"title", "Kubernetes"}, {"version", "v1.30.0-antdt-emulator"}}},
              {"paths", json::object()},
              {"components", {{"schemas", json::object()}}}};
  for (const ApiKind& k : kinds) {
    if (k.group != group || k.version != version) continue;
    AddPaths(k, true, doc["paths"]);
    if (k.schema != nullptr) {
      doc["components"]["schemas"][DefinitionName(k)] = WithTypeMeta(*k.schema, k);
    }
  }
  return doc;
}

json OpenApiV3Index(const std::vector<ApiKind>& kinds) {
  std::set<std::pair<std::string, std::string>> gvs;
  for (const ApiKind& k : kinds) gvs.insert({k.group, k.version});
  json paths = json::object();
  for (const auto& [group, version] : gvs) {
    const std::string key = OpenApiV3Key(group, version);
    const std::string hash = Hash(OpenApiV3(kinds, group, version).dump());
    paths[key] = {{"serverRelativeURL", absl::StrCat("/openapi/v3/", key, "?hash=", hash)}};
  }
  return {{"paths", paths}};
}

}  // namespace antdt::kubeemu
