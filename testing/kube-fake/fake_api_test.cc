#include "testing/kube-fake/fake_api.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "testing/kube-fake/test_util.h"

namespace antdt::kube {
namespace {

using testing::HttpError;
using testing::Pod;

ResourceRef Jobs() { return AntDTJobsResource(); }

Json Job(const std::string& name) {
  return Json{{"apiVersion", "antdt.io/v1alpha1"},
              {"kind", "AntDTJob"},
              {"metadata", {{"name", name}}},
              {"spec", {{"workers", 2}}},
              {"status", {{"phase", "Ignored"}}}};
}

TEST(FakeApiTest, CreateSetsServerFieldsAndRejectsDuplicates) {
  FakeClock clock;
  FakeApiOptions options;
  options.clock = &clock;
  FakeApi api(options);
  absl::StatusOr<Json> pod = api.Create(PodsResource(), "ns", Pod("ns", "a"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ((*pod)["metadata"]["generation"], 1);
  EXPECT_EQ((*pod)["metadata"]["resourceVersion"], "1");
  EXPECT_EQ((*pod)["metadata"]["uid"].get<std::string>().size(), 36u);
  EXPECT_EQ((*pod)["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
  absl::StatusOr<Json> again = api.Create(PodsResource(), "ns", Pod("ns", "a"));
  EXPECT_TRUE(kube::IsAlreadyExists(again.status())) << again.status();
  EXPECT_TRUE(kube::IsNotFound(api.Get(PodsResource(), "ns", "missing").status()));

  Json generated = Pod("ns", "");
  generated["metadata"].erase("name");
  generated["metadata"]["generateName"] = "worker-";
  absl::StatusOr<Json> g = api.Create(PodsResource(), "ns", generated);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)["metadata"]["name"].get<std::string>().size(), 12u);
}

TEST(FakeApiTest, UpdateNeedsCurrentResourceVersion) {
  FakeApi api;
  Json pod = *api.Create(PodsResource(), "ns", Pod("ns", "a"));
  Json changed = pod;
  changed["spec"]["nodeName"] = "n1";
  absl::StatusOr<Json> updated = api.Update(PodsResource(), "ns", changed);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["metadata"]["generation"], 2);
  EXPECT_NE(ResourceVersionOf(*updated), ResourceVersionOf(pod));

  // Stale RV: 409 Conflict.
  absl::StatusOr<Json> stale = api.Update(PodsResource(), "ns", changed);
  EXPECT_TRUE(IsConflict(stale.status())) << stale.status();
  // No RV: 422.
  Json no_rv = *updated;
  no_rv["metadata"].erase("resourceVersion");
  EXPECT_TRUE(IsInvalid(api.Update(PodsResource(), "ns", no_rv).status()));
  // A no-op write keeps the RV.
  absl::StatusOr<Json> same = api.Update(PodsResource(), "ns", *updated);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(ResourceVersionOf(*same), ResourceVersionOf(*updated));
  EXPECT_EQ(api.ResourceVersion(), ResourceVersionOf(*updated));
}

TEST(FakeApiTest, StatusSubresourceIsolation) {
  FakeApi api;
  api.EnableStatusSubresource(Jobs());
  Json job = *api.Create(Jobs(), "ns", Job("j"));
  EXPECT_FALSE(job.contains("status"));  // dropped on create

  Json with_status = job;
  with_status["status"] = {{"phase", "Running"}};
  with_status["spec"]["workers"] = 3;
  // Update: spec taken, status ignored.
  Json updated = *api.Update(Jobs(), "ns", with_status);
  EXPECT_EQ(updated["spec"]["workers"], 3);
  EXPECT_FALSE(updated.contains("status"));
  EXPECT_EQ(updated["metadata"]["generation"], 2);

  // UpdateStatus: status taken, spec ignored, generation kept.
  Json status_write = updated;
  status_write["status"] = {{"phase", "Running"}};
  status_write["spec"]["workers"] = 9;
  Json after = *api.UpdateStatus(Jobs(), "ns", status_write);
  EXPECT_EQ(after["status"]["phase"], "Running");
  EXPECT_EQ(after["spec"]["workers"], 3);
  EXPECT_EQ(after["metadata"]["generation"], 2);

  // Merge patch on /status.
  Json patched =
      *api.Patch(Jobs(), "ns", "j", {{"status", {{"phase", "Done"}}}}, PatchType::kMerge, "status");
  EXPECT_EQ(patched["status"]["phase"], "Done");
}

TEST(FakeApiTest, PatchesAndPreconditions) {
  FakeApi api;
  Json pod = *api.Create(PodsResource(), "ns", Pod("ns", "a", {{"app", "x"}}));
  Json merged = *api.Patch(PodsResource(), "ns", "a",
                           {{"metadata", {{"labels", {{"app", nullptr}, {"tier", "db"}}}}}});
  EXPECT_FALSE(merged["metadata"]["labels"].contains("app"));
  EXPECT_EQ(merged["metadata"]["labels"]["tier"], "db");

  Json ops =
      Json::array({{{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{"k", "v"}}}}});
  Json json_patched = *api.Patch(PodsResource(), "ns", "a", ops, PatchType::kJson);
  EXPECT_EQ(json_patched["metadata"]["annotations"]["k"], "v");

  // A stale RV in the patch is a precondition failure.
  absl::StatusOr<Json> stale =
      api.Patch(PodsResource(), "ns", "a",
                {{"metadata", {{"resourceVersion", ResourceVersionOf(pod)}}}, {"x", 1}});
  EXPECT_TRUE(IsConflict(stale.status())) << stale.status();
  EXPECT_TRUE(kube::IsNotFound(api.Patch(PodsResource(), "ns", "zz", {{"x", 1}}).status()));
}

TEST(FakeApiTest, FinalizersDelayDeletion) {
  FakeApi api;
  Json pod = Pod("ns", "a");
  pod["metadata"]["finalizers"] = {"antdt.io/cleanup"};
  pod = *api.Create(PodsResource(), "ns", pod);
  ASSERT_TRUE(api.Delete(PodsResource(), "ns", "a").ok());
  Json deleting = *api.Get(PodsResource(), "ns", "a");
  EXPECT_TRUE(deleting["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(deleting["metadata"]["generation"], 2);
  // No new finalizers while deleting.
  Json more = deleting;
  more["metadata"]["finalizers"].push_back("other.io/x");
  EXPECT_TRUE(IsInvalid(api.Update(PodsResource(), "ns", more).status()));
  // Removing the last finalizer deletes it.
  Json done = deleting;
  done["metadata"]["finalizers"] = Json::array();
  ASSERT_TRUE(api.Update(PodsResource(), "ns", done).ok());
  EXPECT_TRUE(kube::IsNotFound(api.Get(PodsResource(), "ns", "a").status()));
}

TEST(FakeApiTest, ListSelectors) {
  FakeApi api;
  api.Create(PodsResource(), "a", Pod("a", "p1", {{"app", "x"}})).IgnoreError();
  api.Create(PodsResource(), "a", Pod("a", "p2", {{"app", "y"}})).IgnoreError();
  api.Create(PodsResource(), "b", Pod("b", "p3", {{"app", "x"}})).IgnoreError();
  auto names = [&](const std::string& ns, const std::string& labels, const std::string& fields) {
    ListOptions o;
    o.label_selector = labels;
    o.field_selector = fields;
    std::vector<std::string> out;
    Json list = *api.List(PodsResource(), ns, o);
    for (const Json& item : list["items"]) {
      out.push_back(item["metadata"]["name"]);
    }
    return out;
  };
  EXPECT_EQ(names("", "app=x", ""), (std::vector<std::string>{"p1", "p3"}));
  EXPECT_EQ(names("a", "app!=x", ""), (std::vector<std::string>{"p2"}));
  EXPECT_EQ(names("", "", "metadata.name=p3"), (std::vector<std::string>{"p3"}));
  EXPECT_EQ(names("", "app", "metadata.namespace!=a"), (std::vector<std::string>{"p3"}));
  Json list = *api.List(PodsResource(), "", {});
  EXPECT_EQ(list["metadata"]["resourceVersion"], api.ResourceVersion());
}

TEST(FakeApiTest, WatchResumesFromResourceVersionAndExpires) {
  FakeApiOptions options;
  options.history_size = 3;
  FakeApi api(options);
  Json p1 = *api.Create(PodsResource(), "ns", Pod("ns", "p1"));
  api.Create(PodsResource(), "ns", Pod("ns", "p2")).IgnoreError();
  ASSERT_TRUE(api.Delete(PodsResource(), "ns", "p2").ok());

  std::vector<std::string> seen;
  WatchOptions o;
  o.resource_version = ResourceVersionOf(p1);
  absl::Status s = api.Watch(
      PodsResource(), "ns", o,
      [&](const WatchEvent& e) {
        seen.push_back(e.type + ":" + e.object["metadata"].value("name", ""));
        return seen.size() < 2;
      },
      nullptr);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED:p2", "DELETED:p2"}));

  // Push p1's event out of the history: resuming from before it is 410.
  for (int i = 0; i < 3; ++i) {
    api.Create(PodsResource(), "ns", Pod("ns", "q" + std::to_string(i))).IgnoreError();
  }
  std::vector<WatchEvent> events;
  o.timeout_seconds = 1;
  o.resource_version = "1";
  s = api.Watch(
      PodsResource(), "ns", o,
      [&](const WatchEvent& e) {
        events.push_back(e);
        return true;
      },
      nullptr);
  EXPECT_TRUE(s.ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "ERROR");
  EXPECT_EQ(events[0].object["code"], 410);
}

TEST(FakeApiTest, WatchFaultsAndCancel) {
  FakeApi api;
  auto run_watch = [&](absl::Status* out, Cancel* cancel) {
    return std::thread([&api, out, cancel] {
      WatchOptions o;
      o.resource_version = api.ResourceVersion();
      *out = api.Watch(
          PodsResource(), "", o, [](const WatchEvent&) { return true; }, cancel);
    });
  };
  absl::Status dropped, ended, cancelled;
  std::thread t1 = run_watch(&dropped, nullptr);
  ASSERT_TRUE(api.WaitForOpenWatches(1, 10000));
  api.DropWatches();
  t1.join();
  EXPECT_EQ(dropped.code(), absl::StatusCode::kUnavailable);

  std::thread t2 = run_watch(&ended, nullptr);
  ASSERT_TRUE(api.WaitForOpenWatches(1, 10000));
  api.EndWatches();
  t2.join();
  EXPECT_TRUE(ended.ok());

  std::unique_ptr<Cancel> cancel = api.NewCancel();
  std::thread t3 = run_watch(&cancelled, cancel.get());
  ASSERT_TRUE(api.WaitForOpenWatches(1, 10000));
  cancel->Trigger();
  t3.join();
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(api.OpenWatches(), 0);
}

TEST(FakeApiTest, FailNextAndCounters) {
  FakeApi api;
  api.FailNext("get", HttpError(500, "InternalError"), 2);
  EXPECT_EQ(HttpCode(api.Get(PodsResource(), "ns", "a").status()), 500);
  EXPECT_EQ(HttpCode(api.Get(PodsResource(), "ns", "a").status()), 500);
  EXPECT_TRUE(kube::IsNotFound(api.Get(PodsResource(), "ns", "a").status()));
  EXPECT_EQ(api.Requests("get"), 3);
  EXPECT_EQ(api.Requests("list"), 0);
}

}  // namespace
}  // namespace antdt::kube
