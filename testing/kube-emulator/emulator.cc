#include "testing/kube-emulator/emulator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "backends/kubernetes/client/object.h"
#include "backends/kubernetes/client/selectors.h"
#include "nlohmann/json.hpp"
#include "testing/kube-emulator/managed_fields.h"
#include "testing/kube-emulator/openapi.h"
#include "testing/kube-emulator/pod_security.h"
#include "testing/kube-emulator/rbac.h"
#include "testing/kube-emulator/schema/schema.h"
#include "testing/kube-emulator/workloads.h"
#include "yaml-cpp/yaml.h"

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kCrdKey[] = "apiextensions.k8s.io/customresourcedefinitions";
constexpr char kNamespaceKey[] = "/namespaces";
constexpr char kPodKey[] = "/pods";
constexpr char kMergePatch[] = "application/merge-patch+json";
constexpr char kJsonPatch[] = "application/json-patch+json";
constexpr char kStrategicPatch[] = "application/strategic-merge-patch+json";
constexpr char kApplyPatch[] = "application/apply-patch+yaml";

// ---------------------------------------------------------------------------
// Time, identifiers, names.

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t UnixNow() { return UnixNowMs() / 1000; }

std::mt19937_64& Rng() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng;
}

std::string NewUid() {
  uint64_t a = Rng()(), b = Rng()();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

std::string RandomSuffix() {
  static const char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string s;
  for (int i = 0; i < 5; ++i) s += kAlphabet[Rng()() % (sizeof(kAlphabet) - 1)];
  return s;
}

const std::regex& Dns1123Subdomain() {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  return re;
}
const std::regex& Dns1123Label() {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  return re;
}

// The validation message of apimachinery's IsDNS1123Subdomain / IsDNS1123Label.
std::optional<std::string> NameError(const std::string& name, bool label) {
  if (label) {
    if (name.size() > 63) return "must be no more than 63 characters";
    if (!std::regex_match(name, Dns1123Label())) {
      return "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
             "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
             "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    }
    return std::nullopt;
  }
  if (name.size() > 253) return "must be no more than 253 characters";
  if (!std::regex_match(name, Dns1123Subdomain())) {
    return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
           "'-' or '.', and must start and end with an alphanumeric character (e.g. "
           "'example.com', regex used for validation is "
           "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
  }
  return std::nullopt;
}

// strconv.ParseBool's true values, as the apiserver reads boolean parameters.
bool IsTrue(const std::string& value) {
  return value == "1" || value == "t" || value == "T" || value == "TRUE" || value == "true" ||
         value == "True";
}

std::string StripParams(const std::string& content_type) {
  std::string ct = content_type.substr(0, content_type.find(';'));
  return absl::AsciiStrToLower(absl::StripAsciiWhitespace(ct));
}

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

std::string MetaStr(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains("metadata")) return "";
  return Str(obj["metadata"], key);
}

bool Deleting(const json& obj) {
  return obj.contains("metadata") && obj["metadata"].contains("deletionTimestamp") &&
         !obj["metadata"]["deletionTimestamp"].is_null();
}

std::vector<std::string> Finalizers(const json& obj) {
  std::vector<std::string> out;
  if (!obj.contains("metadata")) return out;
  const json& md = obj["metadata"];
  if (!md.contains("finalizers") || !md["finalizers"].is_array()) return out;
  for (const json& f : md["finalizers"]) {
    if (f.is_string()) out.push_back(f.get<std::string>());
  }
  return out;
}

int64_t IntOr(const json& v, int64_t fallback) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return static_cast<int64_t>(v.get<double>());
  return fallback;
}

std::optional<json> ParseBody(const std::string& body, const std::string& content_type) {
  if (!absl::StrContains(content_type, "yaml")) {
    json parsed = json::parse(body, nullptr, false);
    if (!parsed.is_discarded()) return parsed;
  }
  try {
    return kube::YamlToJson(YAML::Load(body));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Strategic-merge-patch directives have no meaning for a merge patch.
void StripDirectives(json& patch) {
  if (patch.is_object()) {
    for (auto it = patch.begin(); it != patch.end();) {
      if (!it.key().empty() && it.key()[0] == '$') {
        it = patch.erase(it);
      } else {
        StripDirectives(it.value());
        ++it;
      }
    }
  } else if (patch.is_array()) {
    for (json& item : patch) StripDirectives(item);
  }
}

// ---------------------------------------------------------------------------
// Status objects (apimachinery/pkg/api/errors).

json StatusObject(int code, const std::string& reason, const std::string& message,
                  const json& details = nullptr) {
  json s = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason},
            {"code", code}};
  if (!details.is_null()) s["details"] = details;
  return s;
}

HttpResponse JsonResponse(int code, const json& body) {
  HttpResponse r;
  r.code = code;
  r.body = body.dump();
  return r;
}

HttpResponse Error(int code, const std::string& reason, const std::string& message,
                   const json& details = nullptr) {
  return JsonResponse(code, StatusObject(code, reason, message, details));
}

HttpResponse BadRequest(const std::string& message) { return Error(400, "BadRequest", message); }

HttpResponse GenericNotFound() {
  return Error(404, "NotFound", "the server could not find the requested resource", json::object());
}

// ---------------------------------------------------------------------------
// Resources.

struct Resource {
  std::string group;
  std::string resource;  // plural
  std::string singular;
  std::string kind;
  std::string list_kind;
  std::vector<std::string> versions;  // served
  std::string preferred_version;
  bool namespaced = true;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  std::vector<std::string> verbs = {"create", "delete", "deletecollection", "get",
                                    "list",   "patch",  "update",           "watch"};
  bool status_sub = false;
  bool binding_sub = false;
  bool token_sub = false;  // serviceaccounts/token (TokenRequest)
  bool log_sub = false;    // pods/log
  // A custom resource's scale subresource: where its replicas lie (".spec.x").
  bool scale_sub = false;
  std::string spec_replicas_path, status_replicas_path, label_selector_path;
  bool custom = false;
  bool has_generation = false;
  bool validate_names = true;
  std::map<std::string, json> schemas;      // version -> openAPIV3Schema (custom)
  std::map<std::string, json> columns;      // version -> additionalPrinterColumns (custom)
  std::set<std::string> selectable_fields;  // custom, e.g. "spec.nodeName"

  std::string Key() const { return group + "/" + resource; }
  std::string Qualified() const { return group.empty() ? resource : resource + "." + group; }
  std::string QualifiedKind() const { return group.empty() ? kind : kind + "." + group; }
  std::string ApiVersion(const std::string& v) const { return group.empty() ? v : group + "/" + v; }
  bool Serves(const std::string& v) const {
    return std::find(versions.begin(), versions.end(), v) != versions.end();
  }
};
using ResourcePtr = std::shared_ptr<const Resource>;

struct Event {
  int64_t rv = 0;
  std::string type;  // ADDED, MODIFIED, DELETED
  std::string res_key;
  json object;
  json old;  // previous state for MODIFIED (selector transitions)
};

struct Target {
  ResourcePtr res;
  std::string version;
  std::string ns;
  std::string name;
  std::string sub;
  // Who writes, for metadata.managedFields: fieldManager, else the
  // User-Agent's product ("" for the emulator's own controllers); and, for
  // server-side apply, the fields the configuration sets.
  std::string manager;
  bool apply = false;
  FieldSet applied;
};

struct Filter {
  std::string ns;
  std::string name;
  kube::LabelSelector labels;
  kube::FieldSelector fields;
  bool Matches(const json& obj) const {
    if (!ns.empty() && MetaStr(obj, "namespace") != ns) return false;
    if (!name.empty() && MetaStr(obj, "name") != name) return false;
    const json& md = obj["metadata"];
    return labels.Matches(md.contains("labels") ? md["labels"] : json(nullptr)) &&
           fields.Matches(obj);
  }
};

struct Injection {
  int code = 500;
  int64_t count = 1;
  std::set<std::string> verbs;
  std::string path_contains;
  std::string user_agent_contains;
  int64_t retry_after_seconds = 1;
};

std::string ObjKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

}  // namespace

std::string UrlDecode(const std::string& text, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      int v = 0;
      if (std::sscanf(text.substr(i + 1, 2).c_str(), "%2x", &v) == 1) {
        out += static_cast<char>(v);
        i += 2;
        continue;
      }
    }
    out += (c == '+' && plus_is_space) ? ' ' : c;
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(const std::string& query) {
  std::map<std::string, std::string> params;
  for (absl::string_view part : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    size_t eq = part.find('=');
    std::string key = UrlDecode(std::string(part.substr(0, eq)), true);
    std::string value =
        eq == absl::string_view::npos ? "" : UrlDecode(std::string(part.substr(eq + 1)), true);
    params[key] = value;
  }
  return params;
}

struct Emulator::Impl {
  explicit Impl(EmulatorOptions o);

  // Request entry points.
  void Handle(const HttpRequest& req, ResponseWriter& writer);
  void Record(const HttpRequest& req, const std::string& verb, int code, int64_t started);
  std::optional<HttpResponse> Dispatch(const HttpRequest& req, ResponseWriter& writer,
                                       std::string* verb);
  HttpResponse Control(const HttpRequest& req);
  std::optional<HttpResponse> CheckAuth(const HttpRequest& req);
  std::optional<HttpResponse> Authorize(const Target& t, const std::string& verb);
  HttpResponse TokenRequest(const Target& t, const HttpRequest& req);
  std::optional<HttpResponse> Injected(const HttpRequest& req, const std::string& verb,
                                       const Target* target);

  // Discovery.
  std::optional<HttpResponse> Discovery(const std::vector<std::string>& segs);
  std::optional<HttpResponse> OpenApi(const HttpRequest& req);
  json ResourceList(const std::string& group, const std::string& version);

  // Resource verbs (take mu_ themselves).
  HttpResponse Get(const Target& t, const HttpRequest& req);
  HttpResponse PodLog(const Target& t, const HttpRequest& req);
  HttpResponse ScaleSub(const Target& t, const HttpRequest& req);
  HttpResponse List(const Target& t, const HttpRequest& req);
  std::optional<HttpResponse> Watch(const Target& t, const HttpRequest& req,
                                    ResponseWriter& writer);
  HttpResponse Create(const Target& t, const HttpRequest& req);
  HttpResponse Replace(const Target& t, const HttpRequest& req);
  HttpResponse Patch(const Target& t, const HttpRequest& req);
  HttpResponse Delete(const Target& t, const HttpRequest& req);
  HttpResponse DeleteCollection(const Target& t, const HttpRequest& req);
  HttpResponse Bind(const Target& t, const HttpRequest& req);

  // Under mu_.
  HttpResponse CreateLocked(const Target& t, json obj, bool dry_run);
  HttpResponse UpdateLocked(const Target& t, const json& old, json next, bool dry_run);
  HttpResponse DeleteLocked(const ResourcePtr& res, const std::string& key,
                            std::optional<int64_t> grace, const std::string& policy, bool dry_run);
  void CommitPut(const Resource& res, const std::string& key, json obj, const char* type);
  void CommitDelete(const ResourcePtr& res, const std::string& key);
  void RecordEvent(Event e);
  void EnsureNamespace(const std::string& ns);
  std::optional<HttpResponse> AdmitPodSecurity(const Resource& res, const std::string& ns,
                                               const std::string& name, const json& obj,
                                               std::vector<std::string>* warnings);
  json* Find(const Resource& res, const std::string& key);
  ResourcePtr FindResource(const std::string& group, const std::string& resource) const;
  std::vector<Cause> ValidateCrd(json& crd, const json* old);
  void RegisterCrd(const json& crd);
  void CompactLocked();
  json Out(const Resource& res, const std::string& version, json obj) const;
  json TableFor(const Resource& res, const std::string& version,
                const std::vector<json>& objects) const;
  void GcLoop();
  void GcOnce();
  // Built-in workload controllers, under mu_ (workloads.h).
  void ControllersOnce();
  void DeploymentsOnce();
  void ReplicaSetsOnce();
  void DaemonSetsOnce();
  std::vector<std::pair<std::string, json>> OwnedBy(const std::string& res_key, const json& owner);
  HttpResponse CreateChild(const std::string& res_key, const std::string& ns, json obj);
  void SetStatus(const std::string& res_key, const std::string& key, const json& status);
  void RecordFailedCreate(const json& owner, const std::string& kind, const std::string& message);

  void RegisterBuiltin(Resource r);

  EmulatorOptions options;
  mutable std::mutex mu;
  std::condition_variable cv;
  int64_t rv = 0;                                // head revision
  int64_t compacted_rv = 0;                      // a watch from X needs X >= compacted_rv
  std::map<std::string, ResourcePtr> resources;  // "group/resource"
  std::map<std::string, std::map<std::string, json>> objects;  // res key -> "ns/name"
  std::deque<Event> history;
  int64_t expire_epoch = 0;
  int64_t drop_epoch = 0;
  bool stopping = false;
  std::vector<Injection> injections;
  int64_t latency_ms = 0;
  json requests = json::array();
  int64_t next_watch_id = 1;
  std::map<int64_t, json> watches;
  std::map<std::string, std::pair<std::string, std::string>> sa_tokens;  // -> (ns, name)
  std::map<std::string, int64_t> create_retry_at_ms;  // owner uid -> after a refused create
  std::thread gc_thread;
};

void Emulator::Impl::RegisterBuiltin(Resource r) {
  if (r.singular.empty()) r.singular = absl::AsciiStrToLower(r.kind);
  if (r.list_kind.empty()) r.list_kind = r.kind + "List";
  if (r.versions.empty()) r.versions = {"v1"};
  r.preferred_version = r.versions.front();
  std::string key = r.Key();
  resources[key] = std::make_shared<const Resource>(std::move(r));
  objects[key];
}

