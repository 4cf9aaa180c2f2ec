#include "operator/local/prometheus.h"

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

}  // namespace
}  // namespace antdt::local
