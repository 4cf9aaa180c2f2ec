#include "backends/local/prometheus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace antdt::local {
namespace {

using ::testing::HasSubstr;

TEST(LocalPrometheusConfig, HonorsTheJobsLabelsAndQuotesPaths) {
  const std::string c = LocalPrometheusConfig("/w/a b/targets.json", "/s/rules: x.yaml");
  EXPECT_THAT(c, HasSubstr("honor_labels: true"));
  EXPECT_THAT(c, HasSubstr("files: [\"/w/a b/targets.json\"]"));
  EXPECT_THAT(c, HasSubstr("rule_files: [\"/s/rules: x.yaml\"]"));
  EXPECT_THAT(LocalPrometheusConfig("/t.json", ""), ::testing::Not(HasSubstr("rule_files")));
}

// No `job` from the scrape: one meaning per label (the AntDTJob's name).
TEST(LocalPrometheusConfig, DropsTheScrapesJobLabel) {
  const std::string c = LocalPrometheusConfig("/t.json", "");
  EXPECT_THAT(c, HasSubstr("relabel_configs:\n      - action: labeldrop\n        regex: job\n"));
  EXPECT_THAT(c, HasSubstr("scrape_interval: 1s"));
}

TEST(ScrapedTargets, CountsFromTheAnswer) {
  EXPECT_EQ(ScrapedTargetsPath(), "/api/v1/query?query=count%28up%3D%3D1%29");
  EXPECT_EQ(ScrapedTargets(R"({"status":"success","data":{"resultType":"vector",)"
                           R"("result":[{"metric":{},"value":[1700000000.1,"7"]}]}})"),
            7);
  EXPECT_EQ(ScrapedTargets(R"({"status":"success","data":{"resultType":"vector","result":[]}})"),
            0);
  EXPECT_EQ(ScrapedTargets("<html>"), 0);
  EXPECT_EQ(ScrapedTargets(R"({"status":"error"})"), 0);
}

}  // namespace
}  // namespace antdt::local
