#include "core/policy/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace antdt::policy {
namespace {

using vocab::ActionKind;
using vocab::Policy;
using vocab::Role;
using vocab::Signal;

constexpr int64_t kNow = 1'700'000'000'000;
constexpr int64_t kCooldown = 60'000;

// One member of a scenario: what the Monitor says about it and its batch.
struct M {
  std::string id;
  v1::StragglerClass cls = v1::HEALTHY;
  double score = 1.0;
  int windows_slow = 0;
  int64_t batch = 64;
  Role role = Role::kWorker;
};

M Healthy(std::string id, double score = 1.0) { return {std::move(id), v1::HEALTHY, score}; }

// Eight workers w-0..w-7 at batch 64 (global batch 512), all healthy, with
// `changes` replacing members by id (or adding them).
std::vector<M> Eight(std::vector<M> changes = {}) {
  std::vector<M> out;
  for (int i = 0; i < 8; ++i) out.push_back(Healthy(absl::StrCat("w-", i)));
  for (M& c : changes) {
    auto it = std::find_if(out.begin(), out.end(), [&](const M& m) { return m.id == c.id; });
    if (it == out.end()) {
      out.push_back(std::move(c));
    } else {
      *it = std::move(c);
    }
  }
  return out;
}

Observed Make(const std::vector<M>& members, int64_t global_batch = 0) {
  Observed o;
  o.now_ms = kNow;
  o.job = "team/ctr";
  o.health.set_job(o.job);
  o.health.set_time_unix_ms(kNow);
  for (const M& m : members) {
    v1::WorkerHealth* h = o.health.add_workers();
    h->set_job(o.job);
    h->set_worker_id(m.id);
    h->set_role(vocab::Name(m.role));
    h->set_node("node-" + m.id);
    h->set_score(m.score);
    h->set_self_score(m.score);
    h->set_class_(m.cls);
    h->set_windows_slow(m.windows_slow);
    WorkerState w;
    w.id = m.id;
    w.role = m.role;
    w.node = "node-" + m.id;
    w.local_batch_size = m.role == Role::kParameterServer ? 0 : m.batch;
    o.workers.push_back(w);
  }
  if (global_batch <= 0) {
    for (const M& m : members) global_batch += m.role == Role::kParameterServer ? 0 : m.batch;
  }
  o.global_batch_size = global_batch;
  // Deliberately not sorted by name: the target is the first spare by name.
  o.nodes = {{"spare-b", true, 0}, {"busy-0", false, 0}, {"spare-a", true, 0}};
  o.remaining_seconds = 36'000;  // ten hours left
  o.restart_cost_seconds = 60;
  o.ps_restart_cost_seconds = 60;
  return o;
}

PolicySpec Spec(Policy name) {
  PolicySpec s;
  s.name = name;
  s.cooldown_ms = kCooldown;
  return s;
}

// antdt-nd weighing restarts by its thresholds (decideBy: thresholds): the
// restart safeguards below are the same under both ways of deciding, and
// these tests pin them with the thresholds' simpler trigger.
PolicySpec Thresholds() {
  PolicySpec s = Spec(Policy::kAntdtNd);
  s.by_expected_duration = false;
  return s;
}

// The local batches once the plan's ADJUST_BS actions are applied.
std::map<std::string, int64_t> Batches(const Observed& o, const Plan& p) {
  std::map<std::string, int64_t> out;
  for (const WorkerState& w : o.workers) {
    if (w.role != Role::kParameterServer) out[w.id] = w.local_batch_size;
  }
  for (const Decision& d : p.decisions) {
    if (const auto* a = std::get_if<AdjustBatchSize>(&d.action)) {
      out[a->worker] = a->local_batch_size;
    }
  }
  return out;
}

int64_t Sum(const std::map<std::string, int64_t>& batches) {
  int64_t s = 0;
  for (const auto& [id, b] : batches) s += b;
  return s;
}

const Decision* Find(const Plan& p, const std::string& target) {
  for (const Decision& d : p.decisions) {
    if (ActionTarget(d.action) == target) return &d;
  }
  return nullptr;
}

int Count(const Plan& p, const char* action) {
  return static_cast<int>(std::count_if(
      p.decisions.begin(), p.decisions.end(),
      [&](const Decision& d) { return std::string(ActionName(d.action)) == action; }));
}

// Whether a skipped line of `who` has `reason` as its reason.
bool SkippedFor(const Plan& p, const std::string& who, SkipReason reason) {
  EXPECT_EQ(p.skipped.size(), p.skip_reasons.size()) << "one reason per skipped line";
  for (size_t i = 0; i < p.skipped.size() && i < p.skip_reasons.size(); ++i) {
    if (absl::StartsWith(p.skipped[i], who + ": ") && p.skip_reasons[i] == reason) return true;
  }
  return false;
}

bool Skipped(const Plan& p, const std::string& who, const std::string& text) {
  EXPECT_EQ(p.skipped.size(), p.skip_reasons.size()) << "one reason per skipped line";
  return std::any_of(p.skipped.begin(), p.skipped.end(), [&](const std::string& s) {
    return absl::StartsWith(s, who + ": ") && absl::StrContains(s, text);
  });
}

std::string Dump(const Plan& p) {
  std::string out;
  for (const Decision& d : p.decisions) absl::StrAppend(&out, "  decision: ", Describe(d), "\n");
  for (const std::string& s : p.skipped) absl::StrAppend(&out, "  skipped: ", s, "\n");
  return out;
}

// A decision taken `ago_ms` before kNow.
Decision Past(Action action, int64_t ago_ms, std::string rule, std::string subject) {
  Decision d;
  d.action = std::move(action);
  d.at_ms = kNow - ago_ms;
  d.policy = Policy::kAntdtNd;
  d.rule = std::move(rule);
  d.subject = std::move(subject);
  return d;
}

// ---- antdt-nd: each straggler kind leads to its action ------------------------

TEST(NdPolicy, AServerMoveIsWeighedAgainstTheMeasuredCostOfAMove) {
  // ps-0 at 2x: a move saves R x (1 - 1/2) = 300 s of R = 600 s.
  for (const double cost : {100.0, 400.0}) {
    SCOPED_TRACE(cost);
    Observed o =
        Make(Eight({{"ps-0", v1::PERSISTENT, 2.0, 5, 0, Role::kParameterServer}, Healthy("ps-1")}));
    o.remaining_seconds = 600;
    o.restart_cost_seconds = 1;  // a worker's restart is not what a move costs
    o.ps_restart_cost_seconds = cost;
    const Plan p = Decide(o, Spec(Policy::kAntdtNd));
    SCOPED_TRACE(Dump(p));
    const Decision* d = Find(p, "ps-0");
    if (cost < 300) {
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(ActionName(d->action), std::string("KILL_RESTART"));
      EXPECT_EQ(d->evidence.at("cost_seconds"), cost);
      EXPECT_NEAR(d->evidence.at("saved_seconds"), 300, 1e-6);
    } else {
      EXPECT_EQ(d, nullptr);
      EXPECT_TRUE(SkippedFor(p, "ps-0", SkipReason::kCostAboveSaving));
    }
  }
}

struct KindCase {
  std::string name;
  std::vector<M> members;
  std::string action;  // "" for none
  std::string target;
  std::string rule;
  bool job_slowdown = false;
};

TEST(NdPolicy, EachKindLeadsToItsAction) {
  const std::vector<KindCase> cases = {
      {"transient", Eight({{"w-3", v1::TRANSIENT, 1.6, 1}}), "ADJUST_BS", "w-3",
       "antdt-nd:transient-adjust"},
      {"persistent", Eight({{"w-3", v1::PERSISTENT, 2.0, 4}}), "KILL_RESTART", "w-3",
       "antdt-nd:persistent-restart"},
      {"deterministic", Eight({{"w-3", v1::DETERMINISTIC, 2.0, 6}}), "ADJUST_BS", "w-3",
       "antdt-nd:deterministic-adjust"},
      {"slow ps",
       Eight({{"ps-0", v1::PERSISTENT, 2.0, 5, 0, Role::kParameterServer}, Healthy("ps-1")}),
       "KILL_RESTART", "ps-0", "antdt-nd:ps-restart"},
      {"leader", Eight({{"w-3", v1::LEADER, 0.7, 0}}), "ADJUST_BS", "w-3",
       "antdt-nd:leader-adjust"},
      {"noise",
       Eight({Healthy("w-0", 0.93), Healthy("w-1", 1.07), Healthy("w-2", 0.95),
              Healthy("w-3", 1.05), Healthy("w-4", 1.06), Healthy("w-5", 0.94)}),
       "", "", ""},
      {"job slowdown", Eight({{"w-3", v1::PERSISTENT, 2.0, 4}, {"w-4", v1::TRANSIENT, 1.5, 1}}), "",
       "", "", true},
      {"transient ps waits", Eight({{"ps-0", v1::TRANSIENT, 2.0, 1, 0, Role::kParameterServer}}),
       "", "", ""},
      {"deterministic ps", Eight({{"ps-0", v1::DETERMINISTIC, 2.0, 9, 0, Role::kParameterServer}}),
       "", "", ""},
  };
  for (const KindCase& c : cases) {
    SCOPED_TRACE(c.name);
    Observed o = Make(c.members);
    o.health.set_job_slowdown(c.job_slowdown);
    const Plan p = Decide(o, Thresholds());
    SCOPED_TRACE(Dump(p));
    EXPECT_EQ(Sum(Batches(o, p)), o.global_batch_size) << "global batch must stay constant";
    if (c.action.empty()) {
      EXPECT_TRUE(p.decisions.empty());
      if (c.job_slowdown) {
        EXPECT_TRUE(Skipped(p, "job", "job_slowdown"));
        EXPECT_TRUE(SkippedFor(p, "job", SkipReason::kJobSlowdown));
      }
      continue;
    }
    const Decision* d = Find(p, c.target);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(ActionName(d->action), c.action);
    EXPECT_EQ(d->rule, c.rule);
    EXPECT_EQ(d->subject, c.target);
    EXPECT_EQ(d->policy, Policy::kAntdtNd);
    EXPECT_EQ(d->at_ms, kNow);
    for (const Decision& any : p.decisions) {
      EXPECT_TRUE(any.evidence.count("score")) << Describe(any);
      EXPECT_TRUE(any.evidence.count("windows_slow")) << Describe(any);
      EXPECT_FALSE(any.reason.empty());
    }
    if (const auto* k = std::get_if<KillRestart>(&d->action)) {
      EXPECT_EQ(k->from_node, "node-" + c.target);
      EXPECT_EQ(k->to_node, "spare-a");
      EXPECT_EQ(k->exclude_node_until_ms, kNow + kCooldown);
      EXPECT_EQ(Count(p, "KILL_RESTART"), 1);
      EXPECT_EQ(Count(p, "ADJUST_BS"), 0);
      for (const char* key : {"saved_seconds", "cost_seconds", "remaining_seconds"}) {
        EXPECT_TRUE(d->evidence.count(key)) << key;
      }
      EXPECT_GT(d->evidence.at("saved_seconds"), d->evidence.at("cost_seconds"));
    }
    if (const auto* a = std::get_if<AdjustBatchSize>(&d->action)) {
      if (c.name == "leader") {
        EXPECT_GT(a->local_batch_size, 64);
      } else {
        EXPECT_LT(a->local_batch_size, 64);
      }
      EXPECT_EQ(d->evidence.at("batch_before"), 64);
      EXPECT_EQ(d->evidence.at("batch_after"), a->local_batch_size);
    }
  }
}

TEST(NdPolicy, TransientShrinksInProportionToSpeedAndKeepsTheGlobalBatch) {
  const Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 2.0, 1}}));
  const Plan p = Decide(o, Spec(Policy::kAntdtNd));
  SCOPED_TRACE(Dump(p));
  // Capacities 7 x 64 + 64 / 2 = 480; shares of 512: 68.27 each, 34.13 for w-3.
  // Floors sum to 510; the two remaining samples go to the largest fractions
  // (the healthy workers' .27), lowest ids first.
  const std::map<std::string, int64_t> want = {{"w-0", 69}, {"w-1", 69}, {"w-2", 68}, {"w-3", 34},
                                               {"w-4", 68}, {"w-5", 68}, {"w-6", 68}, {"w-7", 68}};
  EXPECT_EQ(Batches(o, p), want);
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->subject, "w-3");
  const Decision* r = Find(p, "w-0");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->rule, "antdt-nd:rebalance");
  EXPECT_EQ(r->subject, "") << "a worker resized for someone else is not in cool-down";
}

