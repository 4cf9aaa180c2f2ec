// Node collectors of the agent, in three layers:
//  - parsers: pure functions from the text of one /proc or cgroup (v1 or v2)
//    file to a plain struct of its raw values;
//  - rates: pure functions from two raw samples and the seconds between them
//    to the monitor.proto messages the agent sends;
//  - Sampler: reads the files through a FileSource (the only I/O here, so
//    tests swap in FakeFileSource), keeps the previous raw sample and builds
//    one NodeSample per call.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "antdt/v1/monitor.pb.h"

namespace antdt::agent {

// ---- Parsers ----------------------------------------------------------------
// Each takes the whole text of one file as read. None crashes on any input: a
// malformed or truncated text gives InvalidArgumentError whose message starts
// with the file name and names the line or field, e.g.
//   /proc/stat: line 1: expected at least 8 numbers after "cpu", got 5
// Every /proc and cgroup file ends in a newline, so a text that does not was
// cut short and is rejected (a number cut mid-digits would otherwise pass).
// Columns and keys added by newer kernels are ignored.

// The aggregate "cpu" line of /proc/stat, in USER_HZ ticks since boot.
struct CpuTimes {
  uint64_t user = 0;
  uint64_t nice = 0;
  uint64_t system = 0;
  uint64_t idle = 0;
  uint64_t iowait = 0;
  uint64_t irq = 0;
  uint64_t softirq = 0;
  uint64_t steal = 0;
  int cpus = 0;  // number of per-CPU "cpuN" lines (online CPUs)
};
absl::StatusOr<CpuTimes> ParseProcStat(std::string_view text);

// /proc/meminfo, converted from kB to bytes.
struct MemInfo {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;  // MemAvailable (kernel 3.14 and later)
  int64_t swap_total_bytes = 0;
  int64_t swap_free_bytes = 0;
};
absl::StatusOr<MemInfo> ParseMeminfo(std::string_view text);

// One interface of /proc/net/dev: counters since the interface came up.
struct NetDevCounters {
  std::string name;
  bool loopback = false;  // "lo"
  uint64_t rx_bytes = 0;
  uint64_t rx_packets = 0;
  uint64_t rx_errs = 0;
  uint64_t rx_drop = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_errs = 0;
  uint64_t tx_drop = 0;
};
// The interfaces in file order, the two header lines skipped.
absl::StatusOr<std::vector<NetDevCounters>> ParseNetDev(std::string_view text);

// Pressure stall information: /proc/pressure/{cpu,memory,io} and a cgroup's
// cpu.pressure (same format). `file` names the file in error messages.
struct PressureLine {
  double avg10 = 0;  // percent of wall time, as the kernel reports it
  double avg60 = 0;
  double avg300 = 0;
  uint64_t total_usec = 0;
};
struct Pressure {
  PressureLine some;
  std::optional<PressureLine> full;  // absent for cpu before kernel 5.13
};
absl::StatusOr<Pressure> ParsePressure(std::string_view text, std::string_view file = "pressure");

// Which cgroup hierarchy a cpu.stat came from.
enum class CgroupVersion { kV2, kV1 };

// A cgroup cpu.stat, v2 or v1, told apart by its keys: usage_usec makes it v2
// (the unified hierarchy), throttled_time v1 (the cpu controller's own
// hierarchy, e.g. /sys/fs/cgroup/cpu).
//  - v2 needs usage_usec, user_usec and system_usec; the throttling keys exist
//    only where the cpu controller is enabled for the cgroup; absent, they are 0.
//  - v1 needs nr_periods, nr_throttled and throttled_time (nanoseconds, kept
//    as throttled_usec = throttled_time / 1000). It has no usage: the usage
//    keys stay 0 here, and the Sampler takes usage_usec from cpuacct.usage.
struct CgroupCpuStat {
  uint64_t usage_usec = 0;
  uint64_t user_usec = 0;
  uint64_t system_usec = 0;
  uint64_t nr_periods = 0;
  uint64_t nr_throttled = 0;
  uint64_t throttled_usec = 0;
  CgroupVersion version = CgroupVersion::kV2;
};
absl::StatusOr<CgroupCpuStat> ParseCgroupCpuStat(std::string_view text,
                                                 std::string_view file = "cpu.stat");

// A cgroup v1 cpuacct.usage: one integer, nanoseconds of CPU since the group
// was created.
absl::StatusOr<uint64_t> ParseCgroupCpuacctUsage(std::string_view text,
                                                 std::string_view file = "cpuacct.usage");

// A cgroup v2 memory.current: one integer, bytes.
absl::StatusOr<int64_t> ParseCgroupMemoryCurrent(std::string_view text,
                                                 std::string_view file = "memory.current");

// ---- Rates and levels -------------------------------------------------------
// A counter that went backwards (wrap, reset, CPU hotplug) never gives a
// negative rate: see each function for what it gives instead.

// Shares of the CPU time between two /proc/stat samples: utilization =
// 1 - (idle + iowait) / total. A field that went backwards counts as 0; no
// time elapsed gives zeros. cpus comes from `after`.
v1::CpuSample CpuRates(const CpuTimes& before, const CpuTimes& after);

// swap_used_bytes = SwapTotal - SwapFree.
v1::MemorySample MemoryLevels(const MemInfo& info);

// Per-second rates of the interfaces present in both samples, in `after`'s
// order, loopback included (its name tells it). An interface new in `after`,
// or with any counter lower than before (wrapped or re-created), is skipped for
// this interval. seconds <= 0 gives no interfaces.
std::vector<v1::NetInterfaceSample> NetRates(const std::vector<NetDevCounters>& before,
                                             const std::vector<NetDevCounters>& after,
                                             double seconds);

// The avg10 values of /proc/pressure/{cpu,memory,io}; a missing full line is 0.
v1::PressureSample PressureLevels(const Pressure& cpu, const Pressure& memory, const Pressure& io);

// One cgroup over an interval: cpu_usage_cores = delta usage_usec / 1e6 /
// seconds; throttled_fraction = delta nr_throttled / delta nr_periods (0 when
// no periods); throttled_seconds_per_second = delta throttled_usec / 1e6 /
// seconds. The levels (memory_current_bytes, cpu.pressure some avg10) are
// always set; the rates stay 0 when seconds <= 0 or when a counter went
// backwards (the cgroup was re-created at the same path).
v1::CgroupSample CgroupRates(const std::string& path, const CgroupCpuStat& before,
                             const CgroupCpuStat& after, int64_t memory_current_bytes,
                             const Pressure& cpu_pressure, double seconds);

// ---- Files ------------------------------------------------------------------

// Where the Sampler reads: logical paths under these roots.
inline constexpr char kProcRoot[] = "/proc";
inline constexpr char kCgroupRoot[] = "/sys/fs/cgroup";

// Reads whole files by logical path ("/proc/stat",
// "/sys/fs/cgroup/kubepods/cpu.stat"). A missing file is NotFoundError.
class FileSource {
 public:
  virtual ~FileSource() = default;
  virtual absl::StatusOr<std::string> Read(const std::string& path) = 0;
  // The names of the directories in the directory `path`, sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectories(const std::string& path) = 0;
};

// The real files: a path under kProcRoot is read under proc_root, one under
// kCgroupRoot under cgroup_root: the cgroup v2 root, which on a hybrid cgroup
// v1/v2 host is "/sys/fs/cgroup/unified", or a cgroup v1 hierarchy such as
// "/sys/fs/cgroup/cpu" ("/sys/fs/cgroup/g/cpu.stat" is then read at
// "/sys/fs/cgroup/cpu/g/cpu.stat"). Any other path, or one with a ".."
// component, is InvalidArgumentError. Thread-safe.
class RealFileSource final : public FileSource {
 public:
  explicit RealFileSource(std::string proc_root = kProcRoot, std::string cgroup_root = kCgroupRoot);
  absl::StatusOr<std::string> Read(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDirectories(const std::string& path) override;

 private:
  absl::StatusOr<std::string> RealPath(const std::string& path) const;
  std::string proc_root_;
  std::string cgroup_root_;
};

// Files held in memory, by logical path; for tests. Not thread-safe.
class FakeFileSource final : public FileSource {
 public:
  void Set(const std::string& path, std::string text) { files_[path] = std::move(text); }
  void Remove(const std::string& path) { files_.erase(path); }
  absl::StatusOr<std::string> Read(const std::string& path) override;
  // The directories that hold a file set here.
  absl::StatusOr<std::vector<std::string>> ListDirectories(const std::string& path) override;

