#include "backends/local/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/testing/testing.h"

namespace antdt::local {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Why cgroups cannot be tested here; empty when they can.
std::string WhyNotWritable() {
  const std::string probe = absl::StrCat(kCpuCgroupRoot, "/antdt-probe-", getpid());
  if (mkdir(probe.c_str(), 0755) != 0) {
    return absl::StrCat("cannot create a group under ", kCpuCgroupRoot,
                        " (needs root and the cgroup v1 cpu controller): ", std::strerror(errno));
  }
  rmdir(probe.c_str());
  return "";
}

std::string GroupName(const std::string& what) {
  return absl::StrCat("antdt-test-", getpid(), "-", what);
}

TEST(CpuCgroup, CreateNamesThePathWhenItCannot) {
  auto group = CpuCgroup::Create("/nonexistent/cpu", "g");
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("mkdir /nonexistent/cpu/g: "), std::string::npos)
      << group.status();
}

// cgroup v2 cannot be exercised for real here (the unified hierarchy of these
// hybrid hosts has no controllers): its file format and detection are.
TEST(CpuCgroup, QuotaTextOfBothVersions) {
  EXPECT_EQ(QuotaText(CgroupVersion::kV1, 3), "3333");
  EXPECT_EQ(QuotaText(CgroupVersion::kV1, 1), "-1");
  EXPECT_EQ(QuotaText(CgroupVersion::kV2, 3), "3333 10000");
  EXPECT_EQ(QuotaText(CgroupVersion::kV2, 0.5), "max 10000");
  EXPECT_EQ(QuotaText(CgroupVersion::kV2, 1000), "1000 10000");  // the kernel's minimum
}

TEST(CpuCgroup, VersionFromTheHierarchy) {
  antdt::testing::TempDir dir;
  EXPECT_EQ(VersionOf(dir.path()), CgroupVersion::kV1);
  std::ofstream(dir.File("cgroup.controllers")) << "cpuset cpu io memory pids\n";
  EXPECT_EQ(VersionOf(dir.path()), CgroupVersion::kV2);
  // A v2 root whose subtree_control cannot be written: the error names it.
  auto group = CpuCgroup::Create(dir.path(), "g");
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("cgroup.subtree_control"), std::string::npos)
      << group.status();
}

TEST(NodeCgroups, ErrorNamesTheSlowdownsVia) {
  manifest::Scenario s;
  s.nodes = {{"node-0", 1, false, vocab::Role::kWorker, {}},
             {"node-1", 1, false, vocab::Role::kWorker, {}}};
  s.slowdowns = {{"node-0", v1::PERSISTENT, 2, 0, 0, manifest::SlowdownVia::kEmulated},
                 {"node-1", v1::PERSISTENT, 3, 5'000, 0, manifest::SlowdownVia::kCpuQuota}};
  auto groups = NodeCgroups::Create(s, "/nonexistent/cpu", "antdt-1");
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().message().rfind("slowdowns[1].via: cpu-quota needs a writable "
                                            "/nonexistent/cpu (root, and the cgroup v1 cpu "
                                            "controller or cgroup v2 with cpu): mkdir "
                                            "/nonexistent/cpu/antdt-1-node-1",
                                            0),
            0u)
      << groups.status();
}

TEST(CpuCgroup, CapsAProcessAndIsRemovedWithItInside) {
  if (const std::string why = WhyNotWritable(); !why.empty()) GTEST_SKIP() << why;
  auto group = CpuCgroup::Create(kCpuCgroupRoot, GroupName("cap"));
  ASSERT_TRUE(group.ok()) << group.status();
  const std::string path = (*group)->path();
  EXPECT_EQ(Read(path + "/cpu.cfs_quota_us"), "-1\n");
  // A busy loop capped to a tenth of a core is throttled.
  Process spin({"/bin/sh", "-c", "while :; do :; done"}, "/dev/null");
  ASSERT_TRUE((*group)->AddProcess(spin.pid()).ok());
  EXPECT_EQ(Read(path + "/cgroup.procs"), absl::StrCat(spin.pid(), "\n"));
  ASSERT_TRUE((*group)->SetCpuFactor(10).ok());
  EXPECT_EQ(Read(path + "/cpu.cfs_quota_us"), absl::StrCat(kCpuPeriodUs / 10, "\n"));
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string stat = Read(path + "/cpu.stat");
        const size_t at = stat.find("nr_throttled ");
        return at != std::string::npos && std::stol(stat.substr(at + 13)) > 0;
      },
      std::chrono::seconds(5)))
      << Read(path + "/cpu.stat");
  ASSERT_TRUE((*group)->SetCpuFactor(1).ok());
  EXPECT_EQ(Read(path + "/cpu.cfs_quota_us"), "-1\n");
  // Still running inside: moved to the root group, then the group goes.
  ASSERT_TRUE((*group)->Remove().ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(spin.Running());
  EXPECT_TRUE((*group)->Remove().ok());  // idempotent
  spin.Signal(SIGKILL);
  spin.Wait(std::chrono::seconds(5));
}

TEST(NodeCgroups, OneGroupPerCpuQuotaNodeFollowingTheScenario) {
  if (const std::string why = WhyNotWritable(); !why.empty()) GTEST_SKIP() << why;
  manifest::Scenario s;
  s.nodes = {{"node-0", 1, false, vocab::Role::kWorker, {}},
             {"node-1", 1, false, vocab::Role::kWorker, {}}};
  s.slowdowns = {{"node-1", v1::TRANSIENT, 4, 1'000, 1'000, manifest::SlowdownVia::kCpuQuota}};
  const std::string prefix = GroupName("nodes");
  auto groups = NodeCgroups::Create(s, kCpuCgroupRoot, prefix);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(groups->Of("node-0"), nullptr);
  ASSERT_NE(groups->Of("node-1"), nullptr);
  const std::string path = groups->Of("node-1")->path();
  EXPECT_EQ(path, absl::StrCat(kCpuCgroupRoot, "/", prefix, "-node-1"));
  const std::string quota = path + "/cpu.cfs_quota_us";
  ASSERT_TRUE(groups->Apply(s, 0).ok());
  EXPECT_EQ(Read(quota), "-1\n");
  ASSERT_TRUE(groups->Apply(s, 1'500).ok());
  EXPECT_EQ(Read(quota), absl::StrCat(kCpuPeriodUs / 4, "\n"));
  ASSERT_TRUE(groups->Apply(s, 2'000).ok());
  EXPECT_EQ(Read(quota), "-1\n");
  ASSERT_TRUE(groups->RemoveAll().ok());
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace antdt::local
