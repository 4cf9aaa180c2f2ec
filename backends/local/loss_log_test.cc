#include "backends/local/loss_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/testing/testing.h"

namespace antdt::local {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(LossLog, FirstFinalStepsAndTheCurveAcrossIncarnations) {
  const LossCurve c = ParseLossLog(
      R"({"time_unix": 1000.5, "step": 1, "loss": 1.4, "samples": 256}
{"time_unix": 1001.5, "step": 2, "loss": 1.1, "samples": 256}
{"time_unix": 1002.0, "step": 3, "loss": 0.9
not json
{"step": 9}
{"time_unix": 1004.0, "step": 3, "loss": 0.95, "samples": 256}
{"time_unix": 1005.0, "step": 4, "loss": 0.7, "samples": 256}
)",
      1000.0);
  EXPECT_DOUBLE_EQ(c.first_loss, 1.4);
  EXPECT_DOUBLE_EQ(c.final_loss, (1.4 + 1.1 + 0.95 + 0.7) / 4);  // fewer than 10 steps
  EXPECT_EQ(c.steps, 4);
  EXPECT_THAT(c.points,
              ElementsAre(Pair(0.5, 1.4), Pair(1.5, 1.1), Pair(4.0, 0.95), Pair(5.0, 0.7)));
}

TEST(LossLog, FinalLossIsTheSampleWeightedMeanOfTheLastTenSteps) {
  std::string text;
  for (int step = 1; step <= 12; ++step) {  // steps 1-2 fall out of the window
    text += absl::StrCat(R"({"step": )", step, R"(, "loss": )", step <= 2 ? 100 : 1,
                         R"(, "samples": 96})", "\n");
  }
  text += R"({"step": 13, "loss": 4.0, "samples": 8})"
          "\n";  // a short last step
  const LossCurve c = ParseLossLog(text, 0);
  // Steps 4..13: nine of 96 samples at loss 1, one of 8 at loss 4.
  EXPECT_DOUBLE_EQ(c.final_loss, (9 * 96 * 1.0 + 8 * 4.0) / (9 * 96 + 8));
  EXPECT_DOUBLE_EQ(c.first_loss, 100);
}

TEST(LossLog, EmptyAndMissing) {
  const LossCurve c = ParseLossLog("", 0);
  EXPECT_EQ(c.first_loss, -1);
  EXPECT_TRUE(c.points.empty());
  EXPECT_EQ(ReadLossLog("/nonexistent/worker-0.loss.jsonl", 0), std::nullopt);
  testing::TempDir dir;
  std::ofstream(dir.File("l.jsonl")) << "{\"loss\": 2.5}\n";
  auto read = ReadLossLog(dir.File("l.jsonl"), 0);
  ASSERT_TRUE(read.has_value());
  EXPECT_DOUBLE_EQ(read->final_loss, 2.5);
  EXPECT_EQ(read->steps, 0);
}

TEST(LossLog, HeldOutEvaluation) {
  antdt::testing::TempDir dir;
  EXPECT_EQ(ReadHeldOut(dir.File("none.json")), std::nullopt);
  std::ofstream(dir.File("eval.json")) << R"({"log_loss": 0.41, "accuracy": 0.83})";
  auto h = ReadHeldOut(dir.File("eval.json"));
  ASSERT_TRUE(h.has_value());
  EXPECT_DOUBLE_EQ(h->log_loss, 0.41);
  EXPECT_DOUBLE_EQ(h->accuracy, 0.83);
  std::ofstream(dir.File("bad.json")) << R"({"accuracy": 0.83})";
  EXPECT_EQ(ReadHeldOut(dir.File("bad.json")), std::nullopt);
}

}  // namespace
}  // namespace antdt::local
