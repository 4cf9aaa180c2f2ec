#include "services/agent/collectors/collectors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace antdt::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// testdata/proc-{a,b} and cgroup-{a,b} were captured from a real machine one
// second apart (cgroup-* from the cgroup v2 root, /sys/fs/cgroup/unified there),
// cgroup-v1-{a,b} from a throttled cgroup v1 group of such a machine;
// malformed/ and variants/ are mostly hand-made (testdata/README.md). The
// expected values below are read from those files.
std::string TestdataPath(const std::string& relative) {
  const char* root = std::getenv("ANTDT_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/services/agent/collectors/testdata/" +
         relative;
}

std::string Fixture(const std::string& relative) {
  const std::string path = TestdataPath(relative);
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path << " (is ANTDT_SOURCE_DIR set?)";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

constexpr int64_t kKiB = 1024;

// ---- Parsers on the real files ----------------------------------------------

TEST(ParseProcStat, RealFile) {
  absl::StatusOr<CpuTimes> a = ParseProcStat(Fixture("proc-a/stat"));
  ASSERT_TRUE(a.ok()) << a.status();
  // cpu  75877 0 16951 206117 2642 0 1733 1270 0 0
  EXPECT_EQ(a->user, 75877u);
  EXPECT_EQ(a->nice, 0u);
  EXPECT_EQ(a->system, 16951u);
  EXPECT_EQ(a->idle, 206117u);
  EXPECT_EQ(a->iowait, 2642u);
  EXPECT_EQ(a->irq, 0u);
  EXPECT_EQ(a->softirq, 1733u);
  EXPECT_EQ(a->steal, 1270u);
  EXPECT_EQ(a->cpus, 2);

  absl::StatusOr<CpuTimes> b = ParseProcStat(Fixture("proc-b/stat"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->user, 75982u);
  EXPECT_EQ(b->idle, 206193u);
  EXPECT_EQ(b->cpus, 2);
}

TEST(ParseMeminfo, RealFile) {
  absl::StatusOr<MemInfo> a = ParseMeminfo(Fixture("proc-a/meminfo"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->total_bytes, 24684096 * kKiB);
  EXPECT_EQ(a->available_bytes, 23731288 * kKiB);
  EXPECT_EQ(a->swap_total_bytes, 0);
  EXPECT_EQ(a->swap_free_bytes, 0);

  absl::StatusOr<MemInfo> b = ParseMeminfo(Fixture("proc-b/meminfo"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->available_bytes, 23748100 * kKiB);
}

TEST(ParseNetDev, RealFile) {
  absl::StatusOr<std::vector<NetDevCounters>> a = ParseNetDev(Fixture("proc-a/net/dev"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 4u);
  const NetDevCounters& lo = (*a)[0];
  EXPECT_EQ(lo.name, "lo");
  EXPECT_TRUE(lo.loopback);
  EXPECT_EQ(lo.rx_bytes, 123745201u);
  EXPECT_EQ(lo.rx_packets, 1090185u);
  EXPECT_EQ(lo.tx_bytes, 123745201u);
  EXPECT_EQ(lo.tx_packets, 1090185u);
  EXPECT_EQ((*a)[1].name, "ifb0");
  EXPECT_EQ((*a)[2].name, "ifb1");
  const NetDevCounters& eth0 = (*a)[3];
  EXPECT_EQ(eth0.name, "eth0");
  EXPECT_FALSE(eth0.loopback);
  EXPECT_EQ(eth0.rx_bytes, 46108805u);
  EXPECT_EQ(eth0.rx_packets, 1184u);
  EXPECT_EQ(eth0.rx_errs, 0u);
  EXPECT_EQ(eth0.rx_drop, 0u);
  EXPECT_EQ(eth0.tx_bytes, 54233u);
  EXPECT_EQ(eth0.tx_packets, 663u);
  EXPECT_EQ(eth0.tx_errs, 0u);
  EXPECT_EQ(eth0.tx_drop, 0u);

  absl::StatusOr<std::vector<NetDevCounters>> b = ParseNetDev(Fixture("proc-b/net/dev"));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 4u);
  EXPECT_EQ((*b)[0].rx_bytes, 123811086u);
}

TEST(ParsePressure, RealFiles) {
  absl::StatusOr<Pressure> cpu = ParsePressure(Fixture("proc-a/pressure/cpu"));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_DOUBLE_EQ(cpu->some.avg10, 9.99);
  EXPECT_DOUBLE_EQ(cpu->some.avg60, 11.10);
  EXPECT_DOUBLE_EQ(cpu->some.avg300, 9.47);
  EXPECT_EQ(cpu->some.total_usec, 119922139u);
  ASSERT_TRUE(cpu->full.has_value());  // this kernel (6.18) has the cpu full line
  EXPECT_EQ(cpu->full->avg10, 0.0);
  EXPECT_EQ(cpu->full->total_usec, 0u);

  absl::StatusOr<Pressure> io = ParsePressure(Fixture("proc-a/pressure/io"));
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_DOUBLE_EQ(io->some.avg10, 1.35);
  EXPECT_DOUBLE_EQ(io->some.avg60, 2.03);
  EXPECT_DOUBLE_EQ(io->some.avg300, 2.11);
  EXPECT_EQ(io->some.total_usec, 27161951u);
  ASSERT_TRUE(io->full.has_value());
  EXPECT_DOUBLE_EQ(io->full->avg10, 0.17);
  EXPECT_DOUBLE_EQ(io->full->avg60, 0.76);
  EXPECT_DOUBLE_EQ(io->full->avg300, 1.14);
  EXPECT_EQ(io->full->total_usec, 18119545u);

  absl::StatusOr<Pressure> memory = ParsePressure(Fixture("proc-a/pressure/memory"));
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->some.avg10, 0.0);
  ASSERT_TRUE(memory->full.has_value());
  EXPECT_EQ(memory->full->total_usec, 0u);

  absl::StatusOr<Pressure> cgroup = ParsePressure(Fixture("cgroup-b/cpu.pressure"));
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  EXPECT_DOUBLE_EQ(cgroup->some.avg10, 8.54);
  EXPECT_EQ(cgroup->some.total_usec, 119960305u);
}

TEST(ParseCgroupCpuStat, RealFileWithoutCpuController) {
  // The root of a tree with no cpu controller: usage keys and nice_usec only.
  absl::StatusOr<CgroupCpuStat> a = ParseCgroupCpuStat(Fixture("cgroup-a/cpu.stat"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->usage_usec, 945632986u);
  EXPECT_EQ(a->user_usec, 758782381u);
  EXPECT_EQ(a->system_usec, 186850604u);
  EXPECT_EQ(a->nr_periods, 0u);
  EXPECT_EQ(a->nr_throttled, 0u);
  EXPECT_EQ(a->throttled_usec, 0u);
}

// ---- Variants that must parse -----------------------------------------------

TEST(Variants, ProcStatExtraAndFewerColumns) {
  absl::StatusOr<CpuTimes> newer = ParseProcStat(Fixture("variants/stat-extra-columns"));
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ(newer->user, 75877u);
  EXPECT_EQ(newer->steal, 1270u);
  EXPECT_EQ(newer->cpus, 2);

  absl::StatusOr<CpuTimes> older = ParseProcStat(Fixture("variants/stat-old-kernel-8-columns"));
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->steal, 1270u);
  EXPECT_EQ(older->cpus, 1);
}

TEST(Variants, MeminfoWithSwapAndUnknownKeys) {
  absl::StatusOr<MemInfo> info = ParseMeminfo(Fixture("variants/meminfo-with-swap"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->total_bytes, 24684096 * kKiB);
  EXPECT_EQ(info->available_bytes, 24310304 * kKiB);
  EXPECT_EQ(info->swap_total_bytes, 8388604 * kKiB);
  EXPECT_EQ(info->swap_free_bytes, 8126460 * kKiB);
}

TEST(Variants, NetDev) {
  absl::StatusOr<std::vector<NetDevCounters>> extra =
      ParseNetDev(Fixture("variants/net-dev-extra-columns"));
  ASSERT_TRUE(extra.ok()) << extra.status();
  ASSERT_EQ(extra->size(), 4u);
  EXPECT_EQ((*extra)[3].tx_bytes, 54233u);

  absl::StatusOr<std::vector<NetDevCounters>> headers =
      ParseNetDev(Fixture("variants/net-dev-headers-only"));
  ASSERT_TRUE(headers.ok()) << headers.status();
  EXPECT_THAT(*headers, IsEmpty());

  // Older kernels print "eth0:4294967295" with no space once a counter is wide.
  absl::StatusOr<std::vector<NetDevCounters>> packed =
      ParseNetDev(Fixture("variants/net-dev-no-space-after-colon"));
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->size(), 2u);
  EXPECT_EQ((*packed)[0].rx_bytes, 123745201u);
  const NetDevCounters& eth0 = (*packed)[1];
  EXPECT_EQ(eth0.rx_bytes, 4294967295u);
  EXPECT_EQ(eth0.rx_errs, 2u);
  EXPECT_EQ(eth0.rx_drop, 3u);
  EXPECT_EQ(eth0.tx_errs, 4u);
  EXPECT_EQ(eth0.tx_drop, 5u);
}

TEST(Variants, Pressure) {
  absl::StatusOr<Pressure> old_cpu =
      ParsePressure(Fixture("variants/pressure-cpu-old-kernel-some-only"));
  ASSERT_TRUE(old_cpu.ok()) << old_cpu.status();
  EXPECT_DOUBLE_EQ(old_cpu->some.avg10, 9.99);
  EXPECT_FALSE(old_cpu->full.has_value());

  absl::StatusOr<Pressure> extra = ParsePressure(Fixture("variants/pressure-extra-fields"));
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_DOUBLE_EQ(extra->some.avg300, 9.47);
  ASSERT_TRUE(extra->full.has_value());
  EXPECT_DOUBLE_EQ(extra->full->avg10, 0.50);
  EXPECT_EQ(extra->full->total_usec, 4242u);
}

TEST(Variants, CgroupFiles) {
  absl::StatusOr<CgroupCpuStat> stat =
      ParseCgroupCpuStat(Fixture("variants/cpu.stat-with-cpu-controller"));
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->usage_usec, 5000000u);
  EXPECT_EQ(stat->user_usec, 4000000u);
  EXPECT_EQ(stat->system_usec, 1000000u);
  EXPECT_EQ(stat->nr_periods, 150u);
  EXPECT_EQ(stat->nr_throttled, 30u);
  EXPECT_EQ(stat->throttled_usec, 500000u);

  absl::StatusOr<int64_t> memory = ParseCgroupMemoryCurrent(Fixture("variants/memory.current"));
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(*memory, 1234567);
}

TEST(Variants, CgroupV1CpuStat) {
  struct Case {
    const char* fixture;
    uint64_t nr_periods;
    uint64_t nr_throttled;
    uint64_t throttled_usec;
  };
  const Case cases[] = {
      // The root of this host's v1 cpu hierarchy: nr_bursts and burst_time too.
      {"variants/cgroup-v1-cpu.stat", 0, 0, 0},
      // A throttled group: throttled_time 1365335037 ns.
      {"cgroup-v1-a/antdt/cpu.stat", 20, 19, 1365335},
      {"cgroup-v1-b/antdt/cpu.stat", 31, 30, 2167941},
      {"variants/cgroup-v1-cpu.stat-wait-sum", 31, 30, 2167941},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fixture);
    absl::StatusOr<CgroupCpuStat> stat = ParseCgroupCpuStat(Fixture(c.fixture));
    ASSERT_TRUE(stat.ok()) << stat.status();
    EXPECT_EQ(stat->version, CgroupVersion::kV1);
    EXPECT_EQ(stat->nr_periods, c.nr_periods);
    EXPECT_EQ(stat->nr_throttled, c.nr_throttled);
    EXPECT_EQ(stat->throttled_usec, c.throttled_usec);
    EXPECT_EQ(stat->usage_usec, 0u);  // not in a v1 cpu.stat
    EXPECT_EQ(stat->user_usec, 0u);
    EXPECT_EQ(stat->system_usec, 0u);
  }

  absl::StatusOr<CgroupCpuStat> v2 = ParseCgroupCpuStat(Fixture("cgroup-a/cpu.stat"));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version, CgroupVersion::kV2);

  absl::StatusOr<uint64_t> usage =
      ParseCgroupCpuacctUsage(Fixture("cgroup-v1-a/antdt/cpuacct.usage"));
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(*usage, 405069652u);
}

// ---- Malformed and truncated files ------------------------------------------

enum class Kind { kStat, kMeminfo, kNetDev, kPressure, kCpuStat, kMemoryCurrent, kCpuacctUsage };

// Runs one parser; the file names are those the Sampler passes.
absl::Status Parse(Kind kind, std::string_view text) {
  switch (kind) {
    case Kind::kStat:
      return ParseProcStat(text).status();
    case Kind::kMeminfo:
      return ParseMeminfo(text).status();
    case Kind::kNetDev:
      return ParseNetDev(text).status();
    case Kind::kPressure:
      return ParsePressure(text, "/proc/pressure/cpu").status();
    case Kind::kCpuStat:
      return ParseCgroupCpuStat(text, "/sys/fs/cgroup/pod/cpu.stat").status();
    case Kind::kMemoryCurrent:
      return ParseCgroupMemoryCurrent(text, "/sys/fs/cgroup/pod/memory.current").status();
    case Kind::kCpuacctUsage:
      return ParseCgroupCpuacctUsage(text, "/sys/fs/cgroup/pod/cpuacct.usage").status();
  }
  return absl::InternalError("unreachable");
}

std::string FileName(Kind kind) {
  switch (kind) {
    case Kind::kStat:
      return "/proc/stat: ";
    case Kind::kMeminfo:
      return "/proc/meminfo: ";
    case Kind::kNetDev:
      return "/proc/net/dev: ";
    case Kind::kPressure:
      return "/proc/pressure/cpu: ";
    case Kind::kCpuStat:
      return "/sys/fs/cgroup/pod/cpu.stat: ";
    case Kind::kMemoryCurrent:
      return "/sys/fs/cgroup/pod/memory.current: ";
    case Kind::kCpuacctUsage:
      return "/sys/fs/cgroup/pod/cpuacct.usage: ";
  }
  return "";
}

constexpr Kind kAllKinds[] = {Kind::kStat,        Kind::kMeminfo, Kind::kNetDev,
                              Kind::kPressure,    Kind::kCpuStat, Kind::kMemoryCurrent,
                              Kind::kCpuacctUsage};

struct MalformedCase {
  const char* fixture;
  Kind kind;
  const char* message;  // after the file name
};

TEST(Malformed, EachFileGivesAnErrorNamingFileAndLine) {
  const MalformedCase cases[] = {
      {"malformed/stat-cut-mid-line", Kind::kStat,
       "line 3: truncated: no newline at the end of the file"},
      {"malformed/stat-missing-fields", Kind::kStat,
       "line 1: expected at least 8 numbers after \"cpu\", got 5"},
      {"malformed/stat-non-numeric", Kind::kStat,
       "line 1: idle: \"lots\" is not a non-negative integer"},
      {"malformed/stat-negative", Kind::kStat,
       "line 1: idle: \"-206117\" is not a non-negative integer"},
      {"malformed/stat-no-cpu-line", Kind::kStat, "no \"cpu\" line"},
      {"malformed/stat-no-per-cpu-lines", Kind::kStat, "no per-CPU \"cpuN\" lines"},
      {"malformed/meminfo-cut-mid-line", Kind::kMeminfo,
       "line 3: truncated: no newline at the end of the file"},
      {"malformed/meminfo-missing-memavailable", Kind::kMeminfo, "missing MemAvailable"},
      {"malformed/meminfo-non-numeric", Kind::kMeminfo,
       "line 1: MemTotal: \"lots\" is not a non-negative integer"},
      {"malformed/meminfo-missing-unit", Kind::kMeminfo,
       "line 16: expected \"SwapFree: <number> kB\""},
      {"malformed/meminfo-no-colon", Kind::kMeminfo, "line 3: expected \"Key: value\""},
      {"malformed/net-dev-cut-mid-line", Kind::kNetDev,
       "line 5: truncated: no newline at the end of the file"},
      {"malformed/net-dev-one-header-line", Kind::kNetDev, "expected 2 header lines"},
      {"malformed/net-dev-missing-fields", Kind::kNetDev,
       "line 6: expected at least 16 numbers after \"eth0:\", got 10"},
      {"malformed/net-dev-non-numeric", Kind::kNetDev,
       "line 6: eth0 column 1: \"4610x805\" is not a non-negative integer"},
      {"malformed/net-dev-no-colon", Kind::kNetDev, "line 6: expected \"interface: counters\""},
      {"malformed/net-dev-empty-name", Kind::kNetDev, "line 6: empty interface name"},
      {"malformed/pressure-cut-mid-line", Kind::kPressure,
       "line 2: truncated: no newline at the end of the file"},
      {"malformed/pressure-missing-avg300", Kind::kPressure, "line 1: missing avg300"},
      {"malformed/pressure-non-numeric", Kind::kPressure,
       "line 1: avg10: \"high\" is not a percentage"},
      {"malformed/pressure-nan", Kind::kPressure, "line 1: avg10: \"nan\" is not a percentage"},
      {"malformed/pressure-no-equals", Kind::kPressure,
       "line 1: expected key=value, got \"avg10\""},
      {"malformed/pressure-no-some-line", Kind::kPressure, "no \"some\" line"},
      {"malformed/cpu.stat-neither-version", Kind::kCpuStat,
       "missing usage_usec (cgroup v2) or throttled_time (cgroup v1)"},
      {"malformed/cgroup-v1-cpu.stat-negative", Kind::kCpuStat,
       "line 3: throttled_time: \"-2167941026\" is not a non-negative integer"},
      {"malformed/cgroup-v1-cpu.stat-non-numeric", Kind::kCpuStat,
       "line 2: nr_throttled: \"thirty\" is not a non-negative integer"},
      {"malformed/cgroup-v1-cpu.stat-cut-mid-line", Kind::kCpuStat,
       "line 3: truncated: no newline at the end of the file"},
      {"malformed/cgroup-v1-cpu.stat-missing-nr-throttled", Kind::kCpuStat, "missing nr_throttled"},
      {"malformed/cgroup-v1-cpu.stat-extra-value", Kind::kCpuStat,
       "line 3: expected \"throttled_time <integer>\""},
      {"malformed/cpuacct.usage-negative", Kind::kCpuacctUsage,
       "line 1: \"-609434911\" is not a non-negative integer"},
      {"malformed/cpuacct.usage-cut", Kind::kCpuacctUsage,
       "line 1: truncated: no newline at the end of the file"},
      {"malformed/cpu.stat-cut-mid-line", Kind::kCpuStat,
       "line 2: truncated: no newline at the end of the file"},
      {"malformed/cpu.stat-missing-system", Kind::kCpuStat, "missing system_usec"},
      {"malformed/cpu.stat-non-numeric", Kind::kCpuStat,
       "line 3: system_usec: \"1.5e9\" is not a non-negative integer"},
      {"malformed/cpu.stat-extra-value", Kind::kCpuStat,
       "line 1: expected \"usage_usec <integer>\""},
      {"malformed/memory.current-non-numeric", Kind::kMemoryCurrent,
       "line 1: \"max\" is not a non-negative integer"},
      {"malformed/memory.current-negative", Kind::kMemoryCurrent,
       "line 1: \"-4096\" is not a non-negative integer"},
      {"malformed/memory.current-two-lines", Kind::kMemoryCurrent, "expected a single integer"},
      {"malformed/memory.current-two-values", Kind::kMemoryCurrent, "expected a single integer"},
      {"malformed/memory.current-cut", Kind::kMemoryCurrent,
       "line 1: truncated: no newline at the end of the file"},
  };
  for (const MalformedCase& c : cases) {
    SCOPED_TRACE(c.fixture);
    absl::Status status = Parse(c.kind, Fixture(c.fixture));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(status.message()), FileName(c.kind) + c.message);
  }
}