TEST(NdPolicy, ARebalancedWorkersReasonNamesAFewOfTheStragglersItMakesRoomFor) {
  // One straggler: named. Five: the first three by id and how many more (a
  // round at 10,000 workers moves thousands around a hundred stragglers; each
  // line names a few, not all).
  for (const int slow : {1, 5}) {
    SCOPED_TRACE(slow);
    std::vector<M> members;
    for (int i = 0; i < 16; ++i) {
      members.push_back(i < slow ? M{absl::StrCat("w-", i), v1::TRANSIENT, 2.0, 1}
                                 : Healthy(absl::StrCat("w-", i)));
    }
    const Plan p = Decide(Make(members), Spec(Policy::kAntdtNd));
    SCOPED_TRACE(Dump(p));
    const Decision* r = Find(p, "w-15");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->rule, "antdt-nd:rebalance");
    const std::string around = slow == 1 ? "around w-0: " : "around w-0,w-1,w-2 and 2 more: ";
    EXPECT_TRUE(absl::StrContains(r->reason, "keeps the global batch 1024 " + around)) << r->reason;
  }
}

TEST(NdPolicy, AStragglersBatchNeverRisesInItsOwnRound) {
  // w-3 is TRANSIENT at batch 40, but its window's throughput reads as 50
  // samples per median step (a window that mixed two batches, a burst between
  // throttled periods): it keeps its 40, nobody's batch moves towards it.
  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 1.4, 2, 40}}));
  for (v1::WorkerHealth& h : *o.health.mutable_workers()) {
    h.set_median_bpt_seconds(1.0);
    h.set_samples_per_second(h.worker_id() == "w-3" ? 50.0 : 64.0);
  }
  const Plan p = Decide(o, Spec(Policy::kAntdtNd));
  SCOPED_TRACE(Dump(p));
  const auto b = Batches(o, p);
  EXPECT_EQ(b.at("w-3"), 40);
  EXPECT_EQ(Sum(b), 7 * 64 + 40);
  EXPECT_TRUE(p.decisions.empty());
  // Its measured capacity below its batch shrinks it, as before.
  o.health.mutable_workers(3)->set_samples_per_second(30.0);
  const auto smaller = Batches(o, Decide(o, Spec(Policy::kAntdtNd)));
  EXPECT_LT(smaller.at("w-3"), 40);
  EXPECT_EQ(Sum(smaller), 7 * 64 + 40);
}

TEST(NdPolicy, SettleAndCooldownFollowTheMonitorsWindows) {
  PolicySpec spec = Spec(Policy::kAntdtNd);
  spec.settle_ms = 25'000;
  v1::GetJobHealthResponse health;
  EXPECT_EQ(EffectiveSpec(spec, health).settle_ms, 25'000) << "no windows said: as given";
  health.set_window_ms(1'300);
  health.set_allowed_lateness_ms(500);
  EXPECT_EQ(EffectiveSpec(spec, health).settle_ms, 3'100);
  EXPECT_EQ(EffectiveSpec(spec, health).cooldown_ms, kCooldown) << "a cooldown given is kept";
  spec.derive_cooldown = true;
  EXPECT_EQ(EffectiveSpec(spec, health).cooldown_ms, 6'200);
  // A straggler sized 7 s ago is out of the derived cool-down and sized again
  // (within the 60 s one it would be frozen).
  Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4, 40}}));
  o.health.set_window_ms(1'300);
  o.health.set_allowed_lateness_ms(500);
  Decision last;
  last.action = AdjustBatchSize{"w-3", 40, 1};
  last.at_ms = kNow - 7'000;
  last.policy = Policy::kAntdtNd;
  last.rule = "antdt-nd:persistent-adjust";
  last.subject = "w-3";
  o.history.push_back(last);
  o.restart_cost_seconds = 1e9;  // no restart: the batch is what is weighed
  EXPECT_NE(Find(Decide(o, spec), "w-3"), nullptr);
  spec.derive_cooldown = false;
  o.health.clear_window_ms();
  EXPECT_EQ(Find(Decide(o, spec), "w-3"), nullptr);
}

TEST(NdPolicy, LeadersTakeTheSamplesFirst) {
  const Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 2.0, 1}, {"w-5", v1::LEADER, 0.5, 0}}));
  const auto b = Batches(o, Decide(o, Spec(Policy::kAntdtNd)));
  EXPECT_EQ(Sum(b), 512);
  // The leader is twice as fast as a healthy worker: twice its batch.
  EXPECT_GT(b.at("w-5"), 2 * b.at("w-0") - 2);
  EXPECT_LT(b.at("w-3"), b.at("w-0"));
}

