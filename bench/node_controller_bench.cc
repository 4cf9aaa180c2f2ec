// antdt-bench-node-controller: what the operator's node controller
// (backends/kubernetes/operator/node_controller.h) costs on a cluster of 5,000
// nodes (issue 44: "little memory and few writes").
//
// A fake API server holds 5,000 Nodes. A simulated day: 200 jobs, one every
// 7.2 minutes, each on 40 nodes drawn at random, and each Monitor view handed
// over on 12 syncs while the job runs (the re-sends); a tenth of the nodes are
// slow (every job on them has an episode there, 3-4x slower), and 1 in 50 of
// the others has an incident. The controller runs as the operator runs it
// (its informer, its queue, resync every 30 s of the simulated clock); the
// clock advances a minute per step, the controller catching up in real time.
// Printed, side by side with the baseline of the same controller under
// Recommend (the informer and the memory, nothing written):
// - writes: PATCHes of nodes/status per node per day, and in total;
// - memory: the process's RSS growth over the informer's own (the baseline),
//   and the annotation's size per remembered node;
// - nodes marked at the end, and the 5,000 Nodes listed once.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "backends/kubernetes/operator/node_controller.h"
#include "testing/kube-fake/fake_api.h"

namespace {

namespace v1 = antdt::v1;
using antdt::kube::Json;

constexpr int kNodes = 5'000;
constexpr int kJobs = 200;
constexpr int kNodesPerJob = 40;
constexpr int kResends = 12;
constexpr int64_t kMinute = 60'000;
constexpr int64_t kT0 = 1'900'000'000'000;

long RssKb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

struct Result {
  int64_t patches = 0;
  long rss_kb = 0;  // growth once the Nodes were listed, to the end
  long listed_kb = 0;
  size_t marked = 0;
  size_t annotation_bytes = 0;  // mean, per annotated node
  double seconds = 0;
};

Result Run(antdt::vocab::Mode mode) {
  antdt::FakeClock clock(kT0);
  antdt::kube::FakeApi api;
  api.EnableStatusSubresource(antdt::kube::NodesResource());
  for (int i = 0; i < kNodes; ++i) {
    Json node = {
        {"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", absl::StrCat("node-", i)}}}};
    auto created = api.Create(antdt::kube::NodesResource(), "", node);
    (*created)["status"] = {{"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}};
    (void)api.UpdateStatus(antdt::kube::NodesResource(), "", *created);
  }
  const long before = RssKb();
  antdt::kube_operator::NodeControllerOptions o;
  o.mode = mode;
  o.clock = &clock;
  o.resync_ms = 200;  // real time: a step of the simulated clock is a minute
  antdt::kube_operator::NodeController c(&api, o, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  c.Start(60'000);
  const long listed = RssKb();
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> node(0, kNodes - 1);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int j = 0; j < kJobs; ++j) {
    const std::string job = absl::StrCat("job-", j);
    Json ref = {{"apiVersion", "antdt.io/v1alpha1"},
                {"kind", "AntDTJob"},
                {"metadata", {{"name", job}, {"namespace", "team"}, {"uid", job}}}};
    v1::GetJobHealthResponse health;
    const int64_t start = clock.NowMillis();
    for (int k = 0; k < kNodesPerJob; ++k) {
      const int n = node(rng);
      if (n % 10 != 0 && unit(rng) > 0.02) continue;  // a slow tenth, and incidents
      v1::StragglerRecord* r = health.add_stragglers();
      r->set_job(job);
      r->set_namespace_("team");
      r->set_worker_id(absl::StrCat("worker-", k));
      r->set_node(absl::StrCat("node-", n));
      r->set_class_(v1::PERSISTENT);
      r->set_cause(v1::CPU_THROTTLING);
      r->set_max_sample_score(3 + unit(rng));
      r->set_max_score(3);
      r->set_first_seen_unix_ms(start);
    }
    for (int s = 0; s < kResends; ++s) {  // 12 syncs over the job's ~7 minutes
      clock.Advance(36'000);
      for (v1::StragglerRecord& r : *health.mutable_stragglers()) {
        r.set_last_seen_unix_ms(clock.NowMillis());
        r.set_windows(s + 1);
      }
      c.Record(ref, health);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the queue drains
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  Result out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.patches = api.Requests("patch");
  out.rss_kb = RssKb() - listed;
  out.listed_kb = listed - before;
  out.marked = c.Marked().size();
  auto nodes = api.List(antdt::kube::NodesResource(), "", {});
  size_t annotated = 0, bytes = 0;
  for (const Json& n : (*nodes)["items"]) {
    const std::string a = antdt::kube::StringAt(
        n, {"metadata", "annotations", antdt::kube_operator::kNodeMemoryAnnotation});
    if (a.empty()) continue;
    ++annotated;
    bytes += a.size();
  }
  out.annotation_bytes = annotated ? bytes / annotated : 0;
  c.Stop();
  return out;
}

}  // namespace

// One mode in a process of its own (its RSS is its own): `--mode Act|Recommend`
// prints one line of figures; without it, runs both and prints the table.
int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--mode") {
    const Result r = Run(std::string(argv[2]) == "Act" ? antdt::vocab::Mode::kAct
                                                       : antdt::vocab::Mode::kRecommend);
    std::printf("%lld %ld %ld %zu %zu %.2f\n", static_cast<long long>(r.patches), r.listed_kb,
                r.rss_kb, r.annotation_bytes, r.marked, r.seconds);
    return 0;
  }
  auto run = [&](const char* mode) {
    Result r;
    const std::string cmd = absl::StrCat(argv[0], " --mode ", mode, " 2>/dev/null");
    FILE* f = popen(cmd.c_str(), "r");
    long long patches = 0;
    if (f == nullptr || std::fscanf(f, "%lld %ld %ld %zu %zu %lf", &patches, &r.listed_kb,
                                    &r.rss_kb, &r.annotation_bytes, &r.marked, &r.seconds) != 6) {
      std::fprintf(stderr, "the %s run printed no figures\n", mode);
    }
    if (f != nullptr) pclose(f);
    r.patches = patches;
    return r;
  };
  std::printf("%d nodes, %d jobs over a simulated day (%d nodes each, %d syncs each)\n", kNodes,
              kJobs, kNodesPerJob, kResends);
  const Result base = run("Recommend");
  const Result act = run("Act");
  std::printf("| what | Recommend (baseline) | Act | ratio |\n|---|---|---|---|\n");
  std::printf("| PATCH nodes/status, total | %lld | %lld | - |\n",
              static_cast<long long>(base.patches), static_cast<long long>(act.patches));
  std::printf("| PATCH per node per day | %.3f | %.3f | - |\n",
              static_cast<double>(base.patches) / kNodes,
              static_cast<double>(act.patches) / kNodes);
  std::printf(
      "| RSS of the 5,000 Nodes listed (the informer's cache) | %ld KB | %ld KB | %.2fx |\n",
      base.listed_kb, act.listed_kb,
      base.listed_kb ? static_cast<double>(act.listed_kb) / base.listed_kb : 0);
  std::printf("| RSS growth over the day (the memory, its queue) | %ld KB | %ld KB | %.2fx |\n",
              base.rss_kb, act.rss_kb,
              base.rss_kb ? static_cast<double>(act.rss_kb) / base.rss_kb : 0);
  std::printf("| annotation per remembered node | - | %zu bytes | - |\n", act.annotation_bytes);
  std::printf("| nodes marked at the end | %zu | %zu | - |\n", base.marked, act.marked);
  std::printf("| wall time | %.1f s | %.1f s | %.2fx |\n", base.seconds, act.seconds,
              act.seconds / base.seconds);
  return 0;
}