TEST(Malformed, EmptyFileIsAnErrorForEveryParser) {
  const std::string empty = Fixture("malformed/empty");
  ASSERT_TRUE(empty.empty());
  for (Kind kind : kAllKinds) {
    absl::Status status = Parse(kind, empty);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(status.message()), FileName(kind) + "empty");
  }
  EXPECT_EQ(ParsePressure("").status().message(), "pressure: empty");
  EXPECT_EQ(ParseCgroupCpuStat("").status().message(), "cpu.stat: empty");
  EXPECT_EQ(ParseCgroupMemoryCurrent("").status().message(), "memory.current: empty");
  EXPECT_EQ(ParseCgroupCpuacctUsage("").status().message(), "cpuacct.usage: empty");
}

// Every prefix of every real file: a cut mid-line is always an error, and no
// cut crashes or gives an error that does not name the file.
TEST(Malformed, EveryTruncationOfTheRealFiles) {
  const std::pair<const char*, Kind> files[] = {
      {"proc-a/stat", Kind::kStat},
      {"proc-a/meminfo", Kind::kMeminfo},
      {"proc-a/net/dev", Kind::kNetDev},
      {"proc-a/pressure/io", Kind::kPressure},
      {"cgroup-a/cpu.stat", Kind::kCpuStat},
      {"variants/memory.current", Kind::kMemoryCurrent},
      {"cgroup-v1-a/antdt/cpu.stat", Kind::kCpuStat},
      {"cgroup-v1-a/antdt/cpuacct.usage", Kind::kCpuacctUsage},
  };
  for (const auto& [fixture, kind] : files) {
    SCOPED_TRACE(fixture);
    const std::string text = Fixture(fixture);
    ASSERT_TRUE(Parse(kind, text).ok());
    for (size_t n = 0; n < text.size(); ++n) {
      const std::string_view prefix(text.data(), n);
      absl::Status status = Parse(kind, prefix);
      if (n == 0 || text[n - 1] != '\n') {
        EXPECT_FALSE(status.ok()) << "prefix of " << n << " bytes";
      }
      if (!status.ok()) {
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(status.message()), StartsWith(FileName(kind)));
      }
    }
  }
}