TEST(NdPolicy, ActionIsNotRepeatedInsideItsCooldown) {
  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 1.6, 1}}));
  const Plan first = Decide(o, Spec(Policy::kAntdtNd));
  ASSERT_NE(Find(first, "w-3"), nullptr);
  // Ten seconds later the Monitor still sees w-3 slow (its window straddled the change).
  o.history.assign(first.decisions.begin(), first.decisions.end());
  o.now_ms = kNow + 10'000;
  const Plan again = Decide(o, Spec(Policy::kAntdtNd));
  SCOPED_TRACE(Dump(again));
  EXPECT_TRUE(again.decisions.empty());
  EXPECT_TRUE(Skipped(again, "w-3", "in cool-down until"));
  EXPECT_EQ(again.requeue_after_ms, 10'000);  // the interval, sooner than the cool-down's end
  o.now_ms = kNow + 55'000;
  EXPECT_EQ(Decide(o, Spec(Policy::kAntdtNd)).requeue_after_ms, 5'000) << "requeue when it ends";
  // Once the cool-down is over it may act again.
  o.now_ms = kNow + kCooldown;
  const Plan later = Decide(o, Spec(Policy::kAntdtNd));
  EXPECT_NE(Find(later, "w-3"), nullptr) << Dump(later);
}

// A drift below the straggler threshold still slows every step: one round
// sizes everyone outside a cool-down by speed, with no subject (so no one's
// own cool-down), not counted against the budget, and not again within the
// cool-down of the last round.
TEST(NdPolicy, ADriftBelowTheStragglerThresholdIsRebalancedOncePerCooldown) {
  // w-2 is 12% slow, w-5 12% fast, w-6 4% fast: a window's noise.
  Observed o = Make(Eight({Healthy("w-2", 1.12), Healthy("w-5", 0.88), Healthy("w-6", 0.96)}));
  PolicySpec spec = Spec(Policy::kAntdtNd);
  spec.max_actions = 1;
  const Plan tidy = Decide(o, spec);
  SCOPED_TRACE(Dump(tidy));
  const Decision* d = Find(tidy, "w-2");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->rule, "antdt-nd:rebalance");
  EXPECT_EQ(d->subject, "");
  EXPECT_TRUE(absl::StrContains(d->reason, "the slowest worker, w-2, scores 1.12")) << d->reason;
  const auto after = Batches(o, tidy);
  EXPECT_EQ(Sum(after), 512);
  EXPECT_LT(after.at("w-2"), 64);
  EXPECT_GT(after.at("w-5"), after.at("w-0")) << "the faster worker takes more";
  // Within the margin a worker is as fast as its batch says: sized by its
  // measured capacity, the noise of a thousand workers gave the fastest-read
  // one more each round (32 -> 34 on a step everyone waits for).
  EXPECT_LE(after.at("w-6"), after.at("w-0")) << "noise moved a sample to w-6";
  // Within the cool-down of that round: nothing, and when it ends, a requeue.
  o.history.assign(tidy.decisions.begin(), tidy.decisions.end());
  o.now_ms = kNow + 10'000;
  const Plan soon = Decide(o, spec);
  EXPECT_TRUE(soon.decisions.empty()) << Dump(soon);
  EXPECT_TRUE(SkippedFor(soon, "job", SkipReason::kCooldown));
  // The tidy round spent none of the budget of one: a straggler still gets its round.
  o.health.mutable_workers(3)->set_class_(v1::TRANSIENT);
  o.health.mutable_workers(3)->set_score(1.6);
  o.health.mutable_workers(3)->set_windows_slow(1);
  const Plan straggler = Decide(o, spec);
  const Decision* s3 = Find(straggler, "w-3");
  ASSERT_NE(s3, nullptr) << Dump(straggler);
  EXPECT_EQ(s3->rule, "antdt-nd:transient-adjust");
}

// The others in a straggler's round are weighed as at the median where their
// batch is a sample off it (an earlier round's remainder): weighed by their
// own batch, the one given the remainder once is the cheapest to give it
// again, and its batch climbs a sample a round.
TEST(NdPolicy, ASampleAnEarlierRoundingGaveIsNotGivenAgain) {
  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 1.6, 1}}));
  for (WorkerState& w : o.workers) {
    if (w.id == "w-6") ++w.local_batch_size;
    if (w.id == "w-7") --w.local_batch_size;
  }
  const Plan plan = Decide(o, Thresholds());
  ASSERT_NE(Find(plan, "w-3"), nullptr) << Dump(plan);
  const auto after = Batches(o, plan);
  EXPECT_EQ(Sum(after), 512);
  EXPECT_LT(after.at("w-3"), 64);
  EXPECT_LE(after.at("w-6"), after.at("w-0")) << Dump(plan);
  EXPECT_GE(after.at("w-7"), after.at("w-5")) << Dump(plan);

  // On small batches a sample is more than noise (a leader's extra one): the
  // worker with one more than the others keeps weighing by it.
  std::vector<M> small = Eight({{"w-3", v1::TRANSIENT, 1.6, 1}});
  for (M& m : small) m.batch = 4;
  small[6].batch = 5;
  small[7].batch = 3;
  const Observed s = Make(small);
  const Plan small_plan = Decide(s, Thresholds());
  ASSERT_NE(Find(small_plan, "w-3"), nullptr) << Dump(small_plan);
  const auto small_after = Batches(s, small_plan);
  EXPECT_EQ(Sum(small_after), 32);
  EXPECT_GT(small_after.at("w-6"), small_after.at("w-0")) << Dump(small_plan);
}

// A straggler sized on a window that straddled its slowdown is sized again once
// a whole window at its new batch was measured (settle_ms), inside its
// cool-down, and a restart is still weighed a cool-down after it was first
// compensated.
TEST(NdPolicy, AnUnderSizedStragglerIsSizedAgainAfterOneWindow) {
  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 2.0, 1}}));
  PolicySpec spec = Thresholds();
  spec.settle_ms = 2'500;
  const Plan first = Decide(o, spec);
  const Decision* d = Find(first, "w-3");
  ASSERT_NE(d, nullptr) << Dump(first);
  const int64_t sized = std::get<AdjustBatchSize>(d->action).local_batch_size;
  // Applied; the first whole window at the new batch says it is still 1.5x slow.
  o.history.assign(first.decisions.begin(), first.decisions.end());
  for (WorkerState& w : o.workers) w.local_batch_size = Batches(o, first).at(w.id);
  o.health.mutable_workers(3)->set_score(1.5);
  o.health.mutable_workers(3)->set_windows_slow(2);
  o.now_ms = kNow + 2'000;
  EXPECT_EQ(Find(Decide(o, spec), "w-3"), nullptr) << "not before a window at the new batch";
  o.now_ms = kNow + 2'500;
  const Plan again = Decide(o, spec);
  SCOPED_TRACE(Dump(again));
  const Decision* a = Find(again, "w-3");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->rule, "antdt-nd:transient-adjust");
  EXPECT_LT(std::get<AdjustBatchSize>(a->action).local_batch_size, sized);
  EXPECT_EQ(Sum(Batches(o, again)), 512);
  // A cool-down after the first sizing (not the second), still slow: restarted.
  o.history.insert(o.history.end(), again.decisions.begin(), again.decisions.end());
  for (WorkerState& w : o.workers) w.local_batch_size = Batches(o, again).at(w.id);
  o.health.mutable_workers(3)->set_score(1.0);
  o.health.mutable_workers(3)->set_class_(v1::HEALTHY);
  o.health.mutable_workers(3)->set_windows_slow(0);
  o.health.mutable_workers(3)->set_samples_per_second(100);
  o.health.mutable_workers(3)->set_median_bpt_seconds(0.1);  // capacity 10 vs 64 for peers
  o.now_ms = kNow + kCooldown;
  const Plan restart = Decide(o, spec);
  EXPECT_EQ(Count(restart, "KILL_RESTART"), 1) << Dump(restart);
}

TEST(NdPolicy, RestartedWorkerIsNotRestartedWithinTheCooldown) {
  Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}}));
  o.workers[3].last_restart_ms = kNow - 20'000;  // restarted by someone else
  const Plan p = Decide(o, Thresholds());
  SCOPED_TRACE(Dump(p));
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0);
  EXPECT_TRUE(Skipped(p, "w-3", "within the cool-down"));
  EXPECT_TRUE(SkippedFor(p, "w-3", SkipReason::kCooldown));
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->rule, "antdt-nd:persistent-adjust");
}

