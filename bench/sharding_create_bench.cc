// antdt-bench-sharding-create: how long a large CreateDataset holds up other
// calls. One thread creates a dataset of N shards (sequential, then shuffled)
// while another calls GetProgress on a small dataset in a loop; prints the
// create's duration and the other calls' latency during it, beside the same
// calls with nothing else running. The ledger over the in-memory store, so
// that only the ledger's own locking is measured.
//
//   antdt-bench-sharding-create [SHARDS]   (default 10,000,000; the per-dataset
//                                           limit is 50,000,000)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "services/sharding/ledger.h"

namespace {

using antdt::sharding::Ledger;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Latencies {
  size_t calls = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

Latencies Summarise(std::vector<double> ms) {
  Latencies l;
  if (ms.empty()) return l;
  std::sort(ms.begin(), ms.end());
  l.calls = ms.size();
  l.p50_ms = ms[ms.size() / 2];
  l.p99_ms = ms[ms.size() * 99 / 100];
  l.max_ms = ms.back();
  return l;
}

antdt::v1::CreateDatasetRequest Request(const char* name, int64_t records, bool shuffle) {
  antdt::v1::CreateDatasetRequest req;
  req.mutable_spec()->set_job("bench");
  req.mutable_spec()->set_name(name);
  req.mutable_spec()->set_record_count(records);
  req.mutable_spec()->set_shard_size(1);
  req.mutable_spec()->set_epochs(1);
  req.mutable_spec()->set_shuffle(shuffle);
  return req;
}

// GetProgress on bench/small until `stop`; each call's latency.
std::vector<double> Poll(Ledger& ledger, const std::atomic<bool>& stop) {
  antdt::v1::GetProgressRequest req;
  req.mutable_dataset()->set_job("bench");
  req.mutable_dataset()->set_name("small");
  std::vector<double> ms;
  while (!stop.load()) {
    auto t0 = Clock::now();
    if (!ledger.GetProgress(req).ok()) std::abort();
    ms.push_back(Ms(Clock::now() - t0));
  }
  return ms;
}

void Print(const char* what, const Latencies& l) {
  std::printf("  %-34s calls=%-9zu p50=%.3f ms  p99=%.3f ms  max=%.1f ms\n", what, l.calls,
              l.p50_ms, l.p99_ms, l.max_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t shards = argc > 1 ? std::atoll(argv[1]) : 10'000'000;
  antdt::sharding::MemoryStore store;
  antdt::sharding::LedgerOptions options;
  options.max_total_shards = 4 * shards;
  auto ledger = Ledger::Open(&store, &antdt::RealClock::Get(), options);
  if (!ledger.ok() || !(*ledger)->CreateDataset(Request("small", 100, false)).ok()) return 1;

  std::atomic<bool> stop{false};
  std::thread idle([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  Latencies baseline = Summarise(Poll(**ledger, stop));
  idle.join();
  std::printf("GetProgress on a 100-record dataset while a %lld-shard dataset is created\n",
              static_cast<long long>(shards));
  Print("baseline (nothing else running)", baseline);
  for (bool shuffle : {false, true}) {
    stop = false;
    double create_ms = 0;
    std::thread creator([&] {
      auto t0 = Clock::now();
      if (!(*ledger)
               ->CreateDataset(Request(shuffle ? "big-shuffled" : "big", shards, shuffle))
               .ok()) {
        std::abort();
      }
      create_ms = Ms(Clock::now() - t0);
      stop = true;
    });
    Latencies during = Summarise(Poll(**ledger, stop));
    creator.join();
    std::printf("  create %s: %.0f ms\n", shuffle ? "shuffled" : "sequential", create_ms);
    Print(shuffle ? "during the shuffled create" : "during the sequential create", during);
  }
  return 0;
}