// Every parser on every fixture of every other kind: errors name the file.
TEST(Malformed, EveryParserOnEveryFixture) {
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(TestdataPath(""))) {
    if (!entry.is_regular_file()) continue;
    ++files;
    const std::string text =
        Fixture(std::filesystem::relative(entry.path(), TestdataPath("")).string());
    for (Kind kind : kAllKinds) {
      absl::Status status = Parse(kind, text);
      if (!status.ok()) {
        EXPECT_THAT(std::string(status.message()), StartsWith(FileName(kind))) << entry.path();
      }
    }
  }
  EXPECT_GT(files, 50);
}

// ---- Rates and levels -------------------------------------------------------

TEST(CpuRates, RealSamples) {
  absl::StatusOr<CpuTimes> a = ParseProcStat(Fixture("proc-a/stat"));
  absl::StatusOr<CpuTimes> b = ParseProcStat(Fixture("proc-b/stat"));
  ASSERT_TRUE(a.ok() && b.ok());
  // Deltas: user 105, system 8, idle 76, iowait 3, softirq 3, steal 0: total 195.
  v1::CpuSample sample = CpuRates(*a, *b);
  EXPECT_DOUBLE_EQ(sample.utilization(), 116.0 / 195);
  EXPECT_DOUBLE_EQ(sample.iowait(), 3.0 / 195);
  EXPECT_EQ(sample.steal(), 0.0);
  EXPECT_EQ(sample.cpus(), 2);
}