// Sentences say durations in seconds, never a reading of the policy's clock
// (Unix milliseconds on a cluster, job milliseconds locally).
TEST(NdPolicy, SentencesSayDurationsInSeconds) {
  auto no_clock = [](const Plan& p) {
    for (const Decision& d : p.decisions) {
      EXPECT_FALSE(absl::StrContains(d.reason, "170000")) << d.reason;
    }
    for (const std::string& s : p.skipped) EXPECT_FALSE(absl::StrContains(s, "170000")) << s;
  };
  const Plan restart = Decide(Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}})), Thresholds());
  const Decision* d = Find(restart, "w-3");
  ASSERT_NE(d, nullptr) << Dump(restart);
  EXPECT_TRUE(absl::StrContains(d->reason, "node-w-3 excluded until its cool-down ends (60 s)"))
      << d->reason;
  no_clock(restart);

  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 1.6, 1}}));
  const Plan taken = Decide(o, Thresholds());
  o.history.assign(taken.decisions.begin(), taken.decisions.end());
  o.now_ms = kNow + 12'500;
  const Plan again = Decide(o, Thresholds());
  EXPECT_TRUE(Skipped(again, "w-3",
                      "in cool-down until 47.5 s from now after ADJUST_BS "
                      "(antdt-nd:transient-adjust) 12.5 s ago"))
      << Dump(again);
  no_clock(again);

  o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}}));
  o.workers[3].last_restart_ms = kNow - 20'000;
  const Plan recent = Decide(o, Thresholds());
  EXPECT_TRUE(Skipped(recent, "w-3", "restarted 20 s ago, within the cool-down (60 s)"))
      << Dump(recent);
  no_clock(recent);
}

TEST(NdPolicy, BudgetIsRespected) {
  // Ten interventions so far: nothing more.
  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 1.6, 1}}));
  for (int i = 0; i < 10; ++i) {
    o.history.push_back(Past(KillRestart{absl::StrCat("old-", i), "n", "m", 0}, 600'000 + i * 1000,
                             "antdt-nd:persistent-restart", absl::StrCat("old-", i)));
  }
  Plan p = Decide(o, Thresholds());
  EXPECT_TRUE(p.decisions.empty()) << Dump(p);
  EXPECT_TRUE(Skipped(p, "w-3", "action budget spent (10 of 10")) << Dump(p);
  EXPECT_TRUE(SkippedFor(p, "w-3", SkipReason::kBudget));

  // An ADJUST_BS round is one intervention however many workers it resized:
  // nine rounds of eight decisions (a straggler's and seven around it) leave one.
  o.history.clear();
  for (int round = 0; round < 9; ++round) {
    for (int i = 0; i < 8; ++i) {
      o.history.push_back(
          Past(AdjustBatchSize{absl::StrCat("w-", i), 64, 1}, 600'000 + round * 100'000,
               i == 0 ? "antdt-nd:transient-adjust" : "antdt-nd:rebalance", i == 0 ? "w-0" : ""));
    }
  }
  // Two persistent stragglers: one restart fits, the other finds the budget spent.
  o = [&] {
    Observed n = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}, {"w-6", v1::PERSISTENT, 2.0, 4}}));
    n.history = o.history;
    return n;
  }();
  p = Decide(o, Thresholds());
  SCOPED_TRACE(Dump(p));
  EXPECT_EQ(Count(p, "KILL_RESTART"), 1);
  EXPECT_EQ(Count(p, "ADJUST_BS"), 0);
  EXPECT_TRUE(Skipped(p, "w-6", "action budget spent"));
  EXPECT_TRUE(Skipped(p, "w-6", "ADJUST_BS skipped"));
}

TEST(NdPolicy, RestartSkippedWhenItCostsMoreThanItSaves) {
  struct Case {
    std::string name;
    double remaining;
    double cost;
    double ratio;
    bool restart;
  };
  // One straggler at 2x among 8 (the header's model): steps now take 2 median
  // times (throughput 256), ADJUST_BS would give 480, a restart 512, so it saves
  // R x 256 / 480 - R x 256 / 512 = R / 30 over ADJUST_BS: 20 s at R = 600.
  const std::vector<Case> cases = {
      {"long job", 36'000, 60, 1.0, true},   {"short job", 600, 60, 1.0, false},
      {"cheap restart", 600, 15, 1.0, true}, {"demanding ratio", 600, 15, 2.0, false},
      {"unknown ETA", -1, 1, 1.0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}}));
    o.remaining_seconds = c.remaining;
    o.restart_cost_seconds = c.cost;
    PolicySpec spec = Thresholds();
    spec.min_saving_ratio = c.ratio;
    const Plan p = Decide(o, spec);
    SCOPED_TRACE(Dump(p));
    const Decision* d = Find(p, "w-3");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(Sum(Batches(o, p)), 512);
    if (c.restart) {
      EXPECT_EQ(ActionName(d->action), std::string("KILL_RESTART"));
      EXPECT_NEAR(d->evidence.at("saved_seconds"), c.remaining / 30, 1e-6);
      EXPECT_EQ(d->evidence.at("cost_seconds"), c.cost);
    } else {
      EXPECT_EQ(ActionName(d->action), std::string("ADJUST_BS"));
      EXPECT_EQ(d->rule, "antdt-nd:persistent-adjust");
      EXPECT_TRUE(Skipped(p, "w-3", "KILL_RESTART skipped")) << "the reason is recorded";
      EXPECT_TRUE(Skipped(p, "w-3", c.remaining < 0 ? "remaining time is unknown" : "saves "));
      EXPECT_TRUE(SkippedFor(
          p, "w-3",
          c.remaining < 0 ? SkipReason::kRemainingUnknown : SkipReason::kCostAboveSaving));
      EXPECT_STREQ(SkipReasonName(SkipReason::kCostAboveSaving), "cost_above_saving");
      EXPECT_TRUE(absl::StrContains(d->reason, "restart skipped")) << d->reason;
    }
  }
}

TEST(NdPolicy, ParameterServerRestartWeighsTheWholeSlowdown) {
  // A slow server holds back every step; batch sizing cannot help it: saved = R (1 - 1/s).
  Observed o = Make(Eight({{"ps-0", v1::PERSISTENT, 1.5, 3, 0, Role::kParameterServer}}));
  o.remaining_seconds = 600;
  Plan p = Decide(o, Spec(Policy::kAntdtNd));
  const Decision* d = Find(p, "ps-0");
  ASSERT_NE(d, nullptr) << Dump(p);
  EXPECT_NEAR(d->evidence.at("saved_seconds"), 200, 1e-9);
  o.remaining_seconds = 150;  // saves 50 s < 60 s
  p = Decide(o, Spec(Policy::kAntdtNd));
  EXPECT_TRUE(p.decisions.empty()) << Dump(p);
  EXPECT_TRUE(Skipped(p, "ps-0", "batch sizing cannot help a parameter server"));
}

TEST(NdPolicy, SpareNodeChoice) {
  struct Case {
    std::string name;
    std::vector<NodeState> nodes;
    std::vector<Decision> history;
    std::string want;  // "" -> no spare: skipped and ADJUST_BS instead
  };
  const std::vector<Case> cases = {
      {"first by name", {{"spare-b", true, 0}, {"spare-a", true, 0}}, {}, "spare-a"},
      {"excluded node", {{"spare-b", true, 0}, {"spare-a", true, kNow + 1}}, {}, "spare-b"},
      {"exclusion over", {{"spare-b", true, 0}, {"spare-a", true, kNow}}, {}, "spare-a"},
      {"not spare", {{"a", false, 0}}, {}, ""},
      {"no nodes", {}, {}, ""},
      {"own node", {{"node-w-3", true, 0}}, {}, ""},
      {"just took a restart",
       {{"spare-a", true, 0}, {"spare-b", true, 0}},
       {Past(KillRestart{"w-9", "x", "spare-a", kNow + 1000}, 5'000, "r", "w-9")},
       "spare-b"},
      {"excluded by history",
       {{"spare-a", true, 0}},
       {Past(KillRestart{"w-9", "spare-a", "y", kNow + 1000}, 5'000, "r", "w-9")},
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}}));
    o.nodes = c.nodes;
    o.history.assign(c.history.begin(), c.history.end());
    const Plan p = Decide(o, Thresholds());
    SCOPED_TRACE(Dump(p));
    const Decision* d = Find(p, "w-3");
    ASSERT_NE(d, nullptr);
    if (c.want.empty()) {
      EXPECT_EQ(ActionName(d->action), std::string("ADJUST_BS"));
      EXPECT_TRUE(Skipped(p, "w-3", "no spare node"));
      EXPECT_TRUE(SkippedFor(p, "w-3", SkipReason::kNoSpareNode));
    } else {
      ASSERT_TRUE(std::holds_alternative<KillRestart>(d->action));
      EXPECT_EQ(std::get<KillRestart>(d->action).to_node, c.want);
    }
  }
  // Two restarts in one plan take two different nodes.
  Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}, {"w-5", v1::PERSISTENT, 2.0, 4}}));
  const Plan p = Decide(o, Thresholds());
  ASSERT_EQ(Count(p, "KILL_RESTART"), 2) << Dump(p);
  EXPECT_EQ(std::get<KillRestart>(Find(p, "w-3")->action).to_node, "spare-a");
  EXPECT_EQ(std::get<KillRestart>(Find(p, "w-5")->action).to_node, "spare-b");
}