 private:
  std::map<std::string, std::string> files_;
};

// ---- Finding the training pods' cgroups ----------------------------------------

// The cgroup of a Kubernetes pod, relative to the cgroup root, by the pod's
// UID: the directory under the kubepods tree (kubepods.slice/..., the systemd
// driver, or kubepods/..., cgroupfs) named for it ("...pod<uid>.slice" with
// the UID's dashes as underscores, or "pod<uid>"), at most four levels down.
// NotFound when there is none (the pod is on another node, or gone).
absl::StatusOr<std::string> FindPodCgroup(FileSource& files, const std::string& pod_uid);

// The cgroup of process `pid` as /proc/<pid>/cgroup names it, relative to
// the cgroup root: the v2 entry ("0::/path"), else the v1 entry whose
// controllers include cpu. A process in another PID namespace than the
// agent's is not found this way (a pod's worker: use FindPodCgroup).
absl::StatusOr<std::string> ProcessCgroup(FileSource& files, int64_t pid);

// Whether process `pid` runs, by /proc/<pid>/stat: false when it has ended
// (no such process, or a zombie not yet reaped), true otherwise; nullopt when
// the file cannot be read for another reason. A pid from another PID
// namespace than the agent's names another process or none: callers trust
// only a process they have seen running end.
std::optional<bool> ProcessRunning(FileSource& files, int64_t pid);

// The training processes' cgroups, found by themselves: for each (pod UID,
// pid) a worker reported, its pod's cgroup (by UID), else its process's (by
// pid), each once. A pod's is kept while the pod keeps reporting (the tree
// is walked once per pod). Not thread-safe: the sampling thread's.
class CgroupFinder {
 public:
  explicit CgroupFinder(FileSource& files) : files_(files) {}
  std::vector<std::string> Find(const std::vector<std::pair<std::string, int64_t>>& processes);

