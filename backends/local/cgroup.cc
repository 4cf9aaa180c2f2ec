#include "backends/local/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace antdt::local {
namespace {

absl::Status ErrnoError(const std::string& what, int err) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Writes `text` to a cgroup control file in one write(2): the kernel answers
// each write with its own error.
absl::Status WriteControl(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return ErrnoError(absl::StrCat("write ", text, " to ", path), err);
  }
  return absl::OkStatus();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

CgroupVersion VersionOf(const std::string& root) {
  return Exists(root + "/cgroup.controllers") ? CgroupVersion::kV2 : CgroupVersion::kV1;
}

std::string CpuCgroupRoot() {
  if (Exists(std::string(kCpuCgroupRoot) + "/cpu.cfs_quota_us")) return kCpuCgroupRoot;
  std::ifstream controllers(std::string(kUnifiedCgroupRoot) + "/cgroup.controllers");
  for (std::string c; controllers >> c;) {
    if (c == "cpu") return kUnifiedCgroupRoot;
  }
  return kCpuCgroupRoot;
}

std::string QuotaText(CgroupVersion version, double factor) {
  const bool limited = factor > 1;
  const int64_t quota =
      limited ? std::max<int64_t>(1000, static_cast<int64_t>(kCpuPeriodUs / factor)) : -1;
  if (version == CgroupVersion::kV1) return absl::StrCat(quota);
  return absl::StrCat(limited ? absl::StrCat(quota) : "max", " ", kCpuPeriodUs);
}

CpuCgroup::CpuCgroup(std::string root, std::string name)
    : root_(std::move(root)),
      version_(VersionOf(root_)),
      name_(std::move(name)),
      path_(root_ + "/" + name_) {}

absl::StatusOr<std::unique_ptr<CpuCgroup>> CpuCgroup::Create(const std::string& root,
                                                             const std::string& name) {
  std::unique_ptr<CpuCgroup> group(new CpuCgroup(root, name));
  if (group->version_ == CgroupVersion::kV2) {
    // The cpu controller must be enabled for the root's children; already
    // enabled is not an error.
    RETURN_IF_ERROR(WriteControl(root + "/cgroup.subtree_control", "+cpu"));
  }
  if (mkdir(group->path_.c_str(), 0755) != 0) {
    const int err = errno;
    group->removed_ = true;  // not ours to remove
    return ErrnoError("mkdir " + group->path_, err);
  }
  if (group->version_ == CgroupVersion::kV1) {  // v2 has the period in cpu.max
    RETURN_IF_ERROR(WriteControl(group->path_ + "/cpu.cfs_period_us", absl::StrCat(kCpuPeriodUs)));
  }
  RETURN_IF_ERROR(group->SetCpuFactor(1));
  return group;
}

CpuCgroup::~CpuCgroup() { (void)Remove(); }

absl::Status CpuCgroup::AddProcess(pid_t pid) {
  return WriteControl(path_ + "/cgroup.procs", absl::StrCat(pid));
}

absl::Status CpuCgroup::SetCpuFactor(double factor) {
  const char* file = version_ == CgroupVersion::kV1 ? "/cpu.cfs_quota_us" : "/cpu.max";
  return WriteControl(path_ + file, QuotaText(version_, factor));
}

absl::Status CpuCgroup::Remove() {
  if (removed_) return absl::OkStatus();
  if (rmdir(path_.c_str()) != 0) {
    const int err = errno;
    if (err != EBUSY && err != ENOENT) return ErrnoError("rmdir " + path_, err);
    if (err == EBUSY) {
      // Stragglers (a grandchild the runner never saw): back to the root group.
      std::ifstream procs(path_ + "/cgroup.procs");
      std::vector<std::string> pids;
      for (std::string pid; std::getline(procs, pid);) pids.push_back(pid);
      for (const std::string& pid : pids) (void)WriteControl(root_ + "/cgroup.procs", pid);
      if (rmdir(path_.c_str()) != 0) return ErrnoError("rmdir " + path_, errno);
    }
  }
  removed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<NodeCgroups> NodeCgroups::Create(const manifest::Scenario& scenario,
                                                const std::string& root,
                                                const std::string& prefix) {
  NodeCgroups groups;
  for (const manifest::NodeSpec& n : scenario.nodes) {
    size_t index = 0;
    if (!scenario.UsesCpuQuota(n.name, &index)) continue;
    auto group = CpuCgroup::Create(root, prefix + "-" + n.name);
    if (!group.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("slowdowns[", index, "].via: cpu-quota needs a writable ", root,
                       " (root, and the cgroup v1 cpu controller or cgroup v2 with cpu): ",
                       group.status().message()));
    }
    groups.factors_[n.name] = 1;
    groups.groups_[n.name] = *std::move(group);
  }
  return groups;
}

CpuCgroup* NodeCgroups::Of(const std::string& node) const {
  auto it = groups_.find(node);
  return it == groups_.end() ? nullptr : it->second.get();
}

absl::Status NodeCgroups::Apply(const manifest::Scenario& scenario, int64_t t_ms) {
  for (auto& [node, group] : groups_) {
    const double factor = scenario.CpuQuotaFactorAt(node, t_ms);
    if (factors_[node] == factor) continue;
    RETURN_IF_ERROR(group->SetCpuFactor(factor));
    factors_[node] = factor;
  }
  return absl::OkStatus();
}

absl::Status NodeCgroups::RemoveAll() {
  absl::Status first;
  for (auto& [node, group] : groups_) first.Update(group->Remove());
  return first;
}

}  // namespace antdt::local