// 70 s ago w-3 was shrunk to 34 as a TRANSIENT straggler; it now scores 1 at
// that batch (so the Monitor calls it HEALTHY) but is still half as fast.
Observed CompensatedW3() {
  std::vector<M> members = Eight({{"w-3", v1::HEALTHY, 1.0, 0, 34}});
  for (M& m : members) {
    if (m.id != "w-3") m.batch = m.id < "w-2" ? 69 : 68;
  }
  Observed o = Make(members, 512);
  o.history.push_back(
      Past(AdjustBatchSize{"w-3", 34, 1}, 70'000, "antdt-nd:transient-adjust", "w-3"));
  return o;
}

TEST(NdPolicy, CompensatedStragglerIsRestartedOnceItProvesPersistent) {
  Observed o = CompensatedW3();
  Plan p = Decide(o, Thresholds());
  SCOPED_TRACE(Dump(p));
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->rule, "antdt-nd:compensated-restart");
  EXPECT_TRUE(absl::StrContains(d->reason, "compensated by ADJUST_BS 70 s ago and still 2"))
      << d->reason;
  EXPECT_NEAR(d->evidence.at("capacity_slowdown"), 2.0, 0.05);
  // On its healthy node it gets a median worker's share back in the same
  // plan, the others giving up what they took; the global batch is kept.
  const std::map<std::string, int64_t> after = Batches(o, p);
  EXPECT_EQ(after.at("w-3"), 64) << Dump(p);
  EXPECT_EQ(Sum(after), 512);
  bool share = false;
  for (const Decision& x : p.decisions) {
    share |= x.rule == "antdt-nd:restart-share" && x.subject == "w-3";
  }
  EXPECT_TRUE(share) << Dump(p);

  // Still inside the shrink's cool-down: nothing.
  o.history[0].at_ms = kNow - 30'000;
  EXPECT_TRUE(Decide(o, Thresholds()).decisions.empty());

  // Recovered: at its small batch it is now a LEADER, and gets its share back.
  o.history[0].at_ms = kNow - 70'000;
  o.health.mutable_workers(3)->set_class_(v1::LEADER);
  o.health.mutable_workers(3)->set_score(0.5);
  p = Decide(o, Thresholds());
  d = Find(p, "w-3");
  ASSERT_NE(d, nullptr) << Dump(p);
  EXPECT_EQ(d->rule, "antdt-nd:leader-adjust");
  EXPECT_EQ(std::get<AdjustBatchSize>(d->action).local_batch_size, 64);
  EXPECT_EQ(Sum(Batches(o, p)), 512);

  // A deterministic straggler's shrink is never followed by a restart.
  o.health.mutable_workers(3)->set_class_(v1::HEALTHY);
  o.health.mutable_workers(3)->set_score(1.0);
  o.history[0].rule = "antdt-nd:deterministic-adjust";
  EXPECT_TRUE(Decide(o, Thresholds()).decisions.empty());
}

// ---- antdt-nd, decideBy expectedDuration (the default) -------------------------

// The Monitor's record of `id`'s slowdown, begun `seconds_ago`.
void SlowSince(Observed& o, const std::string& id, int64_t seconds_ago) {
  v1::StragglerRecord* r = o.health.add_stragglers();
  r->set_worker_id(id);
  r->set_node("node-" + id);
  r->set_first_seen_unix_ms(kNow - seconds_ago * 1000);
  r->set_last_seen_unix_ms(kNow);
  r->set_active(true);
}

// w-3 runs 2x slower among eight: restarting it buys back 1/30 of the job's
// throughput (256/480 - 256/512 of a step), so at 60 s a restart pays once
// the slowdown is expected to last 1,800 s. With no history on its node, it
// is expected to last as long as it has.
TEST(NdPolicy, ByExpectedDurationARestartWaitsUntilItPays) {
  Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}}));
  SlowSince(o, "w-3", 60);
  Plan p = Decide(o, Spec(Policy::kAntdtNd));
  SCOPED_TRACE(Dump(p));
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->rule, "antdt-nd:persistent-adjust");
  EXPECT_TRUE(absl::StrContains(d->reason, "expected to last 60.0s more (60.0s so far, no history"))
      << d->reason;
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0);

  o.health.mutable_stragglers(0)->set_first_seen_unix_ms(kNow - 2'000'000);  // 2,000 s in
  p = Decide(o, Spec(Policy::kAntdtNd));
  d = Find(p, "w-3");
  ASSERT_NE(d, nullptr) << Dump(p);
  ASSERT_TRUE(std::holds_alternative<KillRestart>(d->action)) << Dump(p);
  EXPECT_EQ(d->rule, "antdt-nd:duration-restart");
  EXPECT_DOUBLE_EQ(d->evidence.at("expected_remaining_seconds"), 2000);
  EXPECT_NEAR(d->evidence.at("saved_seconds"), 2000.0 / 30, 0.01);
  EXPECT_DOUBLE_EQ(d->evidence.at("cost_seconds"), 60);
  EXPECT_TRUE(absl::StrContains(d->reason, "saves 66.667s of the 2000s its slowdown is expected"))
      << d->reason;

  // The same 60 s in, on a node the memory calls chronic: the rest of the job.
  o.health.mutable_stragglers(0)->set_first_seen_unix_ms(kNow - 60'000);
  o.nodes.push_back({"node-w-3", false, 0, 0, /*chronic=*/true, 0.9});
  p = Decide(o, Spec(Policy::kAntdtNd));
  d = Find(p, "w-3");
  ASSERT_NE(d, nullptr) << Dump(p);
  EXPECT_TRUE(std::holds_alternative<KillRestart>(d->action)) << Dump(p);
  EXPECT_TRUE(absl::StrContains(d->reason, "a chronically slow node")) << d->reason;

  // A node whose slowdowns last 10 s: 60 s in, expected to last 60 s more.
  o.nodes.back().chronic = false;
  o.nodes.back().slowdown_expected_seconds = 10;
  p = Decide(o, Spec(Policy::kAntdtNd));
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0) << Dump(p);

  // Near the end, even on a chronic node: 50 s left, a restart costs 60 s.
  o.nodes.back().chronic = true;
  o.remaining_seconds = 50;
  p = Decide(o, Spec(Policy::kAntdtNd));
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0) << Dump(p);
  d = Find(p, "w-3");
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(absl::StrContains(d->reason, "not with this little of the job left")) << d->reason;
}

// A straggler compensated by its smaller batch is restarted once its
// slowdown has lasted long enough, and until then says why not.
TEST(NdPolicy, ByExpectedDurationACompensatedStragglerIsRestartedOnceItPays) {
  Observed o = CompensatedW3();
  SlowSince(o, "w-3", 75);
  Plan p = Decide(o, Spec(Policy::kAntdtNd));
  EXPECT_TRUE(p.decisions.empty()) << Dump(p);
  EXPECT_TRUE(Skipped(p, "w-3", "no KILL_RESTART yet")) << Dump(p);
  EXPECT_TRUE(SkippedFor(p, "w-3", SkipReason::kCostAboveSaving));

  o.health.mutable_stragglers(0)->set_first_seen_unix_ms(kNow - 2'000'000);
  p = Decide(o, Spec(Policy::kAntdtNd));
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr) << Dump(p);
  EXPECT_EQ(d->rule, "antdt-nd:duration-restart");
  EXPECT_TRUE(absl::StrContains(d->reason, "compensated by ADJUST_BS 70 s ago and still 2"))
      << d->reason;
  EXPECT_EQ(Batches(o, p).at("w-3"), 64) << "a median worker's share on its new node";
}

