#include "core/loop/control_loop.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace antdt::loop {
namespace {

constexpr int64_t kStart = 1'700'000'000'000;

// A backend that records every call; members, nodes and health are set by the test.
class FakeBackend : public Backend {
 public:
  std::optional<v1::GetJobHealthResponse> health;
  std::vector<policy::WorkerState> members;
  std::vector<policy::NodeState> nodes;
  double remaining = 36'000;
  std::vector<std::string> calls;  // in order, one line each
  std::vector<v1::Directive> directives;
  bool deliver = true;
  std::vector<ServerServing> serving;
  int64_t windows = -1;

  // What a backend gathers for a turn, now.
  Observation Observe(const Clock& clock) const {
    Observation now;
    now.now_ms = clock.NowMillis();
    now.windows_closed = windows;
    now.health = health;
    now.members = members;
    now.nodes = nodes;
    now.remaining_seconds = remaining;
    now.servers_serving = serving;
    return now;
  }
  absl::Status RestartElsewhere(const policy::WorkerState& member,
                                const policy::KillRestart& restart) override {
    calls.push_back(absl::StrCat("restart ", member.id, "@", member.incarnation, " ",
                                 restart.from_node, "->", restart.to_node));
    return absl::OkStatus();
  }
  bool SendDirective(const std::string& node, const v1::Directive& directive) override {
    calls.push_back(absl::StrCat("directive ", directive.worker_id(), "@", node,
                                 " batch=", directive.adjust_batch().local_batch_size(),
                                 " steps=", directive.adjust_batch().accumulation_steps()));
    directives.push_back(directive);
    return deliver;
  }
  void LeaveParameterServers(const std::string& worker) override {
    calls.push_back("leave " + worker);
  }
  absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) override {
    calls.push_back(absl::StrCat("release ", worker, "@", incarnation));
    return absl::OkStatus();
  }
  void RecordAction(const policy::Decision& d, Outcome outcome) override {
    calls.push_back(absl::StrCat(
        "record ", policy::ActionName(d.action), " ", policy::ActionTarget(d.action), " ", d.rule,
        outcome == Outcome::kDone ? std::string() : absl::StrCat(" ", OutcomeName(outcome))));
  }
  void RecordTime(const TimeDelta& delta) override { times.push_back(delta); }
  void RecordSkipped(const std::string& line, policy::SkipReason reason) override {
    skipped.push_back(absl::StrCat(policy::SkipReasonName(reason), " ", line));
  }
  void RecordBudgetUsed(int used) override { budget_used.push_back(used); }
  void RecordRecommendation(const Recommendation& r) override { recommendations.push_back(r); }
  std::vector<Recommendation> recommendations;
  std::vector<TimeDelta> times;
  std::vector<std::string> skipped;
  std::vector<int> budget_used;  // each RecordBudgetUsed, in order
};

// One turn as the runner and the simulator take it: Apply(Step(Observe())),
// the plan carried out (empty when none was due).
absl::StatusOr<policy::Plan> RunOnce(ControlLoop& loop, const FakeBackend& b, const Clock& clock) {
  Ready ready = loop.Step(b.Observe(clock));
  if (absl::Status s = loop.Apply(ready); !s.ok()) return s;
  return std::move(ready.plan);
}

// Four workers on node-0..3 at batch 64; worker `slow` reported as `cls`.
void Job(FakeBackend& b, const std::string& slow, v1::StragglerClass cls, double score,
         int windows_slow) {
  b.health.emplace();
  b.health->set_job("team/ctr");
  b.members.clear();
  for (int i = 0; i < 4; ++i) {
    const std::string id = absl::StrCat("worker-", i);
    v1::WorkerHealth* h = b.health->add_workers();
    h->set_job("team/ctr");
    h->set_worker_id(id);
    h->set_role("worker");
    h->set_node(absl::StrCat("node-", i));
    const bool is_slow = id == slow;
    h->set_score(is_slow ? score : 1.0);
    h->set_self_score(is_slow ? score : 1.0);
    h->set_class_(is_slow ? cls : v1::HEALTHY);
    h->set_windows_slow(is_slow ? windows_slow : 0);
    policy::WorkerState w;
    w.id = id;
    w.node = absl::StrCat("node-", i);
    w.local_batch_size = 64;
    b.members.push_back(w);
  }
  b.nodes = {{"node-0", false, 0},
             {"node-1", false, 0},
             {"node-2", false, 0},
             {"node-3", false, 0},
             {"spare-0", true, 0}};
}

