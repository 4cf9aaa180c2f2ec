#include "backends/kubernetes/client/api.h"

#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace antdt::kube {
namespace {

constexpr char kStatusPayload[] = "antdt.io/k8s-status";

// The reason the API server gives for a code when a response carried no Status.
std::string DefaultReason(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "";
  }
}

absl::StatusCode CodeFor(int http_code, const std::string& reason) {
  switch (http_code) {
    case 400:
    case 415:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      break;
  }
  if (http_code >= 500) return absl::StatusCode::kUnavailable;
  if (http_code >= 400) return absl::StatusCode::kFailedPrecondition;
  return absl::StatusCode::kUnknown;
}

std::string StringField(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

}  // namespace

std::string ResourceRef::GroupVersionPath() const {
  if (group.empty()) return "/api/" + version;
  return "/apis/" + group + "/" + version;
}

std::string ResourceRef::CollectionPath(const std::string& ns) const {
  if (namespaced && !ns.empty()) {
    return GroupVersionPath() + "/namespaces/" + ns + "/" + plural;
  }
  return GroupVersionPath() + "/" + plural;
}

std::string ResourceRef::ObjectPath(const std::string& ns, const std::string& name,
                                    const std::string& subresource) const {
  std::string path = CollectionPath(ns) + "/" + name;
  if (!subresource.empty()) path += "/" + subresource;
  return path;
}

std::string ResourceRef::ApiVersion() const {
  if (group.empty()) return version;
  return group + "/" + version;
}

const ResourceRef& PodsResource() {
  static const ResourceRef r{"", "v1", "pods", "Pod", true};
  return r;
}

const ResourceRef& ServicesResource() {
  static const ResourceRef r{"", "v1", "services", "Service", true};
  return r;
}

const ResourceRef& SecretsResource() {
  static const ResourceRef r{"", "v1", "secrets", "Secret", true};
  return r;
}

const ResourceRef& PersistentVolumeClaimsResource() {
  static const ResourceRef r{"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true};
  return r;
}

const ResourceRef& EventsResource() {
  static const ResourceRef r{"", "v1", "events", "Event", true};
  return r;
}

const ResourceRef& LeasesResource() {
  static const ResourceRef r{"coordination.k8s.io", "v1", "leases", "Lease", true};
  return r;
}

const ResourceRef& NodesResource() {
  static const ResourceRef r{"", "v1", "nodes", "Node", false};
  return r;
}

const ResourceRef& AntDTJobsResource() {
  static const ResourceRef r{"antdt.io", "v1alpha1", "antdtjobs", "AntDTJob", true};
  return r;
}

const ResourceRef& CrdsResource() {
  static const ResourceRef r{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                             "CustomResourceDefinition", false};
  return r;
}

absl::Status ApiError(int http_code, const Json& status_object) {
  Json status = status_object;
  if (!status.is_object()) {
    status = Json{{"kind", "Status"},
                  {"apiVersion", "v1"},
                  {"metadata", Json::object()},
                  {"status", "Failure"}};
    if (status_object.is_string()) status["message"] = status_object;
  }
  if (!status.contains("code") || !status["code"].is_number_integer()) {
    status["code"] = http_code;
  }
  std::string reason = StringField(status, "reason");
  if (reason.empty()) {
    reason = DefaultReason(http_code);
    if (!reason.empty()) status["reason"] = reason;
  }
  std::string message = StringField(status, "message");
  if (message.empty()) message = "the server responded with HTTP " + std::to_string(http_code);
  absl::Status s(
      CodeFor(http_code, reason),
      absl::StrCat("HTTP ", http_code, reason.empty() ? "" : " ", reason, ": ", message));
  s.SetPayload(kStatusPayload, absl::Cord(status.dump()));
  return s;
}

std::optional<Json> StatusObject(const absl::Status& s) {
  auto payload = s.GetPayload(kStatusPayload);
  if (!payload.has_value()) return std::nullopt;
  Json parsed = Json::parse(std::string(*payload), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) return std::nullopt;
  return parsed;
}

int HttpCode(const absl::Status& s) {
  std::optional<Json> status = StatusObject(s);
  if (!status.has_value()) return 0;
  auto it = status->find("code");
  if (it == status->end() || !it->is_number_integer()) return 0;
  return it->get<int>();
}

std::string Reason(const absl::Status& s) {
  std::optional<Json> status = StatusObject(s);
  if (!status.has_value()) return "";
  return StringField(*status, "reason");
}

int RetryAfterSeconds(const absl::Status& s) {
  std::optional<Json> status = StatusObject(s);
  if (!status.has_value()) return 0;
  auto details = status->find("details");
  if (details == status->end() || !details->is_object()) return 0;
  auto it = details->find("retryAfterSeconds");
  if (it == details->end() || !it->is_number_integer()) return 0;
  return it->get<int>();
}

bool IsNotFound(const absl::Status& s) { return HttpCode(s) == 404; }

bool IsAlreadyExists(const absl::Status& s) {
  return HttpCode(s) == 409 && Reason(s) == "AlreadyExists";
}

bool IsConflict(const absl::Status& s) {
  return HttpCode(s) == 409 && Reason(s) != "AlreadyExists";
}

bool IsExpired(const absl::Status& s) {
  if (HttpCode(s) != 410) return false;
  std::string reason = Reason(s);
  return reason == "Expired" || reason == "Gone";
}

bool IsInvalid(const absl::Status& s) { return HttpCode(s) == 422; }

bool IsTooManyRequests(const absl::Status& s) { return HttpCode(s) == 429; }

}  // namespace antdt::kube