// Slower hardware is not restarted (it stays slower wherever the member
// goes), unless the memory says it is the node that is slow, job after job.
TEST(NdPolicy, ByExpectedDurationADeterministicStragglerOnAChronicNodeIsMoved) {
  Observed o = Make(Eight({{"w-3", v1::DETERMINISTIC, 2.0, 6}}));
  SlowSince(o, "w-3", 30);
  Plan p = Decide(o, Spec(Policy::kAntdtNd));
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr) << Dump(p);
  EXPECT_EQ(d->rule, "antdt-nd:deterministic-adjust");
  o.nodes.push_back({"node-w-3", false, 0, 0, /*chronic=*/true, 0.9});
  p = Decide(o, Spec(Policy::kAntdtNd));
  d = Find(p, "w-3");
  ASSERT_NE(d, nullptr) << Dump(p);
  EXPECT_EQ(d->rule, "antdt-nd:duration-restart");
  EXPECT_EQ(std::get<KillRestart>(d->action).to_node, "spare-a");
  // decideBy thresholds: never.
  p = Decide(o, Thresholds());
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0) << Dump(p);
}

// Sized down as slower hardware while its node was not yet marked, then the
// node is marked (the memory folds this job's own record in): still slow per
// sample, it is moved once that pays; not while the node is unmarked, and not
// deciding by thresholds.
TEST(NdPolicy, ByExpectedDurationADeterministicWorkerSizedDownIsMovedOnceItsNodeIsMarked) {
  Observed o = CompensatedW3();
  o.history.back().rule = "antdt-nd:deterministic-adjust";
  o.health.mutable_workers(3)->set_compensated(true);
  o.health.mutable_workers(3)->set_speed_class(v1::DETERMINISTIC);
  SlowSince(o, "w-3", 75);
  Plan p = Decide(o, Spec(Policy::kAntdtNd));
  EXPECT_TRUE(p.decisions.empty()) << Dump(p);

  o.nodes.push_back({"node-w-3", false, 0, 0, /*chronic=*/true, 0.9});
  p = Decide(o, Spec(Policy::kAntdtNd));
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr) << Dump(p);
  ASSERT_TRUE(std::holds_alternative<KillRestart>(d->action)) << Dump(p);
  EXPECT_EQ(d->rule, "antdt-nd:duration-restart");
  EXPECT_TRUE(absl::StrContains(d->reason, "a chronically slow node")) << d->reason;
  EXPECT_TRUE(absl::StrContains(d->reason, "compensated by ADJUST_BS 70 s ago and still 2"))
      << d->reason;
  EXPECT_EQ(std::get<KillRestart>(d->action).to_node, "spare-a");
  EXPECT_EQ(Batches(o, p).at("w-3"), 64) << "a median worker's share on its new node";

  // Near the end: a move costs more than it saves; it stays sized down.
  o.remaining_seconds = 50;
  p = Decide(o, Spec(Policy::kAntdtNd));
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0) << Dump(p);
  o.remaining_seconds = 36'000;
  p = Decide(o, Thresholds());
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0) << Dump(p);
}

// A restart goes to the spare the memory says least to avoid, never to a
// chronic one.
TEST(NdPolicy, RestartsAvoidTheNodesTheMemoryMarks) {
  Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}}));
  o.nodes = {{"spare-a", true, 0, 0, /*chronic=*/true, 0.9},
             {"spare-b", true, 0, 0, false, 0.3},
             {"spare-c", true, 0, 0, false, 0.1}};
  Plan p = Decide(o, Thresholds());
  const Decision* d = Find(p, "w-3");
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(std::holds_alternative<KillRestart>(d->action)) << Dump(p);
  EXPECT_EQ(std::get<KillRestart>(d->action).to_node, "spare-c");
  o.nodes = {{"spare-a", true, 0, 0, /*chronic=*/true, 0.9}};
  p = Decide(o, Thresholds());
  EXPECT_TRUE(Skipped(p, "w-3", "no spare node")) << Dump(p);
}

// The control loop lends the policy an index of the history that it keeps as
// it appends (HistoryIndex): the plans are the ones the policy makes from the
// history alone, turn after turn, and an index of another length is not used.
TEST(HistoryIndexTest, AnIndexKeptAsTheHistoryGrowsGivesTheSamePlans) {
  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 2.0, 1}, {"w-5", v1::PERSISTENT, 2.0, 4}}));
  PolicySpec spec = Thresholds();
  spec.settle_ms = 2'500;
  HistoryIndex index;
  int decided = 0;
  for (int turn = 0; turn < 6; ++turn) {
    o.now_ms = kNow + turn * 20'000;
    o.history_index = nullptr;
    const Plan alone = Decide(o, spec);
    o.history_index = &index;
    const Plan indexed = Decide(o, spec);
    EXPECT_EQ(Dump(indexed), Dump(alone)) << "turn " << turn;
    for (WorkerState& w : o.workers) {
      if (w.role != Role::kParameterServer) w.local_batch_size = Batches(o, indexed).at(w.id);
    }
    for (const Decision& d : indexed.decisions) {
      o.history.push_back(d);
      index.Add(d);
    }
    decided += static_cast<int>(indexed.decisions.size());
    EXPECT_EQ(index.size(), o.history.size());
    EXPECT_EQ(index.BudgetUsed(), BudgetUsed(o.history));
  }
  EXPECT_GT(decided, 0);
  Plan taken;
  taken.decisions.assign(o.history.begin(), o.history.end());
  EXPECT_GT(Count(taken, "KILL_RESTART"), 0) << "restarts: the spare node's choice reads them";
  // An index of fewer decisions than the history (stale) is not read.
  HistoryIndex stale;
  o.history_index = &stale;
  o.now_ms += 20'000;
  Observed alone = o;
  alone.history_index = nullptr;
  EXPECT_EQ(Dump(Decide(o, spec)), Dump(Decide(alone, spec)));
}