LoopOptions Options(vocab::Policy policy) {
  LoopOptions o;
  o.job = "team/ctr";
  o.policy.name = policy;
  o.policy.cooldown_ms = 60'000;
  o.policy.min_saving_ratio = 1.0;
  o.global_batch_size = 256;
  o.window_ms = 10'000;
  o.interval_ms = 5'000;
  return o;
}

// Every look feeds the ledger (and the backend's metrics); every plan's
// skipped actions reach the backend with their reason.
TEST(ControlLoop, LedgerAndSkipsReachTheBackend) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  for (int i = 0; i < 4; ++i) {  // worker-2 3x slower per sample at equal batches
    v1::WorkerHealth* h = b.health->mutable_workers(i);
    h->set_samples_per_second(i == 2 ? 64.0 / 3 : 64);
    h->set_bpt_seconds(i == 2 ? 3 : 1);
  }
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());  // ADJUST_BS now: worker-2 in its cool-down after
  clock.Advance(5'000);
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  ASSERT_EQ(b.times.size(), 2u);
  EXPECT_DOUBLE_EQ(b.times[1].lost_seconds, 5.0 * (1 - 1.0 / 3));  // the view says 3 s steps
  EXPECT_DOUBLE_EQ(loop.time_ledger().lost_seconds(), b.times[1].lost_seconds);
  ASSERT_FALSE(b.skipped.empty());
  EXPECT_EQ(b.skipped[0].rfind("cooldown worker-2: ", 0), 0u) << b.skipped[0];
}

// A directive whose agent is not connected is recorded as not delivered; the
// decision stands and the next plan re-plans from the batches it sees.
TEST(ControlLoop, UndeliveredDirectiveIsRecordedAsSuch) {
  FakeClock clock(kStart);
  FakeBackend b;
  b.deliver = false;
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  auto plan = RunOnce(loop, b, clock);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->decisions.empty());
  bool recorded = false;
  for (const std::string& call : b.calls) {
    if (absl::StartsWith(call, "record ADJUST_BS worker-2 ")) {
      recorded = true;
      EXPECT_TRUE(absl::EndsWith(call, " not_delivered")) << call;
    }
  }
  EXPECT_TRUE(recorded);
  EXPECT_EQ(loop.history().size(), plan->decisions.size());
}

TEST(ControlLoop, TransientStragglerGetsSmallerBatchThroughItsAgent) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  auto plan = RunOnce(loop, b, clock);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->decisions.empty());
  // One directive per batch change, to the member's node, batches summing to 256.
  int64_t sum = 0;
  bool straggler_shrunk = false;
  for (const v1::Directive& d : b.directives) {
    EXPECT_EQ(d.job(), "team/ctr");
    EXPECT_EQ(d.adjust_batch().accumulation_steps(), 1);
    if (d.worker_id() == "worker-2") straggler_shrunk = d.adjust_batch().local_batch_size() < 64;
  }
  EXPECT_TRUE(straggler_shrunk);
  for (const policy::Decision& d : plan->decisions) {
    sum += std::get<policy::AdjustBatchSize>(d.action).local_batch_size;
  }
  // Workers whose batch is unchanged get no decision; theirs stay at 64.
  sum += 64 * (4 - static_cast<int64_t>(plan->decisions.size()));
  EXPECT_EQ(sum, 256);
  EXPECT_EQ(loop.history().size(), plan->decisions.size());
  // Versions increase, even within one millisecond.
  for (size_t i = 1; i < b.directives.size(); ++i) {
    EXPECT_GT(b.directives[i].version(), b.directives[i - 1].version());
  }
}