Emulator::Impl::Impl(EmulatorOptions o) : options(std::move(o)) {
  auto add = [this](std::string group, std::string resource, std::string kind, bool namespaced,
                    std::vector<std::string> short_names, bool status_sub = false) {
    Resource r;
    r.group = std::move(group);
    r.resource = std::move(resource);
    r.kind = std::move(kind);
    r.namespaced = namespaced;
    r.short_names = std::move(short_names);
    r.status_sub = status_sub;
    return r;
  };
  RegisterBuiltin(add("", "namespaces", "Namespace", false, {"ns"}, true));
  RegisterBuiltin(add("", "configmaps", "ConfigMap", true, {"cm"}));
  RegisterBuiltin(add("", "secrets", "Secret", true, {}));
  RegisterBuiltin(add("", "services", "Service", true, {"svc"}, true));
  Resource serviceaccounts = add("", "serviceaccounts", "ServiceAccount", true, {"sa"});
  serviceaccounts.token_sub = true;
  RegisterBuiltin(serviceaccounts);
  Resource pods = add("", "pods", "Pod", true, {"po"}, true);
  pods.binding_sub = true;
  pods.log_sub = true;
  pods.categories = {"all"};
  RegisterBuiltin(pods);
  RegisterBuiltin(add("", "nodes", "Node", false, {"no"}, true));
  RegisterBuiltin(add("", "events", "Event", true, {"ev"}));
  RegisterBuiltin(add("", "endpoints", "Endpoints", true, {"ep"}));
  RegisterBuiltin(add("", "persistentvolumeclaims", "PersistentVolumeClaim", true, {"pvc"}, true));
  Resource bindings = add("", "bindings", "Binding", true, {});
  bindings.verbs = {"create"};
  RegisterBuiltin(bindings);
  for (auto [res, kind, shortname] :
       std::vector<std::array<std::string, 3>>{{"deployments", "Deployment", "deploy"},
                                               {"daemonsets", "DaemonSet", "ds"},
                                               {"statefulsets", "StatefulSet", "sts"},
                                               {"replicasets", "ReplicaSet", "rs"}}) {
    Resource r = add("apps", res, kind, true, {shortname}, true);
    r.has_generation = true;
    RegisterBuiltin(r);
  }
  RegisterBuiltin(add("coordination.k8s.io", "leases", "Lease", true, {}));
  RegisterBuiltin(
      add("policy", "poddisruptionbudgets", "PodDisruptionBudget", true, {"pdb"}, true));
  RegisterBuiltin(add("networking.k8s.io", "networkpolicies", "NetworkPolicy", true, {"netpol"}));
  Resource crd = add("apiextensions.k8s.io", "customresourcedefinitions",
                     "CustomResourceDefinition", false, {"crd", "crds"}, true);
  crd.has_generation = true;
  RegisterBuiltin(crd);
  for (auto [res, kind, namespaced] : std::vector<std::tuple<std::string, std::string, bool>>{
           {"roles", "Role", true},
           {"rolebindings", "RoleBinding", true},
           {"clusterroles", "ClusterRole", false},
           {"clusterrolebindings", "ClusterRoleBinding", false}}) {
    Resource r = add("rbac.authorization.k8s.io", res, kind, namespaced, {});
    r.validate_names = false;  // path-segment names ("system:controller")
    RegisterBuiltin(r);
  }
  RegisterBuiltin(add("events.k8s.io", "events", "Event", true, {"ev"}));

  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    EnsureNamespace(ns);
  }
  if (options.gc || options.controllers) gc_thread = std::thread([this] { GcLoop(); });
}

ResourcePtr Emulator::Impl::FindResource(const std::string& group,
                                         const std::string& resource) const {
  auto it = resources.find(group + "/" + resource);
  return it == resources.end() ? nullptr : it->second;
}

json* Emulator::Impl::Find(const Resource& res, const std::string& key) {
  auto it = objects.find(res.Key());
  if (it == objects.end()) return nullptr;
  auto obj = it->second.find(key);
  return obj == it->second.end() ? nullptr : &obj->second;
}

json Emulator::Impl::Out(const Resource& res, const std::string& version, json obj) const {
  obj["apiVersion"] = res.ApiVersion(version.empty() ? res.preferred_version : version);
  obj["kind"] = res.kind;
  return obj;
}

void Emulator::Impl::RecordEvent(Event e) {
  history.push_back(std::move(e));
  while (static_cast<int64_t>(history.size()) > options.history) {
    compacted_rv = history.front().rv;
    history.pop_front();
  }
  cv.notify_all();
}

void Emulator::Impl::CompactLocked() {
  compacted_rv = rv;
  history.clear();
  cv.notify_all();
}

void Emulator::Impl::CommitPut(const Resource& res, const std::string& key, json obj,
                               const char* type) {
  json& slot = objects[res.Key()][key];
  json old = slot.is_null() ? json(nullptr) : slot;
  ++rv;
  obj["metadata"]["resourceVersion"] = std::to_string(rv);
  slot = obj;
  RecordEvent(Event{rv, type, res.Key(), std::move(obj), std::move(old)});
}

void Emulator::Impl::CommitDelete(const ResourcePtr& res, const std::string& key) {
  auto& store = objects[res->Key()];
  auto it = store.find(key);
  if (it == store.end()) return;
  json last = std::move(it->second);
  store.erase(it);
  ++rv;
  last["metadata"]["resourceVersion"] = std::to_string(rv);
  std::string name = MetaStr(last, "name");
  RecordEvent(Event{rv, "DELETED", res->Key(), last, last});

  if (res->Key() == kCrdKey) {
    // The custom resources go with their definition.
    std::string cr_key = Str(last["spec"], "group") + "/" + Str(last["spec"]["names"], "plural");
    auto cr = resources.find(cr_key);
    if (cr != resources.end() && cr->second->custom) {
      ResourcePtr cr_res = cr->second;
      std::vector<std::string> keys;
      for (const auto& [k, v] : objects[cr_key]) keys.push_back(k);
      for (const std::string& k : keys) CommitDelete(cr_res, k);
      resources.erase(cr_key);
      objects.erase(cr_key);
    }
  } else if (res->Key() == kNamespaceKey) {
    // Simplified namespace deletion: its contents are removed at once.
    for (const auto& [rkey, r] : std::map<std::string, ResourcePtr>(resources)) {
      if (!r->namespaced) continue;
      std::vector<std::string> keys;
      for (const auto& [k, v] : objects[rkey]) {
        if (absl::StartsWith(k, name + "/")) keys.push_back(k);
      }
      for (const std::string& k : keys) CommitDelete(r, k);
    }
  }
}

void Emulator::Impl::EnsureNamespace(const std::string& ns) {
  ResourcePtr res = FindResource("", "namespaces");
  if (Find(*res, ObjKey("", ns)) != nullptr) return;
  json obj = {{"apiVersion", "v1"},
              {"kind", "Namespace"},
              {"metadata",
               {{"name", ns},
                {"uid", NewUid()},
                {"creationTimestamp", kube::FormatTime(UnixNow() * 1000)},
                {"labels", {{"kubernetes.io/metadata.name", ns}}}}},
              {"spec", {{"finalizers", {"kubernetes"}}}},
              {"status", {{"phase", "Active"}}}};
  CommitPut(*res, ObjKey("", ns), std::move(obj), "ADDED");
}

std::vector<Cause> Emulator::Impl::ValidateCrd(json& crd, const json* old) {
  std::vector<Cause> causes;
  auto require = [&causes](bool ok, const std::string& field, const std::string& message,
                           const char* type = "FieldValueRequired") {
    if (!ok) causes.push_back(Cause{type, field, message});
  };
  if (!crd.contains("spec") || !crd["spec"].is_object()) crd["spec"] = json::object();
  json& spec = crd["spec"];
  std::string group = Str(spec, "group");
  require(!group.empty(), "spec.group", "Required value");
  if (!spec.contains("names") || !spec["names"].is_object()) spec["names"] = json::object();
  json& names = spec["names"];
  std::string plural = Str(names, "plural");
  std::string kind = Str(names, "kind");
  require(!plural.empty(), "spec.names.plural", "Required value");
  require(!kind.empty(), "spec.names.kind", "Required value");
  if (!names.contains("singular") && !kind.empty()) names["singular"] = absl::AsciiStrToLower(kind);
  if (!names.contains("listKind") && !kind.empty()) names["listKind"] = kind + "List";
  std::string scope = Str(spec, "scope");
  require(scope == "Namespaced" || scope == "Cluster", "spec.scope",
          "Unsupported value: \"" + scope + "\": supported values: \"Cluster\", \"Namespaced\"",
          "FieldValueNotSupported");
  std::string name = MetaStr(crd, "name");
  require(name == plural + "." + group, "metadata.name",
          "Invalid value: \"" + name + "\": must be spec.names.plural+\".\"+spec.group",
          "FieldValueInvalid");
  if (old != nullptr) {
    require(Str((*old)["spec"], "scope") == scope, "spec.scope",
            "Invalid value: \"" + scope + "\": field is immutable", "FieldValueInvalid");
  }
  if (!spec.contains("versions") || !spec["versions"].is_array() || spec["versions"].empty()) {
    require(false, "spec.versions",
            "Invalid value: null: must have exactly one version marked as storage version",
            "FieldValueInvalid");
    return causes;
  }
  int storage = 0;
  for (size_t i = 0; i < spec["versions"].size(); ++i) {
    json& v = spec["versions"][i];
    std::string prefix = "spec.versions[" + std::to_string(i) + "]";
    require(!Str(v, "name").empty(), prefix + ".name", "Required value");
    if (v.value("storage", false)) storage++;
    if (v.contains("schema") && v["schema"].contains("openAPIV3Schema")) {
      for (Cause c : ValidateCrdSchema(v["schema"]["openAPIV3Schema"])) {
        c.field = prefix + ".schema." + (c.field.empty() ? "openAPIV3Schema" : c.field);
        causes.push_back(c);
      }
    }
  }
  require(storage == 1, "spec.versions",
          "Invalid value: " + spec["versions"].dump() +
              ": must have exactly one version marked as storage version",
          "FieldValueInvalid");
  return causes;
}

void Emulator::Impl::RegisterCrd(const json& crd) {
  const json& spec = crd["spec"];
  Resource r;
  r.custom = true;
  r.has_generation = true;
  r.group = Str(spec, "group");
  r.resource = Str(spec["names"], "plural");
  r.singular = Str(spec["names"], "singular");
  r.kind = Str(spec["names"], "kind");
  r.list_kind = Str(spec["names"], "listKind");
  r.namespaced = Str(spec, "scope") != "Cluster";
  for (const char* field : {"shortNames", "categories"}) {
    if (spec["names"].contains(field) && spec["names"][field].is_array()) {
      for (const json& s : spec["names"][field]) {
        (std::string(field) == "shortNames" ? r.short_names : r.categories)
            .push_back(s.get<std::string>());
      }
    }
  }
  for (const json& v : spec["versions"]) {
    std::string name = Str(v, "name");
    if (v.value("storage", false)) r.preferred_version = name;
    if (!v.value("served", true)) continue;
    r.versions.push_back(name);
    if (v.contains("schema") && v["schema"].contains("openAPIV3Schema")) {
      r.schemas[name] = v["schema"]["openAPIV3Schema"];
    }
    // Without additionalPrinterColumns the apiserver prints an Age column.
    r.columns[name] = v.contains("additionalPrinterColumns")
                          ? v["additionalPrinterColumns"]
                          : json::array({{{"name", "Age"},
                                          {"type", "date"},
                                          {"jsonPath", ".metadata.creationTimestamp"}}});
    if (v.contains("subresources") && v["subresources"].contains("status")) r.status_sub = true;
    if (v.contains("subresources") && v["subresources"].contains("scale") &&
        v["subresources"]["scale"].is_object()) {
      const json& scale = v["subresources"]["scale"];
      r.scale_sub = true;
      r.spec_replicas_path = Str(scale, "specReplicasPath");
      r.status_replicas_path = Str(scale, "statusReplicasPath");
      r.label_selector_path = Str(scale, "labelSelectorPath");
    }
    if (v.contains("selectableFields") && v["selectableFields"].is_array()) {
      for (const json& f : v["selectableFields"]) {
        std::string path = Str(f, "jsonPath");
        if (absl::StartsWith(path, ".")) path = path.substr(1);
        r.selectable_fields.insert(path);
      }
    }
  }
  if (!r.Serves(r.preferred_version) && !r.versions.empty()) r.preferred_version = r.versions[0];
  std::string key = r.Key();
  auto existing = resources.find(key);
  if (existing != resources.end() && !existing->second->custom) return;  // never shadow built-ins
  resources[key] = std::make_shared<const Resource>(std::move(r));
  objects[key];
}

static void SetCrdStatus(json& crd, const json* old) {
  std::string now = kube::FormatTime(UnixNow() * 1000);
  auto transition = [&](const char* type) {
    if (old != nullptr && old->contains("status") && (*old)["status"].contains("conditions")) {
      for (const json& c : (*old)["status"]["conditions"]) {
        if (Str(c, "type") == type) return Str(c, "lastTransitionTime");
      }
    }
    return now;
  };
  json stored = json::array();
  if (old != nullptr && old->contains("status") && (*old)["status"].contains("storedVersions")) {
    stored = (*old)["status"]["storedVersions"];
  }
  for (const json& v : crd["spec"]["versions"]) {
    if (v.value("storage", false) &&
        std::find(stored.begin(), stored.end(), v["name"]) == stored.end()) {
      stored.push_back(v["name"]);
    }
  }
  crd["status"] = {{"conditions",
                    {{{"type", "NamesAccepted"},
                      {"status", "True"},
                      {"lastTransitionTime", transition("NamesAccepted")},
                      {"reason", "NoConflicts"},
                      {"message", "no conflicts found"}},
                     {{"type", "Established"},
                      {"status", "True"},
                      {"lastTransitionTime", transition("Established")},
                      {"reason", "InitialNamesAccepted"},
                      {"message", "the initial names have been accepted"}}}},
                   {"acceptedNames", crd["spec"]["names"]},
                   {"storedVersions", stored}};
}

// A custom resource's Table (its printer columns), or a built-in kind's with
// the columns the API server prints (pods, nodes, services, claims).
bool HasTable(const Resource& res) { return res.custom || HasBuiltinTable(res.resource); }

json Emulator::Impl::TableFor(const Resource& res, const std::string& version,
                              const std::vector<json>& objs) const {
  auto cols = res.columns.find(version);
  json columns = cols == res.columns.end() ? json::array() : cols->second;
  std::vector<json> out;
  out.reserve(objs.size());
  for (const json& o : objs) out.push_back(Out(res, version, o));
  if (!res.custom) return RenderBuiltinTable(res.resource, out, std::to_string(rv), UnixNow());
  return RenderTable(columns, out, std::to_string(rv), UnixNow());
}

