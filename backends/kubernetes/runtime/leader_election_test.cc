#include "backends/kubernetes/runtime/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <thread>

#include "testing/kube-fake/fake_api.h"
#include "testing/kube-fake/test_util.h"

namespace antdt::kube {
namespace {

using testing::AdvanceUntil;
using testing::Eventually;

// One candidate's connection to the shared fake server; its writes can be
// made to fail (a partitioned leader).
class CandidateApi : public Api {
 public:
  explicit CandidateApi(FakeApi* api) : api_(api) {}
  std::atomic<bool> fail_writes{false};

  absl::StatusOr<Json> Get(const ResourceRef& r, const std::string& ns,
                           const std::string& name) override {
    return api_->Get(r, ns, name);
  }
  absl::StatusOr<Json> List(const ResourceRef& r, const std::string& ns,
                            const ListOptions& o) override {
    return api_->List(r, ns, o);
  }
  absl::StatusOr<Json> Create(const ResourceRef& r, const std::string& ns, const Json& o) override {
    if (fail_writes) return absl::UnavailableError("partitioned");
    return api_->Create(r, ns, o);
  }
  absl::StatusOr<Json> Update(const ResourceRef& r, const std::string& ns, const Json& o) override {
    if (fail_writes) return absl::UnavailableError("partitioned");
    return api_->Update(r, ns, o);
  }
  absl::StatusOr<Json> UpdateStatus(const ResourceRef& r, const std::string& ns,
                                    const Json& o) override {
    return api_->UpdateStatus(r, ns, o);
  }
  absl::StatusOr<Json> Patch(const ResourceRef& r, const std::string& ns, const std::string& n,
                             const Json& p, PatchType t, const std::string& s) override {
    return api_->Patch(r, ns, n, p, t, s);
  }
  absl::Status Delete(const ResourceRef& r, const std::string& ns, const std::string& n,
                      const DeleteOptions& o) override {
    return api_->Delete(r, ns, n, o);
  }
  absl::Status Watch(const ResourceRef& r, const std::string& ns, const WatchOptions& o,
                     const std::function<bool(const WatchEvent&)>& f, Cancel* c) override {
    return api_->Watch(r, ns, o, f, c);
  }

