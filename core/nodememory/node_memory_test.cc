#include "core/nodememory/node_memory.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace antdt::nodememory {
namespace {

constexpr int64_t kHour = 3600 * 1000;
constexpr int64_t kNow = 1'900'000'000'000;

// A Monitor record of `worker` in `job` on `node`: slow `slowdown` times from
// `start` for `seconds`, over `windows` slow windows.
v1::StragglerRecord Slow(const std::string& node, const std::string& job, int64_t start,
                         double seconds, double slowdown = 3, int32_t windows = 5,
                         bool active = false, const std::string& worker = "worker-1") {
  v1::StragglerRecord r;
  r.set_node(node);
  r.set_job(job);
  r.set_namespace_("team-a");
  r.set_worker_id(worker);
  r.set_class_(v1::TRANSIENT);
  r.set_cause(v1::CPU_CONTENTION);
  r.set_first_seen_unix_ms(start);
  r.set_last_seen_unix_ms(start + static_cast<int64_t>(seconds * 1000));
  r.set_max_sample_score(slowdown);
  r.set_max_score(slowdown);
  r.set_windows(windows);
  r.set_active(active);
  return r;
}

NodeMemory Memory(Options o = {}) {
  absl::StatusOr<NodeMemory> m = NodeMemory::Create(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

// The cause a node's condition names: the one its episodes named, weighted by
// how much slower each was and how fresh; an unnamed cause never wins.
TEST(NodeMemoryTest, TheMainCauseIsTheOneTheSlowestFreshestEpisodesNamed) {
  NodeMemory m = Memory();
  EXPECT_EQ(m.MainCause("node-1", kNow), v1::CAUSE_UNKNOWN);  // never seen
  v1::StragglerRecord contention = Slow("node-1", "a", kNow - 60'000, 30, 1.5);
  v1::StragglerRecord throttling = Slow("node-1", "b", kNow - 60'000, 30, 4.0, 5, false, "w-2");
  throttling.set_cause(v1::CPU_THROTTLING);
  v1::StragglerRecord unknown = Slow("node-1", "c", kNow - 60'000, 30, 5.0, 5, false, "w-3");
  unknown.set_cause(v1::CAUSE_UNKNOWN);
  for (const auto& r : {contention, throttling, unknown}) ASSERT_TRUE(m.Record(r, kNow).ok());
  EXPECT_EQ(m.MainCause("node-1", kNow), v1::CPU_THROTTLING);
  // Days later a fresh, milder contention episode outweighs the decayed throttling.
  v1::StragglerRecord later = Slow("node-1", "d", kNow + 72 * kHour, 30, 2.0);
  ASSERT_TRUE(m.Record(later, kNow + 72 * kHour).ok());
  EXPECT_EQ(m.MainCause("node-1", kNow + 72 * kHour), v1::CPU_CONTENTION);
  EXPECT_NE(m.Find("node-1"), nullptr);
  EXPECT_EQ(m.Find("node-2"), nullptr);
}

TEST(NodeMemoryTest, ANodeNeverSeenHasThePriorAndNothingToAvoid) {
  const NodeMemory m = Memory();
  const Estimate e = m.For("node-x", kNow);
  EXPECT_DOUBLE_EQ(e.expected_duration_seconds, 0);  // the prior: no history says nothing
  EXPECT_EQ(e.avoid, 0);
  EXPECT_FALSE(e.chronic);
  EXPECT_EQ(e.episodes, 0);
}

// The example: a node seen slow once an hour ago counts less than one
// seen slow in three jobs today; and both count less as time passes.
TEST(NodeMemoryTest, OnceAnHourAgoCountsLessThanThreeJobsToday) {
  NodeMemory m = Memory();
  ASSERT_TRUE(m.Record(Slow("once", "a", kNow - kHour - 10'000, 10), kNow - kHour).ok());
  for (int j = 0; j < 3; ++j) {
    const int64_t start = kNow - (2 + 3 * j) * kHour;
    ASSERT_TRUE(m.Record(Slow("often", "job-" + std::to_string(j), start, 10), start).ok());
  }
  const Estimate once = m.For("once", kNow);
  const Estimate often = m.For("often", kNow);
  EXPECT_GT(often.avoid, once.avoid);
  EXPECT_GT(once.avoid, 0);
  EXPECT_EQ(often.jobs, 3);
  EXPECT_EQ(once.jobs, 1);
  EXPECT_TRUE(often.chronic);
  EXPECT_FALSE(once.chronic) << "one job's episode is an incident";
  EXPECT_FALSE(m.For("never", kNow).chronic);
  // A day on, four half-lives: the slow weight is a sixteenth of what it was.
  EXPECT_NEAR(m.For("often", kNow + 24 * kHour).slow, often.slow / 16, 1e-9);
  EXPECT_LT(m.For("often", kNow + 24 * kHour).avoid, often.avoid);
  EXPECT_FALSE(m.For("often", kNow + 24 * kHour).chronic);
}

TEST(NodeMemoryTest, DurationsComeFromTheNodesEpisodesBlendedWithThePrior) {
  NodeMemory m = Memory();
  for (int j = 0; j < 8; ++j) {
    const int64_t start = kNow - (j + 1) * 60'000;
    ASSERT_TRUE(m.Record(Slow("long", "job-" + std::to_string(j), start, 300), start).ok());
    ASSERT_TRUE(m.Record(Slow("short", "job-" + std::to_string(j), start, 2), start).ok());
  }
  const double long_s = m.For("long", kNow).expected_duration_seconds;
  const double short_s = m.For("short", kNow).expected_duration_seconds;
  EXPECT_GT(long_s, 200);  // 8 sure episodes of 300 s against a 0 s prior of weight 1
  EXPECT_LT(long_s, 300);
  EXPECT_LE(short_s, 2);
  EXPECT_GT(short_s, 1.5);
}

// The Monitor re-sends a record while its episode goes on: the same job,
// worker and start update one episode, however often.
TEST(NodeMemoryTest, AnEpisodeReportedAgainIsOneEpisode) {
  NodeMemory m = Memory();
  const int64_t start = kNow - 60'000;
  for (int k = 1; k <= 10; ++k) {
    ASSERT_TRUE(m.Record(Slow("n", "a", start, k * 5, 3, k, /*active=*/k < 10), start + k).ok());
  }
  const Estimate e = m.For("n", kNow);
  EXPECT_EQ(e.episodes, 1);
  EXPECT_EQ(m.State().nodes(0).episodes_total(), 1);
  EXPECT_EQ(m.State().nodes(0).episodes(0).end_unix_ms(), start + 50'000);
  // Another worker's episode from the same start is another episode.
  ASSERT_TRUE(m.Record(Slow("n", "a", start, 5, 3, 2, false, "worker-2"), kNow).ok());
  EXPECT_EQ(m.For("n", kNow).episodes, 2);
}

TEST(NodeMemoryTest, EpisodesAndNodesAreBoundedAndOldEpisodesStillCount) {
  Options o;
  o.max_episodes_per_node = 4;
  o.max_nodes = 10;
  NodeMemory m = Memory(o);
  for (int j = 0; j < 40; ++j) {
    const int64_t start = kNow - (40 - j) * 60'000;
    ASSERT_TRUE(m.Record(Slow("busy", "job-" + std::to_string(j), start, 30), start).ok());
  }
  const Estimate e = m.For("busy", kNow);
  EXPECT_EQ(e.episodes, 4);
  EXPECT_EQ(m.State().nodes(0).episodes_total(), 40);
  // 40 fresh 3x episodes of about 0.83 confidence each: the folded 36 count.
  EXPECT_GT(e.slow, 40 * 0.83 * 2 * 0.9);
  EXPECT_NEAR(e.expected_duration_seconds, 30, 1);
  for (int n = 0; n < 20; ++n) {
    ASSERT_TRUE(m.Record(Slow("node-" + std::to_string(n), "j", kNow, 1), kNow + n).ok());
  }
  EXPECT_EQ(m.nodes(), 10u);
  EXPECT_EQ(m.For("busy", kNow).episodes, 0) << "the least recently recorded node went first";
  EXPECT_EQ(m.For("node-19", kNow).episodes, 1);
  EXPECT_EQ(m.For("node-9", kNow).episodes, 0);
}

TEST(NodeMemoryTest, AStateKeptAndReadBackGivesTheSameEstimates) {
  Options o;
  o.max_episodes_per_node = 3;
  NodeMemory m = Memory(o);
  for (int j = 0; j < 7; ++j) {
    const int64_t start = kNow - (j + 1) * kHour;
    ASSERT_TRUE(m.Record(Slow("a", "job-" + std::to_string(j), start, 10 + j, 2 + j), start).ok());
    ASSERT_TRUE(m.Record(Slow("b", "job-" + std::to_string(j), start, 5), start).ok());
  }
  std::string bytes;
  ASSERT_TRUE(m.State().SerializeToString(&bytes));
  v1::NodeMemoryState state;
  ASSERT_TRUE(state.ParseFromString(bytes));
  absl::StatusOr<NodeMemory> back = NodeMemory::FromState(state, o);
  ASSERT_TRUE(back.ok()) << back.status();
  for (const char* node : {"a", "b", "c"}) {
    const Estimate x = m.For(node, kNow), y = back->For(node, kNow);
    EXPECT_DOUBLE_EQ(x.slow, y.slow) << node;
    EXPECT_DOUBLE_EQ(x.expected_duration_seconds, y.expected_duration_seconds) << node;
    EXPECT_EQ(x.jobs, y.jobs) << node;
  }
  // Read back under smaller bounds: the older episodes fold, and still count.
  o.max_episodes_per_node = 1;
  absl::StatusOr<NodeMemory> small = NodeMemory::FromState(state, o);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->For("a", kNow).episodes, 1);
  EXPECT_NEAR(small->For("a", kNow).slow, m.For("a", kNow).slow, 1e-9);
}

TEST(NodeMemoryTest, BadInputIsRefusedNamingTheFieldAndChangesNothing) {
  NodeMemory m = Memory();
  ASSERT_TRUE(m.Record(Slow("n", "a", kNow - 60'000, 10), kNow).ok());
  const std::string before = m.State().SerializeAsString();
  struct Case {
    v1::StragglerRecord record;
    std::string field;
  };
  v1::StragglerRecord no_node = Slow("", "a", kNow, 1);
  v1::StragglerRecord no_start = Slow("n", "a", kNow, 1);
  no_start.set_first_seen_unix_ms(0);
  v1::StragglerRecord backwards = Slow("n", "a", kNow, 1);
  backwards.set_last_seen_unix_ms(kNow - 1);
  v1::StragglerRecord nan_score = Slow("n", "a", kNow, 1);
  nan_score.set_max_sample_score(NAN);
  v1::StragglerRecord negative_windows = Slow("n", "a", kNow, 1);
  negative_windows.set_windows(-1);
  for (const Case& c :
       {Case{no_node, "record.node: "}, Case{no_start, "record.first_seen_unix_ms: "},
        Case{backwards, "record.last_seen_unix_ms: "}, Case{nan_score, "record.max_sample_score: "},
        Case{negative_windows, "record.windows: "}}) {
    const absl::Status s = m.Record(c.record, kNow);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(std::string(s.message()).rfind(c.field, 0), 0u) << s.message();
  }
  EXPECT_EQ(m.State().SerializeAsString(), before);

  Options bad;
  bad.half_life_ms = 0;
  EXPECT_EQ(std::string(NodeMemory::Create(bad).status().message()).rfind("half_life_ms: ", 0), 0u);
  v1::NodeMemoryState twice;
  twice.add_nodes()->set_node("n");
  twice.add_nodes()->set_node("n");
  EXPECT_EQ(std::string(NodeMemory::FromState(twice).status().message()).rfind("nodes[1].node", 0),
            0u);
  v1::NodeMemoryState broken;
  broken.add_nodes()->set_folded_slow(-1);
  broken.mutable_nodes(0)->set_node("n");
  EXPECT_FALSE(NodeMemory::FromState(broken).ok());
}

}  // namespace
}  // namespace antdt::nodememory
