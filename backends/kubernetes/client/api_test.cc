#include "backends/kubernetes/client/api.h"

#include <gtest/gtest.h>

namespace antdt::kube {
namespace {

TEST(ResourceRefTest, Paths) {
  EXPECT_EQ(PodsResource().CollectionPath("ns"), "/api/v1/namespaces/ns/pods");
  EXPECT_EQ(PodsResource().CollectionPath(""), "/api/v1/pods");
  EXPECT_EQ(PodsResource().ObjectPath("ns", "p"), "/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(PodsResource().ApiVersion(), "v1");
  EXPECT_EQ(NodesResource().ObjectPath("ignored", "n1"), "/api/v1/nodes/n1");
  EXPECT_EQ(AntDTJobsResource().ObjectPath("ns", "j", "status"),
            "/apis/antdt.io/v1alpha1/namespaces/ns/antdtjobs/j/status");
  EXPECT_EQ(AntDTJobsResource().ApiVersion(), "antdt.io/v1alpha1");
  EXPECT_EQ(AntDTJobsResource().kind, "AntDTJob");
  EXPECT_EQ(LeasesResource().CollectionPath("kube-system"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
  EXPECT_EQ(CrdsResource().ObjectPath("", "antdtjobs.antdt.io"),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/antdtjobs.antdt.io");
  EXPECT_EQ(ServicesResource().plural, "services");
  EXPECT_EQ(EventsResource().kind, "Event");
}

Json StatusJson(int code, const std::string& reason) {
  return Json{{"kind", "Status"},  {"apiVersion", "v1"}, {"status", "Failure"},
              {"message", "boom"}, {"reason", reason},   {"code", code}};
}

TEST(ApiErrorTest, CodesAndHelpers) {
  absl::Status not_found = ApiError(404, StatusJson(404, "NotFound"));
  EXPECT_EQ(not_found.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(kube::IsNotFound(not_found));
  EXPECT_EQ(HttpCode(not_found), 404);
  EXPECT_EQ(Reason(not_found), "NotFound");
  EXPECT_NE(std::string(not_found.message()).find("boom"), std::string::npos);

  absl::Status exists = ApiError(409, StatusJson(409, "AlreadyExists"));
  EXPECT_EQ(exists.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(kube::IsAlreadyExists(exists));
  EXPECT_FALSE(kube::IsConflict(exists));

  absl::Status conflict = ApiError(409, StatusJson(409, "Conflict"));
  EXPECT_EQ(conflict.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(kube::IsConflict(conflict));
  EXPECT_FALSE(kube::IsAlreadyExists(conflict));

  EXPECT_TRUE(kube::IsExpired(ApiError(410, StatusJson(410, "Expired"))));
  EXPECT_TRUE(kube::IsExpired(ApiError(410, StatusJson(410, "Gone"))));
  EXPECT_EQ(ApiError(410, StatusJson(410, "Gone")).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(kube::IsInvalid(ApiError(422, StatusJson(422, "Invalid"))));
  EXPECT_EQ(ApiError(422, StatusJson(422, "Invalid")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApiError(400, Json()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApiError(401, Json()).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ApiError(403, Json()).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ApiError(500, Json()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ApiError(503, Json()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ApiError(504, Json()).code(), absl::StatusCode::kDeadlineExceeded);

  Json throttled = StatusJson(429, "TooManyRequests");
  throttled["details"] = {{"retryAfterSeconds", 3}};
  absl::Status tmr = ApiError(429, throttled);
  EXPECT_TRUE(kube::IsTooManyRequests(tmr));
  EXPECT_EQ(tmr.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RetryAfterSeconds(tmr), 3);
  EXPECT_EQ(RetryAfterSeconds(not_found), 0);
}

TEST(ApiErrorTest, SynthesizesStatusWhenMissing) {
  absl::Status s = ApiError(410, Json());
  EXPECT_TRUE(kube::IsExpired(s));  // default reason Expired
  std::optional<Json> status = StatusObject(s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ((*status)["kind"], "Status");
  EXPECT_EQ((*status)["code"], 410);
}

TEST(ApiErrorTest, PlainErrorsCarryNoStatus) {
  absl::Status s = absl::UnavailableError("connection refused");
  EXPECT_EQ(HttpCode(s), 0);
  EXPECT_EQ(Reason(s), "");
  EXPECT_FALSE(StatusObject(s).has_value());
  EXPECT_FALSE(kube::IsNotFound(s));
  EXPECT_FALSE(kube::IsExpired(absl::OkStatus()));
}

TEST(KeyTest, KeyAndResourceVersion) {
  Json pod = {{"metadata", {{"namespace", "ns"}, {"name", "p"}, {"resourceVersion", "12"}}}};
  EXPECT_EQ(KeyOf(pod), "ns/p");
  EXPECT_EQ(ResourceVersionOf(pod), "12");
  Json node = {{"metadata", {{"name", "n1"}}}};
  EXPECT_EQ(KeyOf(node), "n1");
  EXPECT_EQ(ResourceVersionOf(node), "");
  EXPECT_EQ(KeyOf(Json()), "");
}

}  // namespace
}  // namespace antdt::kube
