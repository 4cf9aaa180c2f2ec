#include "backends/kubernetes/runtime/informer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "testing/kube-fake/fake_api.h"
#include "testing/kube-fake/test_util.h"

namespace antdt::kube {
namespace {

using testing::AdvanceUntil;
using testing::Eventually;
using testing::HttpError;
using testing::Pod;

// What the handlers saw, as "add ns/name", "update ns/name rv->rv",
// "delete ns/name unknown|final".
class Recorder {
 public:
  Handlers handlers() {
    return Handlers{[this](const Json& o) { Push("add " + KeyOf(o)); },
                    [this](const Json& old, const Json& now) {
                      Push("update " + KeyOf(now) + " " + ResourceVersionOf(old) + "->" +
                           ResourceVersionOf(now));
                    },
                    [this](const Json& last, bool unknown) {
                      Push("delete " + KeyOf(last) + (unknown ? " unknown" : " final"));
                    }};
  }
  std::vector<std::string> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    out.swap(seen_);
    return out;
  }
  size_t Size() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.size();
  }

 private:
  void Push(std::string s) {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back(std::move(s));
  }
  std::mutex mu_;
  std::vector<std::string> seen_;
};

class InformerTest : public ::testing::Test {
 protected:
  void StartInformer(InformerOptions options = {}, const std::string& ns = "") {
    options.clock = &clock_;
    informer_ = std::make_unique<Informer>(&api_, PodsResource(), ns, ListOptions{}, options);
    informer_->AddHandler(recorder_.handlers());
    informer_->Start();
    ASSERT_TRUE(informer_->WaitForSync(10000));
    ASSERT_TRUE(api_.WaitForOpenWatches(1, 10000));
  }
  Json Create(const std::string& ns, const std::string& name, const Json& labels = {}) {
    absl::StatusOr<Json> o =
        api_.Create(PodsResource(), ns, Pod(ns, name, labels.is_null() ? Json::object() : labels));
    EXPECT_TRUE(o.ok()) << o.status();
    return *o;
  }
  Json Touch(const std::string& ns, const std::string& name) {
    absl::StatusOr<Json> o = api_.Patch(PodsResource(), ns, name,
                                        {{"metadata", {{"annotations", {{"t", ++touches_}}}}}});
    EXPECT_TRUE(o.ok()) << o.status();
    return *o;
  }
  bool WaitEvents(size_t n) {
    return Eventually([&] { return recorder_.Size() >= n; });
  }

  FakeClock clock_;
  FakeApi api_;
  Recorder recorder_;
  std::unique_ptr<Informer> informer_;
  int touches_ = 0;
};

TEST_F(InformerTest, InitialListSyncsCacheAndHandlers) {
  Create("a", "p1", {{"app", "x"}});
  Create("a", "p2", {{"app", "y"}});
  Create("b", "p3", {{"app", "x"}});
  StartInformer();
  EXPECT_TRUE(informer_->HasSynced());
  // Synced means delivered.
  EXPECT_EQ(recorder_.Take(), (std::vector<std::string>{"add a/p1", "add a/p2", "add b/p3"}));
  ASSERT_TRUE(informer_->Get("a/p2").has_value());
  EXPECT_EQ((*informer_->Get("a/p2"))["metadata"]["labels"]["app"], "y");
  EXPECT_FALSE(informer_->Get("a/zz").has_value());
  EXPECT_EQ(informer_->List().size(), 3u);
  EXPECT_EQ(informer_->List("a", {{"app", "x"}}).size(), 1u);
  EXPECT_EQ(informer_->List("", {{"app", "x"}}).size(), 2u);
  EXPECT_EQ(api_.ListResourceVersions(), (std::vector<std::string>{"0"}));
  EXPECT_EQ(informer_->LastSyncResourceVersion(), api_.ResourceVersion());
  EXPECT_EQ(informer_->stats().lists, 1);
}