TEST(CpuRates, HandComputed) {
  CpuTimes before{1000, 10, 500, 4000, 100, 7, 9, 40, 4};
  CpuTimes after = before;
  after.user += 50;
  after.system += 20;
  after.idle += 70;
  after.iowait += 20;
  after.irq += 5;
  after.softirq += 5;
  after.steal += 30;  // total 200
  v1::CpuSample sample = CpuRates(before, after);
  EXPECT_DOUBLE_EQ(sample.utilization(), 0.55);  // 1 - (70 + 20) / 200
  EXPECT_DOUBLE_EQ(sample.iowait(), 0.10);
  EXPECT_DOUBLE_EQ(sample.steal(), 0.15);
  EXPECT_EQ(sample.cpus(), 4);
}

TEST(CpuRates, BackwardsFieldsAndNoTime) {
  CpuTimes before{1000, 0, 0, 5000, 0, 0, 0, 0, 2};
  CpuTimes after = before;
  after.user += 100;
  after.idle -= 300;  // idle can go back when a CPU goes offline
  after.cpus = 1;
  v1::CpuSample sample = CpuRates(before, after);
  EXPECT_DOUBLE_EQ(sample.utilization(), 1.0);
  EXPECT_EQ(sample.cpus(), 1);

  v1::CpuSample same = CpuRates(before, before);
  EXPECT_EQ(same.utilization(), 0.0);
  EXPECT_EQ(same.cpus(), 2);
}

TEST(MemoryLevels, SwapUsed) {
  absl::StatusOr<MemInfo> info = ParseMeminfo(Fixture("variants/meminfo-with-swap"));
  ASSERT_TRUE(info.ok());
  v1::MemorySample sample = MemoryLevels(*info);
  EXPECT_EQ(sample.total_bytes(), 24684096 * kKiB);
  EXPECT_EQ(sample.available_bytes(), 24310304 * kKiB);
  EXPECT_EQ(sample.swap_used_bytes(), (8388604 - 8126460) * kKiB);

  MemInfo odd;
  odd.swap_free_bytes = 4096;  // more free than total: never negative
  EXPECT_EQ(MemoryLevels(odd).swap_used_bytes(), 0);
}

NetDevCounters Dev(const std::string& name, uint64_t rx_bytes, uint64_t rx_errs, uint64_t rx_drop,
                   uint64_t tx_bytes, uint64_t tx_errs, uint64_t tx_drop) {
  NetDevCounters dev;
  dev.name = name;
  dev.rx_bytes = rx_bytes;
  dev.rx_packets = rx_bytes / 100;
  dev.rx_errs = rx_errs;
  dev.rx_drop = rx_drop;
  dev.tx_bytes = tx_bytes;
  dev.tx_packets = tx_bytes / 100;
  dev.tx_errs = tx_errs;
  dev.tx_drop = tx_drop;
  return dev;
}

