#include "cli/results.h"

#include <gtest/gtest.h>

namespace antdt::cli {
namespace {

// Real runs and simulated ones write one shape: every key in every row, a
// figure not measured null, the ratios to the first row, extras before the
// actions.
TEST(ResultsJson, OneShapeForRunsAndSimulations) {
  ResultRow ideal;
  ideal.policy = "no-slowdown";
  ideal.jct_seconds = 20;
  ideal.exactly_once = true;
  ResultRow nd;
  nd.policy = "antdt-nd";
  nd.jct_seconds = 25;
  nd.first_loss = 0.69;
  nd.saved_vs_none_seconds = 40;
  nd.extra = {{"restarts", 2}};
  policy::Decision restart;
  restart.at_ms = 8'500;
  restart.action = policy::KillRestart{"worker-5", "node-5", "node-9", 0};
  nd.actions = {restart};
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(
      ResultsJson("paper-mix", {ideal, nd}, {{"simulated", true}, {"seeds", 3}}));
  EXPECT_EQ(doc["scenario"], "paper-mix");
  EXPECT_EQ(doc["simulated"], true);
  EXPECT_EQ(doc["seeds"], 3);
  ASSERT_EQ(doc["results"].size(), 2u);
  const auto& a = doc["results"][0];
  const auto& b = doc["results"][1];
  EXPECT_EQ(a.size(), b.size() - 1) << "the extra key alone differs";
  EXPECT_DOUBLE_EQ(b["ratio_to_no_slowdown"].get<double>(), 1.25);
  EXPECT_EQ(a["exactly_once"], true);
  EXPECT_EQ(a["exactly_once_checked"], true);
  EXPECT_TRUE(b["exactly_once"].is_null());
  EXPECT_EQ(b["exactly_once_checked"], false);
  EXPECT_TRUE(a["first_loss"].is_null());
  EXPECT_DOUBLE_EQ(b["first_loss"].get<double>(), 0.69);
  EXPECT_TRUE(a["saved_vs_none_seconds"].is_null());
  EXPECT_EQ(b["restarts"], 2);
  EXPECT_EQ(std::prev(b.end()).key(), "actions");
  EXPECT_EQ(b["actions"][0]["action"], "KILL_RESTART");
  EXPECT_EQ(b["actions"][0]["worker"], "worker-5");
}

}  // namespace
}  // namespace antdt::cli