// Every directive a backend delivers is the loop's: a re-delivered batch
// keeps its accumulation steps, and a moved server reaches every running
// worker, each at a version above all the loop's decisions used.
TEST(ControlLoop, ReDeliveriesAndServerMovesAreTheLoopsDirectives) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  LoopOptions o = Options(vocab::Policy::kAntdtNd);
  o.namespace_ = "team";
  ControlLoop loop(o, &b, &clock);
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  ASSERT_FALSE(b.directives.empty());
  const int64_t last = b.directives.back().version();

  const v1::Directive again = loop.BatchDirective("worker-1", 48, 3, "committed, not delivered");
  EXPECT_EQ(again.job(), "team/ctr");
  EXPECT_EQ(again.namespace_(), "team");
  EXPECT_EQ(again.worker_id(), "worker-1");
  EXPECT_EQ(again.adjust_batch().local_batch_size(), 48);
  EXPECT_EQ(again.adjust_batch().accumulation_steps(), 3);
  EXPECT_EQ(again.reason(), "committed, not delivered");
  EXPECT_GT(again.version(), last);
  EXPECT_EQ(loop.BatchDirective("worker-1", 48, 0, "").adjust_batch().accumulation_steps(), 1);

  // ps-0 moved and serves from node-9: every running worker is pointed
  // there once, by the step's deliveries, and only when Apply sends them.
  b.members[3].alive = false;  // being restarted: told when it starts
  b.members[3].node.clear();
  policy::WorkerState ps;
  ps.id = "ps-0";
  ps.role = vocab::Role::kParameterServer;
  ps.node = "node-9";
  b.members.push_back(ps);
  b.serving = {{"ps-0", 1, "10.0.0.9:7000", "node-9"}};
  b.calls.clear();
  const Ready ready = loop.Step(b.Observe(clock));
  EXPECT_FALSE(ready.decided) << "not due: the interval is 5 s";
  EXPECT_TRUE(b.calls.empty()) << "a step sends nothing";
  const std::vector<Delivery>& moved = ready.deliveries;
  ASSERT_EQ(moved.size(), 3u);  // workers 0-2: not the one restarting, not the server
  int64_t previous = again.version();
  for (size_t i = 0; i < moved.size(); ++i) {
    EXPECT_EQ(moved[i].node, absl::StrCat("node-", i));
    EXPECT_EQ(moved[i].directive.worker_id(), absl::StrCat("worker-", i));
    EXPECT_EQ(moved[i].directive.move_parameter_server().ps_id(), "ps-0");
    EXPECT_EQ(moved[i].directive.move_parameter_server().address(), "10.0.0.9:7000");
    EXPECT_EQ(moved[i].directive.reason(), "ps-0 moved to node-9");
    EXPECT_GT(moved[i].directive.version(), previous);
    previous = moved[i].directive.version();
  }
  ASSERT_TRUE(loop.Apply(ready).ok());
  EXPECT_EQ(b.calls.size(), 3u);
  EXPECT_TRUE(loop.Step(b.Observe(clock)).deliveries.empty()) << "announced once per move";
  b.serving[0].incarnation = 2;
  EXPECT_EQ(loop.Step(b.Observe(clock)).deliveries.size(), 3u) << "moved again";
}

// A backend's own departures (the operator's: a removed worker's pod gone, a
// restarted worker's earlier pod gone) go out through the loop's Apply, before
// the step's decisions are carried out, and only there: one stream of effects.
TEST(ControlLoop, ABackendsDeparturesAreCarriedOutFirstByApply) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  Ready ready = loop.Step(b.Observe(clock));
  ASSERT_TRUE(ready.decided);
  ASSERT_FALSE(ready.effects.empty());
  ready.departures.push_back({"worker-7", 0, /*leave_servers=*/true, false});
  ready.departures.push_back({"worker-9", 3, false, /*release_shards=*/true});
  EXPECT_TRUE(b.calls.empty()) << "a step sends nothing";
  ASSERT_TRUE(loop.Apply(ready).ok());
  ASSERT_GE(b.calls.size(), 3u);
  EXPECT_EQ(b.calls[0], "leave worker-7");
  EXPECT_EQ(b.calls[1], "release worker-9@3");
  EXPECT_EQ(b.calls[2].rfind("directive worker-", 0), 0u) << b.calls[2];
  for (size_t i = 2; i < b.calls.size(); ++i) {
    EXPECT_EQ(b.calls[i].find("leave"), std::string::npos) << "each departure once";
    EXPECT_EQ(b.calls[i].find("release"), std::string::npos) << "each departure once";
  }
}

