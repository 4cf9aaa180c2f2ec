// The collectors on a real cgroup v1 group, as the agent started with
// `--cgroup-root /sys/fs/cgroup/cpu --cgroups <group>` reads it: a busy child
// capped to a fifth of a core shows as throttled in the NodeSample. Creating
// the group needs root and the v1 cpu controller; the test is skipped, saying
// why, where it cannot.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "services/agent/collectors/collectors.h"

namespace antdt::agent {
namespace {

using ::testing::IsEmpty;

constexpr char kCpuHierarchy[] = "/sys/fs/cgroup/cpu";

// Writes a cgroup control file; the error names the file and the errno.
::testing::AssertionResult WriteControl(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text << std::flush;
  if (out.good()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "write " << text << " to " << path << ": " << std::strerror(errno);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(CgroupV1, BusyChildCappedToAFifthOfACoreIsThrottled) {
  const std::string name = absl::StrCat("antdt-test-", getpid());
  const std::string dir = absl::StrCat(kCpuHierarchy, "/", name);
  if (mkdir(dir.c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot create " << dir << " (needs root and the cgroup v1 cpu controller at "
                 << kCpuHierarchy << "): " << std::strerror(errno);
  }
  // Runs after the child is reaped (cleanups run in reverse order).
  absl::Cleanup remove_group = [&dir] {
    EXPECT_EQ(rmdir(dir.c_str()), 0) << "rmdir " << dir << ": " << std::strerror(errno);
  };
  ASSERT_TRUE(WriteControl(dir + "/cpu.cfs_period_us", "100000"));
  ASSERT_TRUE(WriteControl(dir + "/cpu.cfs_quota_us", "20000"));

  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) {
    volatile bool spin = true;
    while (spin) {
    }
  }
  absl::Cleanup stop_child = [child] {
    kill(child, SIGKILL);
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child) << "waitpid: " << std::strerror(errno);
  };
  ASSERT_TRUE(WriteControl(dir + "/cgroup.procs", absl::StrCat(child)));
  ASSERT_EQ(ReadAll(dir + "/cgroup.procs"), absl::StrCat(child, "\n"));

  RealFileSource files(kProcRoot, kCpuHierarchy);
  Sampler sampler(files);
  const v1::NodeSample first = sampler.Sample(NowSeconds(), {name});
  EXPECT_THAT(first.errors(), IsEmpty());
  // The interval the rates are measured over: ten periods of the quota.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const v1::NodeSample sample = sampler.Sample(NowSeconds(), {name});

  EXPECT_THAT(sample.errors(), IsEmpty());
  ASSERT_EQ(sample.cgroups_size(), 1);
  const v1::CgroupSample& group = sample.cgroups(0);
  EXPECT_EQ(group.path(), name);
  // Every period ends with the child throttled once its 20 ms are spent.
  EXPECT_GT(group.throttled_fraction(), 0.5) << ReadAll(dir + "/cpu.stat");
  EXPECT_LE(group.throttled_fraction(), 1.0);
  // About 0.8 s of each second, less while others hold the CPUs.
  EXPECT_GT(group.throttled_seconds_per_second(), 0.1) << ReadAll(dir + "/cpu.stat");
  EXPECT_LT(group.throttled_seconds_per_second(), sysconf(_SC_NPROCESSORS_ONLN));
  if (access((dir + "/cpuacct.usage").c_str(), F_OK) == 0) {
    // cpu,cpuacct mounted together: the usage of a fifth of a core.
    EXPECT_GT(group.cpu_usage_cores(), 0.05);
    EXPECT_LT(group.cpu_usage_cores(), 0.5);
  } else {
    RecordProperty("cpu_usage", "cpuacct is mounted apart from cpu here: no usage to read");
    EXPECT_EQ(group.cpu_usage_cores(), 0.0);
  }
}

// The root of this machine's v1 cpu hierarchy, read through the agent's roots.
TEST(CgroupV1, RootOfThisMachinesCpuHierarchyParses) {
  RealFileSource files(kProcRoot, kCpuHierarchy);
  absl::StatusOr<std::string> text = files.Read(absl::StrCat(kCgroupRoot, "/cpu.stat"));
  if (absl::IsNotFound(text.status())) {
    GTEST_SKIP() << "no cgroup v1 cpu controller at " << kCpuHierarchy << ": " << text.status();
  }
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<CgroupCpuStat> stat = ParseCgroupCpuStat(*text);
  ASSERT_TRUE(stat.ok()) << stat.status() << "\n" << *text;
  EXPECT_EQ(stat->version, CgroupVersion::kV1);
  EXPECT_LE(stat->nr_throttled, stat->nr_periods);
}

}  // namespace
}  // namespace antdt::agent
