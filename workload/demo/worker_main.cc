// antdt-demo-worker: consumes a dataset through the sharding service and
// journals every record the service acknowledged, for exactly-once checks.
// Emulates --record-us microseconds of work per record.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "client/sharding_client.h"
#include "common/config.h"
#include "common/log.h"
#include "workload/demo/journal.h"

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "antdt-demo-worker: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace antdt;
  auto flags = ParseFlags(argc, argv,
                          {"address", "job", "dataset", "worker-id", "incarnation", "journal",
                           "record-us", "commit-every"});
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  for (const char* required : {"address", "job", "dataset", "worker-id", "journal"}) {
    if (!flags->Has(required)) return Fail(std::string("--") + required + ": required");
  }
  int64_t incarnation = 0, record_us = 0, commit_every = 10;
  if (!absl::SimpleAtoi(flags->Get("incarnation", "0"), &incarnation) || incarnation < 0) {
    return Fail("--incarnation: must be an integer >= 0");
  }
  if (!absl::SimpleAtoi(flags->Get("record-us", "0"), &record_us) || record_us < 0) {
    return Fail("--record-us: must be an integer >= 0");
  }
  if (!absl::SimpleAtoi(flags->Get("commit-every", "10"), &commit_every) || commit_every <= 0) {
    return Fail("--commit-every: must be an integer > 0");
  }
  client::ShardingClientOptions options;
  options.job = flags->Get("job");
  options.dataset = flags->Get("dataset");
  options.worker_id = flags->Get("worker-id");
  options.incarnation = incarnation;
  options.retry_budget_ms = 120'000;
  options.follow_shorter_leases = true;  // it takes no record past what it commits
  client::ShardingClient client(client::CreateShardingChannel(flags->Get("address")), options);

  auto journal = demo::Journal::OpenAndResolve(flags->Get("journal"), client);
  if (!journal.ok()) return Fail(std::string(journal.status().message()));

  int64_t records = 0;
  for (;;) {
    auto acquired = client.Acquire();
    if (!acquired.ok()) return Fail("acquire: " + std::string(acquired.status().message()));
    if (!*acquired) break;
    client::ShardLease& lease = **acquired;
    const int64_t base = lease.shard.committed();
    const int64_t n = lease.remaining();
    int64_t acked = 0;
    // remaining() read afresh: a ReportProgress may end the lease early.
    for (int64_t i = 0; i < lease.remaining(); ++i) {
      if (record_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(record_us));
      const bool last = i + 1 == lease.remaining();
      if (!last && i + 1 - acked < commit_every) continue;
      std::vector<int64_t> ids;
      for (int64_t j = acked; j <= i; ++j) ids.push_back(lease.RecordAt(j));
      const int64_t done = base + i + 1;
      journal->Pending(last ? 'C' : 'R', lease.token, done, lease.epoch(), ids);
      absl::Status s = last ? client.Complete(lease) : client.ReportProgress(lease, done);
      if (s.ok()) {
        journal->Acked(lease.token, done);
        records += i + 1 - acked;
        acked = i + 1;
        continue;
      }
      if (s.code() == absl::StatusCode::kFailedPrecondition) {
        journal->Refused(lease.token, done);
        break;  // the lease is gone; its remainder went back to the queue
      }
      return Fail("commit: " + std::string(s.message()));
    }
    if (n == 0) {
      journal->Pending('C', lease.token, base, lease.epoch(), {});
      if (client.Complete(lease).ok()) journal->Acked(lease.token, base);
    }
  }
  LogEvent("worker_done",
           {{"worker", options.worker_id}, {"incarnation", incarnation}, {"records", records}});
  return 0;
}