TEST_F(InformerTest, WatchEventsReachHandlersInOrder) {
  StartInformer();
  Json p = Create("a", "p1");
  Json p2 = Touch("a", "p1");
  ASSERT_TRUE(api_.Delete(PodsResource(), "a", "p1").ok());
  ASSERT_TRUE(WaitEvents(3));
  EXPECT_EQ(recorder_.Take(),
            (std::vector<std::string>{
                "add a/p1", "update a/p1 " + ResourceVersionOf(p) + "->" + ResourceVersionOf(p2),
                "delete a/p1 final"}));
  EXPECT_FALSE(informer_->Get("a/p1").has_value());
  EXPECT_EQ(informer_->LastSyncResourceVersion(), api_.ResourceVersion());
  EXPECT_EQ(informer_->stats().events, 3);
}

TEST_F(InformerTest, RelistAfterExpiryDeliversWhatChangedWhileDisconnected) {
  Create("a", "keep");
  Create("a", "gone");
  Json changed = Create("a", "changed");
  StartInformer();
  recorder_.Take();
  const std::string rv_before = informer_->LastSyncResourceVersion();

  api_.ExpireWatches();
  // The informer backs off (on the fake clock) before relisting: change the
  // world meanwhile, with no watch open to see it.
  ASSERT_TRUE(Eventually([&] { return informer_->stats().watch_restarts_expired == 1; }));
  ASSERT_TRUE(api_.Delete(PodsResource(), "a", "gone").ok());
  Json changed2 = Touch("a", "changed");
  Create("a", "new");
  EXPECT_EQ(recorder_.Size(), 0u);

  ASSERT_TRUE(AdvanceUntil(clock_, [&] { return informer_->stats().lists == 2; }));
  ASSERT_TRUE(WaitEvents(3));
  std::vector<std::string> seen = recorder_.Take();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"add a/new", "delete a/gone unknown",
                                            "update a/changed " + ResourceVersionOf(changed) +
                                                "->" + ResourceVersionOf(changed2)}));
  // The relist read from the last RV, not "0" or "".
  EXPECT_EQ(api_.ListResourceVersions(), (std::vector<std::string>{"0", rv_before}));
  EXPECT_EQ(informer_->stats().relists, 1);
  EXPECT_FALSE(informer_->Get("a/gone").has_value());
  EXPECT_TRUE(informer_->Get("a/new").has_value());

  // And it watches again from the new list's RV.
  ASSERT_TRUE(api_.WaitForOpenWatches(1, 10000));
  Create("a", "later");
  ASSERT_TRUE(WaitEvents(1));
  EXPECT_EQ(recorder_.Take(), (std::vector<std::string>{"add a/later"}));
}

TEST_F(InformerTest, ExpiredListFallsBackToConsistentRead) {
  StartInformer();
  const std::string rv_before = informer_->LastSyncResourceVersion();
  api_.FailNext("list", HttpError(410, "Expired"));
  api_.ExpireWatches();
  ASSERT_TRUE(AdvanceUntil(clock_, [&] { return informer_->stats().lists == 2; }));
  EXPECT_EQ(api_.ListResourceVersions(), (std::vector<std::string>{"0", rv_before, ""}));
}

TEST_F(InformerTest, CleanTimeoutRewatchesWithoutRelist) {
  StartInformer();
  clock_.Advance(5000);  // the watch has lasted long enough to be normal
  api_.EndWatches();
  ASSERT_TRUE(Eventually([&] { return informer_->stats().watches == 2; }));
  ASSERT_TRUE(api_.WaitForOpenWatches(1, 10000));
  Informer::Stats s = informer_->stats();
  EXPECT_EQ(s.lists, 1);
  EXPECT_EQ(s.watch_restarts_timeout, 1);
  EXPECT_EQ(s.watch_restarts_error, 0);
  EXPECT_EQ(api_.Requests("list"), 1);
  Create("a", "p");
  ASSERT_TRUE(WaitEvents(1));
  EXPECT_EQ(recorder_.Take(), (std::vector<std::string>{"add a/p"}));
}

TEST_F(InformerTest, ShortEmptyWatchCountsAsError) {
  StartInformer();
  api_.EndWatches();  // no fake time has passed, no events: too short
  ASSERT_TRUE(Eventually([&] { return informer_->stats().watch_restarts_error == 1; }));
  EXPECT_EQ(informer_->stats().watch_restarts_timeout, 0);
  // It backs off, then rewatches without a relist.
  ASSERT_TRUE(AdvanceUntil(clock_, [&] { return informer_->stats().watches == 2; }));
  EXPECT_EQ(api_.Requests("list"), 1);
}