TEST(NetRates, HandComputedWithWrapAndChangingInterfaces) {
  const std::vector<NetDevCounters> before = {
      Dev("eth0", 1000, 1, 2, 5000, 3, 4),
      Dev("eth1", 4294967000, 0, 0, 0, 0, 0),  // a 32-bit counter about to wrap
      Dev("gone0", 100, 0, 0, 100, 0, 0),
  };
  const std::vector<NetDevCounters> after = {
      Dev("new0", 100, 0, 0, 100, 0, 0),
      Dev("eth0", 3000, 3, 8, 6000, 7, 4),
      Dev("eth1", 200, 0, 0, 0, 0, 0),
  };
  std::vector<v1::NetInterfaceSample> rates = NetRates(before, after, 2.0);
  ASSERT_EQ(rates.size(), 1u);
  EXPECT_EQ(rates[0].name(), "eth0");
  EXPECT_DOUBLE_EQ(rates[0].rx_bytes_per_second(), 1000);  // 2000 bytes / 2 s
  EXPECT_DOUBLE_EQ(rates[0].tx_bytes_per_second(), 500);
  EXPECT_DOUBLE_EQ(rates[0].rx_drops_per_second(), 3);
  EXPECT_DOUBLE_EQ(rates[0].tx_drops_per_second(), 0);
  EXPECT_DOUBLE_EQ(rates[0].errors_per_second(), 3);  // (2 rx + 4 tx) / 2 s

  EXPECT_THAT(NetRates(before, after, 0), IsEmpty());
  EXPECT_THAT(NetRates(before, after, -1), IsEmpty());
}

TEST(NetRates, RealSamples) {
  absl::StatusOr<std::vector<NetDevCounters>> a = ParseNetDev(Fixture("proc-a/net/dev"));
  absl::StatusOr<std::vector<NetDevCounters>> b = ParseNetDev(Fixture("proc-b/net/dev"));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<v1::NetInterfaceSample> rates = NetRates(*a, *b, 1.0);
  ASSERT_EQ(rates.size(), 4u);
  EXPECT_EQ(rates[0].name(), "lo");
  EXPECT_DOUBLE_EQ(rates[0].rx_bytes_per_second(), 123811086 - 123745201);
  EXPECT_DOUBLE_EQ(rates[0].tx_bytes_per_second(), 123811086 - 123745201);
  EXPECT_EQ(rates[3].name(), "eth0");
  EXPECT_EQ(rates[3].rx_bytes_per_second(), 0.0);
}

TEST(PressureLevels, MissingFullLineIsZero) {
  absl::StatusOr<Pressure> cpu =
      ParsePressure(Fixture("variants/pressure-cpu-old-kernel-some-only"));
  absl::StatusOr<Pressure> memory = ParsePressure(Fixture("variants/pressure-extra-fields"));
  absl::StatusOr<Pressure> io = ParsePressure(Fixture("proc-a/pressure/io"));
  ASSERT_TRUE(cpu.ok() && memory.ok() && io.ok());
  v1::PressureSample sample = PressureLevels(*cpu, *memory, *io);
  EXPECT_DOUBLE_EQ(sample.cpu_some_avg10(), 9.99);
  EXPECT_DOUBLE_EQ(sample.memory_some_avg10(), 9.99);
  EXPECT_DOUBLE_EQ(sample.memory_full_avg10(), 0.50);
  EXPECT_DOUBLE_EQ(sample.io_some_avg10(), 1.35);
  EXPECT_DOUBLE_EQ(sample.io_full_avg10(), 0.17);

  Pressure no_full = *cpu;
  EXPECT_EQ(PressureLevels(*cpu, no_full, no_full).io_full_avg10(), 0.0);
}

TEST(CgroupRates, Throttled) {
  CgroupCpuStat before{1000000, 800000, 200000, 100, 10, 0};
  CgroupCpuStat after{5000000, 4000000, 1000000, 150, 30, 500000};
  Pressure pressure;
  pressure.some.avg10 = 12.5;
  v1::CgroupSample sample = CgroupRates("kubepods/pod1", before, after, 4096, pressure, 2.0);
  EXPECT_EQ(sample.path(), "kubepods/pod1");
  EXPECT_DOUBLE_EQ(sample.cpu_usage_cores(), 2.0);                // 4 s of CPU in 2 s
  EXPECT_DOUBLE_EQ(sample.throttled_fraction(), 0.4);             // 20 of 50 periods
  EXPECT_DOUBLE_EQ(sample.throttled_seconds_per_second(), 0.25);  // 0.5 s in 2 s
  EXPECT_EQ(sample.memory_current_bytes(), 4096);
  EXPECT_DOUBLE_EQ(sample.cpu_pressure_some_avg10(), 12.5);
}

TEST(CgroupRates, RealSamplesWithoutPeriods) {
  absl::StatusOr<CgroupCpuStat> a = ParseCgroupCpuStat(Fixture("cgroup-a/cpu.stat"));
  absl::StatusOr<CgroupCpuStat> b = ParseCgroupCpuStat(Fixture("cgroup-b/cpu.stat"));
  ASSERT_TRUE(a.ok() && b.ok());
  v1::CgroupSample sample = CgroupRates("", *a, *b, 0, Pressure{}, 1.0);
  EXPECT_DOUBLE_EQ(sample.cpu_usage_cores(), 1.175802);  // 946808788 - 945632986 usec
  EXPECT_EQ(sample.throttled_fraction(), 0.0);
  EXPECT_EQ(sample.throttled_seconds_per_second(), 0.0);
}

TEST(CgroupRates, ResetOrNoTimeGivesLevelsOnly) {
  CgroupCpuStat before{5000000, 4000000, 1000000, 150, 30, 500000};
  CgroupCpuStat recreated{20000, 10000, 10000, 2, 0, 0};
  Pressure pressure;
  pressure.some.avg10 = 3.0;
  for (const v1::CgroupSample& sample : {CgroupRates("pod", before, recreated, 8192, pressure, 1.0),
                                         CgroupRates("pod", before, before, 8192, pressure, 0.0)}) {
    EXPECT_EQ(sample.cpu_usage_cores(), 0.0);
    EXPECT_EQ(sample.throttled_fraction(), 0.0);
    EXPECT_EQ(sample.throttled_seconds_per_second(), 0.0);
    EXPECT_EQ(sample.memory_current_bytes(), 8192);
    EXPECT_DOUBLE_EQ(sample.cpu_pressure_some_avg10(), 3.0);
  }
}

// ---- Sampler ----------------------------------------------------------------

constexpr char kPodA[] =
    "usage_usec 1000000\nuser_usec 800000\nsystem_usec 200000\nnr_periods 100\n"
    "nr_throttled 10\nthrottled_usec 0\n";