 private:
  FileSource& files_;
  std::map<std::string, std::string> by_pod_;  // pod UID -> cgroup
};

// ---- Sampler ----------------------------------------------------------------

// Builds NodeSamples from the files, keeping each collector's previous raw
// sample to compute rates. A collector that fails adds one line to
// NodeSample.errors ("pressure: /proc/pressure/io: ...") and leaves its field
// unset; the others are still filled. Rates need a previous successful read:
// the first call, and the first one after a collector starts working, has
// levels only: no cpu and no net, cgroups with their rates at 0. The caller
// fills node, labels and gpus. Not thread-safe: one thread samples.
class Sampler {
 public:
  explicit Sampler(FileSource& files) : files_(files) {}

  // now_seconds: seconds since the Unix epoch (time_unix_ms, and the
  // intervals of the rates). cgroup_paths: cgroups relative to the cgroup root
  // ("" is the root). Each needs cpu.stat (v2 or v1); a missing memory.current
  // or cpu.pressure (controller or PSI off) leaves that field 0 without error.
  // A v1 group's usage is its cpuacct.usage, read in the same directory (where
  // cpu and cpuacct are mounted together, as "cpu,cpuacct"); without that file
  // its cpu_usage_cores is 0, without error, and its throttling still counts.
  // A cpuacct.usage that is there but malformed is an error, as a bad cpu.stat.
  v1::NodeSample Sample(double now_seconds, const std::vector<std::string>& cgroup_paths);

 private:
  template <typename T>
  struct Timed {
    T value;
    double at_seconds;
  };

  FileSource& files_;
  std::optional<CpuTimes> cpu_;
  std::optional<Timed<std::vector<NetDevCounters>>> net_;
  std::map<std::string, Timed<CgroupCpuStat>> cgroups_;  // by normalized path
};

// ---- Neighbours' CPU ------------------------------------------------------------

// utime + stime of a /proc/PID/stat, in clock ticks; the command name in
// parentheses may hold spaces and parentheses (the last ')' ends it).
absl::StatusOr<uint64_t> ParseProcPidStatCpuTicks(std::string_view text);

// The CPU used by a node's processes that are not the job's, from a file
// that lists the node's pids (one per line), between two calls.
// Thread-compatible.
class NeighbourCpu {
 public:
  // Cores used since the previous call by the pids in `pids_file` that are
  // not in `job`; a pid seen for the first time counts from the next call.
  // nullopt on the first call or when the file cannot be read.
  std::optional<double> Sample(const std::string& pids_file, const std::set<int64_t>& job,
                               double now_seconds);

 private:
  std::map<int64_t, uint64_t> ticks_;  // per pid, at the previous call
  double at_seconds_ = -1;
};

}  // namespace antdt::agent
