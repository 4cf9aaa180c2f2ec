#include "backends/kubernetes/runtime/event_recorder.h"

#include <gtest/gtest.h>

#include "testing/kube-fake/fake_api.h"
#include "testing/kube-fake/test_util.h"

namespace antdt::kube {
namespace {

using testing::HttpError;
using testing::Pod;

EventRecorderOptions FastRetries() {
  EventRecorderOptions o;
  o.retry_delay_ms = 1;
  return o;
}

std::vector<Json> Events(FakeApi& api, const std::string& ns) {
  absl::StatusOr<Json> list = api.List(EventsResource(), ns, {});
  EXPECT_TRUE(list.ok());
  return (*list)["items"].get<std::vector<Json>>();
}

TEST(EventRecorderTest, CreatesThenPatchesCountOnRepeat) {
  FakeApi api;
  Json pod = *api.Create(PodsResource(), "ns", Pod("ns", "worker-0"));
  EventRecorder recorder(&api, "antdt-operator", "op-1", FastRetries());
  recorder.Record(pod, "Warning", "Straggler", "worker 0 is slow");
  recorder.Record(pod, "Warning", "Straggler", "worker 0 is slow");
  recorder.Record(pod, "Warning", "Straggler", "worker 0 is slow");
  ASSERT_TRUE(recorder.Flush(10000));

  std::vector<Json> events = Events(api, "ns");
  ASSERT_EQ(events.size(), 1u);
  const Json& e = events[0];
  EXPECT_EQ(e["count"], 3);
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["reason"], "Straggler");
  EXPECT_EQ(e["message"], "worker 0 is slow");
  EXPECT_EQ(e["metadata"]["name"].get<std::string>().rfind("worker-0.", 0), 0u);
  EXPECT_EQ(e["involvedObject"]["kind"], "Pod");
  EXPECT_EQ(e["involvedObject"]["apiVersion"], "v1");
  EXPECT_EQ(e["involvedObject"]["name"], "worker-0");
  EXPECT_EQ(e["involvedObject"]["namespace"], "ns");
  EXPECT_EQ(e["involvedObject"]["uid"], pod["metadata"]["uid"]);
  EXPECT_EQ(e["involvedObject"]["resourceVersion"], pod["metadata"]["resourceVersion"]);
  EXPECT_EQ(e["source"]["component"], "antdt-operator");
  EXPECT_EQ(e["reportingComponent"], "antdt-operator");
  EXPECT_EQ(e["reportingInstance"], "op-1");
  EXPECT_TRUE(e.contains("firstTimestamp"));
  EXPECT_TRUE(e.contains("lastTimestamp"));
  EXPECT_EQ(api.Requests("patch"), 2);
  EXPECT_EQ(recorder.stats().created, 1);
  EXPECT_EQ(recorder.stats().patched, 2);

  // Another message is another Event.
  recorder.Record(pod, "Normal", "Restarted", "worker 0 restarted");
  ASSERT_TRUE(recorder.Flush(10000));
  EXPECT_EQ(Events(api, "ns").size(), 2u);
}

TEST(EventRecorderTest, ClusterScopedObjectsGoToDefault) {
  FakeApi api;
  Json node = *api.Create(NodesResource(), "", {{"metadata", {{"name", "n1"}}}});
  EventRecorder recorder(&api, "antdt-operator", "op-1", FastRetries());
  recorder.Record(node, "Normal", "Cordoned", "node n1 cordoned");
  ASSERT_TRUE(recorder.Flush(10000));
  ASSERT_EQ(Events(api, "default").size(), 1u);
  EXPECT_FALSE(Events(api, "default")[0]["involvedObject"].contains("namespace"));
}

TEST(EventRecorderTest, SurvivesErrors) {
  FakeApi api;
  Json pod = *api.Create(PodsResource(), "ns", Pod("ns", "p"));
  EventRecorder recorder(&api, "antdt-operator", "op-1", FastRetries());

  // An API error (the server answered): logged, not retried.
  const int64_t creates = api.Requests("create");
  api.FailNext("create", HttpError(500, "InternalError"));
  recorder.Record(pod, "Normal", "A", "a");
  ASSERT_TRUE(recorder.Flush(10000));
  EXPECT_EQ(api.Requests("create"), creates + 1);
  EXPECT_EQ(recorder.stats().failed, 1);
  EXPECT_TRUE(Events(api, "ns").empty());

  // Transport errors: retried.
  api.FailNext("create", absl::UnavailableError("connection refused"), 2);
  recorder.Record(pod, "Normal", "B", "b");
  ASSERT_TRUE(recorder.Flush(10000));
  EXPECT_EQ(Events(api, "ns").size(), 1u);
  EXPECT_EQ(recorder.stats().created, 1);

  // The Event was deleted (expired): a repeat creates a new one.
  const std::string name = Events(api, "ns")[0]["metadata"]["name"];
  ASSERT_TRUE(api.Delete(EventsResource(), "ns", name).ok());
  recorder.Record(pod, "Normal", "B", "b");
  ASSERT_TRUE(recorder.Flush(10000));
  ASSERT_EQ(Events(api, "ns").size(), 1u);
  EXPECT_EQ(Events(api, "ns")[0]["count"], 1);
  EXPECT_NE(Events(api, "ns")[0]["metadata"]["name"], name);

  // After Shutdown, Records are dropped, not fatal.
  recorder.Shutdown();
  recorder.Record(pod, "Normal", "C", "c");
  EXPECT_EQ(recorder.stats().dropped, 1);
}

}  // namespace
}  // namespace antdt::kube