// The node as captured at "a" or "b", plus a throttled pod cgroup.
void LoadNode(FakeFileSource& files, const std::string& at) {
  files.Set("/proc/stat", Fixture("proc-" + at + "/stat"));
  files.Set("/proc/meminfo", Fixture("proc-" + at + "/meminfo"));
  files.Set("/proc/net/dev", Fixture("proc-" + at + "/net/dev"));
  for (const char* resource : {"cpu", "memory", "io"}) {
    files.Set(std::string("/proc/pressure/") + resource,
              Fixture("proc-" + at + "/pressure/" + resource));
  }
  files.Set("/sys/fs/cgroup/cpu.stat", Fixture("cgroup-" + at + "/cpu.stat"));
  files.Set("/sys/fs/cgroup/cpu.pressure", Fixture("cgroup-" + at + "/cpu.pressure"));
  files.Set("/sys/fs/cgroup/kubepods/pod1/cpu.stat",
            at == "a" ? kPodA : Fixture("variants/cpu.stat-with-cpu-controller"));
  files.Set("/sys/fs/cgroup/kubepods/pod1/memory.current", Fixture("variants/memory.current"));
}

const std::vector<std::string> kCgroups = {"", "/kubepods/pod1/"};

TEST(Sampler, FirstSampleHasLevelsOnly) {
  FakeFileSource files;
  LoadNode(files, "a");
  Sampler sampler(files);
  v1::NodeSample sample = sampler.Sample(1000.0, kCgroups);

  EXPECT_THAT(sample.errors(), IsEmpty());
  EXPECT_EQ(sample.time_unix_ms(), 1000000);
  EXPECT_FALSE(sample.has_cpu());
  EXPECT_THAT(sample.net(), IsEmpty());
  ASSERT_TRUE(sample.has_memory());
  EXPECT_EQ(sample.memory().total_bytes(), 24684096 * kKiB);
  EXPECT_EQ(sample.memory().available_bytes(), 23731288 * kKiB);
  EXPECT_EQ(sample.memory().swap_used_bytes(), 0);
  ASSERT_TRUE(sample.has_pressure());
  EXPECT_DOUBLE_EQ(sample.pressure().cpu_some_avg10(), 9.99);
  EXPECT_DOUBLE_EQ(sample.pressure().io_some_avg10(), 1.35);
  EXPECT_DOUBLE_EQ(sample.pressure().io_full_avg10(), 0.17);
  EXPECT_EQ(sample.pressure().memory_some_avg10(), 0.0);
  ASSERT_EQ(sample.cgroups_size(), 2);
  EXPECT_EQ(sample.cgroups(0).path(), "");
  EXPECT_EQ(sample.cgroups(0).memory_current_bytes(), 0);  // no memory.current: not an error
  EXPECT_DOUBLE_EQ(sample.cgroups(0).cpu_pressure_some_avg10(), 9.99);
  EXPECT_EQ(sample.cgroups(0).cpu_usage_cores(), 0.0);
  EXPECT_EQ(sample.cgroups(1).path(), "kubepods/pod1");
  EXPECT_EQ(sample.cgroups(1).memory_current_bytes(), 1234567);
  EXPECT_EQ(sample.cgroups(1).cpu_pressure_some_avg10(), 0.0);  // no cpu.pressure
  EXPECT_EQ(sample.cgroups(1).cpu_usage_cores(), 0.0);
}

TEST(Sampler, SecondSampleHasRates) {
  FakeFileSource files;
  LoadNode(files, "a");
  Sampler sampler(files);
  sampler.Sample(1000.0, kCgroups);
  LoadNode(files, "b");
  v1::NodeSample sample = sampler.Sample(1002.0, kCgroups);

  EXPECT_THAT(sample.errors(), IsEmpty());
  ASSERT_TRUE(sample.has_cpu());
  EXPECT_DOUBLE_EQ(sample.cpu().utilization(), 116.0 / 195);
  EXPECT_DOUBLE_EQ(sample.cpu().iowait(), 3.0 / 195);
  EXPECT_EQ(sample.cpu().cpus(), 2);
  ASSERT_EQ(sample.net_size(), 4);
  EXPECT_EQ(sample.net(0).name(), "lo");
  EXPECT_DOUBLE_EQ(sample.net(0).rx_bytes_per_second(), (123811086 - 123745201) / 2.0);
  EXPECT_EQ(sample.memory().available_bytes(), 23748100 * kKiB);
  EXPECT_DOUBLE_EQ(sample.pressure().cpu_some_avg10(), 8.54);
  ASSERT_EQ(sample.cgroups_size(), 2);
  EXPECT_DOUBLE_EQ(sample.cgroups(0).cpu_usage_cores(), (946808788 - 945632986) / 1e6 / 2);
  EXPECT_DOUBLE_EQ(sample.cgroups(0).cpu_pressure_some_avg10(), 8.54);
  EXPECT_DOUBLE_EQ(sample.cgroups(1).cpu_usage_cores(), 2.0);
  EXPECT_DOUBLE_EQ(sample.cgroups(1).throttled_fraction(), 0.4);
  EXPECT_DOUBLE_EQ(sample.cgroups(1).throttled_seconds_per_second(), 0.25);
  EXPECT_EQ(sample.cgroups(1).memory_current_bytes(), 1234567);
}

TEST(Sampler, BrokenCollectorsAreListedAndTheOthersStillPresent) {
  FakeFileSource files;
  LoadNode(files, "a");
  Sampler sampler(files);
  sampler.Sample(1000.0, kCgroups);

  LoadNode(files, "b");
  files.Set("/proc/pressure/io", Fixture("malformed/pressure-non-numeric"));
  files.Remove("/sys/fs/cgroup/kubepods/pod1/cpu.stat");
  files.Set("/sys/fs/cgroup/cpu.pressure", Fixture("malformed/pressure-cut-mid-line"));
  v1::NodeSample sample = sampler.Sample(1002.0, kCgroups);

  EXPECT_THAT(
      sample.errors(),
      ElementsAre(
          "pressure: /proc/pressure/io: line 1: avg10: \"high\" is not a percentage",
          "cgroup: /sys/fs/cgroup/cpu.pressure: line 2: truncated: no newline at the end of the "
          "file",
          "cgroup: /sys/fs/cgroup/kubepods/pod1/cpu.stat: no such file"));
  EXPECT_FALSE(sample.has_pressure());
  EXPECT_TRUE(sample.has_cpu());
  EXPECT_TRUE(sample.has_memory());
  EXPECT_EQ(sample.net_size(), 4);
  ASSERT_EQ(sample.cgroups_size(), 1);  // the root, its cpu.pressure field left 0
  EXPECT_EQ(sample.cgroups(0).path(), "");
  EXPECT_EQ(sample.cgroups(0).cpu_pressure_some_avg10(), 0.0);
  EXPECT_GT(sample.cgroups(0).cpu_usage_cores(), 0.0);

  // The pod is back: its rates span the interval since its last good read.
  LoadNode(files, "b");
  v1::NodeSample later = sampler.Sample(1004.0, kCgroups);
  EXPECT_THAT(later.errors(), IsEmpty());
  ASSERT_EQ(later.cgroups_size(), 2);
  EXPECT_DOUBLE_EQ(later.cgroups(1).cpu_usage_cores(), 1.0);  // 4 s of CPU in 4 s
}

