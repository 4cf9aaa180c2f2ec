#include "services/sharding/config.h"

#include <gtest/gtest.h>

namespace antdt::sharding {
namespace {

TEST(ServiceConfig, ParsesYamlAndFlagsWin) {
  auto c = ParseServiceConfig("listen: 127.0.0.1:0\nlease_ttl: 5s\nsync: normal\nstate_dir: /x\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->lease_ttl_ms, 5000);
  EXPECT_EQ(c->max_datasets, 10'000);
  EXPECT_EQ(c->max_total_shards, 100'000'000);
  EXPECT_FALSE(c->sync_full);
  const char* argv[] = {"bin", "--lease-ttl",        "2s", "--max-datasets",
                        "7",   "--max-total-shards", "900"};
  auto flags = ParseFlags(7, argv, {"lease-ttl", "max-datasets", "max-total-shards"});
  auto merged = ApplyServiceFlags(*c, *flags);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->lease_ttl_ms, 2000);
  EXPECT_EQ(merged->max_datasets, 7);
  EXPECT_EQ(merged->max_total_shards, 900);
  EXPECT_EQ(merged->state_dir, "/x");
}

TEST(ServiceConfig, ErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* field;
  } cases[] = {
      {"lease_ttl: 5\n", "lease_ttl"},
      {"listen: nowhere\n", "listen"},
      {"sync: sometimes\n", "sync"},
      {"max_datasets: 0\n", "max_datasets"},
      {"max_total_shards: lots\n", "max_total_shards"},
      {"bogus: 1\n", "bogus"},
      {"metrics_listen: 1.2.3.4:99999\n", "metrics_listen"},
      {"listen: [a, b]\n", "listen"},
      {"- a\n", "config"},
      {"a: [\n", "config"},
  };
  for (const Case& c : cases) {
    auto r = ParseServiceConfig(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace antdt::sharding