TEST_F(InformerTest, TransportErrorRewatchesFromSameRvWithoutRelist) {
  Json p = Create("a", "p");
  StartInformer();
  recorder_.Take();
  api_.DropWatches();
  ASSERT_TRUE(Eventually([&] { return informer_->stats().watch_restarts_error == 1; }));
  // A change while disconnected arrives through the resumed watch.
  Json p2 = Touch("a", "p");
  ASSERT_TRUE(AdvanceUntil(clock_, [&] { return informer_->stats().watches == 2; }));
  ASSERT_TRUE(WaitEvents(1));
  EXPECT_EQ(recorder_.Take(), (std::vector<std::string>{"update a/p " + ResourceVersionOf(p) +
                                                        "->" + ResourceVersionOf(p2)}));
  EXPECT_EQ(api_.Requests("list"), 1);
  EXPECT_EQ(informer_->stats().lists, 1);
}

TEST_F(InformerTest, TooManyRequestsWaitsForTheBackoff) {
  api_.FailNext("watch", HttpError(429, "TooManyRequests"));
  InformerOptions options;
  options.clock = &clock_;
  informer_ = std::make_unique<Informer>(&api_, PodsResource(), "", ListOptions{}, options);
  informer_->Start();
  ASSERT_TRUE(informer_->WaitForSync(10000));
  ASSERT_TRUE(Eventually([&] { return informer_->stats().watch_restarts_error == 1; }));
  // Without the clock moving, no new watch: it is backing off.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(api_.Requests("watch"), 1);
  clock_.Advance(700);  // below the 800 ms initial backoff
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(api_.Requests("watch"), 1);
  ASSERT_TRUE(AdvanceUntil(clock_, [&] { return api_.Requests("watch") == 2; }));
  ASSERT_TRUE(api_.WaitForOpenWatches(1, 10000));
  EXPECT_EQ(api_.Requests("list"), 1);
}

TEST_F(InformerTest, BookmarkAdvancesLastSyncResourceVersion) {
  StartInformer();
  const std::string before = informer_->LastSyncResourceVersion();
  // Writes to another kind move the global RV; the pod watch sees none.
  api_.Create(ServicesResource(), "a", {{"metadata", {{"name", "s"}}}}).IgnoreError();
  api_.Create(ServicesResource(), "a", {{"metadata", {{"name", "t"}}}}).IgnoreError();
  EXPECT_EQ(informer_->LastSyncResourceVersion(), before);
  api_.SendBookmarks();
  ASSERT_TRUE(
      Eventually([&] { return informer_->LastSyncResourceVersion() == api_.ResourceVersion(); }));
  EXPECT_NE(before, api_.ResourceVersion());
  EXPECT_EQ(recorder_.Size(), 0u);  // bookmarks are not handler events
}

TEST_F(InformerTest, ResyncRedeliversUpdatesWithOldEqualNew) {
  Json p = Create("a", "p");
  InformerOptions options;
  options.resync_ms = 10000;
  StartInformer(options);
  recorder_.Take();
  ASSERT_TRUE(AdvanceUntil(
      clock_, [&] { return recorder_.Size() >= 1; }, 1000));
  const std::string rv = ResourceVersionOf(p);
  EXPECT_EQ(recorder_.Take()[0], "update a/p " + rv + "->" + rv);
  EXPECT_EQ(api_.Requests("list"), 1);  // resync is not a relist
}

TEST_F(InformerTest, NamespaceAndStopEndsTheWatch) {
  Create("a", "p");
  Create("b", "q");
  StartInformer({}, "b");
  EXPECT_EQ(recorder_.Take(), (std::vector<std::string>{"add b/q"}));
  informer_->Stop();
  EXPECT_EQ(api_.OpenWatches(), 0);
  Create("b", "r");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(recorder_.Size(), 0u);
}

}  // namespace
}  // namespace antdt::kube