TEST(Sampler, FirstGoodReadAfterAFailureHasNoRates) {
  FakeFileSource files;
  LoadNode(files, "a");
  files.Set("/proc/stat", Fixture("malformed/empty"));
  Sampler sampler(files);
  v1::NodeSample first = sampler.Sample(1000.0, {});
  EXPECT_THAT(first.errors(), ElementsAre("cpu: /proc/stat: empty"));
  EXPECT_THAT(first.cgroups(), IsEmpty());

  LoadNode(files, "b");
  v1::NodeSample second = sampler.Sample(1001.0, {});
  EXPECT_THAT(second.errors(), IsEmpty());
  EXPECT_FALSE(second.has_cpu());
  EXPECT_EQ(second.net_size(), 4);
}

TEST(Sampler, ClockGoingBackGivesNoTimeRates) {
  FakeFileSource files;
  LoadNode(files, "a");
  Sampler sampler(files);
  sampler.Sample(1000.0, kCgroups);
  LoadNode(files, "b");
  v1::NodeSample sample = sampler.Sample(999.0, kCgroups);
  EXPECT_THAT(sample.net(), IsEmpty());
  ASSERT_EQ(sample.cgroups_size(), 2);
  EXPECT_EQ(sample.cgroups(1).cpu_usage_cores(), 0.0);
  EXPECT_TRUE(sample.has_cpu());  // shares of ticks need no clock
}

// A cgroup v1 group "antdt" as captured at "a" or "b" (cgroup-v1-*), its
// cpuacct.usage next to its cpu.stat as under a cpu,cpuacct co-mount.
void LoadCgroupV1(FakeFileSource& files, const std::string& at, bool with_cpuacct) {
  const std::string dir = "cgroup-v1-" + at + "/antdt/";
  files.Set("/sys/fs/cgroup/antdt/cpu.stat", Fixture(dir + "cpu.stat"));
  if (with_cpuacct) {
    files.Set("/sys/fs/cgroup/antdt/cpuacct.usage", Fixture(dir + "cpuacct.usage"));
  } else {
    files.Remove("/sys/fs/cgroup/antdt/cpuacct.usage");
  }
}

