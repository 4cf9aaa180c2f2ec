#include "backends/local/workers.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace antdt::local {
namespace {

// A child that runs until the test ends it (exit code) or it is signalled.
struct FakeChildState {
  std::vector<std::string> argv;
  std::optional<int> status;  // wait status once ended
  std::vector<int> signals;
};

class FakeChild final : public Child {
 public:
  explicit FakeChild(FakeChildState* state) : state_(state) {}
  void Signal(int sig) override {
    state_->signals.push_back(sig);
    if (sig == SIGKILL) state_->status = sig;  // WIFSIGNALED
  }
  std::optional<int> Wait(std::chrono::milliseconds) override { return state_->status; }

 private:
  FakeChildState* state_;
};

class FakeLauncher final : public Launcher {
 public:
  std::vector<std::unique_ptr<FakeChildState>> launched;
  std::unique_ptr<Child> Launch(const WorkerLaunch& launch, const std::string&) override {
    launched.push_back(std::make_unique<FakeChildState>());
    launched.back()->argv = launch.argv;
    return std::make_unique<FakeChild>(launched.back().get());
  }
  // The latest launch whose argv starts with `id`.
  FakeChildState* Latest(const std::string& id) {
    for (auto it = launched.rbegin(); it != launched.rend(); ++it) {
      if ((*it)->argv[0] == id) return it->get();
    }
    return nullptr;
  }
};

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1 << 8;  // exited with status 1

struct Fixture {
  FakeClock clock{1'000};
  FakeLauncher launcher;
  std::vector<std::string> events;
  std::vector<std::string> retired;
  std::vector<std::string> spawned;
  WorkerSet workers{Options(), &launcher, &clock};

  void Start(const std::string& id, const std::string& node, int64_t local_batch) {
    ASSERT_TRUE(workers.Start(id, node, local_batch).ok());
  }

  WorkerSetOptions Options() {
    WorkerSetOptions o;
    o.log_dir = "/nonexistent";
    o.backoff_limit = 2;
    o.launch = [](const WorkerSlot& w) -> absl::StatusOr<WorkerLaunch> {
      if (w.node == "broken") return absl::InvalidArgumentError("cannot launch on broken");
      return WorkerLaunch{{w.id, w.node, absl::StrCat(w.incarnation), absl::StrCat(w.local_batch),
                           absl::StrCat("rank=", w.rank)},
                          {},
                          ""};
    };
    o.on_spawn = [this](const WorkerSlot& w, int) {
      spawned.push_back(absl::StrCat(w.id, "@", w.incarnation, " on ", w.node));
      return absl::OkStatus();
    };
    o.retire = [this](const std::string& worker, int32_t incarnation) {
      retired.push_back(absl::StrCat(worker, "@", incarnation));
      return absl::OkStatus();
    };
    o.on_event = [this](const std::string& line) { events.push_back(line); };
    return o;
  }
};

TEST(WorkerSet, StartsEachWorkerOnItsNodeAndIsDoneWhenAllExitCleanly) {
  Fixture f;
  f.Start("worker-0", "node-0", 64);
  f.Start("worker-1", "node-1", 32);
  ASSERT_EQ(f.launcher.launched.size(), 2u);
  EXPECT_EQ(absl::StrJoin(f.launcher.launched[1]->argv, " "), "worker-1 node-1 0 32 rank=1");
  EXPECT_FALSE(*f.workers.Poll());
  f.launcher.Latest("worker-0")->status = kExitOk;
  EXPECT_FALSE(*f.workers.Poll());
  EXPECT_EQ(f.workers.BusyNodes().count("node-0"), 0u);
  f.launcher.Latest("worker-1")->status = kExitOk;
  EXPECT_TRUE(*f.workers.Poll());
  EXPECT_TRUE(f.retired.empty());
  const auto members = f.workers.Members();
  ASSERT_EQ(members.size(), 2u);
  EXPECT_FALSE(members[0].alive);
}

TEST(WorkerSet, FailedWorkerIsRetiredAndStartedAgainUntilTheBackoffLimit) {
  Fixture f;
  f.Start("worker-0", "node-0", 64);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    f.launcher.Latest("worker-0")->status = kExitFailed;
    auto done = f.workers.Poll();
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_FALSE(*done);
    // The next incarnation on the same node, after the failed one was retired.
    EXPECT_EQ(f.launcher.Latest("worker-0")->argv[2], absl::StrCat(attempt));
    EXPECT_EQ(f.launcher.Latest("worker-0")->argv[1], "node-0");
    EXPECT_EQ(f.retired.back(), absl::StrCat("worker-0@", attempt - 1));
  }
  f.launcher.Latest("worker-0")->status = kExitFailed;
  auto done = f.workers.Poll();
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.status().message().find("worker-0 failed 3 times (runPolicy.backoffLimit)"),
            std::string::npos)
      << done.status();
}

