// The terminal's summary and report.html/report.json of a run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/config.h"
#include "common/testing/testing.h"
#include "operator/local/runner.h"

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
  ActionRecord restart;
  restart.at_seconds = 8.6;
  restart.action = vocab::ActionKind::kKillRestart;
  restart.worker = "worker-5";
  restart.subject = "worker-5";
  restart.rule = "antdt-nd:persistent-restart";
  restart.cause = v1::CPU_THROTTLING;
  restart.reason =
      "PERSISTENT worker (score 1.594, 5 slow windows): restart on spare-0 saves 3.411s of "
      "89.879s left, cost 2s; node-5 excluded until its cool-down ends (4 s)";
  restart.description =
      "action=KILL_RESTART worker=worker-5 from_node=node-5 to_node=spare-0 "
      "exclude_node_until_ms=12603 at_ms=8603 saved_seconds=3.411";
  restart.evidence = {
      {"score", 1.594}, {"windows_slow", 5}, {"saved_seconds", 3.411}, {"cost_seconds", 2}};
  r.actions.push_back(restart);
  for (const char* w : {"worker-0", "worker-1", "worker-2"}) {
    ActionRecord keep;
    keep.at_seconds = 8.6;
    keep.worker = w;
    keep.rule = "antdt-nd:rebalance";
    keep.reason = "keeps the global batch 512 around worker-5";
    keep.description = "action=ADJUST_BS local_batch_size=70 at_ms=8603";
    r.actions.push_back(keep);
  }
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
              HasSubstr("time saved (Controller's estimate): 3.4 s; lost to stragglers: 12.5 s\n"));
  EXPECT_THAT(text, HasSubstr("actions: 1 (and 3 batch changes that only keep the global batch"));
  EXPECT_THAT(text, HasSubstr("\n  8.6 s KILL_RESTART worker-5: PERSISTENT worker"));
  EXPECT_THAT(text,
              HasSubstr("\n      cause CPU_THROTTLING, score 1.59, 5 slow windows, saves ~3.4 s, "
                        "costs 2.0 s\n"));
  EXPECT_THAT(text, Not(HasSubstr("keeps the global batch")));
  // Seconds, never the controller's milliseconds.
  EXPECT_THAT(text, Not(HasSubstr("8603")));
  EXPECT_THAT(text, Not(HasSubstr("12603")));
}

// A straggler that ADJUST_BS compensates: slow by BPT at 3 s, then slow per
// sample only (compensated) at 4, 5 and 6 s, recovered at 7 s.
TEST(ReportText, ShowsEachStragglerWithItsPerSampleSpeedAndCompensation) {
  RunResult r = Sample();
  r.timeline.clear();
  auto at = [&](double t, v1::StragglerClass cls, double score, double sample_score,
                v1::StragglerClass speed, bool compensated, v1::Cause cause) {
    r.timeline.push_back(
        {t, "worker-0", 950, 1, v1::HEALTHY, v1::CAUSE_UNSPECIFIED, "worker", 1, v1::HEALTHY});
    r.timeline.push_back(
        {t, "worker-3", 320, score, cls, cause, "worker", sample_score, speed, compensated});
  };
  at(3, v1::TRANSIENT, 3.02, 3.01, v1::TRANSIENT, false, v1::CPU_CONTENTION);
  at(4, v1::HEALTHY, 1.01, 3.05, v1::TRANSIENT, true, v1::CPU_CONTENTION);
  at(5, v1::HEALTHY, 0.99, 2.98, v1::PERSISTENT, true, v1::CPU_CONTENTION);
  at(6, v1::HEALTHY, 1.02, 3.00, v1::PERSISTENT, true, v1::CPU_CONTENTION);
  at(7, v1::HEALTHY, 0.35, 1.00, v1::HEALTHY, false, v1::CAUSE_UNSPECIFIED);
  const std::string text = ReportText(r);
  EXPECT_THAT(text, HasSubstr("stragglers: 1, as the Monitor saw them:\n"
                              "  worker-3 PERSISTENT from 3.0 s to 6.0 s: up to 3.05x slower per "
                              "sample (batch time score up to 3.02), compensated by a smaller "
                              "batch for 2.0 s, cause CPU_CONTENTION\n"));
  antdt::testing::TempDir dir;
  ASSERT_TRUE(WriteReport(r, dir.path()).ok());
  EXPECT_THAT(Read(dir.File("report.html")),
              HasSubstr("<h2>Stragglers</h2><p>worker-3 PERSISTENT from 3.0 s"));
  EXPECT_THAT(Read(dir.File("report.json")),
              HasSubstr("\"sample_score\": 3.050, \"speed_class\": \"transient\", "
                        "\"compensated\": true}"));
  // A slow parameter server is listed too, by the workers' wait on it.
  r.timeline.push_back({8, "ps-1", 0, 2.02, v1::PERSISTENT, v1::CAUSE_UNSPECIFIED, "ps"});
  EXPECT_THAT(ReportText(r), HasSubstr("stragglers: 2, as the Monitor saw them:\n"));
  EXPECT_THAT(ReportText(r), HasSubstr("\n  ps-1 PERSISTENT from 8.0 s to 8.0 s: parameter "
                                       "server, step time score up to 2.02\n"));
  r.timeline.clear();
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
  EXPECT_THAT(html, HasSubstr("<td>CPU_THROTTLING</td><td>PERSISTENT worker (score 1.594"));
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
  EXPECT_THAT(json, HasSubstr("\"cause\": \"CPU_THROTTLING\", \"reason\": \"PERSISTENT"));
  EXPECT_THAT(json, HasSubstr("\"worker\": \"ps-0\", \"role\": \"ps\""));
}

}  // namespace
}  // namespace antdt::local
