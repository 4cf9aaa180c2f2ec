#include "common/config.h"

#include <gtest/gtest.h>

#include <map>

namespace antdt {
namespace {

TEST(ParseDurationMs, AcceptsUnits) {
  EXPECT_EQ(*ParseDurationMs("250ms", "x"), 250);
  EXPECT_EQ(*ParseDurationMs("30s", "x"), 30000);
  EXPECT_EQ(*ParseDurationMs("1.5s", "x"), 1500);
  EXPECT_EQ(*ParseDurationMs("2m", "x"), 120000);
  EXPECT_EQ(*ParseDurationMs("1h", "x"), 3600000);
}

TEST(ParseDurationMs, RejectsMalformedNamingTheField) {
  for (const char* bad : {"", "30", "s", "3x", "-1s", "1.2.3s"}) {
    auto r = ParseDurationMs(bad, "spec.lease_ttl");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("spec.lease_ttl"), std::string::npos);
  }
}

TEST(ValidateHostPort, ChecksPort) {
  EXPECT_TRUE(ValidateHostPort("127.0.0.1:0", "listen").ok());
  EXPECT_TRUE(ValidateHostPort("[::1]:8080", "listen").ok());
  EXPECT_FALSE(ValidateHostPort("127.0.0.1", "listen").ok());
  EXPECT_FALSE(ValidateHostPort("127.0.0.1:70000", "listen").ok());
  EXPECT_FALSE(ValidateHostPort(":80", "listen").ok());
}

TEST(ParseFlags, ReadsBothFormsAndRejectsUnknown) {
  const char* argv[] = {"bin", "--listen", "127.0.0.1:0", "--state-dir=/tmp/x", "pos", "--v"};
  auto f = ParseFlags(6, argv, {"listen", "state-dir"}, {"v"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Get("listen"), "127.0.0.1:0");
  EXPECT_EQ(f->Get("state-dir"), "/tmp/x");
  EXPECT_EQ(f->Get("v"), "true");
  ASSERT_EQ(f->positional.size(), 1u);
  const char* bad[] = {"bin", "--nope", "1"};
  auto r = ParseFlags(3, bad, {"listen"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--nope"), std::string::npos);
  const char* missing[] = {"bin", "--listen"};
  EXPECT_FALSE(ParseFlags(2, missing, {"listen"}).ok());
}

TEST(ParseFlags, AnUnknownFlagNamesTheNearestKnownOne) {
  const char* typo[] = {"bin", "--state_dir=/tmp/x"};
  auto r = ParseFlags(2, typo, {"listen", "state-dir"}, {"v"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--state_dir: unknown flag; did you mean \"--state-dir\"?");
  const char* bool_typo[] = {"bin", "--hepl"};
  EXPECT_EQ(ParseFlags(2, bool_typo, {"listen"}, {"help"}).status().message(),
            "--hepl: unknown flag; did you mean \"--help\"?");
  const char* far[] = {"bin", "--nope", "1"};
  EXPECT_EQ(ParseFlags(3, far, {"listen"}).status().message(), "--nope: unknown flag");
}

}  // namespace
}  // namespace antdt

namespace antdt {
namespace {

// gRPC reflection is off unless a command line asks for it; the flag is every
// program's, and no config field.
TEST(ParseCommandLine, GrpcReflectionIsOffUnlessAsked) {
  int exit_code = 0;
  const char* plain[] = {"bin", "--listen", "127.0.0.1:0"};
  auto f = ParseCommandLine(3, plain, "bin", "usage\n", {"listen"}, &exit_code);
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(GrpcReflectionRequested());
  const char* asked[] = {"bin", "--grpc-reflection", "--listen", "127.0.0.1:0"};
  f = ParseCommandLine(4, asked, "bin", "usage\n", {"listen"}, &exit_code);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(GrpcReflectionRequested());
  EXPECT_FALSE(f->Has("grpc-reflection"));
  EXPECT_EQ(f->Get("listen"), "127.0.0.1:0");
}

TEST(ForEachYamlField, FlattensListsAndMapsAndNamesBadKeys) {
  std::map<std::string, std::string> got;
  auto collect = [&](const std::string& k, const std::string& v) {
    got[k] = v;
    return absl::OkStatus();
  };
  ASSERT_TRUE(ForEachYamlField("a: 1\nb: [x, y]\nc: {k: v, z: w}\n", collect).ok());
  EXPECT_EQ(got["a"], "1");
  EXPECT_EQ(got["b"], "x,y,");
  EXPECT_EQ(got["c"], "k=v,z=w,");
  EXPECT_TRUE(ForEachYamlField("", collect).ok());
  auto bad_map = ForEachYamlField("labels: {zone: [a]}\n", collect);
  EXPECT_NE(bad_map.message().find("labels.zone"), std::string::npos) << bad_map;
  auto bad_list = ForEachYamlField("cgroups: [[a]]\n", collect);
  EXPECT_NE(bad_list.message().find("cgroups"), std::string::npos) << bad_list;
  EXPECT_NE(ForEachYamlField("- a\n", collect).message().find("must be a mapping"),
            std::string::npos);
  EXPECT_NE(ForEachYamlField("a: [\n", collect).message().find("not valid YAML"),
            std::string::npos);
  // The setter's own error comes back as it is.
  auto refused = ForEachYamlField("a: 1\n", [](const std::string& k, const std::string&) {
    return absl::InvalidArgumentError(k + ": unknown field");
  });
  EXPECT_EQ(refused.message(), "a: unknown field");
}

}  // namespace
}  // namespace antdt