// A backend whose members may run without their committed batch (the
// operator's pods) has it re-delivered once to each incarnation; a worker the
// same step sizes is not sent its old batch, and a re-delivery overtaken by
// another delivery before it is applied is passed over.
TEST(ControlLoop, CommittedBatchesAreReDeliveredOncePerIncarnation) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "", v1::HEALTHY, 1.0, 0);
  b.members[1].accumulation_steps = 4;
  LoopOptions o = Options(vocab::Policy::kAntdtNd);
  o.redeliver_batches = true;
  ControlLoop loop(o, &b, &clock);
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  ASSERT_EQ(b.directives.size(), 4u);
  EXPECT_EQ(b.directives[1].worker_id(), "worker-1");
  EXPECT_EQ(b.directives[1].adjust_batch().local_batch_size(), 64);
  EXPECT_EQ(b.directives[1].adjust_batch().accumulation_steps(), 4);
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  EXPECT_EQ(b.directives.size(), 4u) << "delivered: not again";

  b.members[2].incarnation = 1;  // restarted: its new incarnation gets it
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  ASSERT_EQ(b.directives.size(), 5u);
  EXPECT_EQ(b.directives[4].worker_id(), "worker-2");

  b.deliver = false;  // an agent away: tried again at the next step
  b.members[0].local_batch_size = 80;
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  b.deliver = true;
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  ASSERT_EQ(b.directives.size(), 7u);
  EXPECT_EQ(b.directives[6].adjust_batch().local_batch_size(), 80);

  b.members[3].local_batch_size = 32;
  const Ready ready = loop.Step(b.Observe(clock));
  ASSERT_EQ(ready.deliveries.size(), 1u);
  // Another batch sent in between (a rescale's): the old one is not sent after it.
  ASSERT_TRUE(loop.Deliver({"node-3", loop.BatchDirective("worker-3", 40, 1, "rescale"), 0}));
  ASSERT_TRUE(loop.Apply(ready).ok());
  ASSERT_EQ(b.directives.size(), 8u);
  EXPECT_EQ(b.directives.back().adjust_batch().local_batch_size(), 40);
}

// antdt-nd restarting by its thresholds (decideBy: thresholds): the loop's
// handling of a restart is the same whichever way it was decided, and a
// PERSISTENT class restarts at once this way.
LoopOptions ThresholdOptions() {
  LoopOptions o = Options(vocab::Policy::kAntdtNd);
  o.policy.by_expected_duration = false;
  return o;
}

// Mode Recommend: the same decisions, none carried out (no directive, no
// restart, no action recorded), each recommended with its predicted saving
// and cost, and in the history so that its cool-down holds as it would have.
TEST(ControlLoop, RecommendModeDecidesAsUsualAndCarriesNothingOut) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-1", v1::PERSISTENT, 3.0, 5);
  LoopOptions o = ThresholdOptions();
  o.mode = vocab::Mode::kRecommend;
  ControlLoop loop(o, &b, &clock);
  auto plan = RunOnce(loop, b, clock);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->decisions.empty());
  EXPECT_TRUE(b.calls.empty()) << b.calls.front();
  ASSERT_EQ(b.recommendations.size(), plan->decisions.size());
  const auto restart =
      std::find_if(b.recommendations.begin(), b.recommendations.end(), [](const Recommendation& r) {
        return std::holds_alternative<policy::KillRestart>(r.decision.action);
      });
  ASSERT_NE(restart, b.recommendations.end());
  EXPECT_EQ(restart->decision.subject, "worker-1");
  EXPECT_GT(restart->predicted_saving_seconds, restart->cost_seconds);
  EXPECT_DOUBLE_EQ(restart->cost_seconds, loop.RestartCostSeconds());
  EXPECT_EQ(loop.history().size(), plan->decisions.size());
  clock.Advance(5'000);
  b.recommendations.clear();
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());
  for (const Recommendation& r : b.recommendations) {
    EXPECT_FALSE(std::holds_alternative<policy::KillRestart>(r.decision.action))
        << "worker-1's cool-down holds";
  }
  EXPECT_TRUE(b.calls.empty());
}

TEST(ControlLoop, DecidesOnlyWhenDueAndOnlyWithAView) {
  FakeClock clock(kStart);
  FakeBackend b;
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  auto plan = RunOnce(loop, b, clock);  // nothing reported yet
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->decisions.empty());
  EXPECT_TRUE(b.calls.empty());
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  clock.Advance(4'999);
  plan = RunOnce(loop, b, clock);  // not due: the interval is 5 s
  EXPECT_TRUE(plan->decisions.empty());
  EXPECT_TRUE(b.calls.empty());
  clock.Advance(1);
  plan = RunOnce(loop, b, clock);
  EXPECT_FALSE(plan->decisions.empty());
  EXPECT_FALSE(b.calls.empty());
}

