// The terminal's summary and report.html/report.json of a run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "backends/local/runner.h"
#include "common/config.h"
#include "common/testing/testing.h"

namespace antdt::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Read(const std::string& path) { return ReadFile(path).value_or(""); }

// A restart with its batch changes, as the runner records them.
RunResult Sample() {
  RunResult r;
  r.job = "paper-mix";
  r.policy = "antdt-nd";
  r.jct_seconds = 63.5;
  r.records_committed = 400'000;
  r.journals_checked = false;
  r.estimated_saved_seconds = 3.411;
  r.estimated_lost_seconds = 12.5;
  policy::Decision restart;
  restart.at_ms = 8'603;
  restart.action = policy::KillRestart{"worker-5", "node-5", "spare-0", 12'603};
  restart.policy = vocab::Policy::kAntdtNd;
  restart.subject = "worker-5";
  restart.rule = "antdt-nd:persistent-restart";
  restart.cause = v1::CPU_THROTTLING;
  restart.reason =
      "PERSISTENT worker (score 1.594, 5 slow windows): restart on spare-0 saves 3.411s of "
      "89.879s left, cost 2s; node-5 excluded until its cool-down ends (4 s)";
  restart.evidence = {
      {"score", 1.594}, {"windows_slow", 5}, {"saved_seconds", 3.411}, {"cost_seconds", 2}};
  r.actions.push_back(restart);
  for (const char* w : {"worker-0", "worker-1", "worker-2"}) {
    policy::Decision keep;
    keep.at_ms = 8'603;
    keep.action = policy::AdjustBatchSize{w, 70, 1};
    keep.policy = vocab::Policy::kAntdtNd;
    keep.rule = "antdt-nd:rebalance";
    keep.reason = "keeps the global batch 512 around worker-5";
    r.actions.push_back(keep);
  }
  r.start_unix_ms = 1'700'000'000'000;
  v1::StragglerRecord& rec = r.stragglers.emplace_back();
  rec.set_worker_id("worker-5");
  rec.set_node("node-5");
  rec.set_role("worker");
  rec.set_class_(v1::PERSISTENT);
  rec.set_cause(v1::CPU_THROTTLING);
  (*rec.mutable_evidence())["cgroup_throttled_fraction"] = 0.62;
  (*rec.mutable_evidence())["cpu_wait_share"] = 0.4;
  rec.set_first_seen_unix_ms(r.start_unix_ms + 3'000);
  rec.set_detected_unix_ms(r.start_unix_ms + 3'400);
  rec.set_last_seen_unix_ms(r.start_unix_ms + 9'000);
  rec.set_windows(20);
  (*rec.mutable_cause_windows())["cpu_contention"] = 20;
  rec.set_max_score(3.9);
  rec.set_max_sample_score(3.95);
  for (double t : {3.0, 4.0}) {
    r.timeline.push_back({t, "ps-0", 0, 1, v1::HEALTHY, v1::CAUSE_UNSPECIFIED, "ps"});
    r.timeline.push_back({t, "worker-0", 950, 1, v1::HEALTHY, v1::CAUSE_UNSPECIFIED, "worker"});
    r.timeline.push_back({t, "worker-5", 240, 3.9, v1::PERSISTENT, v1::CPU_THROTTLING, "worker"});
  }
  return r;
}

TEST(ReportText, ListsTheActionsWithTheirCauseAndEvidenceInSeconds) {
  const std::string text = ReportText(Sample());
  EXPECT_THAT(text,
              HasSubstr("time saved (Controller's estimate): 3.4 s, so without AntDT's actions "
                        "about 66.9 s; lost to stragglers: 12.5 s\n"));
  EXPECT_THAT(text, HasSubstr("actions: 1 (and 3 batch changes that only keep the global batch"));
  EXPECT_THAT(text, HasSubstr("\n  8.6 s KILL_RESTART worker-5: PERSISTENT worker"));
  EXPECT_THAT(text,
              HasSubstr("\n      cause cpu_throttling, score 1.59, 5 slow windows, saves ~3.4 s, "
                        "costs 2.0 s\n"));
  EXPECT_THAT(text, Not(HasSubstr("keeps the global batch")));
  // Seconds, never the controller's milliseconds.
  EXPECT_THAT(text, Not(HasSubstr("8603")));
  EXPECT_THAT(text, Not(HasSubstr("12603")));
}

// Each straggler as the Monitor recorded it: when it began, when it was
// detected, until when, how slow, its cause with the values behind it beside
// its peers', and what was done.
TEST(ReportText, ShowsEachStragglerRecordWithItsCauseAndWhatWasDone) {
  RunResult r = Sample();
  const std::string text = ReportText(r);
  EXPECT_THAT(text,
              HasSubstr("stragglers: 1, as the Monitor recorded them:\n"
                        "  worker-5 on node-5 PERSISTENT: slow from 3.0 s, detected at 3.4 s, "
                        "until 9.0 s; up to 3.95x slower per sample (batch time score up to "
                        "3.90); cause cpu_throttling (cgroup_throttled_fraction 0.62); done: "
                        "KILL_RESTART at 8.6 s\n"));
  // Compensated, still slow at the end, its cause measured beside its peers'.
  v1::StragglerRecord& rec = r.stragglers[0];
  rec.set_compensated(true);
  rec.set_active(true);
  rec.set_cause(v1::CPU_CONTENTION);
  (*rec.mutable_evidence())["cpu_wait_share_peer_median"] = 0.1;
  EXPECT_THAT(ReportText(r), HasSubstr("detected at 3.4 s, to the end; up to 3.95x slower per "
                                       "sample (batch time score up to 3.90), compensated by a "
                                       "smaller batch; cause cpu_contention (cpu_wait_share 0.40, "
                                       "peers 0.10)"));
  antdt::testing::TempDir dir;
  ASSERT_TRUE(WriteReport(r, dir.path()).ok());
  EXPECT_THAT(Read(dir.File("report.html")),
              HasSubstr("<h2>Stragglers</h2><p>worker-5 on node-5 PERSISTENT: slow from 3.0 s"));
  const std::string json = Read(dir.File("report.json"));
  EXPECT_THAT(json, HasSubstr("\"stragglers\": [\n    {\"worker\": \"worker-5\", \"node\": "
                              "\"node-5\", \"role\": \"worker\", \"class\": \"persistent\", "
                              "\"compensated\": true, \"cause\": \"cpu_contention\", "
                              "\"first_seen_seconds\": 3.000, \"detected_seconds\": 3.400, "
                              "\"last_seen_seconds\": 9.000, \"active\": true, \"windows\": 20, "
                              "\"cause_windows\": {\"cpu_contention\": 20}, "
                              "\"max_score\": 3.900, \"max_sample_score\": 3.950, \"evidence\": "
                              "{\"cgroup_throttled_fraction\": 0.62, \"cpu_wait_share\": 0.4, "
                              "\"cpu_wait_share_peer_median\": 0.1}}\n  ],"));
  // The action shows the record's cause, as every section does.
  EXPECT_THAT(json, HasSubstr("\"cause\": \"cpu_contention\", \"reason\": \"PERSISTENT"));
  // A slow parameter server is listed too, by the workers' wait on it.
  v1::StragglerRecord& ps = r.stragglers.emplace_back();
  ps.set_worker_id("ps-1");
  ps.set_node("node-9");
  ps.set_role("ps");
  ps.set_class_(v1::PERSISTENT);
  ps.set_cause(v1::CAUSE_UNKNOWN);
  ps.set_first_seen_unix_ms(r.start_unix_ms + 8'000);
  ps.set_detected_unix_ms(r.start_unix_ms + 8'500);
  ps.set_last_seen_unix_ms(r.start_unix_ms + 9'000);
  ps.set_max_score(2.02);
  EXPECT_THAT(ReportText(r), HasSubstr("stragglers: 2, as the Monitor recorded them:\n"));
  EXPECT_THAT(ReportText(r), HasSubstr("\n  ps-1 on node-9 PERSISTENT: slow from 8.0 s, detected "
                                       "at 8.5 s, until 9.0 s; parameter server, step time score "
                                       "up to 2.02; cause unknown; nothing done\n"));
  r.stragglers.clear();
  EXPECT_THAT(ReportText(r), HasSubstr("stragglers: 0\n"));
}

TEST(ReportText, ComparesWithPolicyNoneWhenABenchmarkRanIt) {
  RunResult r = Sample();
  EXPECT_THAT(ReportText(r), Not(HasSubstr("policy none")));
  r.none_jct_seconds = 75.0;
  EXPECT_THAT(ReportText(r), HasSubstr("measured against policy none (75.0 s): 11.5 s"));
}

TEST(WriteReport, TheWhyIsTheSentenceWithTheFieldsBehindAToggle) {
  antdt::testing::TempDir dir;
  ASSERT_TRUE(WriteReport(Sample(), dir.path()).ok());
  const std::string html = Read(dir.File("report.html"));
  EXPECT_THAT(html, HasSubstr("<td>cpu_throttling</td><td>PERSISTENT worker (score 1.594"));
  EXPECT_THAT(html, HasSubstr("(4 s)<details><summary>evidence</summary><code>action=KILL_RESTART "
                              "worker=worker-5 from_node=node-5"));
  EXPECT_THAT(html, HasSubstr("<details><summary>3 batch changes that only keep the global batch"));
  EXPECT_THAT(html, HasSubstr("time saved (Controller's estimate): 3.4 s"));
  // Workers only in the throughput chart; the restart is mark 1.
  EXPECT_THAT(html, HasSubstr("data-name=\"worker-0\""));
  EXPECT_THAT(html, HasSubstr("data-name=\"worker-5\""));
  EXPECT_THAT(html, Not(HasSubstr("data-name=\"ps-0\"")));
  EXPECT_THAT(html, HasSubstr(">8.6 s KILL_RESTART worker-5</text></g>"));
  EXPECT_EQ(html.find("class=\"mark-entry\""), html.rfind("class=\"mark-entry\""));

  const std::string json = Read(dir.File("report.json"));
  EXPECT_THAT(json, HasSubstr("\"estimated_saved_seconds\": 3.411,"));
  EXPECT_THAT(json, HasSubstr("\"none_jct_seconds\": null,"));
  EXPECT_THAT(json, HasSubstr("\"leases_shortened\": null,"));  // no sharding service's figure
  EXPECT_THAT(json, HasSubstr("\"cause\": \"cpu_throttling\", \"reason\": \"PERSISTENT"));
  RunResult counted = Sample();
  counted.leases_shortened = 7;
  ASSERT_TRUE(WriteReport(counted, dir.path()).ok());
  EXPECT_THAT(Read(dir.File("report.json")), HasSubstr("\"leases_shortened\": 7,"));
  EXPECT_THAT(json, HasSubstr("\"worker\": \"ps-0\", \"role\": \"ps\""));
}

}  // namespace
}  // namespace antdt::local
