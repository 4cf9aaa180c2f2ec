// antdt-bench-node-memory: what node memory (core/nodememory) costs at the
// issue's scale: a fleet of 1,000 nodes and 10,000 episodes.
//
// 10,000 episodes over 1,000 nodes (10 per node, more on a tenth of them, the
// chronically slow), each recorded three times as the Monitor re-sends a
// record while its episode goes on: 30,000 Record calls. Printed:
// - Record: time per call, against the baseline of copying the same
//   StragglerRecord into a vector (the least an update can do: take the
//   record), and their ratio;
// - For: time per estimate, over every node;
// - size: the memory's own bytes (ApproxBytes), its serialized state
//   (v1::NodeMemoryState) and the process's peak RSS growth.
// Aims (issue 43): under 10 MB, one update under 10 us.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/nodememory/node_memory.h"

namespace {

namespace v1 = antdt::v1;
using Clock = std::chrono::steady_clock;

constexpr int kNodes = 1'000;
constexpr int kEpisodes = 10'000;
constexpr int kResends = 3;
constexpr int64_t kT0 = 1'900'000'000'000;

long PeakRssKb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The records in the order a fleet sends them: episodes over a day, each
// re-sent as its windows pass.
std::vector<std::pair<v1::StragglerRecord, int64_t>> Records() {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> node(0, kNodes - 1), chronic(0, kNodes / 10 - 1);
  std::uniform_real_distribution<double> slowdown(1.5, 5), seconds(5, 600);
  std::vector<std::pair<v1::StragglerRecord, int64_t>> out;
  out.reserve(static_cast<size_t>(kEpisodes * kResends));
  for (int e = 0; e < kEpisodes; ++e) {
    // One on every node first; then nine in ten on the chronically slow tenth
    // of the nodes and the rest anywhere.
    const int n = e < kNodes ? e : e % 10 != 0 ? chronic(rng) : node(rng);
    const int64_t start = kT0 + static_cast<int64_t>(e) * 8'640;  // a day of episodes
    const double length = seconds(rng);
    const double slower = slowdown(rng);
    for (int k = 1; k <= kResends; ++k) {
      v1::StragglerRecord r;
      r.set_node(absl::StrCat("node-", n));
      r.set_job(absl::StrCat("job-", e / 8));
      r.set_namespace_("team");
      r.set_worker_id(absl::StrCat("worker-", e % 8));
      r.set_class_(v1::TRANSIENT);
      r.set_cause(v1::CPU_CONTENTION);
      r.set_first_seen_unix_ms(start);
      r.set_last_seen_unix_ms(start + static_cast<int64_t>(length * 1000 * k / kResends));
      r.set_max_sample_score(slower);
      r.set_max_score(slower);
      r.set_windows(2 * k);
      r.set_active(k < kResends);
      out.emplace_back(std::move(r), r.last_seen_unix_ms());
    }
  }
  return out;
}

}  // namespace

int main() {
  const std::vector<std::pair<v1::StragglerRecord, int64_t>> records = Records();
  const long rss_before = PeakRssKb();

  absl::StatusOr<antdt::nodememory::NodeMemory> memory = antdt::nodememory::NodeMemory::Create();
  if (!memory.ok()) {
    std::fprintf(stderr, "%s\n", std::string(memory.status().message()).c_str());
    return 1;
  }
  auto t0 = Clock::now();
  for (const auto& [r, at] : records) {
    if (absl::Status s = memory->Record(r, at); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const double record_s = Seconds(Clock::now() - t0);
  const long rss_after = PeakRssKb();

  // Baseline (after, so that its own peak is not the memory's): take each
  // record (a copy into a vector), nothing else.
  std::vector<v1::StragglerRecord> taken;
  taken.reserve(records.size());
  t0 = Clock::now();
  for (const auto& [r, at] : records) taken.push_back(r);
  const double copy_s = Seconds(Clock::now() - t0);

  const int64_t now = records.back().second;
  int chronic = 0;
  double avoid_sum = 0;
  t0 = Clock::now();
  for (int n = 0; n < kNodes; ++n) {
    const antdt::nodememory::Estimate e = memory->For(absl::StrCat("node-", n), now);
    chronic += e.chronic ? 1 : 0;
    avoid_sum += e.avoid;
  }
  const double for_s = Seconds(Clock::now() - t0);
  const size_t state_bytes = memory->State().ByteSizeLong();

  const double calls = static_cast<double>(records.size());
  std::printf("node memory: %d nodes, %d episodes, %zu Record calls (each episode %d times)\n",
              kNodes, kEpisodes, records.size(), kResends);
  std::printf("| what | figure |\n|---|---|\n");
  std::printf("| Record, per call | %.2f us |\n", record_s / calls * 1e6);
  std::printf("| baseline: copy the record, per call | %.2f us |\n", copy_s / calls * 1e6);
  std::printf("| ratio Record / copy | %.1fx |\n", record_s / copy_s);
  std::printf("| For, per node | %.2f us |\n", for_s / kNodes * 1e6);
  std::printf("| nodes kept | %zu |\n", memory->nodes());
  std::printf("| memory's own bytes (ApproxBytes) | %.2f MB |\n",
              static_cast<double>(memory->ApproxBytes()) / 1e6);
  std::printf("| serialized state | %.2f MB |\n", static_cast<double>(state_bytes) / 1e6);
  std::printf("| peak RSS growth while recording | %.2f MB |\n",
              static_cast<double>(rss_after - rss_before) / 1e3);
  std::printf("| chronic nodes (%d were made so) | %d, mean avoid %.2f |\n", kNodes / 10, chronic,
              avoid_sum / kNodes);
  return 0;
}