// A window the Monitor closes is a turn at once, between the interval's
// turns: its news is freshest then.
TEST(ControlLoop, ANewWindowIsATurnAtOnce) {
  FakeClock clock(kStart);
  FakeBackend b;
  b.windows = 0;
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  ASSERT_TRUE(RunOnce(loop, b, clock).ok());  // the first turn: nothing reported yet
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  clock.Advance(1'000);
  EXPECT_TRUE(RunOnce(loop, b, clock)->decisions.empty())
      << "no new window, 4 s before the interval";
  b.windows = 1;
  clock.Advance(200);
  EXPECT_FALSE(RunOnce(loop, b, clock)->decisions.empty()) << "window 1 closed: a turn";
  const size_t calls = b.calls.size();
  clock.Advance(200);
  EXPECT_TRUE(RunOnce(loop, b, clock)->decisions.empty()) << "the same window: no second turn";
  EXPECT_EQ(b.calls.size(), calls);
}

TEST(ControlLoop, PersistentStragglerRestartedOnSpareAndRelaunchTimeMeasured) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-1", v1::PERSISTENT, 4.0, 6);
  ControlLoop loop(ThresholdOptions(), &b, &clock);
  EXPECT_DOUBLE_EQ(loop.RestartCostSeconds(), kMinRelaunchSeconds + 10.0);
  auto plan = RunOnce(loop, b, clock);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(b.calls.empty());
  EXPECT_EQ(b.calls[0], "restart worker-1@0 node-1->spare-0");
  EXPECT_EQ(b.calls[1], "record KILL_RESTART worker-1 antdt-nd:persistent-restart");
  ASSERT_FALSE(loop.history().empty());
  EXPECT_EQ(loop.history()[0].subject, "worker-1");

  // The member comes back 3 s later as incarnation 1, not yet alive, then alive.
  Job(b, "", v1::HEALTHY, 1.0, 0);
  b.members[1].incarnation = 1;
  b.members[1].node = "spare-0";
  b.members[1].alive = false;
  clock.Advance(1'000);
  ASSERT_TRUE(loop.PolicyInput(b.Observe(clock)).has_value());
  EXPECT_EQ(loop.measured_restarts(), 0);
  b.members[1].alive = true;
  clock.Advance(2'000);
  std::optional<policy::Observed> obs = loop.PolicyInput(b.Observe(clock));
  ASSERT_TRUE(obs.has_value());
  EXPECT_EQ(loop.measured_restarts(), 1);
  EXPECT_DOUBLE_EQ(loop.RestartCostSeconds(), 3.0 + 10.0);
  EXPECT_DOUBLE_EQ(obs->restart_cost_seconds, 3.0 + 10.0);
  // A parameter server's move is measured on moves only.
  EXPECT_DOUBLE_EQ(loop.RestartCostSeconds(vocab::Role::kParameterServer),
                   kMinRelaunchSeconds + 10.0);
  EXPECT_DOUBLE_EQ(obs->ps_restart_cost_seconds, kMinRelaunchSeconds + 10.0);
  // The history puts the restart into the member's state (its cool-down).
  EXPECT_EQ(obs->workers[1].last_restart_ms, kStart);
}

// The seconds a restart of worker-1 (persistent, 4x slower) would save with
// `remaining` seconds left, as the policy weighs it.
double SavedByRestart(double remaining) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-1", v1::PERSISTENT, 4.0, 6);
  b.remaining = remaining;
  ControlLoop loop(ThresholdOptions(), &b, &clock);
  auto plan = RunOnce(loop, b, clock);
  EXPECT_TRUE(plan.ok() && !plan->decisions.empty());
  return plan.ok() && !plan->decisions.empty() ? plan->decisions[0].evidence.at("saved_seconds")
                                               : 0;
}

TEST(ControlLoop, RegroupSecondsAddToTheRestartCost) {
  // The saving is proportional to the time left: pick the time left at which
  // a restart saves 2.5 s more than it costs without the regroup (11 s).
  const double per_second = SavedByRestart(36'000) / 36'000;
  ASSERT_GT(per_second, 0);
  const double remaining = (kMinRelaunchSeconds + 10.0 + 2.5) / per_second;
  for (const double regroup : {0.0, kDefaultRegroupSeconds}) {
    SCOPED_TRACE(regroup);
    FakeClock clock(kStart);
    FakeBackend b;
    Job(b, "worker-1", v1::PERSISTENT, 4.0, 6);
    b.remaining = remaining;
    LoopOptions o = ThresholdOptions();
    o.regroup_seconds = regroup;
    ControlLoop loop(o, &b, &clock);
    EXPECT_DOUBLE_EQ(loop.RestartCostSeconds(), kMinRelaunchSeconds + 10.0 + regroup);
    auto plan = RunOnce(loop, b, clock);
    ASSERT_TRUE(plan.ok()) << plan.status();
    bool restarted = false;
    for (const std::string& call : b.calls) restarted |= call.rfind("restart worker-1", 0) == 0;
    // 13.5 s saved: worth 11 s, not 16 s.
    EXPECT_EQ(restarted, regroup == 0);
  }
}

// Whether the backend was called with `call` (one of FakeBackend::calls).
bool Called(const FakeBackend& b, const std::string& call) {
  return std::find(b.calls.begin(), b.calls.end(), call) != b.calls.end();
}

// The loop folds the Monitor's records into the node memory and the policy
// weighs a slowdown by it: node-1, slow for five minutes in two jobs before,
// is chronically slow, so a third job restarts its worker there at once; a
// job with a memory of its own (nothing seen) sizes its batch instead.
TEST(ControlLoop, ANodeSlowInEarlierJobsIsRememberedAndShortensTheWait) {
  absl::StatusOr<nodememory::NodeMemory> memory = nodememory::NodeMemory::Create();
  ASSERT_TRUE(memory.ok());
  FakeClock clock(kStart);
  for (const std::string job : {"team/a", "team/b"}) {
    FakeBackend b;
    Job(b, "worker-1", v1::PERSISTENT, 3.0, 30);
    b.health->set_time_unix_ms(clock.NowMillis());
    v1::StragglerRecord* r = b.health->add_stragglers();
    r->set_job(job);
    r->set_worker_id("worker-1");
    r->set_node("node-1");
    r->set_first_seen_unix_ms(clock.NowMillis() - 300'000);
    r->set_last_seen_unix_ms(clock.NowMillis());
    r->set_windows(30);
    r->set_max_score(3.0);
    LoopOptions o = Options(vocab::Policy::kNone);
    o.job = job;
    o.node_memory = &*memory;
    ControlLoop loop(o, &b, &clock);
    ASSERT_TRUE(loop.PolicyInput(b.Observe(clock)).has_value());
    clock.Advance(600'000);
  }
  EXPECT_TRUE(memory->For("node-1", clock.NowMillis()).chronic);
  EXPECT_FALSE(memory->For("node-2", clock.NowMillis()).chronic);

  for (const bool remembered : {true, false}) {
    SCOPED_TRACE(remembered);
    FakeBackend b;
    Job(b, "worker-1", v1::PERSISTENT, 3.0, 2);
    b.health->set_time_unix_ms(clock.NowMillis());
    LoopOptions o = Options(vocab::Policy::kAntdtNd);
    if (remembered) o.node_memory = &*memory;
    ControlLoop loop(o, &b, &clock);
    std::optional<policy::Observed> obs = loop.PolicyInput(b.Observe(clock));
    ASSERT_TRUE(obs.has_value());
    EXPECT_EQ(obs->nodes[1].chronic, remembered);
    EXPECT_EQ(obs->nodes[1].avoid > 0.5, remembered) << obs->nodes[1].avoid;
    auto plan = RunOnce(loop, b, clock);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(Called(b, "restart worker-1@0 node-1->spare-0"), remembered)
        << absl::StrJoin(b.calls, "\n");
  }
}

// What the backend knows of a node beyond this job (the operator's cluster
// memory: marked by two earlier jobs) stands: the loop's own memory, empty,
// takes nothing from it, and the worker there is restarted at once as in the
// test above.
TEST(ControlLoop, ANodeTheBackendKnowsIsChronicStaysChronic) {
  FakeClock clock(kStart);
  for (const bool marked : {true, false}) {
    SCOPED_TRACE(marked);
    FakeBackend b;
    Job(b, "worker-1", v1::PERSISTENT, 3.0, 2);
    b.health->set_time_unix_ms(clock.NowMillis());
    b.nodes[1].chronic = marked;
    ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
    std::optional<policy::Observed> obs = loop.PolicyInput(b.Observe(clock));
    ASSERT_TRUE(obs.has_value());
    EXPECT_EQ(obs->nodes[1].chronic, marked);
    auto plan = RunOnce(loop, b, clock);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(Called(b, "restart worker-1@0 node-1->spare-0"), marked)
        << absl::StrJoin(b.calls, "\n");
  }
}

TEST(ControlLoop, SeededHistoryKeepsCooldownsAcrossABackendRestart) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-1", v1::PERSISTENT, 4.0, 6);
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  policy::Decision earlier;
  earlier.action = policy::KillRestart{"worker-1", "node-9", "node-1", kStart + 50'000};
  earlier.at_ms = kStart - 10'000;
  earlier.subject = "worker-1";
  earlier.rule = "antdt-nd:persistent-restart";
  loop.Seed({earlier});
  auto plan = RunOnce(loop, b, clock);
  ASSERT_TRUE(plan.ok());
  for (const std::string& call : b.calls) {
    EXPECT_EQ(call.rfind("restart ", 0), std::string::npos) << call;
  }
  bool cooldown_noted = false;
  for (const std::string& line : plan->skipped) {
    cooldown_noted |= line.rfind("worker-1", 0) == 0 && line.find("cool-down") != std::string::npos;
  }
  EXPECT_TRUE(cooldown_noted);
}

// The budget used reaches the backend as the policy counts it: a seeded
// restart is one; an ADJUST_BS round (the straggler's batch and the others'
// rebalances, several decisions) is one more; a turn that decides nothing
// reports nothing new.
TEST(ControlLoop, BudgetUsedIsCountedAsThePolicyCountsIt) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "worker-2", v1::TRANSIENT, 3.0, 1);
  ControlLoop loop(Options(vocab::Policy::kAntdtNd), &b, &clock);
  policy::Decision earlier;
  earlier.action = policy::KillRestart{"worker-0", "node-9", "node-0", kStart - 50'000};
  earlier.at_ms = kStart - 100'000;
  earlier.subject = "worker-0";
  earlier.rule = "antdt-nd:persistent-restart";
  loop.Seed({earlier});
  auto plan = RunOnce(loop, b, clock);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->decisions.size(), 1u);  // the straggler's batch and the others'
  int rebalances = 0;
  for (const policy::Decision& d : plan->decisions) rebalances += policy::IsRebalance(d);
  EXPECT_GT(rebalances, 0);
  EXPECT_EQ(b.budget_used, std::vector<int>({2}));
  EXPECT_EQ(policy::BudgetUsed(loop.history()), 2);
  clock.Advance(5'000);  // worker-2 in its cool-down: nothing decided
  auto quiet = RunOnce(loop, b, clock);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_TRUE(quiet->decisions.empty());
  EXPECT_EQ(b.budget_used, std::vector<int>({2}));
}

TEST(ControlLoop, DirectiveCarriesTheDecisionsAccumulationSteps) {
  FakeClock clock(kStart);
  FakeBackend b;
  Job(b, "", v1::HEALTHY, 1.0, 0);
  for (int i = 0; i < 4; ++i) b.health->mutable_workers(i)->set_score(i == 0 ? 2.0 : 1.0);
  for (policy::WorkerState& m : b.members) m.max_micro_batch = 16;
  LoopOptions o = Options(vocab::Policy::kAntdtDd);
  ControlLoop loop(o, &b, &clock);
  auto plan = RunOnce(loop, b, clock);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->decisions.empty());
  ASSERT_EQ(b.directives.size(), plan->decisions.size());
  for (size_t i = 0; i < plan->decisions.size(); ++i) {
    const auto& a = std::get<policy::AdjustBatchSize>(plan->decisions[i].action);
    EXPECT_EQ(b.directives[i].adjust_batch().accumulation_steps(), a.accumulation_steps);
    EXPECT_EQ(a.accumulation_steps, (a.local_batch_size + 15) / 16);
  }
}

TEST(ControlLoop, RetireTellsServersThenReleasesShards) {
  FakeBackend b;
  ASSERT_TRUE(b.Retire("worker-3", 2).ok());
  ASSERT_EQ(b.calls.size(), 2u);
  EXPECT_EQ(b.calls[0], "leave worker-3");
  EXPECT_EQ(b.calls[1], "release worker-3@2");
}

}  // namespace
}  // namespace antdt::loop