TEST(WorkerSet, RestartElsewhereKillsRetiresAndStartsOnTheNewNode) {
  Fixture f;
  f.Start("worker-0", "node-0", 64);
  f.Start("worker-1", "node-1", 64);
  FakeChildState* old = f.launcher.Latest("worker-1");
  f.clock.Advance(5'000);
  ASSERT_TRUE(f.workers.RestartElsewhere("worker-1", "spare-0").ok());
  EXPECT_EQ(old->signals, std::vector<int>{SIGKILL});
  EXPECT_EQ(f.retired, std::vector<std::string>{"worker-1@0"});
  EXPECT_EQ(absl::StrJoin(f.launcher.Latest("worker-1")->argv, " "),
            "worker-1 spare-0 1 64 rank=1");
  const auto members = f.workers.Members();
  EXPECT_EQ(members[1].node, "spare-0");
  EXPECT_EQ(members[1].incarnation, 1);
  EXPECT_EQ(members[1].last_restart_ms, 6'000);
  EXPECT_TRUE(f.workers.BusyNodes().count("spare-0"));
  EXPECT_FALSE(f.workers.BusyNodes().count("node-1"));
  // The killed incarnation is not counted as a failure.
  EXPECT_FALSE(*f.workers.Poll());
  EXPECT_EQ(f.workers.Find("worker-1")->failures, 0);
  EXPECT_FALSE(f.workers.RestartElsewhere("worker-7", "spare-0").ok());
}

TEST(WorkerSet, EachIncarnationIsReportedAfterItsLaunchAndALaunchErrorStopsTheRun) {
  Fixture f;
  f.Start("worker-0", "node-0", 64);
  ASSERT_TRUE(f.workers.RestartElsewhere("worker-0", "spare-0").ok());
  EXPECT_EQ(f.spawned, (std::vector<std::string>{"worker-0@0 on node-0", "worker-0@1 on spare-0"}));
  absl::Status s = f.workers.RestartElsewhere("worker-0", "broken");
  EXPECT_EQ(s.message(), "cannot launch on broken");
  EXPECT_FALSE(f.workers.Start("worker-1", "broken", 64).ok());
}

TEST(WorkerSet, DoneWorkerIsNotRestarted) {
  Fixture f;
  f.Start("worker-0", "node-0", 64);
  f.launcher.Latest("worker-0")->status = kExitOk;
  EXPECT_TRUE(*f.workers.Poll());
  ASSERT_TRUE(f.workers.RestartElsewhere("worker-0", "spare-0").ok());
  EXPECT_EQ(f.launcher.launched.size(), 1u);
  EXPECT_TRUE(f.retired.empty());
}

TEST(WorkerSet, KillAllSignalsOnlyRunningWorkers) {
  Fixture f;
  f.Start("worker-0", "node-0", 64);
  f.Start("worker-1", "node-1", 64);
  f.launcher.Latest("worker-0")->status = kExitOk;
  f.workers.KillAll();
  EXPECT_TRUE(f.launcher.Latest("worker-0")->signals.empty());
  EXPECT_EQ(f.launcher.Latest("worker-1")->signals, std::vector<int>{SIGKILL});
}

}  // namespace
}  // namespace antdt::local