 private:
  FakeApi* api_;
};

LeaderElectionConfig Config(const std::string& identity, FakeClock* clock) {
  LeaderElectionConfig c;
  c.lease_namespace = "antdt-system";
  c.lease_name = "antdt-operator";
  c.identity = identity;
  c.clock = clock;
  return c;  // 15 s / 10 s / 2 s
}

// A candidate running Run() on its own thread, recording when (fake time)
// it started and stopped leading.
struct Candidate {
  Candidate(FakeApi* fake, const std::string& id, FakeClock* clock)
      : api(fake), elector(&api, Config(id, clock)), clock_(clock) {}
  ~Candidate() {
    elector.Stop();
    if (thread.joinable()) thread.join();
  }
  void Start() {
    thread = std::thread([this] {
      result = elector.Run([this] { started_at = clock_->NowMillis(); },
                           [this] { stopped_at = clock_->NowMillis(); });
      returned = true;
    });
  }
  CandidateApi api;
  LeaderElector elector;
  FakeClock* clock_;
  std::thread thread;
  std::atomic<int64_t> started_at{-1};
  std::atomic<int64_t> stopped_at{-1};
  std::atomic<bool> returned{false};
  absl::Status result;
};

Json Lease(FakeApi& api) {
  absl::StatusOr<Json> lease = api.Get(LeasesResource(), "antdt-system", "antdt-operator");
  EXPECT_TRUE(lease.ok()) << lease.status();
  return lease.ok() ? (*lease)["spec"] : Json();
}

TEST(LeaderElectionTest, ValidatesConfigNamingTheField) {
  FakeClock clock;
  LeaderElectionConfig c = Config("a", &clock);
  EXPECT_TRUE(ValidateLeaderElectionConfig(c).ok());
  c.renew_deadline_ms = 15000;
  EXPECT_NE(ValidateLeaderElectionConfig(c).message().find("lease_duration_ms"), std::string::npos);
  c = Config("a", &clock);
  c.retry_period_ms = 9000;  // 1.2 * 9 s > 10 s
  EXPECT_NE(ValidateLeaderElectionConfig(c).message().find("renew_deadline_ms"), std::string::npos);
  c = Config("", &clock);
  EXPECT_NE(ValidateLeaderElectionConfig(c).message().find("identity"), std::string::npos);

  FakeApi api;
  LeaderElector bad(&api, c);
  EXPECT_EQ(bad.Run(nullptr, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LeaderElectionTest, CreatesTheLeaseAndRenews) {
  FakeClock clock;
  FakeApi api;
  Candidate a(&api, "a", &clock);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.elector.IsLeader(); }));
  Json spec = Lease(api);
  EXPECT_EQ(spec["holderIdentity"], "a");
  EXPECT_EQ(spec["leaseDurationSeconds"], 15);
  EXPECT_EQ(spec["leaseTransitions"], 0);
  const std::regex micro(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  EXPECT_TRUE(std::regex_match(spec["acquireTime"].get<std::string>(), micro));
  EXPECT_EQ(a.elector.CurrentHolder(), "a");
  const std::string acquired = spec["acquireTime"];
  const std::string renewed = spec["renewTime"];
  ASSERT_TRUE(AdvanceUntil(clock, [&] { return Lease(api)["renewTime"] != renewed; }));
  EXPECT_EQ(Lease(api)["acquireTime"], acquired);  // kept on renewal
  EXPECT_EQ(Lease(api)["leaseTransitions"], 0);
}

TEST(LeaderElectionTest, TakeoverAfterTheLeaderStopsRenewing) {
  FakeClock clock;
  FakeApi api;
  Candidate a(&api, "a", &clock);
  Candidate b(&api, "b", &clock);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.elector.IsLeader(); }));
  b.Start();
  // Several renew periods pass; b keeps seeing a valid, changing lease.
  ASSERT_FALSE(AdvanceUntil(
      clock, [&] { return b.elector.IsLeader(); }, 100, 8000, 10));
  EXPECT_TRUE(a.elector.IsLeader());
  EXPECT_EQ(b.elector.CurrentHolder(), "a");

  // a is cut off from the server: its renewals fail.
  a.api.fail_writes = true;
  const int64_t cut_at = clock.NowMillis();
  // Wait for b's callback, not IsLeader(): the elector is leader a moment
  // before it calls on_started_leading, and the fake time the callback
  // records is what is judged.
  ASSERT_TRUE(AdvanceUntil(
      clock, [&] { return b.started_at.load() >= 0; }, 100, 60000, 10));
  const int64_t took_over = b.started_at.load();
  // b judges by its own observation: one lease duration after it first saw
  // a's last renewal (up to one jittered retry period, 4.4 s, after the
  // cut), plus its own retry period.
  EXPECT_LE(took_over - cut_at, 4400 + 15000 + 4400 + 500);
  EXPECT_GE(took_over - cut_at, 15000 - 2000 - 500);

  // a gave up within its renew deadline, before b took over, and returned.
  ASSERT_TRUE(Eventually([&] { return a.returned.load(); }));
  EXPECT_EQ(a.result.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(a.result.message(), "leader election lost");
  EXPECT_FALSE(a.elector.IsLeader());
  EXPECT_GE(a.stopped_at.load(), 0);
  EXPECT_LT(a.stopped_at.load(), took_over);

  Json spec = Lease(api);
  EXPECT_EQ(spec["holderIdentity"], "b");
  EXPECT_EQ(spec["leaseTransitions"], 1);
}

TEST(LeaderElectionTest, ReleaseLetsTheOtherAcquireAtOnce) {
  FakeClock clock;
  FakeApi api;
  Candidate a(&api, "a", &clock);
  Candidate b(&api, "b", &clock);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.elector.IsLeader(); }));
  b.Start();
  ASSERT_TRUE(AdvanceUntil(clock, [&] { return b.elector.CurrentHolder() == "a"; }));

  a.elector.Stop();
  ASSERT_TRUE(Eventually([&] { return a.returned.load(); }));
  EXPECT_TRUE(a.result.ok()) << a.result;
  EXPECT_GE(a.stopped_at.load(), 0);
  Json released = Lease(api);
  EXPECT_EQ(released["holderIdentity"], "");
  EXPECT_EQ(released["leaseDurationSeconds"], 1);

  const int64_t released_at = clock.NowMillis();
  ASSERT_TRUE(AdvanceUntil(
      clock, [&] { return b.started_at.load() >= 0; }, 100, 60000, 10));
  // No waiting out the 15 s lease: b's next retry takes it.
  EXPECT_LE(b.started_at.load() - released_at, 4400 + 500);
  EXPECT_EQ(Lease(api)["holderIdentity"], "b");
  EXPECT_EQ(Lease(api)["leaseTransitions"], 1);
}

TEST(LeaderElectionTest, StopWhileCampaigningReturnsOk) {
  FakeClock clock;
  FakeApi api;
  api.FailNext("get", absl::UnavailableError("down"), 1000);
  Candidate a(&api, "a", &clock);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return api.Requests("get") >= 1; }));
  a.elector.Stop();
  ASSERT_TRUE(Eventually([&] { return a.returned.load(); }));
  EXPECT_TRUE(a.result.ok());
  EXPECT_EQ(a.stopped_at.load(), -1);  // never led
}

}  // namespace
}  // namespace antdt::kube