// ---------------------------------------------------------------------------
// Request entry, auth, faults, control endpoint.

// Set by a watch once it has recorded its request (at the stream's start).
static thread_local bool t_recorded = false;
static thread_local UserInfo t_user;  // the request's, set by CheckAuth

void Emulator::Impl::Handle(const HttpRequest& req, ResponseWriter& writer) {
  std::string verb = req.method;
  int64_t started = UnixNowMs();
  std::optional<HttpResponse> response;
  try {
    response = Dispatch(req, writer, &verb);
  } catch (const std::exception& e) {
    response = Error(500, "InternalError", std::string("Internal error occurred: ") + e.what());
  }
  if (!response) {
    if (t_recorded) {  // a watch, recorded when its stream started
      t_recorded = false;
    } else {
      Record(req, verb, 200, started);
    }
    return;
  }
  // Recorded before the answer leaves, so a client that has its answer finds
  // its request in the log.
  Record(req, verb, response->code, started);
  writer.Send(*response);
}

// Logs a request to stderr and appends it to the request log.
void Emulator::Impl::Record(const HttpRequest& req, const std::string& verb, int code,
                            int64_t started) {
  std::fprintf(stderr, "%s %s%s%s %d\n", req.method.c_str(), req.path.c_str(),
               req.query.empty() ? "" : "?", req.query.c_str(), code);
  if (absl::StartsWith(req.path, "/emulator/")) return;
  std::lock_guard<std::mutex> lock(mu);
  if (requests.size() >= 100000) {  // bounded: the oldest tenth goes
    requests.erase(requests.begin(), requests.begin() + 10000);
  }
  requests.push_back({{"method", req.method},
                      {"verb", verb},
                      {"path", req.path},
                      {"query", req.query},
                      {"contentType", req.content_type},
                      {"userAgent", req.user_agent},
                      {"user", t_user.name},
                      {"body", req.body.size() > 65536 ? req.body.substr(0, 65536) : req.body},
                      {"code", code},
                      {"timeUnixMs", started}});
}

// Authentication: the admin's token (group system:masters), a ServiceAccount's
// token from the TokenRequest API while the ServiceAccount exists, or none.
// Sets t_user.
std::optional<HttpResponse> Emulator::Impl::CheckAuth(const HttpRequest& req) {
  t_user = UserInfo{};
  if (req.path == "/version" || req.path == "/healthz" || req.path == "/livez" ||
      req.path == "/readyz" || absl::StartsWith(req.path, "/emulator/")) {
    return std::nullopt;
  }
  std::string token = options.token;
  if (!options.token_file.empty()) {
    std::ifstream in(options.token_file);
    std::stringstream ss;
    ss << in.rdbuf();
    token = std::string(absl::StripAsciiWhitespace(ss.str()));
    if (token.empty()) token = options.token;
  }
  const UserInfo admin{"admin", {"system:masters", "system:authenticated"}};
  if (!token.empty() && req.authorization == "Bearer " + token) {
    t_user = admin;
    return std::nullopt;
  }
  if (absl::StartsWith(req.authorization, "Bearer ")) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = sa_tokens.find(req.authorization.substr(7));
    if (it != sa_tokens.end()) {
      const auto& [ns, name] = it->second;
      ResourcePtr res = FindResource("", "serviceaccounts");
      if (Find(*res, ObjKey(ns, name)) != nullptr) {
        t_user = ServiceAccountUser(ns, name);
        return std::nullopt;
      }
    }
  }
  if (token.empty() && options.token_file.empty()) {
    // No credentials required: everyone is the admin, unless RBAC is on.
    t_user = options.rbac ? UserInfo{"system:anonymous", {"system:unauthenticated"}} : admin;
    return std::nullopt;
  }
  return Error(401, "Unauthorized", "Unauthorized");
}

// RBAC (rbac.h), when options.rbac: a resource request its user may not make
// is refused with the API server's 403.
std::optional<HttpResponse> Emulator::Impl::Authorize(const Target& t, const std::string& verb) {
  if (!options.rbac) return std::nullopt;
  RequestAttributes a;
  static const std::map<std::string, std::string> kVerbs = {
      {"GET", "get"},    {"LIST", "list"},   {"WATCH", "watch"},  {"POST", "create"},
      {"PUT", "update"}, {"PATCH", "patch"}, {"DELETE", "delete"}};
  auto v = kVerbs.find(verb);
  a.verb = v == kVerbs.end() ? absl::AsciiStrToLower(verb) : v->second;
  if (a.verb == "delete" && t.name.empty()) a.verb = "deletecollection";
  a.api_group = t.res->group;
  a.resource = t.res->resource;
  a.subresource = t.sub;
  a.namespace_ = t.ns;
  a.name = t.name;
  RbacObjects rbac;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto load = [this](const char* resource, std::vector<json>* out) {
      auto it = objects.find(absl::StrCat("rbac.authorization.k8s.io/", resource));
      if (it == objects.end()) return;
      for (const auto& [key, obj] : it->second) out->push_back(obj);
    };
    load("roles", &rbac.roles);
    load("clusterroles", &rbac.cluster_roles);
    load("rolebindings", &rbac.role_bindings);
    load("clusterrolebindings", &rbac.cluster_role_bindings);
  }
  if (RbacAllows(t_user, a, rbac)) return std::nullopt;
  json details = {{"kind", a.resource}};
  if (!a.api_group.empty()) details["group"] = a.api_group;
  if (!a.name.empty()) details["name"] = a.name;
  return Error(403, "Forbidden", ForbiddenMessage(t_user, a), details);
}

std::optional<HttpResponse> Emulator::Impl::Injected(const HttpRequest& req,
                                                     const std::string& verb,
                                                     const Target* target) {
  int64_t latency;
  std::optional<Injection> hit;
  {
    std::lock_guard<std::mutex> lock(mu);
    latency = latency_ms;
    for (auto it = injections.begin(); it != injections.end(); ++it) {
      if (!it->verbs.empty() && it->verbs.count(verb) == 0) continue;
      if (!it->path_contains.empty() && !absl::StrContains(req.path, it->path_contains)) continue;
      if (!it->user_agent_contains.empty() &&
          !absl::StrContains(req.user_agent, it->user_agent_contains)) {
        continue;
      }
      hit = *it;
      if (--it->count <= 0) injections.erase(it);
      break;
    }
  }
  if (latency > 0) std::this_thread::sleep_for(std::chrono::milliseconds(latency));
  if (!hit) return std::nullopt;
  std::string name = target != nullptr ? target->name : "";
  json details = json::object();
  if (target != nullptr && target->res) {
    details = {{"name", name}, {"group", target->res->group}, {"kind", target->res->resource}};
  }
  switch (hit->code) {
    case 409:
      return Error(409, "Conflict",
                   "Operation cannot be fulfilled on " +
                       (target && target->res ? target->res->Qualified() : std::string("object")) +
                       " \"" + name +
                       "\": the object has been modified; please apply your changes to the "
                       "latest version and try again",
                   details);
    case 429: {
      details["retryAfterSeconds"] = hit->retry_after_seconds;
      details["causes"] = {{{"reason", "ServerTimeout"},
                            {"message", "The server is currently unable to handle the request"}}};
      HttpResponse r =
          Error(429, "TooManyRequests", "Too many requests, please try again later.", details);
      r.headers.push_back({"Retry-After", std::to_string(hit->retry_after_seconds)});
      return r;
    }
    case 503: {
      HttpResponse r = Error(503, "ServiceUnavailable",
                             "The server is currently unable to handle the request", details);
      r.headers.push_back({"Retry-After", std::to_string(hit->retry_after_seconds)});
      return r;
    }
    case 500:
      return Error(500, "InternalError", "Internal error occurred: injected fault", details);
    default:
      return Error(hit->code, "InternalError", "injected fault", details);
  }
}

HttpResponse Emulator::Impl::Control(const HttpRequest& req) {
  std::string what = req.path.substr(std::string("/emulator/v1/").size());
  std::unique_lock<std::mutex> lock(mu);
  if (what == "faults" && req.method == "DELETE") {
    injections.clear();
    latency_ms = 0;
    return JsonResponse(200, {{"ok", true}});
  }
  if (what == "faults" && req.method == "POST") {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return BadRequest("faults: body must be a JSON object");
    if (body.value("compact", false)) CompactLocked();
    if (body.value("expireWatches", false)) {
      expire_epoch++;
      CompactLocked();
    }
    if (body.value("dropWatches", false)) {
      drop_epoch++;
      cv.notify_all();
    }
    if (body.contains("latencyMs")) latency_ms = IntOr(body["latencyMs"], 0);
    if (body.contains("inject")) {
      const json& in = body["inject"];
      Injection inj;
      inj.code = static_cast<int>(IntOr(in.value("code", json(500)), 500));
      inj.count = IntOr(in.value("count", json(1)), 1);
      if (in.contains("verbs") && in["verbs"].is_array()) {
        for (const json& v : in["verbs"]) {
          inj.verbs.insert(absl::AsciiStrToUpper(v.get<std::string>()));
        }
      }
      inj.path_contains = Str(in, "pathContains");
      inj.user_agent_contains = Str(in, "userAgentContains");
      inj.retry_after_seconds = IntOr(in.value("retryAfterSeconds", json(1)), 1);
      injections.push_back(inj);
    }
    return JsonResponse(200, {{"ok", true}, {"resourceVersion", std::to_string(rv)}});
  }
  if (what == "requests" && req.method == "GET") return JsonResponse(200, requests);
  if (what == "requests" && req.method == "DELETE") {
    requests = json::array();
    return JsonResponse(200, {{"ok", true}});
  }
  if (what == "watches" && req.method == "GET") {
    json out = json::array();
    for (const auto& [id, w] : watches) out.push_back(w);
    return JsonResponse(200, out);
  }
  if (what == "state" && req.method == "GET") {
    return JsonResponse(200, {{"resourceVersion", std::to_string(rv)},
                              {"compactedResourceVersion", std::to_string(compacted_rv)},
                              {"history", history.size()}});
  }
  return Error(404, "NotFound", "unknown emulator endpoint " + req.path);
}

