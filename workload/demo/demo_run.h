// The demo job (and the chaos harness): a real sharding service process and
// real worker processes consume a dataset, while workers and the service are
// SIGKILLed and restarted at random points; the workers' journals are then
// checked for every record of every epoch committed exactly once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "antdt/v1/sharding.pb.h"
#include "workload/demo/journal.h"

namespace antdt::demo {

struct DemoOptions {
  std::string bin_dir;   // holds antdt-sharding-service and antdt-demo-worker
  std::string work_dir;  // state, journals and logs go here
  int workers = 4;
  int64_t records = 20'000;
  int64_t shard_size = 100;
  int32_t epochs = 2;
  bool shuffle = true;
  int64_t record_us = 200;  // emulated work per record
  // worker-0's work per record instead (a straggler: on the guided layout the
  // service ends its leases early, and the rest goes to the others); 0: none.
  int64_t slow_record_us = 0;
  int64_t commit_every = 25;
  int worker_kills = 1;   // SIGKILL a worker, restart it with incarnation + 1
  int service_kills = 0;  // SIGKILL the service, restart it on the same state
  uint64_t seed = 1;
  // The guided layout (v1::DatasetSpec.min_shard_records): the epoch's last
  // shards are smaller, so the kills hit them too. 0: off.
  int64_t min_shard_records = 10;
  std::string lease_ttl = "3s";
  int64_t timeout_ms = 300'000;
  // Called about every 200 ms with a one-line status, and with each event.
  std::function<void(const std::string&)> on_status;
  std::function<void(const std::string&)> on_event;
};

struct DemoResult {
  Verification verification;
  int worker_kills = 0;
  int service_kills = 0;
  // Leases the service ended early (a much slower worker's), over every
  // process of it (its log's lease_shortened events).
  int64_t leases_shortened = 0;
  double seconds = 0;
  v1::GetProgressResponse progress;  // the service's view at the end
};

absl::StatusOr<DemoResult> RunDemo(const DemoOptions& options);

}  // namespace antdt::demo