TEST(Sampler, CgroupV1ThrottledGroup) {
  struct Case {
    const char* name;
    bool with_cpuacct;
    double cpu_usage_cores;
  };
  const Case cases[] = {
      // cpuacct.usage 405069652 -> 609434911 ns, read as usec.
      {"cpu,cpuacct co-mounted", true, (609434 - 405069) / 1e6},
      // cpuacct mounted apart (as on these hosts): no usage, no error.
      {"no cpuacct.usage", false, 0.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakeFileSource files;
    LoadNode(files, "a");
    LoadCgroupV1(files, "a", c.with_cpuacct);
    Sampler sampler(files);
    v1::NodeSample first = sampler.Sample(1000.0, {"antdt"});
    EXPECT_THAT(first.errors(), IsEmpty());
    ASSERT_EQ(first.cgroups_size(), 1);
    EXPECT_EQ(first.cgroups(0).throttled_fraction(), 0.0);  // levels only

    LoadNode(files, "b");
    LoadCgroupV1(files, "b", c.with_cpuacct);
    v1::NodeSample sample = sampler.Sample(1001.0, {"antdt"});
    EXPECT_THAT(sample.errors(), IsEmpty());
    ASSERT_EQ(sample.cgroups_size(), 1);
    const v1::CgroupSample& group = sample.cgroups(0);
    EXPECT_EQ(group.path(), "antdt");
    EXPECT_DOUBLE_EQ(group.cpu_usage_cores(), c.cpu_usage_cores);
    EXPECT_DOUBLE_EQ(group.throttled_fraction(), 1.0);  // 11 of 11 periods
    // throttled_time 1365335037 -> 2167941026 ns
    EXPECT_DOUBLE_EQ(group.throttled_seconds_per_second(), (2167941 - 1365335) / 1e6);
    EXPECT_EQ(group.memory_current_bytes(), 0);  // no memory.current in the cpu hierarchy
  }
}

TEST(Sampler, CgroupV1BrokenCpuacctUsageFailsTheGroupForThatSample) {
  FakeFileSource files;
  LoadNode(files, "a");
  LoadCgroupV1(files, "a", true);
  Sampler sampler(files);
  sampler.Sample(1000.0, {"antdt"});
  LoadNode(files, "b");
  LoadCgroupV1(files, "b", true);
  files.Set("/sys/fs/cgroup/antdt/cpuacct.usage", Fixture("malformed/cpuacct.usage-cut"));
  v1::NodeSample broken = sampler.Sample(1001.0, {"antdt"});
  EXPECT_THAT(broken.errors(),
              ElementsAre("cgroup: /sys/fs/cgroup/antdt/cpuacct.usage: line 1: truncated: no "
                          "newline at the end of the file"));
  EXPECT_THAT(broken.cgroups(), IsEmpty());

  // Back: the rates span the interval since the last good read, with no jump.
  LoadCgroupV1(files, "b", true);
  v1::NodeSample later = sampler.Sample(1002.0, {"antdt"});
  EXPECT_THAT(later.errors(), IsEmpty());
  ASSERT_EQ(later.cgroups_size(), 1);
  EXPECT_DOUBLE_EQ(later.cgroups(0).cpu_usage_cores(), (609434 - 405069) / 1e6 / 2);
  EXPECT_DOUBLE_EQ(later.cgroups(0).throttled_fraction(), 1.0);
}

// ---- The real files ---------------------------------------------------------

TEST(RealFileSource, ReadsUnderTheConfiguredRoots) {
  RealFileSource files(TestdataPath("proc-a"), TestdataPath("cgroup-a"));
  Sampler sampler(files);
  v1::NodeSample sample = sampler.Sample(1.0, {""});
  EXPECT_THAT(sample.errors(), IsEmpty());
  EXPECT_EQ(sample.memory().total_bytes(), 24684096 * kKiB);
  EXPECT_DOUBLE_EQ(sample.pressure().io_full_avg10(), 0.17);
  ASSERT_EQ(sample.cgroups_size(), 1);
  EXPECT_DOUBLE_EQ(sample.cgroups(0).cpu_pressure_some_avg10(), 9.99);

  absl::StatusOr<std::string> missing = files.Read("/proc/missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              StartsWith("/proc/missing (" + TestdataPath("proc-a") + "/missing): "));
  for (const char* outside : {"/etc/passwd", "/procfoo/stat", "/proc/../etc/passwd", "stat"}) {
    EXPECT_EQ(files.Read(outside).status().code(), absl::StatusCode::kInvalidArgument) << outside;
  }
}

TEST(RealFileSource, CgroupV1HierarchyAsRoot) {
  // As `--cgroup-root /sys/fs/cgroup/cpu --cgroups antdt` would read.
  RealFileSource files(TestdataPath("proc-a"), TestdataPath("cgroup-v1-a"));
  Sampler sampler(files);
  v1::NodeSample sample = sampler.Sample(1.0, {"antdt", "/antdt/", "../cgroup-a"});
  EXPECT_THAT(sample.errors(),
              ElementsAre("cgroup: /sys/fs/cgroup/../cgroup-a/cpu.stat: \"..\" in path"));
  ASSERT_EQ(sample.cgroups_size(), 2);
  EXPECT_EQ(sample.cgroups(0).path(), "antdt");
  EXPECT_EQ(sample.cgroups(1).path(), "antdt");

  absl::StatusOr<std::string> usage = files.Read("/sys/fs/cgroup/antdt/cpuacct.usage");
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(*usage, "405069652\n");
  for (const char* outside :
       {"/sys/fs/cgroup/../cgroup-a/cpu.stat", "/sys/fs/cgroup/antdt/../../cgroup-a/cpu.stat",
        "/sys/fs/cgroupfoo/antdt/cpu.stat", "/sys/fs/cpu.stat", "sys/fs/cgroup/antdt/cpu.stat",
        "/sys/fs/cgroup/cpu/../../../etc/passwd"}) {
    absl::StatusOr<std::string> read = files.Read(outside);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << outside;
  }
}

TEST(RealFileSource, ThisMachine) {
  RealFileSource files;
  absl::StatusOr<std::string> stat = files.Read("/proc/stat");
  ASSERT_TRUE(stat.ok()) << stat.status();
  absl::StatusOr<CpuTimes> cpu = ParseProcStat(*stat);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_GE(cpu->cpus, 1);
  absl::StatusOr<std::string> meminfo = files.Read("/proc/meminfo");
  ASSERT_TRUE(meminfo.ok()) << meminfo.status();
  absl::StatusOr<MemInfo> memory = ParseMeminfo(*meminfo);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_GT(memory->total_bytes, 0);
}

// The training pods' cgroups, found by the pod's UID in either cgroup
// driver's layout, or by a process's /proc/<pid>/cgroup.
TEST(FindPodCgroup, SystemdAndCgroupfsLayouts) {
  FakeFileSource files;
  const std::string uid = "0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10";
  const std::string systemd =
      "kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod0b6f3a52_4c1e_4d7a_9a43_5f0e8c2d7b10.slice";
  files.Set("/sys/fs/cgroup/cpu.stat", "usage_usec 1\n");
  files.Set("/sys/fs/cgroup/system.slice/cpu.stat", "usage_usec 1\n");
  files.Set(
      "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-podffff.slice/cpu.stat",
      "usage_usec 1\n");
  files.Set("/sys/fs/cgroup/" + systemd + "/cri-containerd-abc.scope/cpu.stat", "usage_usec 1\n");
  files.Set("/sys/fs/cgroup/" + systemd + "/cpu.stat", "usage_usec 1\n");
  EXPECT_EQ(FindPodCgroup(files, uid).value_or("?"), systemd);
  EXPECT_EQ(FindPodCgroup(files, "1111-2222").status().code(), absl::StatusCode::kNotFound);

  FakeFileSource cgroupfs;
  cgroupfs.Set("/sys/fs/cgroup/kubepods/burstable/pod" + uid + "/cpu.stat", "usage_usec 1\n");
  cgroupfs.Set("/sys/fs/cgroup/kubepods/pod" + uid + "x/cpu.stat", "usage_usec 1\n");
  EXPECT_EQ(FindPodCgroup(cgroupfs, uid).value_or("?"), "kubepods/burstable/pod" + uid);
}

TEST(ProcessCgroup, V2EntryElseV1Cpu) {
  FakeFileSource files;
  files.Set("/proc/42/cgroup", "0::/user.slice/trainer.scope\n");
  files.Set("/proc/43/cgroup",
            "12:memory:/m\n4:cpu,cpuacct:/kubepods/burstable/podx/c1\n1:name=systemd:/s\n");
  files.Set("/proc/44/cgroup", "12:memory:/m\n");
  EXPECT_EQ(ProcessCgroup(files, 42).value_or("?"), "user.slice/trainer.scope");
  EXPECT_EQ(ProcessCgroup(files, 43).value_or("?"), "kubepods/burstable/podx/c1");
  EXPECT_EQ(ProcessCgroup(files, 44).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ProcessCgroup(files, 45).status().code(), absl::StatusCode::kNotFound);
}

TEST(ProcessRunning, GoneOrZombieHasEnded) {
  FakeFileSource files;
  files.Set("/proc/42/stat", "42 (antdt demo (w)) S 1 42 42 0 -1 4194560\n");
  files.Set("/proc/43/stat", "43 (trainer) Z 1 43 43 0 -1 4227084\n");
  files.Set("/proc/44/stat", "44 (trainer");
  EXPECT_EQ(ProcessRunning(files, 42), std::optional<bool>(true));
  EXPECT_EQ(ProcessRunning(files, 43), std::optional<bool>(false));  // a zombie
  EXPECT_EQ(ProcessRunning(files, 45), std::optional<bool>(false));  // gone
  EXPECT_EQ(ProcessRunning(files, 44), std::nullopt);                // cannot tell
}

TEST(CgroupFinder, EachWorkersCgroupOnceAPodsKeptWhileItReports) {
  FakeFileSource files;
  files.Set("/sys/fs/cgroup/kubepods/burstable/poda-1/cpu.stat", "usage_usec 1\n");
  files.Set("/proc/7/cgroup", "0::/local/w7\n");
  files.Set("/proc/8/cgroup", "0::/local/w7\n");  // the same group
  CgroupFinder finder(files);
  EXPECT_THAT(finder.Find({{"a-1", 1}, {"", 7}, {"", 8}, {"gone", 0}}),
              ::testing::ElementsAre("kubepods/burstable/poda-1", "local/w7"));
  // Found once: the tree is not walked again while the pod reports.
  files.Remove("/sys/fs/cgroup/kubepods/burstable/poda-1/cpu.stat");
  EXPECT_THAT(finder.Find({{"a-1", 1}}), ::testing::ElementsAre("kubepods/burstable/poda-1"));
  // Once it stopped reporting, it is looked up again (and is gone now).
  EXPECT_THAT(finder.Find({}), ::testing::IsEmpty());
  EXPECT_THAT(finder.Find({{"a-1", 0}}), ::testing::IsEmpty());
}

}  // namespace
}  // namespace antdt::agent
