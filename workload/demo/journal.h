// A worker's journal of the records the sharding service acknowledged as
// committed: the ground truth the demo and the chaos test check exactly-once
// against (never the service's own counters).
//
// Before each commit call the worker appends  P <kind> <token> <done> <epoch> <ids>
// (kind R: ReportProgress, C: CompleteShard); after the answer, A <token> <done>
// (acknowledged) or X <token> <done> (refused: the lease was lost). A worker
// killed between the two resolves its last P line on restart by repeating the
// call, which the service answers idempotently. One write(2) per line, so a
// SIGKILL never tears a line.
//
// A restore of the sharding service to a checkpoint undoes the commits after
// it; whoever restores appends its RestoreResponse's rolled_back to a journal
// of its own as  U <epoch> <ids>  lines (AppendRollback), which the check
// subtracts: those records are committed once more afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/sharding_client.h"

namespace antdt::demo {

class Journal {
 public:
  static absl::StatusOr<Journal> Open(const std::string& path);
  Journal(Journal&& other) noexcept;
  ~Journal();

  void Pending(char kind, uint64_t token, int64_t done, int32_t epoch,
               const std::vector<int64_t>& ids);
  void Acked(uint64_t token, int64_t done);
  void Refused(uint64_t token, int64_t done);
  // U lines for the commits a restore undid.
  void RolledBack(int32_t epoch, const std::vector<int64_t>& ids);

  struct PendingCall {
    char kind = 0;
    uint64_t token = 0;
    int64_t done = 0;
  };
  // The last P line without an answer, if the previous process died there.
  static absl::StatusOr<std::vector<PendingCall>> Unresolved(const std::string& path);

  // Opens the journal of a (re)starting worker: when the previous process
  // died between a commit call and its answer, the call is made again (the
  // service answers idempotently for the same lease) and its answer
  // journaled. Do this before acquiring: acquiring under a new incarnation
  // releases the old leases.
  static absl::StatusOr<Journal> OpenAndResolve(const std::string& path,
                                                client::ShardingClient& client);

 private:
  explicit Journal(int fd) : fd_(fd) {}
  void Line(const std::string& line);
  int fd_ = -1;
};

struct Verification {
  int32_t epochs = 0;
  int64_t records = 0;
  std::vector<int64_t> committed_per_epoch;  // acknowledged commits
  std::vector<int64_t> missing_per_epoch;
  std::vector<int64_t> duplicated_per_epoch;
  std::map<std::string, int64_t> per_journal;  // records committed by each journal
  int64_t refused_calls = 0;
  int64_t rolled_back = 0;  // commits undone by restores (U lines)
  bool exactly_once() const;
  std::string Summary() const;
};

// Reads every journal and checks each record of each epoch was committed once.
absl::StatusOr<Verification> VerifyJournals(const std::vector<std::string>& paths, int64_t records,
                                            int32_t epochs);

}  // namespace antdt::demo