std::optional<HttpResponse> Emulator::Impl::Dispatch(const HttpRequest& req, ResponseWriter& writer,
                                                     std::string* verb) {
  if (absl::StartsWith(req.path, "/emulator/v1/")) return Control(req);
  if (auto denied = CheckAuth(req)) return denied;
  if (req.path == "/healthz" || req.path == "/livez" || req.path == "/readyz") {
    HttpResponse r;
    r.content_type = "text/plain; charset=utf-8";
    r.body = "ok";
    return r;
  }
  if (absl::StartsWith(req.path, "/openapi/")) {
    if (req.method != "GET") {
      return Error(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
    }
    if (auto injected = Injected(req, "GET", nullptr)) return injected;
    if (auto doc = OpenApi(req)) return doc;
    return GenericNotFound();
  }
  std::vector<std::string> segs = absl::StrSplit(req.path, '/', absl::SkipEmpty());
  for (std::string& s : segs) s = UrlDecode(s, false);
  bool api = !segs.empty() && segs[0] == "api" && segs.size() >= 2;
  bool apis = !segs.empty() && segs[0] == "apis" && segs.size() >= 3;
  if ((!api && !apis) || (api && segs.size() == 2) || (apis && segs.size() == 3)) {
    if (req.method != "GET")
      return Error(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
    if (auto injected = Injected(req, "GET", nullptr)) return injected;
    if (auto d = Discovery(segs)) return d;
    return GenericNotFound();
  }
  // Resource request: [namespaces/{ns}/]{resource}[/{name}[/{sub}]].
  Target t;
  std::string group = api ? "" : segs[1];
  t.version = api ? segs[1] : segs[2];
  std::vector<std::string> rest(segs.begin() + (api ? 2 : 3), segs.end());
  std::string resource;
  if (rest[0] == "namespaces" && rest.size() >= 3 &&
      !(rest.size() == 3 && (rest[2] == "status" || rest[2] == "finalize"))) {
    t.ns = rest[1];
    resource = rest[2];
    if (rest.size() > 3) t.name = rest[3];
    if (rest.size() > 4) t.sub = rest[4];
    if (rest.size() > 5) return GenericNotFound();
  } else {
    resource = rest[0];
    if (rest.size() > 1) t.name = rest[1];
    if (rest.size() > 2) t.sub = rest[2];
    if (rest.size() > 3) return GenericNotFound();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    t.res = FindResource(group, resource);
  }
  if (!t.res || !t.res->Serves(t.version)) return GenericNotFound();
  if (!t.ns.empty() && !t.res->namespaced) return GenericNotFound();
  if (!t.sub.empty() &&
      !((t.sub == "status" && t.res->status_sub) || (t.sub == "binding" && t.res->binding_sub) ||
        (t.sub == "token" && t.res->token_sub) || (t.sub == "log" && t.res->log_sub) ||
        (t.sub == "scale" && t.res->scale_sub))) {
    return GenericNotFound();
  }
  auto field_manager = req.params.find("fieldManager");
  t.manager = field_manager != req.params.end()
                  ? field_manager->second
                  : req.user_agent.substr(0, req.user_agent.find('/'));
  bool watch = req.params.count("watch") && IsTrue(req.params.at("watch"));
  const std::string& m = req.method;
  if (m == "GET") {
    *verb = watch ? "WATCH" : (t.name.empty() ? "LIST" : "GET");
  }
  if (auto denied = Authorize(t, *verb)) return denied;
  if (auto injected = Injected(req, *verb, &t)) return injected;
  if (t.sub == "token") {
    if (m != "POST")
      return Error(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
    return TokenRequest(t, req);
  }
  if (t.sub == "log") {
    if (m != "GET")
      return Error(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
    return PodLog(t, req);
  }
  if (t.sub == "scale") {
    if (m != "GET" && m != "PUT" && m != "PATCH")
      return Error(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
    return ScaleSub(t, req);
  }
  if (t.res->resource == "bindings") {
    if (m != "POST" || !t.name.empty())
      return Error(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
    return Bind(t, req);
  }
  if (t.sub == "binding") {
    if (m != "POST")
      return Error(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
    return Bind(t, req);
  }
  if (m == "GET" && watch) return Watch(t, req, writer);
  if (m == "GET") return t.name.empty() ? List(t, req) : Get(t, req);
  if (m == "POST" && t.name.empty()) return Create(t, req);
  if (m == "PUT" && !t.name.empty()) return Replace(t, req);
  if (m == "PATCH" && !t.name.empty()) return Patch(t, req);
  if (m == "DELETE" && !t.name.empty()) return Delete(t, req);
  if (m == "DELETE" && t.name.empty() && t.sub.empty()) return DeleteCollection(t, req);
  return Error(405, "MethodNotAllowed",
               "the server does not allow this method on the requested resource");
}

// ---------------------------------------------------------------------------
// Discovery (legacy JSON; the aggregated Accept is answered with it too).

json Emulator::Impl::ResourceList(const std::string& group, const std::string& version) {
  json list = json::array();
  for (const auto& [key, r] : resources) {
    if (r->group != group || !r->Serves(version)) continue;
    json entry = {{"name", r->resource},
                  {"singularName", r->singular},
                  {"namespaced", r->namespaced},
                  {"kind", r->kind},
                  {"verbs", r->verbs}};
    if (!r->short_names.empty()) entry["shortNames"] = r->short_names;
    if (!r->categories.empty()) entry["categories"] = r->categories;
    list.push_back(entry);
    if (r->status_sub) {
      list.push_back({{"name", r->resource + "/status"},
                      {"singularName", ""},
                      {"namespaced", r->namespaced},
                      {"kind", r->kind},
                      {"verbs", {"get", "patch", "update"}}});
    }
    if (r->scale_sub) {
      list.push_back({{"name", r->resource + "/scale"},
                      {"singularName", ""},
                      {"namespaced", r->namespaced},
                      {"group", "autoscaling"},
                      {"version", "v1"},
                      {"kind", "Scale"},
                      {"verbs", {"get", "patch", "update"}}});
    }
    if (r->binding_sub) {
      list.push_back({{"name", r->resource + "/binding"},
                      {"singularName", ""},
                      {"namespaced", r->namespaced},
                      {"kind", "Binding"},
                      {"verbs", {"create"}}});
    }
  }
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group.empty() ? version : group + "/" + version},
          {"resources", list}};
}

std::optional<HttpResponse> Emulator::Impl::Discovery(const std::vector<std::string>& segs) {
  std::lock_guard<std::mutex> lock(mu);
  if (segs.size() == 1 && segs[0] == "version") {
    return JsonResponse(200, {{"major", "1"},
                              {"minor", "30"},
                              {"gitVersion", "v1.30.0-antdt-emulator"},
                              {"gitCommit", "0000000000000000000000000000000000000000"},
                              {"gitTreeState", "clean"},
                              {"buildDate", "2024-01-01T00:00:00Z"},
                              {"goVersion", "go1.22.0"},
                              {"compiler", "gc"},
                              {"platform", "linux/amd64"}});
  }
  if (segs.size() == 1 && segs[0] == "api") {
    return JsonResponse(200, {{"kind", "APIVersions"},
                              {"versions", {"v1"}},
                              {"serverAddressByClientCIDRs",
                               {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", "127.0.0.1"}}}}});
  }
  if (segs.size() == 2 && segs[0] == "api") {
    if (segs[1] != "v1") return std::nullopt;
    return JsonResponse(200, ResourceList("", "v1"));
  }
  // Groups in first-registration order is not kept; sort by name, built-ins first.
  std::map<std::string, json> groups;
  std::vector<std::string> order;
  for (const auto& [key, r] : resources) {
    if (r->group.empty()) continue;
    if (!groups.count(r->group)) {
      order.push_back(r->group);
      groups[r->group] = {{"name", r->group}, {"versions", json::array()}};
    }
    json& g = groups[r->group];
    for (const std::string& v : r->versions) {
      json gv = {{"groupVersion", r->group + "/" + v}, {"version", v}};
      if (std::find(g["versions"].begin(), g["versions"].end(), gv) == g["versions"].end()) {
        g["versions"].push_back(gv);
      }
    }
    if (!g.contains("preferredVersion") || r->custom) {
      g["preferredVersion"] = {{"groupVersion", r->group + "/" + r->preferred_version},
                               {"version", r->preferred_version}};
    }
  }
  if (segs.size() == 1 && segs[0] == "apis") {
    json list = json::array();
    for (const std::string& name : order) list.push_back(groups[name]);
    return JsonResponse(200, {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", list}});
  }
  if (segs[0] != "apis" || !groups.count(segs[1])) return std::nullopt;
  if (segs.size() == 2) {
    json g = groups[segs[1]];
    g["kind"] = "APIGroup";
    g["apiVersion"] = "v1";
    return JsonResponse(200, g);
  }
  if (segs.size() == 3) {
    json list = ResourceList(segs[1], segs[2]);
    if (list["resources"].empty()) return std::nullopt;
    return JsonResponse(200, list);
  }
  return std::nullopt;
}

// /openapi/v2 and /openapi/v3 (openapi.h), from the kinds served now.
std::optional<HttpResponse> Emulator::Impl::OpenApi(const HttpRequest& req) {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<ApiKind> kinds;
  for (const auto& [key, r] : resources) {
    for (const std::string& v : r->versions) {
      ApiKind k;
      k.group = r->group;
      k.version = v;
      k.kind = r->kind;
      k.plural = r->resource;
      k.namespaced = r->namespaced;
      k.verbs = r->verbs;
      k.status_subresource = r->status_sub;
      auto schema = r->schemas.find(v);
      if (r->custom && schema != r->schemas.end()) k.schema = &schema->second;
      kinds.push_back(std::move(k));
    }
  }
  HttpResponse r;
  if (req.path == "/openapi/v2") {
    const json doc = OpenApiV2(kinds);
    if (absl::StrContains(req.accept, "protobuf")) {
      r.body = OpenApiV2Protobuf(doc);
      if (r.body.empty()) {
        return Error(406, "NotAcceptable",
                     "the emulator was built without gnostic's OpenAPIv2.proto; only JSON");
      }
      r.content_type = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
      return r;
    }
    return JsonResponse(200, doc);
  }
  if (req.path == "/openapi/v3") return JsonResponse(200, OpenApiV3Index(kinds));
  std::string key(absl::StripPrefix(req.path, "/openapi/v3/"));
  for (const ApiKind& k : kinds) {
    if (OpenApiV3Key(k.group, k.version) == key) {
      r = JsonResponse(200, OpenApiV3(kinds, k.group, k.version));
      if (req.params.count("hash")) {
        r.headers.push_back({"Cache-Control", "public, immutable"});
      }
      return r;
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Reads.

namespace {

bool WantsTable(const HttpRequest& req) { return absl::StrContains(req.accept, "as=Table"); }

std::optional<HttpResponse> ParseFilter(const Target& t, const HttpRequest& req, Filter* f) {
  f->ns = t.ns;
  f->name = t.name;
  auto param = [&req](const char* key) {
    auto it = req.params.find(key);
    return it == req.params.end() ? std::string() : it->second;
  };
  auto labels = kube::ParseLabelSelector(param("labelSelector"));
  if (!labels.ok()) return BadRequest(std::string(labels.status().message()));
  auto fields = kube::ParseFieldSelector(param("fieldSelector"));
  if (!fields.ok()) return BadRequest(std::string(fields.status().message()));
  if (t.res->custom) {
    for (const kube::Requirement& r : fields->requirements) {
      if (r.key != "metadata.name" && r.key != "metadata.namespace" &&
          t.res->selectable_fields.count(r.key) == 0) {
        return BadRequest("field label not supported: " + r.key);
      }
    }
  }
  f->labels = *labels;
  f->fields = *fields;
  return std::nullopt;
}

std::string Param(const HttpRequest& req, const char* key) {
  auto it = req.params.find(key);
  return it == req.params.end() ? std::string() : it->second;
}

}  // namespace

HttpResponse Emulator::Impl::Get(const Target& t, const HttpRequest& req) {
  std::lock_guard<std::mutex> lock(mu);
  json* obj = Find(*t.res, ObjKey(t.ns, t.name));
  if (obj == nullptr) {
    return Error(404, "NotFound", t.res->Qualified() + " \"" + t.name + "\" not found",
                 {{"name", t.name}, {"group", t.res->group}, {"kind", t.res->resource}});
  }
  if (WantsTable(req) && HasTable(*t.res))
    return JsonResponse(200, TableFor(*t.res, t.version, {*obj}));
  return JsonResponse(200, Out(*t.res, t.version, *obj));
}

// GET pods/NAME/log: the container's output (plain text), its last
// `tailLines` lines or `limitBytes` bytes when asked; `container` must name one
// of the pod's containers. `follow` answers what there is so far.
HttpResponse Emulator::Impl::PodLog(const Target& t, const HttpRequest& req) {
  std::string uid;
  {
    std::lock_guard<std::mutex> lock(mu);
    json* pod = Find(*t.res, ObjKey(t.ns, t.name));
    if (pod == nullptr) {
      return Error(404, "NotFound", "pods \"" + t.name + "\" not found",
                   {{"name", t.name}, {"kind", "pods"}});
    }
    uid = (*pod)["metadata"].value("uid", "");
    auto c = req.params.find("container");
    if (c != req.params.end()) {
      bool found = false;
      for (const json& container : (*pod)["spec"].value("containers", json::array())) {
        found = found || container.value("name", "") == c->second;
      }
      if (!found) {
        return BadRequest("container " + c->second + " is not valid for pod " + t.name);
      }
    }
  }
  std::ifstream in(options.pod_logs_dir + "/" + t.ns + "_" + t.name + "_" + uid + "/log");
  if (options.pod_logs_dir.empty() || !in) {
    return BadRequest("container of pod \"" + t.name + "\" has no log yet (not started?)");
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int64_t tail = -1, limit = -1;
  auto p = req.params.find("tailLines");
  if (p != req.params.end() && (!absl::SimpleAtoi(p->second, &tail) || tail < 0)) {
    return BadRequest("tailLines: must be a non-negative integer, got \"" + p->second + "\"");
  }
  p = req.params.find("limitBytes");
  if (p != req.params.end() && (!absl::SimpleAtoi(p->second, &limit) || limit < 1)) {
    return BadRequest("limitBytes: must be a positive integer, got \"" + p->second + "\"");
  }
  if (tail >= 0) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the last newline
    const size_t from = lines.size() > static_cast<size_t>(tail) ? lines.size() - tail : 0;
    text.clear();
    for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&text, lines[i], "\n");
  }
  if (limit > 0 && static_cast<int64_t>(text.size()) > limit) text.resize(limit);
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = std::move(text);
  return r;
}

HttpResponse Emulator::Impl::List(const Target& t, const HttpRequest& req) {
  Filter filter;
  if (auto bad = ParseFilter(t, req, &filter)) return *bad;
  std::unique_lock<std::mutex> lock(mu);
  std::string want = Param(req, "resourceVersion");
  if (!want.empty() && want != "0") {
    int64_t n = 0;
    if (!absl::SimpleAtoi(want, &n)) {
      return BadRequest("invalid resource version \"" + want + "\"");
    }
    if (Param(req, "resourceVersionMatch") == "Exact") {
      if (n < rv) {
        return Error(410, "Expired",
                     "too old resource version: " + want + " (" + std::to_string(rv) + ")");
      }
    }
    if (n > rv) {
      cv.wait_for(lock, std::chrono::seconds(3), [&] { return rv >= n || stopping; });
      if (n > rv) {
        return Error(
            504, "Timeout",
            "Too large resource version: " + want + ", current: " + std::to_string(rv),
            {{"causes",
              {{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}}},
             {"retryAfterSeconds", 1}});
      }
    }
  }
  std::vector<json> items;
  for (const auto& [key, obj] : objects[t.res->Key()]) {
    if (filter.Matches(obj)) items.push_back(obj);
  }
  if (WantsTable(req) && HasTable(*t.res))
    return JsonResponse(200, TableFor(*t.res, t.version, items));
  json list = {{"kind", t.res->list_kind},
               {"apiVersion", t.res->ApiVersion(t.version)},
               {"metadata", {{"resourceVersion", std::to_string(rv)}}},
               {"items", json::array()}};
  for (json& item : items) list["items"].push_back(Out(*t.res, t.version, std::move(item)));
  return JsonResponse(200, list);
}

std::optional<HttpResponse> Emulator::Impl::Watch(const Target& t, const HttpRequest& req,
                                                  ResponseWriter& writer) {
  Filter filter;
  if (auto bad = ParseFilter(t, req, &filter)) return *bad;
  if (IsTrue(Param(req, "sendInitialEvents"))) {
    return Error(422, "Invalid",
                 "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
                 "sendInitialEvents is forbidden for watch unless the WatchList feature gate "
                 "is enabled",
                 {{"kind", "ListOptions"},
                  {"group", "meta.k8s.io"},
                  {"causes",
                   {{{"reason", "FieldValueForbidden"},
                     {"message",
                      "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList "
                      "feature gate is enabled"},
                     {"field", "sendInitialEvents"}}}}});
  }
  int64_t timeout_s = 0;
  if (!Param(req, "timeoutSeconds").empty() &&
      !absl::SimpleAtoi(Param(req, "timeoutSeconds"), &timeout_s)) {
    return BadRequest("invalid timeoutSeconds");
  }
  if (timeout_s <= 0) timeout_s = 1800 + static_cast<int64_t>(Rng()() % 1800);
  bool bookmarks = IsTrue(Param(req, "allowWatchBookmarks"));
  bool table = WantsTable(req) && HasTable(*t.res);
  std::string want = Param(req, "resourceVersion");
  int64_t from = 0;
  if (!want.empty() && want != "0" && !absl::SimpleAtoi(want, &from)) {
    return BadRequest("invalid resource version \"" + want + "\"");
  }

  const Resource& res = *t.res;
  auto encode = [&](const char* type, const json& obj) {
    json o = table ? TableFor(res, t.version, {obj}) : Out(res, t.version, obj);
    return json{{"type", type}, {"object", o}}.dump() + "\n";
  };
  auto expired = [](int64_t asked, int64_t oldest) {
    return json{{"type", "ERROR"},
                {"object", StatusObject(410, "Expired",
                                        "too old resource version: " + std::to_string(asked) +
                                            " (" + std::to_string(oldest) + ")")}}
               .dump() +
           "\n";
  };

  std::vector<std::string> initial;
  int64_t cursor;
  int64_t id;
  int64_t my_expire, my_drop;
  bool too_old = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (want.empty() || want == "0") {
      for (const auto& [key, obj] : objects[res.Key()]) {
        if (filter.Matches(obj)) initial.push_back(encode("ADDED", obj));
      }
      cursor = rv;
    } else {
      cursor = from;
      if (from < compacted_rv) {
        too_old = true;
        initial.push_back(expired(from, compacted_rv));
      }
    }
    id = next_watch_id++;
    my_expire = expire_epoch;
    my_drop = drop_epoch;
    watches[id] = {{"id", id},
                   {"path", req.path},
                   {"query", req.query},
                   {"userAgent", req.user_agent},
                   {"startedUnixMs", UnixNowMs()}};
  }
  auto unregister = [&] {
    std::lock_guard<std::mutex> lock(mu);
    watches.erase(id);
  };
  bool started = writer.StartStream("application/json");
  Record(req, "WATCH", 200, UnixNowMs());
  t_recorded = true;
  if (!started) {
    unregister();
    return std::nullopt;
  }
  for (const std::string& line : initial) {
    if (!writer.WriteChunk(line)) {
      unregister();
      return std::nullopt;
    }
  }
  if (too_old) {
    writer.EndStream();
    unregister();
    return std::nullopt;
  }

  auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  auto interval = std::chrono::milliseconds(std::max<int64_t>(options.bookmark_interval_ms, 10));
  auto next_bookmark = Clock::now() + interval;
  enum class End { kClean, kAbort, kExpired };
  End end = End::kClean;
  for (;;) {
    std::vector<std::string> lines;
    bool finished = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto wake = std::min(deadline, Clock::now() + std::chrono::seconds(1));
      if (bookmarks) wake = std::min(wake, next_bookmark);
      cv.wait_until(lock, wake, [&] {
        return stopping || expire_epoch != my_expire || drop_epoch != my_drop ||
               (!history.empty() && history.back().rv > cursor);
      });
      if (stopping) {
        finished = true;
      } else if (drop_epoch != my_drop) {
        end = End::kAbort;
        finished = true;
      } else if (expire_epoch != my_expire || cursor < compacted_rv) {
        lines.push_back(expired(cursor, compacted_rv));
        end = End::kExpired;
        finished = true;
      } else {
        auto it = std::upper_bound(history.begin(), history.end(), cursor,
                                   [](int64_t c, const Event& e) { return c < e.rv; });
        for (; it != history.end(); ++it) {
          const Event& e = *it;
          if (e.res_key != res.Key()) continue;
          bool now_match = filter.Matches(e.object);
          if (e.type == "ADDED") {
            if (now_match) lines.push_back(encode("ADDED", e.object));
          } else if (e.type == "DELETED") {
            if (now_match) lines.push_back(encode("DELETED", e.object));
          } else {
            bool was_match = !e.old.is_null() && filter.Matches(e.old);
            if (now_match && was_match) lines.push_back(encode("MODIFIED", e.object));
            if (now_match && !was_match) lines.push_back(encode("ADDED", e.object));
            if (!now_match && was_match) lines.push_back(encode("DELETED", e.object));
          }
        }
        cursor = std::max(cursor, rv);
        if (bookmarks && Clock::now() >= next_bookmark) {
          json bm = {{"type", "BOOKMARK"},
                     {"object",
                      {{"kind", res.kind},
                       {"apiVersion", res.ApiVersion(t.version)},
                       {"metadata", {{"resourceVersion", std::to_string(cursor)}}}}}};
          lines.push_back(bm.dump() + "\n");
          next_bookmark = Clock::now() + interval;
        }
        if (Clock::now() >= deadline) finished = true;
      }
      if (!lines.empty() && watches.count(id)) {
        watches[id]["events"] = watches[id].value("events", 0) + static_cast<int>(lines.size());
      }
    }
    if (end == End::kAbort) break;
    bool ok = true;
    for (const std::string& line : lines) {
      if (!writer.WriteChunk(line)) {
        ok = false;
        break;
      }
    }
    if (!ok) {
      end = End::kAbort;
      break;
    }
    if (finished) break;
    if (lines.empty() && writer.PeerClosed()) {
      end = End::kAbort;
      break;
    }
  }
  unregister();
  if (end == End::kAbort) {
    writer.Abort();
  } else {
    writer.EndStream();
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Writes.

namespace {

json ObjectDetails(const Resource& res, const std::string& name) {
  return {{"name", name}, {"group", res.group}, {"kind", res.resource}};
}

HttpResponse NotFound(const Resource& res, const std::string& name) {
  return Error(404, "NotFound", res.Qualified() + " \"" + name + "\" not found",
               ObjectDetails(res, name));
}

HttpResponse Conflict(const Resource& res, const std::string& name, const std::string& why) {
  return Error(409, "Conflict",
               "Operation cannot be fulfilled on " + res.Qualified() + " \"" + name + "\": " + why,
               ObjectDetails(res, name));
}

HttpResponse StaleConflict(const Resource& res, const std::string& name) {
  return Conflict(res, name,
                  "the object has been modified; please apply your changes to the latest "
                  "version and try again");
}

HttpResponse Invalid(const Resource& res, const std::string& name,
                     const std::vector<Cause>& causes) {
  std::vector<std::string> parts;
  json list = json::array();
  for (const Cause& c : causes) {
    parts.push_back(c.field.empty() ? c.message : c.field + ": " + c.message);
    json cause = {{"reason", c.type}, {"message", c.message}};
    if (!c.field.empty()) cause["field"] = c.field;
    list.push_back(cause);
  }
  std::string joined = parts.size() == 1 ? parts[0] : "[" + absl::StrJoin(parts, ", ") + "]";
  return Error(422, "Invalid", res.QualifiedKind() + " \"" + name + "\" is invalid: " + joined,
               {{"name", name}, {"group", res.group}, {"kind", res.kind}, {"causes", list}});
}

bool DryRun(const HttpRequest& req) { return Param(req, "dryRun") == "All"; }

// Everything but metadata and status: what a generation bump looks at.
json SpecPart(json obj) {
  if (obj.is_object()) {
    obj.erase("metadata");
    obj.erase("status");
    obj.erase("apiVersion");
    obj.erase("kind");
  }
  return obj;
}

// A write's manager, as metadata.managedFields records it.
ManagedWrite WriteOf(const Target& t) {
  ManagedWrite w;
  w.manager = t.manager.empty() ? "kube-controller-manager" : t.manager;
  w.apply = t.apply;
  w.api_version = t.res->ApiVersion(t.version);
  w.subresource = t.sub;
  w.time = kube::FormatTime(UnixNow() * 1000);
  w.applied = t.applied;
  return w;
}

const json& SchemaFor(const Resource& res, const std::string& version) {
  static const json kEmpty = json::object();
  auto it = res.schemas.find(version);
  if (it == res.schemas.end()) it = res.schemas.find(res.preferred_version);
  return it == res.schemas.end() ? kEmpty : it->second;
}

// Server-side field validation (`fieldValidation`) of the fields a custom
// resource's schema does not declare (UnknownFields): Strict refuses the
// write as the API server's strict decoding does (400), Warn - the default -
// answers with a Warning per field, Ignore says nothing; pruning drops them
// in both. Built-in kinds are stored schemaless: only the value is checked.
std::optional<HttpResponse> CheckFields(const Target& t, const HttpRequest& req, const json& obj,
                                        std::vector<std::string>* warnings) {
  std::string directive = Param(req, "fieldValidation");
  if (directive.empty()) directive = "Warn";
  if (directive != "Ignore" && directive != "Warn" && directive != "Strict") {
    return BadRequest("fieldValidation: Unsupported value: \"" + directive +
                      "\": supported values: \"Ignore\", \"Strict\", \"Warn\"");
  }
  if (!t.res->custom || directive == "Ignore" || !obj.is_object()) return std::nullopt;
  std::vector<std::string> unknown;
  for (const std::string& field : UnknownFields(SchemaFor(*t.res, t.version), obj)) {
    unknown.push_back("unknown field \"" + field + "\"");
  }
  if (unknown.empty()) return std::nullopt;
  if (directive == "Strict") {
    const std::string& kind = t.res->kind;
    return BadRequest(absl::StrCat(kind, " in version \"", t.version, "\" cannot be handled as a ",
                                   kind,
                                   ": strict decoding error: ", absl::StrJoin(unknown, ", ")));
  }
  warnings->insert(warnings->end(), unknown.begin(), unknown.end());
  return std::nullopt;
}

// Warning headers (RFC 7234 warn-text: quoted, its quotes and backslashes escaped).
void AddWarnings(HttpResponse& response, const std::vector<std::string>& warnings) {
  if (response.code >= 300) return;
  for (const std::string& w : warnings) {
    const std::string text = absl::StrReplaceAll(w, {{"\\", "\\\\"}, {"\"", "\\\""}});
    response.headers.push_back({"Warning", absl::StrCat("299 - \"", text, "\"")});
  }
}

}  // namespace

// The emulator speaks JSON (and YAML) only: a protobuf (or CBOR) body gets the
// API server's 415, on which client-go falls back to JSON.
std::optional<HttpResponse> UnsupportedBody(const HttpRequest& req) {
  const std::string type = StripParams(req.content_type);
  if (type.empty() || absl::StrContains(type, "json") || absl::StrContains(type, "yaml")) {
    return std::nullopt;
  }
  return Error(415, "UnsupportedMediaType",
               "the body of the request was in an unknown format - accepted media types "
               "include: application/json, application/yaml");
}

HttpResponse Emulator::Impl::Create(const Target& t, const HttpRequest& req) {
  if (auto refused = UnsupportedBody(req)) return *refused;
  std::optional<json> body = ParseBody(req.body, req.content_type);
  if (!body || !body->is_object()) {
    return BadRequest("the body of the request could not be decoded as a JSON object");
  }
  std::vector<std::string> warnings;
  if (auto refused = CheckFields(t, req, *body, &warnings)) return *refused;
  std::lock_guard<std::mutex> lock(mu);
  HttpResponse response = CreateLocked(t, std::move(*body), DryRun(req));
  AddWarnings(response, warnings);
  return response;
}

HttpResponse Emulator::Impl::CreateLocked(const Target& t, json obj, bool dry_run) {
  const Resource& res = *t.res;
  if (!obj.contains("metadata") || !obj["metadata"].is_object()) obj["metadata"] = json::object();
  json& md = obj["metadata"];
  std::string body_ns = Str(md, "namespace");
  if (res.namespaced) {
    if (t.ns.empty()) return GenericNotFound();
    if (!body_ns.empty() && body_ns != t.ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
    md["namespace"] = t.ns;
  } else {
    md.erase("namespace");
  }
  std::string name = Str(md, "name");
  if (name.empty() && !Str(md, "generateName").empty()) {
    do {
      name = Str(md, "generateName") + RandomSuffix();
    } while (Find(res, ObjKey(t.ns, name)) != nullptr);
    md["name"] = name;
  }
  if (name.empty()) {
    return Invalid(res, "",
                   {Cause{"FieldValueRequired", "metadata.name",
                          "Required value: name or generateName is required"}});
  }
  if (!t.name.empty() && t.name != name) {
    return BadRequest("the name of the object (" + name + ") does not match the name on the URL (" +
                      t.name + ")");
  }
  if (res.validate_names) {
    if (auto err = NameError(name, res.Key() == kNamespaceKey)) {
      return Invalid(res, name,
                     {Cause{"FieldValueInvalid", "metadata.name",
                            "Invalid value: \"" + name + "\": " + *err}});
    }
  }
  if (res.namespaced) {
    ResourcePtr nsres = FindResource("", "namespaces");
    json* ns = Find(*nsres, ObjKey("", t.ns));
    if (ns == nullptr && options.strict_namespaces) return NotFound(*nsres, t.ns);
    if (ns != nullptr && Deleting(*ns)) {
      return Error(403, "Forbidden",
                   res.Qualified() + " \"" + name +
                       "\" is forbidden: unable to create new "
                       "content in namespace " +
                       t.ns + " because it is being terminated",
                   ObjectDetails(res, name));
    }
  }
  if (Find(res, ObjKey(t.ns, name)) != nullptr) {
    return Error(409, "AlreadyExists", res.Qualified() + " \"" + name + "\" already exists",
                 ObjectDetails(res, name));
  }
  obj["apiVersion"] = res.ApiVersion(t.version);
  obj["kind"] = res.kind;
  md["uid"] = NewUid();
  md["creationTimestamp"] = kube::FormatTime(UnixNow() * 1000);
  for (const char* f : {"resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                        "selfLink", "managedFields"}) {
    md.erase(f);
  }
  if (md.contains("finalizers") && md["finalizers"].is_array() && md["finalizers"].empty()) {
    md.erase("finalizers");
  }
  if (res.has_generation) {
    md["generation"] = 1;
  } else {
    md.erase("generation");
  }
  if (res.custom && res.status_sub) obj.erase("status");
  if (res.Key() == kPodKey) {
    obj["status"] = {{"phase", "Pending"}, {"qosClass", "BestEffort"}};
  }
  if (res.Key() == kNamespaceKey) {
    obj["status"] = {{"phase", "Active"}};
    md["labels"]["kubernetes.io/metadata.name"] = name;
  }
  if (res.custom) {
    std::vector<Cause> causes = ValidateCustomResource(SchemaFor(res, t.version), obj, nullptr);
    if (!causes.empty()) return Invalid(res, name, causes);
    obj["apiVersion"] = res.ApiVersion(t.version);
    obj["kind"] = res.kind;
  }
  if (res.Key() == kCrdKey) {
    obj.erase("status");
    std::vector<Cause> causes = ValidateCrd(obj, nullptr);
    if (!causes.empty()) return Invalid(res, name, causes);
    SetCrdStatus(obj, nullptr);
  }
  std::vector<std::string> warnings;
  if (std::optional<HttpResponse> refused = AdmitPodSecurity(res, t.ns, name, obj, &warnings)) {
    return *refused;
  }
  json managed = UpdateManagedFields(json::array(), json(), obj, WriteOf(t));
  if (!managed.empty()) obj["metadata"]["managedFields"] = std::move(managed);
  HttpResponse response;
  if (dry_run) {
    response = JsonResponse(201, Out(res, t.version, obj));
  } else {
    if (res.namespaced) EnsureNamespace(t.ns);
    std::string key = ObjKey(t.ns, name);
    CommitPut(res, key, obj, "ADDED");
    if (res.Key() == kCrdKey) RegisterCrd(obj);
    response = JsonResponse(201, Out(res, t.version, *Find(res, key)));
  }
  AddWarnings(response, warnings);
  return response;
}

// "would violate PodSecurity ...": a warning, as the API server words it.
std::string WouldViolate(PodSecurityLevel level, const std::vector<std::string>& violations) {
  std::string m = PodSecurityMessage(level, violations);
  return "would violate" + m.substr(std::string("violates").size());
}

// Pod Security admission (pod_security.h): a pod that breaks its namespace's
// enforce level is refused (403); a pod breaking the warn level, or a workload
// whose pod template breaks either, gets Warning headers.
std::optional<HttpResponse> Emulator::Impl::AdmitPodSecurity(const Resource& res,
                                                             const std::string& ns,
                                                             const std::string& name,
                                                             const json& obj,
                                                             std::vector<std::string>* warnings) {
  const json* spec = nullptr;
  const bool pod = res.Key() == kPodKey;
  if (pod) {
    spec = &obj["spec"];
  } else if (res.group == "apps" || (res.group == "batch" && res.resource == "jobs")) {
    if (obj.contains("spec") && obj["spec"].contains("template")) {
      spec = &obj["spec"]["template"]["spec"];
    }
  }
  if (spec == nullptr || spec->is_null()) return std::nullopt;
  ResourcePtr nsres = FindResource("", "namespaces");
  const json* namespace_obj = Find(*nsres, ObjKey("", ns));
  if (namespace_obj == nullptr) return std::nullopt;
  const json labels = (*namespace_obj)["metadata"].value("labels", json::object());
  auto level_of = [&](const char* label) -> std::optional<PodSecurityLevel> {
    if (!labels.contains(label) || !labels[label].is_string()) return std::nullopt;
    return ParsePodSecurityLevel(labels[label].get<std::string>());
  };
  const std::optional<PodSecurityLevel> enforce = level_of(kEnforceLabel);
  if (enforce) {
    const std::vector<std::string> v = PodSecurityViolations(*enforce, *spec);
    if (!v.empty() && pod) {
      return Error(
          403, "Forbidden",
          absl::StrCat("pods \"", name, "\" is forbidden: ", PodSecurityMessage(*enforce, v)),
          ObjectDetails(res, name));
    }
    if (!v.empty()) warnings->push_back(WouldViolate(*enforce, v));
  }
  const std::optional<PodSecurityLevel> warn = level_of(kWarnLabel);
  if (warn && (!enforce || *warn != *enforce)) {
    const std::vector<std::string> v = PodSecurityViolations(*warn, *spec);
    if (!v.empty()) warnings->push_back(WouldViolate(*warn, v));
  }
  return std::nullopt;
}

HttpResponse Emulator::Impl::Replace(const Target& t, const HttpRequest& req) {
  if (auto refused = UnsupportedBody(req)) return *refused;
  std::optional<json> body = ParseBody(req.body, req.content_type);
  if (!body || !body->is_object()) {
    return BadRequest("the body of the request could not be decoded as a JSON object");
  }
  const Resource& res = *t.res;
  json& md = (*body)["metadata"];
  if (!md.is_object()) md = json::object();
  std::string body_name = Str(md, "name");
  if (!body_name.empty() && body_name != t.name) {
    return BadRequest("the name of the object (" + body_name +
                      ") does not match the name on the URL (" + t.name + ")");
  }
  if (res.namespaced && !Str(md, "namespace").empty() && Str(md, "namespace") != t.ns) {
    return BadRequest(
        "the namespace of the provided object does not match the namespace sent on the "
        "request");
  }
  std::vector<std::string> warnings;
  if (auto refused = CheckFields(t, req, *body, &warnings)) return *refused;
  std::lock_guard<std::mutex> lock(mu);
  json* current = Find(res, ObjKey(t.ns, t.name));
  if (current == nullptr) return NotFound(res, t.name);
  std::string want = Str(md, "resourceVersion");
  if (want.empty()) {
    if (res.custom || res.Key() == kCrdKey) {
      return Invalid(res, t.name,
                     {Cause{"FieldValueInvalid", "metadata.resourceVersion",
                            "Invalid value: 0x0: must be specified for an update"}});
    }
  } else if (want != MetaStr(*current, "resourceVersion")) {
    return StaleConflict(res, t.name);
  }
  HttpResponse response = UpdateLocked(t, *current, std::move(*body), DryRun(req));
  AddWarnings(response, warnings);
  return response;
}

HttpResponse Emulator::Impl::Patch(const Target& t, const HttpRequest& req) {
  const Resource& res = *t.res;
  std::string type = StripParams(req.content_type);
  bool apply = type == kApplyPatch;
  if (type != kMergePatch && type != kJsonPatch && type != kStrategicPatch && !apply) {
    return Error(415, "UnsupportedMediaType",
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json-patch+json, application/merge-patch+json, "
                 "application/apply-patch+yaml" +
                     std::string(res.custom ? "" : ", application/strategic-merge-patch+json"));
  }
  if (type == kStrategicPatch && res.custom) {
    return Error(415, "UnsupportedMediaType",
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json-patch+json, application/merge-patch+json, "
                 "application/apply-patch+yaml");
  }
  if (apply && Param(req, "fieldManager").empty()) {
    return BadRequest("PATCH requests with apply content type require fieldManager");
  }
  std::optional<json> patch = ParseBody(req.body, apply ? "yaml-or-json" : "application/json");
  if (apply && patch) {
    json strict = json::parse(req.body, nullptr, false);
    if (!strict.is_discarded()) patch = strict;
  }
  if (!patch) return BadRequest("error decoding patch: the body is not valid JSON");
  std::vector<std::string> warnings;
  Target at = t;  // with what an apply sets
  if (apply) {
    if (!patch->is_object()) return BadRequest("apply patch must be an object");
    at.apply = true;
    at.applied = LeafFields(*patch, t.sub == "status");
  }
  std::lock_guard<std::mutex> lock(mu);
  json* current = Find(res, ObjKey(t.ns, t.name));
  if (current == nullptr) {
    if (apply && t.sub.empty()) {
      if (auto refused = CheckFields(t, req, *patch, &warnings)) return *refused;
      HttpResponse response = CreateLocked(at, std::move(*patch), DryRun(req));
      AddWarnings(response, warnings);
      return response;
    }
    return NotFound(res, t.name);
  }
  json patched = *current;
  try {
    if (apply) {
      ApplyResult merged =
          MergeApply(*current, *patch, (*current)["metadata"].value("managedFields", json::array()),
                     WriteOf(at), IsTrue(Param(req, "force")));
      if (!merged.message.empty()) {
        json details = ObjectDetails(res, t.name);
        details["causes"] = merged.conflicts;
        return Error(409, "Conflict", merged.message, details);
      }
      patched = std::move(merged.object);
    } else if (type == kJsonPatch) {
      if (!patch->is_array()) return BadRequest("json patch must be an array of operations");
      patched = current->patch(*patch);
    } else {
      if (!patch->is_object()) return BadRequest("merge patch must be a JSON object");
      if (type == kStrategicPatch) StripDirectives(*patch);
      patched.merge_patch(*patch);
    }
  } catch (const std::exception& e) {
    return Error(422, "Invalid",
                 std::string("the server rejected our request due to an error in "
                             "our request: ") +
                     e.what());
  }
  if (!patched.is_object()) return BadRequest("the patch did not produce an object");
  if (!patched["metadata"].is_object()) patched["metadata"] = json::object();
  std::string want = MetaStr(patched, "resourceVersion");
  if (!want.empty() && want != MetaStr(*current, "resourceVersion")) {
    return StaleConflict(res, t.name);
  }
  if (MetaStr(patched, "name") != t.name) {
    return BadRequest("the name of the object (" + MetaStr(patched, "name") +
                      ") does not match the name on the URL (" + t.name + ")");
  }
  if (auto refused = CheckFields(t, req, patched, &warnings)) return *refused;
  HttpResponse response = UpdateLocked(at, *current, std::move(patched), DryRun(req));
  AddWarnings(response, warnings);
  return response;
}

HttpResponse Emulator::Impl::UpdateLocked(const Target& t, const json& old, json next,
                                          bool dry_run) {
  const Resource& res = *t.res;
  const std::string name = MetaStr(old, "name");
  const json& old_md = old["metadata"];
  if (t.sub == "status") {
    json status = next.contains("status") ? next["status"] : json(nullptr);
    next = old;
    if (status.is_null()) {
      next.erase("status");
    } else {
      next["status"] = status;
    }
  } else {
    json& md = next["metadata"];
    for (const char* f : {"name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation", "resourceVersion"}) {
      if (old_md.contains(f)) {
        md[f] = old_md[f];
      } else {
        md.erase(f);
      }
    }
    md.erase("selfLink");
    if (old_md.contains("managedFields")) {  // the server's, whatever the body says
      md["managedFields"] = old_md["managedFields"];
    } else {
      md.erase("managedFields");
    }
    if (md.contains("finalizers") && md["finalizers"].is_array() && md["finalizers"].empty()) {
      md.erase("finalizers");
    }
    if (res.status_sub) {
      if (old.contains("status")) {
        next["status"] = old["status"];
      } else {
        next.erase("status");
      }
    }
    if (Deleting(old)) {
      std::vector<std::string> before = Finalizers(old);
      std::vector<std::string> added;
      for (const std::string& f : Finalizers(next)) {
        if (std::find(before.begin(), before.end(), f) == before.end()) added.push_back(f);
      }
      if (!added.empty()) {
        return Invalid(res, name,
                       {Cause{"FieldValueForbidden", "metadata.finalizers",
                              "Forbidden: no new finalizers can be added if the object is being "
                              "deleted, found new finalizers []string{\"" +
                                  absl::StrJoin(added, "\", \"") + "\"}"}});
      }
    }
  }
  next["apiVersion"] =
      old.contains("apiVersion") ? old["apiVersion"] : json(res.ApiVersion(t.version));
  next["kind"] = res.kind;
  if (res.custom) {
    std::vector<Cause> causes = ValidateCustomResource(SchemaFor(res, t.version), next, &old);
    if (!causes.empty()) return Invalid(res, name, causes);
    next["apiVersion"] = old["apiVersion"];
    next["kind"] = res.kind;
  }
  if (res.Key() == kCrdKey) {
    std::vector<Cause> causes = ValidateCrd(next, &old);
    if (!causes.empty()) return Invalid(res, name, causes);
    SetCrdStatus(next, &old);
  }
  if (res.has_generation && t.sub != "status" && SpecPart(next) != SpecPart(old)) {
    next["metadata"]["generation"] = IntOr(old_md.value("generation", json(0)), 0) + 1;
  }
  json managed =
      UpdateManagedFields(old_md.value("managedFields", json::array()), old, next, WriteOf(t));
  if (managed.empty()) {
    next["metadata"].erase("managedFields");
  } else {
    next["metadata"]["managedFields"] = std::move(managed);
  }
  if (next == old) return JsonResponse(200, Out(res, t.version, old));  // no-op write
  std::string key = ObjKey(t.ns, name);
  if (Deleting(next) && Finalizers(next).empty() &&
      IntOr(next["metadata"].value("deletionGracePeriodSeconds", json(0)), 0) == 0) {
    // The update that removes the last finalizer deletes the object; watchers
    // see only DELETED with the last persisted state.
    if (!dry_run) CommitDelete(t.res, key);
    return JsonResponse(200, Out(res, t.version, next));
  }
  if (dry_run) return JsonResponse(200, Out(res, t.version, next));
  CommitPut(res, key, std::move(next), "MODIFIED");
  if (res.Key() == kCrdKey) RegisterCrd(*Find(res, key));
  return JsonResponse(200, Out(res, t.version, *Find(res, key)));
}

// A custom resource's field at a scale path (".spec.workers.replicas"), or null.
json AtPath(const json& obj, const std::string& path) {
  const json* at = &obj;
  for (absl::string_view part : absl::StrSplit(absl::StripPrefix(path, "."), '.')) {
    if (!at->is_object() || !at->contains(std::string(part))) return nullptr;
    at = &(*at)[std::string(part)];
  }
  return *at;
}

// The autoscaling/v1 Scale of a custom resource, as the apiserver derives it.
json ScaleOf(const Resource& res, const json& obj) {
  const json& md = obj["metadata"];
  json scale = {{"apiVersion", "autoscaling/v1"},
                {"kind", "Scale"},
                {"metadata", json::object()},
                {"spec", json::object()},
                {"status", {{"replicas", 0}}}};
  for (const char* f : {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}) {
    if (md.contains(f)) scale["metadata"][f] = md[f];
  }
  const json spec = AtPath(obj, res.spec_replicas_path);
  if (spec.is_number_integer()) scale["spec"]["replicas"] = spec;
  const json status = AtPath(obj, res.status_replicas_path);
  if (status.is_number_integer()) scale["status"]["replicas"] = status;
  if (!res.label_selector_path.empty()) {
    const json selector = AtPath(obj, res.label_selector_path);
    if (selector.is_string()) scale["status"]["selector"] = selector;
  }
  return scale;
}

// The scale subresource (GET, PUT, PATCH): a Scale read from and written to
// the object's specReplicasPath. A write is an update of the object: its
// schema, CEL rules (transition rules too) and generation apply.
HttpResponse Emulator::Impl::ScaleSub(const Target& t, const HttpRequest& req) {
  const Resource& res = *t.res;
  std::optional<json> body;
  const std::string type = StripParams(req.content_type);
  if (req.method != "GET") {
    if (req.method == "PATCH" && type != kMergePatch && type != kJsonPatch &&
        type != kStrategicPatch) {
      return Error(415, "UnsupportedMediaType",
                   "the body of the request was in an unknown format - accepted media types "
                   "include: application/json-patch+json, application/merge-patch+json, "
                   "application/strategic-merge-patch+json");
    }
    body = ParseBody(req.body, req.method == "PATCH" ? "application/json" : req.content_type);
    if (!body) return BadRequest("error decoding the body: not valid JSON");
  }
  std::lock_guard<std::mutex> lock(mu);
  json* current = Find(res, ObjKey(t.ns, t.name));
  if (current == nullptr) return NotFound(res, t.name);
  json scale = ScaleOf(res, *current);
  if (req.method == "GET") return JsonResponse(200, scale);
  json next_scale = scale;
  try {
    if (req.method == "PUT") {
      next_scale = *body;
    } else if (type == kJsonPatch) {
      if (!body->is_array()) return BadRequest("json patch must be an array of operations");
      next_scale = scale.patch(*body);
    } else {
      if (!body->is_object()) return BadRequest("merge patch must be a JSON object");
      next_scale.merge_patch(*body);
    }
  } catch (const std::exception& ex) {
    return Error(422, "Invalid",
                 std::string("the server rejected our request due to an error in our request: ") +
                     ex.what());
  }
  const std::string want = Str(next_scale.value("metadata", json::object()), "resourceVersion");
  if (!want.empty() && want != MetaStr(*current, "resourceVersion")) {
    return StaleConflict(res, t.name);
  }
  const json replicas = AtPath(next_scale, ".spec.replicas");
  if (!replicas.is_number_integer() || replicas.get<int64_t>() < 0) {
    return Invalid(
        res, t.name,
        {Cause{"FieldValueInvalid", "spec.replicas",
               "Invalid value: " + replicas.dump() + ": must be greater than or equal to 0"}});
  }
  json next = *current;
  json* at = &next;
  for (absl::string_view part :
       absl::StrSplit(absl::StripPrefix(res.spec_replicas_path, "."), '.')) {
    at = &(*at)[std::string(part)];
  }
  *at = replicas;
  Target object = t;
  object.sub.clear();
  HttpResponse r = UpdateLocked(object, *current, std::move(next), DryRun(req));
  if (r.code != 200) return r;
  json* updated = Find(res, ObjKey(t.ns, t.name));
  return JsonResponse(200, ScaleOf(res, updated == nullptr ? *current : *updated));
}

// ---------------------------------------------------------------------------
// Deletion, binding, garbage collection.

HttpResponse Emulator::Impl::Delete(const Target& t, const HttpRequest& req) {
  const Resource& res = *t.res;
  json opts = json::object();
  if (!absl::StripAsciiWhitespace(req.body).empty()) {
    std::optional<json> body = ParseBody(req.body, req.content_type);
    if (!body || !body->is_object()) return BadRequest("could not decode DeleteOptions");
    opts = *body;
  }
  std::optional<int64_t> grace;
  if (opts.contains("gracePeriodSeconds") && opts["gracePeriodSeconds"].is_number()) {
    grace = IntOr(opts["gracePeriodSeconds"], 0);
  }
  int64_t q;
  if (absl::SimpleAtoi(Param(req, "gracePeriodSeconds"), &q)) grace = q;
  std::string policy = Str(opts, "propagationPolicy");
  if (!Param(req, "propagationPolicy").empty()) policy = Param(req, "propagationPolicy");
  if (opts.contains("orphanDependents") && opts["orphanDependents"].is_boolean() &&
      policy.empty()) {
    policy = opts["orphanDependents"].get<bool>() ? "Orphan" : "Background";
  }
  bool dry_run = DryRun(req);
  if (opts.contains("dryRun") && opts["dryRun"].is_array()) {
    for (const json& d : opts["dryRun"]) dry_run = dry_run || d == "All";
  }
  std::lock_guard<std::mutex> lock(mu);
  json* current = Find(res, ObjKey(t.ns, t.name));
  if (current == nullptr) return NotFound(res, t.name);
  if (opts.contains("preconditions") && opts["preconditions"].is_object()) {
    const json& pre = opts["preconditions"];
    std::string uid = Str(pre, "uid");
    std::string want_rv = Str(pre, "resourceVersion");
    if (!uid.empty() && uid != MetaStr(*current, "uid")) {
      return Conflict(res, t.name,
                      "Precondition failed: UID in precondition: " + uid +
                          ", UID in object meta: " + MetaStr(*current, "uid"));
    }
    if (!want_rv.empty() && want_rv != MetaStr(*current, "resourceVersion")) {
      return Conflict(
          res, t.name,
          "Precondition failed: ResourceVersion in precondition: " + want_rv +
              ", ResourceVersion in object meta: " + MetaStr(*current, "resourceVersion"));
    }
  }
  HttpResponse r = DeleteLocked(t.res, ObjKey(t.ns, t.name), grace, policy, dry_run);
  if (r.code == 200) {
    json body = json::parse(r.body);
    if (body.value("kind", "") != "Status") r.body = Out(res, t.version, body).dump();
  }
  return r;
}

HttpResponse Emulator::Impl::DeleteLocked(const ResourcePtr& res, const std::string& key,
                                          std::optional<int64_t> grace, const std::string& policy,
                                          bool dry_run) {
  json obj = *Find(*res, key);
  json& md = obj["metadata"];
  bool deleting = Deleting(obj);
  // A pod bound to a node is deleted gracefully: the kubelet finishes it.
  if (res->Key() == kPodKey && !Str(obj["spec"], "nodeName").empty() && !(grace && *grace == 0)) {
    int64_t g =
        grace ? *grace : IntOr(obj["spec"].value("terminationGracePeriodSeconds", json(30)), 30);
    if (deleting) return JsonResponse(200, obj);
    md["deletionTimestamp"] = kube::FormatTime((UnixNow() + g) * 1000);
    md["deletionGracePeriodSeconds"] = g;
    if (!dry_run) CommitPut(*res, key, obj, "MODIFIED");
    return JsonResponse(200, *Find(*res, key));
  }
  std::vector<std::string> finalizers = Finalizers(obj);
  if (!deleting) {
    const char* gc_finalizer = policy == "Foreground" ? "foregroundDeletion"
                               : policy == "Orphan"   ? "orphan"
                                                      : nullptr;
    if (gc_finalizer != nullptr &&
        std::find(finalizers.begin(), finalizers.end(), gc_finalizer) == finalizers.end()) {
      finalizers.push_back(gc_finalizer);
      md["finalizers"] = finalizers;
    }
  }
  if (!finalizers.empty()) {
    if (deleting) {
      if (grace && *grace == 0 && IntOr(md.value("deletionGracePeriodSeconds", json(0)), 0) != 0) {
        md["deletionGracePeriodSeconds"] = 0;
        if (!dry_run) CommitPut(*res, key, obj, "MODIFIED");
      }
      return JsonResponse(200, dry_run ? obj : *Find(*res, key));
    }
    md["deletionTimestamp"] = kube::FormatTime(UnixNow() * 1000);
    md["deletionGracePeriodSeconds"] = 0;
    if (res->has_generation) md["generation"] = IntOr(md.value("generation", json(0)), 0) + 1;
    if (dry_run) return JsonResponse(200, obj);
    CommitPut(*res, key, obj, "MODIFIED");
    return JsonResponse(200, *Find(*res, key));
  }
  json details = {{"name", Str(md, "name")},
                  {"group", res->group},
                  {"kind", res->resource},
                  {"uid", Str(md, "uid")}};
  if (!dry_run) CommitDelete(res, key);
  return JsonResponse(200, {{"kind", "Status"},
                            {"apiVersion", "v1"},
                            {"metadata", json::object()},
                            {"status", "Success"},
                            {"details", details}});
}

HttpResponse Emulator::Impl::DeleteCollection(const Target& t, const HttpRequest& req) {
  Filter filter;
  if (auto bad = ParseFilter(t, req, &filter)) return *bad;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::string> keys;
  for (const auto& [key, obj] : objects[t.res->Key()]) {
    if (filter.Matches(obj)) keys.push_back(key);
  }
  json list = {{"kind", t.res->list_kind},
               {"apiVersion", t.res->ApiVersion(t.version)},
               {"metadata", json::object()},
               {"items", json::array()}};
  for (const std::string& key : keys) {
    json before = *Find(*t.res, key);
    DeleteLocked(t.res, key, std::nullopt, "", DryRun(req));
    json* after = Find(*t.res, key);
    list["items"].push_back(Out(*t.res, t.version, after ? *after : before));
  }
  list["metadata"]["resourceVersion"] = std::to_string(rv);
  return JsonResponse(200, list);
}

// POST .../serviceaccounts/NAME/token: a TokenRequest answered with a token
// that authenticates as the ServiceAccount for as long as it exists.
HttpResponse Emulator::Impl::TokenRequest(const Target& t, const HttpRequest& req) {
  std::optional<json> body = ParseBody(req.body, req.content_type);
  json request = body && body->is_object() ? *body : json::object();
  std::lock_guard<std::mutex> lock(mu);
  if (Find(*t.res, ObjKey(t.ns, t.name)) == nullptr) return NotFound(*t.res, t.name);
  std::string token;
  do {
    token = absl::StrCat("sa.", NewUid(), RandomSuffix());
  } while (sa_tokens.count(token));
  sa_tokens[token] = {t.ns, t.name};
  const int64_t seconds =
      IntOr(request.contains("spec") ? request["spec"].value("expirationSeconds", json(3600))
                                     : json(3600),
            3600);
  request["apiVersion"] = "authentication.k8s.io/v1";
  request["kind"] = "TokenRequest";
  request["metadata"] = {{"name", t.name},
                         {"namespace", t.ns},
                         {"creationTimestamp", kube::FormatTime(UnixNow() * 1000)}};
  request["status"] = {{"token", token},
                       {"expirationTimestamp", kube::FormatTime((UnixNow() + seconds) * 1000)}};
  return JsonResponse(201, request);
}

HttpResponse Emulator::Impl::Bind(const Target& t, const HttpRequest& req) {
  std::optional<json> body = ParseBody(req.body, req.content_type);
  if (!body || !body->is_object()) return BadRequest("could not decode Binding");
  std::string pod = t.name.empty() ? MetaStr(*body, "name") : t.name;
  std::string node = Str((*body)["target"], "name");
  std::lock_guard<std::mutex> lock(mu);
  ResourcePtr pods = FindResource("", "pods");
  if (node.empty()) {
    return Invalid(*pods, pod, {Cause{"FieldValueRequired", "target.name", "Required value"}});
  }
  json* current = Find(*pods, ObjKey(t.ns, pod));
  if (current == nullptr) return NotFound(*pods, pod);
  std::string bound = Str((*current)["spec"], "nodeName");
  if (!bound.empty()) {
    return Conflict(*pods, pod, "pod " + pod + " is already assigned to node \"" + bound + "\"");
  }
  if (Deleting(*current)) {
    return Conflict(*pods, pod, "pod " + pod + " is being deleted, cannot be assigned to a host");
  }
  json next = *current;
  next["spec"]["nodeName"] = node;
  if (!DryRun(req)) CommitPut(*pods, ObjKey(t.ns, pod), std::move(next), "MODIFIED");
  HttpResponse r = JsonResponse(201, {{"kind", "Status"},
                                      {"apiVersion", "v1"},
                                      {"metadata", json::object()},
                                      {"status", "Success"},
                                      {"code", 201}});
  return r;
}

void Emulator::Impl::GcLoop() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    cv.wait_for(lock, std::chrono::milliseconds(options.gc_period_ms), [this] { return stopping; });
    if (stopping) break;
    if (options.gc) GcOnce();
    if (options.controllers) ControllersOnce();
  }
}

// ---------------------------------------------------------------------------
// Built-in workload controllers: what kube-controller-manager does for
// Deployments (a ReplicaSet per pod template, the old ones scaled to 0),
// ReplicaSets (their pods) and DaemonSets (a pod on each node that fits),
// with their status as `kubectl rollout status` reads it. Pods they create
// pass admission like anyone's: a refusal is a FailedCreate Event on the owner.

void Emulator::Impl::ControllersOnce() {
  DeploymentsOnce();
  ReplicaSetsOnce();
  DaemonSetsOnce();
}

std::vector<std::pair<std::string, json>> Emulator::Impl::OwnedBy(const std::string& res_key,
                                                                  const json& owner) {
  std::vector<std::pair<std::string, json>> out;
  const std::string uid = MetaStr(owner, "uid");
  for (const auto& [key, obj] : objects[res_key]) {
    const json refs = obj["metadata"].value("ownerReferences", json::array());
    for (const json& r : refs) {
      if (r.value("uid", "") == uid && r.value("controller", false)) out.push_back({key, obj});
    }
  }
  return out;
}

HttpResponse Emulator::Impl::CreateChild(const std::string& res_key, const std::string& ns,
                                         json obj) {
  Target t;
  t.res = resources.at(res_key);
  t.version = t.res->preferred_version;
  t.ns = ns;
  return CreateLocked(t, std::move(obj), false);
}

void Emulator::Impl::SetStatus(const std::string& res_key, const std::string& key,
                               const json& status) {
  auto it = objects[res_key].find(key);
  if (it == objects[res_key].end() || it->second.value("status", json()) == status) return;
  json next = it->second;
  next["status"] = status;
  CommitPut(*resources.at(res_key), key, next, "MODIFIED");
}

void Emulator::Impl::RecordFailedCreate(const json& owner, const std::string& kind,
                                        const std::string& message) {
  const std::string ns = MetaStr(owner, "namespace");
  const std::string name = absl::StrCat(MetaStr(owner, "name"), ".failedcreate");
  const std::string now = kube::FormatTime(UnixNow() * 1000);
  const Resource& events = *resources.at("/events");
  if (json* e = Find(events, ObjKey(ns, name))) {
    json next = *e;
    next["count"] = next.value("count", 1) + 1;
    next["lastTimestamp"] = now;
    next["message"] = message;
    CommitPut(events, ObjKey(ns, name), next, "MODIFIED");
    return;
  }
  const std::string component =
      kind == "DaemonSet" ? "daemonset-controller" : "replicaset-controller";
  json event = {{"metadata", {{"name", name}, {"namespace", ns}}},
                {"involvedObject",
                 {{"apiVersion", "apps/v1"},
                  {"kind", kind},
                  {"name", MetaStr(owner, "name")},
                  {"namespace", ns},
                  {"uid", MetaStr(owner, "uid")}}},
                {"type", "Warning"},
                {"reason", "FailedCreate"},
                {"message", message},
                {"count", 1},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"source", {{"component", component}}}};
  CreateChild("/events", ns, event);
}

namespace {

int64_t Generation(const json& obj) {
  return IntOr(obj["metadata"].value("generation", json(1)), 1);
}

json DeploymentConditions(int64_t replicas, int64_t available, int64_t new_available,
                          const std::string& rs_name) {
  const bool ok = available >= replicas;
  const bool done = new_available >= replicas;
  return json::array(
      {{{"type", "Available"},
        {"status", ok ? "True" : "False"},
        {"reason", ok ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable"},
        {"message", ok ? "Deployment has minimum availability."
                       : "Deployment does not have minimum availability."}},
       {{"type", "Progressing"},
        {"status", "True"},
        {"reason", done ? "NewReplicaSetAvailable" : "ReplicaSetUpdated"},
        {"message", absl::StrCat("ReplicaSet \"", rs_name, "\" ",
                                 done ? "has successfully progressed." : "is progressing.")}}});
}

// A Deployment's ReplicaSet for `tmpl`: its labels and selector carry the hash.
json NewReplicaSet(const json& d, const json& tmpl, const std::string& hash, int64_t replicas) {
  json labels = tmpl.value("metadata", json::object()).value("labels", json::object());
  labels["pod-template-hash"] = hash;
  json rs_tmpl = tmpl;
  rs_tmpl["metadata"]["labels"] = labels;
  json selector = d["spec"].value("selector", json::object());
  selector["matchLabels"]["pod-template-hash"] = hash;
  return {{"apiVersion", "apps/v1"},
          {"kind", "ReplicaSet"},
          {"metadata",
           {{"name", absl::StrCat(MetaStr(d, "name"), "-", hash)},
            {"namespace", MetaStr(d, "namespace")},
            {"labels", labels},
            {"ownerReferences", json::array({ControllerRef(d, "apps/v1", "Deployment")})}}},
          {"spec", {{"replicas", replicas}, {"selector", selector}, {"template", rs_tmpl}}}};
}

}  // namespace

void Emulator::Impl::DeploymentsOnce() {
  const auto deployments = objects["apps/deployments"];  // a copy: children change the store
  for (const auto& [key, d] : deployments) {
    if (Deleting(d)) continue;
    const json tmpl = d["spec"].value("template", json::object());
    const std::string hash = PodTemplateHash(tmpl);
    const int64_t replicas = IntOr(d["spec"].value("replicas", json(1)), 1);
    const std::string rs_name = absl::StrCat(MetaStr(d, "name"), "-", hash);
    json status = {{"observedGeneration", Generation(d)},
                   {"replicas", 0},
                   {"updatedReplicas", 0},
                   {"readyReplicas", 0},
                   {"availableReplicas", 0}};
    bool have_new = false;
    int64_t new_available = 0;
    for (auto [rs_key, rs] : OwnedBy("apps/replicasets", d)) {
      const bool is_new = MetaStr(rs, "name") == rs_name;
      have_new = have_new || is_new;
      const int64_t want = is_new ? replicas : 0;
      if (IntOr(rs["spec"].value("replicas", json(1)), 1) != want) {
        rs["spec"]["replicas"] = want;
        rs["metadata"]["generation"] = Generation(rs) + 1;
        CommitPut(*resources.at("apps/replicasets"), rs_key, rs, "MODIFIED");
      }
      const json rs_status = rs.value("status", json::object());
      for (const char* f : {"replicas", "readyReplicas", "availableReplicas"}) {
        status[f] = status[f].get<int64_t>() + rs_status.value(f, int64_t{0});
      }
      if (is_new) {
        status["updatedReplicas"] = rs_status.value("replicas", int64_t{0});
        new_available = rs_status.value("availableReplicas", int64_t{0});
      }
    }
    if (!have_new) {
      CreateChild("apps/replicasets", MetaStr(d, "namespace"),
                  NewReplicaSet(d, tmpl, hash, replicas));
    }
    const int64_t available = status["availableReplicas"];
    status["unavailableReplicas"] = std::max<int64_t>(0, replicas - available);
    status["conditions"] = DeploymentConditions(replicas, available, new_available, rs_name);
    SetStatus("apps/deployments", key, status);
  }
}

void Emulator::Impl::ReplicaSetsOnce() {
  const auto sets = objects["apps/replicasets"];
  for (const auto& [key, rs] : sets) {
    if (Deleting(rs)) continue;
    const int64_t want = IntOr(rs["spec"].value("replicas", json(1)), 1);
    const std::string ns = MetaStr(rs, "namespace");
    std::vector<std::pair<std::string, json>> pods;
    for (auto& p : OwnedBy("/pods", rs)) {
      if (!Deleting(p.second)) pods.push_back(p);
    }
    std::string failure;
    const bool backing_off = UnixNowMs() < create_retry_at_ms[MetaStr(rs, "uid")];
    for (int64_t i = static_cast<int64_t>(pods.size()); i < want && !backing_off; ++i) {
      json pod = PodFromTemplate(rs["spec"].value("template", json::object()), ns,
                                 ControllerRef(rs, "apps/v1", "ReplicaSet"), "",
                                 MetaStr(rs, "name") + "-", json::object());
      HttpResponse r = CreateChild("/pods", ns, pod);
      if (r.code >= 300) {
        failure = json::parse(r.body, nullptr, false).value("message", r.body);
        RecordFailedCreate(rs, "ReplicaSet", "Error creating: " + failure);
        create_retry_at_ms[MetaStr(rs, "uid")] = UnixNowMs() + 2000;  // retried, not hammered
        break;
      }
    }
    // Extra pods go, those not ready first.
    std::stable_sort(pods.begin(), pods.end(), [](const auto& a, const auto& b) {
      return !PodReady(a.second) && PodReady(b.second);
    });
    int64_t kept = static_cast<int64_t>(pods.size());
    for (size_t i = 0; kept > want && i < pods.size(); ++i, --kept) {
      DeleteLocked(resources.at("/pods"), pods[i].first, std::nullopt, "", false);
    }
    int64_t ready = 0;
    for (size_t i = pods.size() - static_cast<size_t>(kept); i < pods.size(); ++i) {
      ready += PodReady(pods[i].second) ? 1 : 0;
    }
    json status = {{"replicas", kept},
                   {"fullyLabeledReplicas", kept},
                   {"readyReplicas", ready},
                   {"availableReplicas", ready},
                   {"observedGeneration", Generation(rs)}};
    const json old_conditions = rs.value("status", json::object()).value("conditions", json());
    if (backing_off && !old_conditions.is_null()) status["conditions"] = old_conditions;
    if (!failure.empty()) {
      status["conditions"] = json::array({{{"type", "ReplicaFailure"},
                                           {"status", "True"},
                                           {"reason", "FailedCreate"},
                                           {"message", failure}}});
    }
    SetStatus("apps/replicasets", key, status);
  }
}

void Emulator::Impl::DaemonSetsOnce() {
  const auto sets = objects["apps/daemonsets"];
  const auto nodes = objects["/nodes"];
  for (const auto& [key, ds] : sets) {
    if (Deleting(ds)) continue;
    const json tmpl = ds["spec"].value("template", json::object());
    const std::string hash = PodTemplateHash(tmpl);
    const std::string ns = MetaStr(ds, "namespace");
    auto revision = [](const json& pod) {
      return pod["metadata"].value("labels", json::object()).value("controller-revision-hash", "");
    };
    std::map<std::string, std::vector<std::pair<std::string, json>>> on_node;
    for (auto& p : OwnedBy("/pods", ds)) {
      if (!Deleting(p.second)) on_node[p.second["spec"].value("nodeName", "")].push_back(p);
    }
    int64_t desired = 0, current = 0, ready = 0, misscheduled = 0;
    std::string failure;
    if (UnixNowMs() < create_retry_at_ms[MetaStr(ds, "uid")]) failure = "backing off";
    for (const auto& [node_key, node] : nodes) {
      const std::string node_name = MetaStr(node, "name");
      const bool fits = DaemonPodFits(tmpl.value("spec", json::object()), node);
      desired += fits ? 1 : 0;
      bool has_current = false;
      for (const auto& [pod_key, pod] : on_node[node_name]) {
        if (fits && revision(pod) == hash) {
          has_current = true;
          ++current;
          ready += PodReady(pod) ? 1 : 0;
        } else {  // not for this node any more, or an old template: replaced
          misscheduled += fits ? 0 : 1;
          DeleteLocked(resources.at("/pods"), pod_key, std::nullopt, "", false);
        }
      }
      if (!fits || has_current || !failure.empty()) continue;
      json pod = PodFromTemplate(tmpl, ns, ControllerRef(ds, "apps/v1", "DaemonSet"), "",
                                 MetaStr(ds, "name") + "-",
                                 {{"controller-revision-hash", hash},
                                  {"pod-template-generation", std::to_string(Generation(ds))}});
      pod["spec"]["nodeName"] = node_name;
      HttpResponse r = CreateChild("/pods", ns, pod);
      if (r.code >= 300) {
        failure = json::parse(r.body, nullptr, false).value("message", r.body);
        RecordFailedCreate(ds, "DaemonSet", "Error creating: " + failure);
        create_retry_at_ms[MetaStr(ds, "uid")] = UnixNowMs() + 2000;
      }
    }
    json status = {{"desiredNumberScheduled", desired},
                   {"currentNumberScheduled", current},
                   {"updatedNumberScheduled", current},
                   {"numberReady", ready},
                   {"numberAvailable", ready},
                   {"numberUnavailable", std::max<int64_t>(0, desired - ready)},
                   {"numberMisscheduled", misscheduled},
                   {"observedGeneration", Generation(ds)}};
    SetStatus("apps/daemonsets", key, status);
  }
}

void Emulator::Impl::GcOnce() {
  // Background propagation: a dependent whose owners (by uid) are all gone is
  // deleted. Foreground and Orphan owners are finished here as well.
  std::map<std::string, std::pair<ResourcePtr, std::string>> by_uid;
  for (const auto& [rkey, store] : objects) {
    auto r = resources.find(rkey);
    if (r == resources.end()) continue;
    for (const auto& [key, obj] : store) by_uid[MetaStr(obj, "uid")] = {r->second, key};
  }
  std::vector<std::pair<ResourcePtr, std::string>> to_delete;
  std::map<std::string, std::vector<std::pair<ResourcePtr, std::string>>> dependents;
  for (const auto& [uid, where] : by_uid) {
    const json& obj = *Find(*where.first, where.second);
    const json& md = obj["metadata"];
    if (!md.contains("ownerReferences") || !md["ownerReferences"].is_array() ||
        md["ownerReferences"].empty()) {
      continue;
    }
    bool alive = false;
    for (const json& ref : md["ownerReferences"]) {
      std::string owner = Str(ref, "uid");
      if (by_uid.count(owner)) {
        alive = true;
        dependents[owner].push_back(where);
      }
    }
    if (!alive && !Deleting(obj)) to_delete.push_back(where);
  }
  for (const auto& [uid, where] : by_uid) {
    const json* found = Find(*where.first, where.second);
    if (found == nullptr || !Deleting(*found)) continue;
    const json obj = *found;
    std::vector<std::string> fins = Finalizers(obj);
    bool foreground = std::find(fins.begin(), fins.end(), "foregroundDeletion") != fins.end();
    bool orphan = std::find(fins.begin(), fins.end(), "orphan") != fins.end();
    if (!foreground && !orphan) continue;
    const auto& deps = dependents[uid];
    if (orphan) {
      for (const auto& dep : deps) {
        if (Find(*dep.first, dep.second) == nullptr) continue;
        json next = *Find(*dep.first, dep.second);
        json refs = json::array();
        for (const json& ref : next["metadata"]["ownerReferences"]) {
          if (Str(ref, "uid") != uid) refs.push_back(ref);
        }
        next["metadata"]["ownerReferences"] = refs;
        if (refs.empty()) next["metadata"].erase("ownerReferences");
        CommitPut(*dep.first, dep.second, std::move(next), "MODIFIED");
      }
    } else if (!deps.empty()) {
      for (const auto& dep : deps) {
        const json* d = Find(*dep.first, dep.second);
        if (d != nullptr && !Deleting(*d)) to_delete.push_back(dep);
      }
      continue;
    }
    json next = obj;
    fins.erase(std::remove_if(
                   fins.begin(), fins.end(),
                   [](const std::string& f) { return f == "foregroundDeletion" || f == "orphan"; }),
               fins.end());
    if (fins.empty()) {
      next["metadata"].erase("finalizers");
    } else {
      next["metadata"]["finalizers"] = fins;
    }
    if (fins.empty() &&
        IntOr(next["metadata"].value("deletionGracePeriodSeconds", json(0)), 0) == 0) {
      CommitDelete(where.first, where.second);
    } else {
      CommitPut(*where.first, where.second, std::move(next), "MODIFIED");
    }
  }
  for (const auto& [res, key] : to_delete) {
    if (Find(*res, key) == nullptr || Deleting(*Find(*res, key))) continue;
    std::fprintf(stderr, "gc: deleting %s %s (owner gone)\n", res->Qualified().c_str(),
                 key.c_str());
    DeleteLocked(res, key, std::nullopt, "Background", false);
  }
}

Emulator::Emulator(EmulatorOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Emulator::~Emulator() { Shutdown(); }

void Emulator::Handle(const HttpRequest& request, ResponseWriter& writer) {
  impl_->Handle(request, writer);
}

void Emulator::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->cv.notify_all();
  }
  if (impl_->gc_thread.joinable()) impl_->gc_thread.join();
}

}  // namespace antdt::kubeemu