TEST(HistoryIndexTest, WhatThePoliciesReadOfAHistory) {
  const HistoryIndex index({
      Past(AdjustBatchSize{"w-3", 40, 1}, 30'000, "antdt-nd:transient-adjust", "w-3"),
      Past(AdjustBatchSize{"w-4", 72, 1}, 30'000, "antdt-nd:restart-share", ""),
      Past(AdjustBatchSize{"w-3", 30, 1}, 20'000, "antdt-nd:persistent-adjust", "w-3"),
      Past(KillRestart{"w-5", "node-w-5", "node-s", kNow + 60'000}, 15'000,
           "antdt-nd:persistent-restart", "w-5"),
      Past(AdjustBatchSize{"w-1", 60, 1}, 10'000, "antdt-nd:rebalance", ""),
      Past(AdjustBatchSize{"w-5", 64, 1}, 5'000, "antdt-nd:leader-adjust", "w-5"),
  });
  EXPECT_EQ(index.size(), 6u);
  EXPECT_EQ(index.LastOwn("w-3"), std::optional<size_t>(2));
  EXPECT_EQ(index.LastOwn("w-5"), std::optional<size_t>(5));
  EXPECT_EQ(index.LastOwn("w-4"), std::nullopt) << "sized around another's action only";
  EXPECT_EQ(index.CompensatedSince("w-3"), kNow - 30'000) << "from the first of its run";
  EXPECT_EQ(index.CompensatedSince("w-5"), HistoryIndex::kNever) << "its last is no shrink";
  EXPECT_EQ(index.LastRestartMs("w-5"), kNow - 15'000);
  EXPECT_EQ(index.LastRestartMs("w-3"), -1);
  // Rounds at -30 s, -20 s and -5 s, one restart; the tidy round counts for none.
  EXPECT_EQ(index.BudgetUsed(), 4);
  EXPECT_EQ(index.UsedByRule().at("antdt-nd:transient-adjust"), 1);
  EXPECT_EQ(index.UsedByRule().at("antdt-nd:persistent-restart"), 1);
  EXPECT_EQ(index.UsedByRule().count("antdt-nd:rebalance"), 0u);
  EXPECT_EQ(index.LastRoundMs(), kNow - 5'000);
  EXPECT_EQ(index.Restarts(), std::vector<size_t>{3});
  EXPECT_FALSE(index.BackupWorkersStarted());
}

TEST(NdPolicy, DeadWorkersKeepTheirBatch) {
  Observed o = Make(Eight({{"w-3", v1::TRANSIENT, 2.0, 1}}));
  o.workers[7].alive = false;  // being restarted
  const Plan p = Decide(o, Spec(Policy::kAntdtNd));
  const auto b = Batches(o, p);
  EXPECT_EQ(b.at("w-7"), 64);
  EXPECT_EQ(Find(p, "w-7"), nullptr);
  EXPECT_EQ(Sum(b), 512);
}

// ---- antdt-dd, lb-bsp ---------------------------------------------------------------

TEST(DdPolicy, BatchesProportionalToSpeedSumToTheGlobalBatch) {
  Observed o = Make({Healthy("g-0"),
                     Healthy("g-1"),
                     {"g-2", v1::LEADER, 0.5},
                     {"g-3", v1::DETERMINISTIC, 2.0, 3}});
  o.workers[2].max_micro_batch = 32;
  const Plan p = Decide(o, Spec(Policy::kAntdtDd));
  SCOPED_TRACE(Dump(p));
  // Capacities 64, 64, 128, 32 of 288; shares of 256: 56.9, 56.9, 113.8, 28.4.
  const std::map<std::string, int64_t> want = {{"g-0", 57}, {"g-1", 57}, {"g-2", 114}, {"g-3", 28}};
  EXPECT_EQ(Batches(o, p), want);
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0);
  EXPECT_EQ(std::get<AdjustBatchSize>(Find(p, "g-2")->action).accumulation_steps, 4);
  EXPECT_EQ(std::get<AdjustBatchSize>(Find(p, "g-3")->action).accumulation_steps, 1);
  for (const Decision& d : p.decisions) {
    EXPECT_EQ(d.rule, "antdt-dd:proportional");
    EXPECT_EQ(d.subject, "");
    EXPECT_TRUE(d.evidence.count("score") && d.evidence.count("windows_slow") &&
                d.evidence.count("drift"));
  }
  // Applied, the same speeds measured again (now all ~1): nothing to do.
  Observed next = o;
  next.history.assign(p.decisions.begin(), p.decisions.end());
  next.now_ms = kNow + kCooldown;
  for (int i = 0; i < 4; ++i) {
    next.workers[i].local_batch_size = want.at(next.workers[i].id);
    next.health.mutable_workers(i)->set_score(1.0);
    next.health.mutable_workers(i)->set_class_(v1::HEALTHY);
  }
  next.workers[2].accumulation_steps = 4;
  EXPECT_TRUE(Decide(next, Spec(Policy::kAntdtDd)).decisions.empty());
}

TEST(DdPolicy, NoReplanWithinTheHysteresisMargin) {
  const Observed o =
      Make({Healthy("g-0", 1.05), Healthy("g-1", 0.95), Healthy("g-2"), Healthy("g-3")});
  Plan p = Decide(o, Spec(Policy::kAntdtDd));
  EXPECT_TRUE(p.decisions.empty()) << Dump(p);
  EXPECT_TRUE(Skipped(p, "job", "within the hysteresis margin")) << Dump(p);
  EXPECT_TRUE(SkippedFor(p, "job", SkipReason::kNotNeeded));
  // Beyond the margin it re-plans.
  PolicySpec tight = Spec(Policy::kAntdtDd);
  tight.hysteresis = 0.02;
  p = Decide(o, tight);
  EXPECT_FALSE(p.decisions.empty());
  EXPECT_EQ(Sum(Batches(o, p)), 256);
  // And not within the cool-down of the last round.
  Observed cooling = o;
  cooling.history.push_back(
      Past(AdjustBatchSize{"g-0", 64, 1}, 20'000, "antdt-dd:proportional", ""));
  p = Decide(cooling, tight);
  EXPECT_TRUE(p.decisions.empty());
  EXPECT_TRUE(Skipped(p, "job", "cool-down"));
  EXPECT_TRUE(SkippedFor(p, "job", SkipReason::kCooldown));
  EXPECT_EQ(p.requeue_after_ms, 10'000);
}

TEST(LbBspPolicy, SizesBatchesWithoutHysteresisOrClasses) {
  // Noise the other policies ignore still re-plans under lb-bsp.
  const Observed o =
      Make({Healthy("g-0", 1.05), Healthy("g-1", 0.95), Healthy("g-2"), Healthy("g-3")});
  const Plan p = Decide(o, Spec(Policy::kLbBsp));
  SCOPED_TRACE(Dump(p));
  EXPECT_FALSE(p.decisions.empty());
  EXPECT_EQ(Sum(Batches(o, p)), 256);
  EXPECT_LT(Batches(o, p).at("g-0"), Batches(o, p).at("g-1"));
  EXPECT_EQ(Count(p, "KILL_RESTART"), 0);
  // A persistent straggler is resized, never restarted.
  const Observed s = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 9}}));
  const Plan q = Decide(s, Spec(Policy::kLbBsp));
  EXPECT_EQ(Count(q, "KILL_RESTART"), 0);
  EXPECT_EQ(Batches(s, q).at("w-3"), 34);
  EXPECT_TRUE(Decide(Make(Eight()), Spec(Policy::kLbBsp)).decisions.empty()) << "equal speeds";
}

// ---- baselines ---------------------------------------------------------------------

TEST(Baselines, BackupWorkersOnceAndNoneNever) {
  Observed o = Make(Eight({{"w-3", v1::PERSISTENT, 2.0, 4}, {"w-4", v1::TRANSIENT, 1.6, 1}}));
  PolicySpec spec = Spec(Policy::kBackupWorkers);
  spec.backup_workers = 2;
  const Plan p = Decide(o, spec);
  ASSERT_EQ(p.decisions.size(), 1u) << Dump(p);
  EXPECT_EQ(std::get<UseBackupWorkers>(p.decisions[0].action).backups, 2);
  EXPECT_EQ(p.decisions[0].evidence.at("workers"), 8);
  o.history.assign(p.decisions.begin(), p.decisions.end());
  o.now_ms += 3'600'000;
  EXPECT_TRUE(Decide(o, spec).decisions.empty());

  const Plan none = Decide(o, Spec(Policy::kNone));
  EXPECT_TRUE(none.decisions.empty());
  EXPECT_TRUE(none.skipped.empty());
  EXPECT_EQ(none.requeue_after_ms, 10'000);
}

// ---- custom -----------------------------------------------------------------------

PolicySpec CustomSpec() {
  PolicySpec s = Spec(Policy::kCustom);
  Rule restart;
  restart.name = "restart-persistent";
  restart.signal = Signal::kClass;
  restart.straggler_class = v1::PERSISTENT;
  restart.action = ActionKind::kKillRestart;
  restart.budget = 1;
  Rule shrink;
  shrink.signal = Signal::kScore;
  shrink.threshold = 1.5;
  shrink.windows = 2;
  shrink.role = Role::kWorker;
  shrink.action = ActionKind::kAdjustBatchSize;
  shrink.cooldown_ms = 20'000;
  s.rules = {restart, shrink};
  return s;
}

TEST(CustomPolicy, RulesInOrder) {
  struct Case {
    std::string name;
    std::vector<M> members;
    std::vector<Decision> history;
    std::string action;  // for w-3; "" none
    std::string rule;
  };
  const std::vector<Case> cases = {
      {"persistent restarts",
       Eight({{"w-3", v1::PERSISTENT, 1.6, 3}}),
       {},
       "KILL_RESTART",
       "restart-persistent"},
      {"budget spent falls to the next rule",
       Eight({{"w-3", v1::PERSISTENT, 1.6, 3}}),
       {Past(KillRestart{"w-9", "a", "b", 0}, 900'000, "restart-persistent", "w-9")},
       "ADJUST_BS",
       "rules[1]"},
      {"score rule needs its windows", Eight({{"w-3", v1::TRANSIENT, 1.6, 1}}), {}, "", ""},
      {"score rule", Eight({{"w-3", v1::TRANSIENT, 1.6, 2}}), {}, "ADJUST_BS", "rules[1]"},
      {"below threshold", Eight({{"w-3", v1::TRANSIENT, 1.4, 5}}), {}, "", ""},
      {"rule's own cool-down over",
       Eight({{"w-3", v1::TRANSIENT, 1.6, 4}}),
       {Past(AdjustBatchSize{"w-3", 50, 1}, 25'000, "rules[1]", "w-3")},
       "ADJUST_BS",
       "rules[1]"},
      {"rule's own cool-down running",
       Eight({{"w-3", v1::TRANSIENT, 1.6, 4}}),
       {Past(AdjustBatchSize{"w-3", 50, 1}, 15'000, "rules[1]", "w-3")},
       "",
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Observed o = Make(c.members);
    o.history.assign(c.history.begin(), c.history.end());
    const Plan p = Decide(o, CustomSpec());
    SCOPED_TRACE(Dump(p));
    EXPECT_EQ(Sum(Batches(o, p)), 512);
    const Decision* d = Find(p, "w-3");
    if (c.action.empty()) {
      EXPECT_TRUE(p.decisions.empty());
      continue;
    }
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(ActionName(d->action), c.action);
    EXPECT_EQ(d->rule, c.rule);
    EXPECT_EQ(d->policy, Policy::kCustom);
  }
  // A parameter server matches only the class rule.
  const Observed ps = Make(Eight({{"ps-0", v1::PERSISTENT, 2.0, 3, 0, Role::kParameterServer}}));
  const Plan p = Decide(ps, CustomSpec());
  ASSERT_NE(Find(p, "ps-0"), nullptr) << Dump(p);
  EXPECT_EQ(ActionName(Find(p, "ps-0")->action), std::string("KILL_RESTART"));
}

// ---- Validate --------------------------------------------------------------------

TEST(ValidateSpec, NamesTheFieldPath) {
  struct Case {
    std::string name;
    std::function<void(PolicySpec&)> edit;
    std::string want;  // "" -> OK
  };
  const std::vector<Case> cases = {
      {"valid custom", [](PolicySpec&) {}, ""},
      {"bad action", [](PolicySpec& s) { s.rules[1].action = ActionKind::kBackupWorkers; },
       "spec.stragglerPolicy.rules[1].action: must be one of ADJUST_BS, KILL_RESTART"},
      {"rules outside custom", [](PolicySpec& s) { s.name = Policy::kAntdtNd; },
       "spec.stragglerPolicy.rules: only the custom policy takes rules, not antdt-nd"},
      {"custom without rules", [](PolicySpec& s) { s.rules.clear(); },
       "spec.stragglerPolicy.rules: the custom policy needs at least one rule"},
      {"cooldown", [](PolicySpec& s) { s.cooldown_ms = -1; },
       "spec.stragglerPolicy.cooldown: must be >= 0"},
      {"budget", [](PolicySpec& s) { s.max_actions = -1; },
       "spec.stragglerPolicy.maxActions: must be >= 0"},
      {"ratio", [](PolicySpec& s) { s.min_saving_ratio = -0.5; },
       "spec.stragglerPolicy.minSavingRatio: must be a number >= 0"},
      {"hysteresis", [](PolicySpec& s) { s.hysteresis = 1.5; },
       "spec.stragglerPolicy.hysteresis: must be in [0, 1)"},
      {"class", [](PolicySpec& s) { s.rules[0].straggler_class = v1::HEALTHY; },
       "spec.stragglerPolicy.rules[0].class: must be one of TRANSIENT, PERSISTENT, "
       "DETERMINISTIC, LEADER"},
      {"threshold", [](PolicySpec& s) { s.rules[1].threshold = 0.9; },
       "spec.stragglerPolicy.rules[1].threshold: must be > 1 (1 is the median), got 0.9"},
      {"windows", [](PolicySpec& s) { s.rules[1].windows = 0; },
       "spec.stragglerPolicy.rules[1].windows: must be >= 1"},
      {"adjust a ps", [](PolicySpec& s) { s.rules[1].role = Role::kParameterServer; },
       "spec.stragglerPolicy.rules[1].action: ADJUST_BS cannot help a parameter server (role ps)"},
      {"rule cooldown", [](PolicySpec& s) { s.rules[1].cooldown_ms = -5; },
       "spec.stragglerPolicy.rules[1].cooldown: must be >= 0"},
      {"rule budget", [](PolicySpec& s) { s.rules[0].budget = -1; },
       "spec.stragglerPolicy.rules[0].budget: must be >= 0"},
      {"duplicate name", [](PolicySpec& s) { s.rules[1].name = "restart-persistent"; },
       "spec.stragglerPolicy.rules[1].name: \"restart-persistent\" is also rules[0]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PolicySpec spec = CustomSpec();
    c.edit(spec);
    const absl::Status status = Validate(spec);
    if (c.want.empty()) {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(status.message(), c.want);
    }
  }
  for (Policy name : {Policy::kAntdtNd, Policy::kAntdtDd, Policy::kNone, Policy::kBackupWorkers,
                      Policy::kLbBsp}) {
    EXPECT_TRUE(Validate(Spec(name)).ok()) << name;
  }
  EXPECT_EQ(Validate(Spec(Policy::kCustom), "policy").message().substr(0, 13), "policy.rules:");
}

// ---- Describe ----------------------------------------------------------------------

TEST(DescribeTest, OneLineOfKeyValues) {
  EXPECT_EQ(Describe(Action{AdjustBatchSize{"w-3", 34, 2}}),
            "action=ADJUST_BS worker=w-3 local_batch_size=34 accumulation_steps=2");
  EXPECT_EQ(Describe(Action{KillRestart{"ps-0", "node-1", "spare-a", 123}}),
            "action=KILL_RESTART worker=ps-0 from_node=node-1 to_node=spare-a "
            "exclude_node_until_ms=123");
  EXPECT_EQ(Describe(Action{UseBackupWorkers{1}}), "action=BACKUP_WORKERS backups=1");
  Decision d;
  d.action = KillRestart{"w-3", "node-3", "spare-a", 5};
  d.at_ms = 7;
  d.policy = Policy::kAntdtNd;
  d.rule = "antdt-nd:persistent-restart";
  d.subject = "w-3";
  d.reason = "PERSISTENT \"slow\"";
  d.evidence = {{"score", 2}, {"cost_seconds", 60}};
  EXPECT_EQ(Describe(d),
            "action=KILL_RESTART worker=w-3 from_node=node-3 to_node=spare-a "
            "exclude_node_until_ms=5 at_ms=7 policy=antdt-nd rule=antdt-nd:persistent-restart "
            "subject=w-3 reason=\"PERSISTENT \\\"slow\\\"\" cost_seconds=60 score=2");
  d.subject.clear();
  EXPECT_TRUE(absl::StrContains(Describe(d), " subject=\"\" "));
}

// ---- invariants over random scenarios ---------------------------------------------

TEST(Invariants, GlobalBatchConstantAndDeterministic) {
  std::mt19937_64 rng(7);
  const v1::StragglerClass classes[] = {v1::HEALTHY,   v1::HEALTHY,    v1::LEADER,
                                        v1::TRANSIENT, v1::PERSISTENT, v1::DETERMINISTIC};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<M> members;
    const int n = 2 + static_cast<int>(rng() % 14);
    for (int i = 0; i < n; ++i) {
      M m;
      m.id = absl::StrCat("w-", i);
      m.cls = classes[rng() % 6];
      const double u = static_cast<double>(rng() % 100) / 100.0;  // [0, 1)
      m.score = m.cls == v1::LEADER    ? 0.3 + 0.5 * u
                : m.cls == v1::HEALTHY ? 0.9 + 0.2 * u
                                       : 1.3 + 3.0 * u;
      m.windows_slow =
          m.cls == v1::HEALTHY || m.cls == v1::LEADER ? 0 : 1 + static_cast<int>(rng() % 6);
      m.batch = 1 + static_cast<int64_t>(rng() % 128);
      members.push_back(m);
    }
    Observed o = Make(members);
    o.remaining_seconds = static_cast<double>(rng() % 20'000);
    for (Policy name : {Policy::kAntdtNd, Policy::kAntdtDd, Policy::kLbBsp}) {
      SCOPED_TRACE(absl::StrCat("trial ", trial, " ", vocab::Name(name)));
      const Plan p = Decide(o, Spec(name));
      const auto batches = Batches(o, p);
      EXPECT_EQ(Sum(batches), o.global_batch_size) << Dump(p);
      for (const auto& [id, b] : batches) EXPECT_GE(b, 1) << id;
      for (const Decision& d : p.decisions) {
        EXPECT_TRUE(d.evidence.count("score") && d.evidence.count("windows_slow"));
        if (const auto* a = std::get_if<AdjustBatchSize>(&d.action)) {
          EXPECT_GE(a->accumulation_steps, 1);
          EXPECT_LE(a->accumulation_steps, a->local_batch_size);
        }
      }
      const Plan again = Decide(o, Spec(name));
      EXPECT_EQ(Dump(again), Dump(p)) << "a pure function";
    }
  }
}

}  // namespace
}  // namespace antdt::policy
