#include "workload/demo/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"

namespace antdt::demo {

absl::StatusOr<Journal> Journal::Open(const std::string& path) {
  // Its directory may be a fresh volume (a pod's checkpoint path).
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("journal: cannot open ", path));
  return Journal(fd);
}

Journal::Journal(Journal&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

Journal::~Journal() {
  if (fd_ >= 0) close(fd_);
}

void Journal::Line(const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = write(fd_, p, left);
    if (n <= 0) std::abort();  // a journal we cannot write makes the run meaningless
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void Journal::Pending(char kind, uint64_t token, int64_t done, int32_t epoch,
                      const std::vector<int64_t>& ids) {
  std::string line = absl::StrCat("P ", std::string(1, kind), " ", token, " ", done, " ", epoch);
  for (int64_t id : ids) absl::StrAppend(&line, " ", id);
  line += '\n';
  Line(line);
}

void Journal::Acked(uint64_t token, int64_t done) {
  Line(absl::StrCat("A ", token, " ", done, "\n"));
}

void Journal::Refused(uint64_t token, int64_t done) {
  Line(absl::StrCat("X ", token, " ", done, "\n"));
}

void Journal::RolledBack(int32_t epoch, const std::vector<int64_t>& ids) {
  std::string line = absl::StrCat("U ", epoch);
  for (int64_t id : ids) absl::StrAppend(&line, " ", id);
  line += '\n';
  Line(line);
}

absl::StatusOr<std::vector<Journal::PendingCall>> Journal::Unresolved(const std::string& path) {
  std::ifstream in(path);
  std::vector<PendingCall> out;
  if (!in) return out;
  std::string line;
  std::optional<PendingCall> last;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string tag;
    ss >> tag;
    if (tag == "P") {
      PendingCall p;
      std::string kind;
      ss >> kind >> p.token >> p.done;
      p.kind = kind.empty() ? 'R' : kind[0];
      last = p;
    } else if (tag == "A" || tag == "X") {
      last.reset();
    }
  }
  if (last) out.push_back(*last);
  return out;
}

absl::StatusOr<Journal> Journal::OpenAndResolve(const std::string& path,
                                                client::ShardingClient& client) {
  auto unresolved = Unresolved(path);
  if (!unresolved.ok()) return unresolved.status();
  auto journal = Open(path);
  if (!journal.ok()) return journal.status();
  for (const PendingCall& p : *unresolved) {
    client::ShardLease lease;
    lease.token = p.token;
    absl::Status s = p.kind == 'C' ? client.Complete(lease) : client.ReportProgress(lease, p.done);
    if (s.ok()) {
      journal->Acked(p.token, p.done);
    } else if (s.code() == absl::StatusCode::kFailedPrecondition ||
               s.code() == absl::StatusCode::kNotFound) {
      journal->Refused(p.token, p.done);
    } else {
      return absl::Status(s.code(), absl::StrCat("resolving a pending commit: ", s.message()));
    }
    LogEvent("pending_commit_resolved", {{"worker", client.options().worker_id},
                                         {"token", p.token},
                                         {"acked", s.ok() ? "true" : "false"}});
  }
  return journal;
}

bool Verification::exactly_once() const {
  for (int32_t e = 0; e < epochs; ++e) {
    if (missing_per_epoch[e] != 0 || duplicated_per_epoch[e] != 0) return false;
  }
  return true;
}

std::string Verification::Summary() const {
  std::string out = absl::StrFormat("%-8s %12s %10s %10s %10s\n", "epoch", "records", "committed",
                                    "missing", "twice");
  for (int32_t e = 0; e < epochs; ++e) {
    absl::StrAppendFormat(&out, "%-8d %12d %10d %10d %10d\n", e, records, committed_per_epoch[e],
                          missing_per_epoch[e], duplicated_per_epoch[e]);
  }
  for (const auto& [name, n] : per_journal) {
    absl::StrAppendFormat(&out, "  %-40s %10d records\n", name, n);
  }
  absl::StrAppendFormat(&out, "refused commits (lease lost, redone by others): %d\n",
                        refused_calls);
  if (rolled_back > 0) {
    absl::StrAppendFormat(&out, "commits undone by restores (trained and committed again): %d\n",
                          rolled_back);
  }
  absl::StrAppend(&out, exactly_once() ? "RESULT: every record committed exactly once\n"
                                       : "RESULT: FAILED: records lost or committed twice\n");
  return out;
}

absl::StatusOr<Verification> VerifyJournals(const std::vector<std::string>& paths, int64_t records,
                                            int32_t epochs) {
  Verification v;
  v.epochs = epochs;
  v.records = records;
  // Signed: a restore's U line may be read before the commits it undoes.
  std::vector<std::vector<int16_t>> count(epochs, std::vector<int16_t>(records, 0));
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("journal: cannot read ", path));
    std::unordered_map<uint64_t, std::pair<int32_t, std::vector<int64_t>>> pending;
    std::string line;
    int64_t mine = 0;
    while (std::getline(in, line)) {
      std::istringstream ss(line);
      std::string tag;
      ss >> tag;
      if (tag == "P") {
        std::string kind;
        uint64_t token;
        int64_t done;
        int32_t epoch;
        ss >> kind >> token >> done >> epoch;
        std::vector<int64_t> ids;
        int64_t id;
        while (ss >> id) ids.push_back(id);
        pending[token] = {epoch, std::move(ids)};
      } else if (tag == "A") {
        uint64_t token;
        ss >> token;
        auto it = pending.find(token);
        if (it == pending.end()) continue;
        auto& [epoch, ids] = it->second;
        if (epoch < 0 || epoch >= epochs) {
          return absl::DataLossError(absl::StrCat(path, ": epoch ", epoch, " out of range"));
        }
        for (int64_t id : ids) {
          if (id < 0 || id >= records) {
            return absl::DataLossError(absl::StrCat(path, ": record ", id, " out of range"));
          }
          if (count[epoch][id] < 255) ++count[epoch][id];
        }
        mine += static_cast<int64_t>(ids.size());
        pending.erase(it);
      } else if (tag == "U") {
        int32_t epoch = -1;
        ss >> epoch;
        if (epoch < 0 || epoch >= epochs) {
          return absl::DataLossError(absl::StrCat(path, ": epoch ", epoch, " out of range"));
        }
        int64_t id;
        while (ss >> id) {
          if (id < 0 || id >= records) {
            return absl::DataLossError(absl::StrCat(path, ": record ", id, " out of range"));
          }
          if (count[epoch][id] > -255) --count[epoch][id];
          ++v.rolled_back;
        }
      } else if (tag == "X") {
        uint64_t token;
        ss >> token;
        pending.erase(token);
        ++v.refused_calls;
      }
    }
    v.per_journal[path.substr(path.find_last_of('/') + 1)] += mine;
  }
  v.committed_per_epoch.assign(epochs, 0);
  v.missing_per_epoch.assign(epochs, 0);
  v.duplicated_per_epoch.assign(epochs, 0);
  for (int32_t e = 0; e < epochs; ++e) {
    for (int64_t id = 0; id < records; ++id) {
      v.committed_per_epoch[e] += count[e][id];
      if (count[e][id] <= 0) ++v.missing_per_epoch[e];
      if (count[e][id] > 1) ++v.duplicated_per_epoch[e];
    }
  }
  return v;
}

}  // namespace antdt::demo
