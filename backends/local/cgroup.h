// A real CPU slowdown for the local runner: a cgroup of the cpu controller
// whose quota caps the processes in it to a share of one core. Both versions:
// v1 (/sys/fs/cgroup/cpu/NAME, cpu.cfs_period_us and cpu.cfs_quota_us), as on
// hybrid hosts like these machines, and v2 (/sys/fs/cgroup/NAME, cpu.max,
// with +cpu in the root's cgroup.subtree_control), as on current Kubernetes
// nodes. Creating one needs root (docs/local-runner.md, "cpu-quota slowdowns").
//
// Thread-safety: none; the runner's thread owns them.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"

namespace antdt::local {

inline constexpr char kCpuCgroupRoot[] = "/sys/fs/cgroup/cpu";  // v1
inline constexpr char kUnifiedCgroupRoot[] = "/sys/fs/cgroup";  // v2

enum class CgroupVersion { kV1, kV2 };

// v2 when `root` holds cgroup.controllers (a cgroup2 hierarchy), else v1.
CgroupVersion VersionOf(const std::string& root);

// Where this host caps CPU: the v1 cpu controller when it is mounted (a hybrid
// host), else the unified hierarchy when its cgroup.controllers lists cpu;
// kCpuCgroupRoot when neither (Create then names what is missing).
std::string CpuCgroupRoot();

// The text a quota is written as: v1 cpu.cfs_quota_us ("3333", "-1": no
// limit) or v2 cpu.max ("3333 10000", "max 10000"), for a share 1/factor of
// one core over a kCpuPeriodUs period.
std::string QuotaText(CgroupVersion version, double factor);
// cpu.cfs_period_us the groups are given: 10 ms rather than the kernel's 100 ms,
// so a training step of tens of milliseconds runs at a steady share of a core
// instead of in 100 ms bursts and stalls.
inline constexpr int64_t kCpuPeriodUs = 10'000;

class CpuCgroup {
 public:
  // Creates `root`/`name` with no limit; an error naming the path and errno
  // when it cannot (not root, no v1 cpu controller, a group of that name).
  static absl::StatusOr<std::unique_ptr<CpuCgroup>> Create(const std::string& root,
                                                           const std::string& name);
  ~CpuCgroup();  // Remove(), its error ignored
  CpuCgroup(const CpuCgroup&) = delete;
  CpuCgroup& operator=(const CpuCgroup&) = delete;

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }

  // Moves process `pid` into the group (its children forked later follow).
  absl::Status AddProcess(pid_t pid);
  // A share 1/factor of one core (cpu.cfs_quota_us = period / factor);
  // factor <= 1: no limit (-1).
  absl::Status SetCpuFactor(double factor);
  // Removes the group; processes still in it go back to the root group first.
  // Idempotent.
  absl::Status Remove();

 private:
  CpuCgroup(std::string root, std::string name);

  const std::string root_;
  const CgroupVersion version_;
  const std::string name_;
  const std::string path_;
  bool removed_ = false;
};

// The runner's groups: one per node of the scenario with a cpu-quota
// slowdown, named <prefix>-<node>.
class NodeCgroups {
 public:
  // Creates them under `root`; an error naming the first such slowdown
  // (slowdowns[i].via) when a group cannot be created.
  static absl::StatusOr<NodeCgroups> Create(const manifest::Scenario& scenario,
                                            const std::string& root, const std::string& prefix);

  // The group of `node`; nullptr when it has none.
  CpuCgroup* Of(const std::string& node) const;
  // Each group's quota for the scenario at `t_ms` (written when it changes).
  absl::Status Apply(const manifest::Scenario& scenario, int64_t t_ms);
  // Removes every group (after their processes were stopped); the first error.
  absl::Status RemoveAll();

 private:
  std::map<std::string, std::unique_ptr<CpuCgroup>> groups_;  // by node
  std::map<std::string, double> factors_;                     // as last written
};

}  // namespace antdt::local
