#include "examples/demo/demo_run.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/sharding_client.h"
#include "common/process.h"
#include "common/status.h"

namespace antdt::demo {
namespace {

using Clock = std::chrono::steady_clock;

std::string Tail(const std::string& path, size_t bytes = 2000) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

class ServiceProcess {
 public:
  ServiceProcess(const DemoOptions& o) : o_(o) {}

  absl::Status Start(const std::string& listen) {
    const std::string ready = o_.work_dir + "/service.ready";
    std::filesystem::remove(ready);
    proc_ = std::make_unique<Process>(
        std::vector<std::string>{o_.bin_dir + "/antdt-sharding-service", "--listen", listen,
                                 "--state-dir", o_.work_dir + "/state", "--ready-file", ready,
                                 "--lease-ttl", o_.lease_ttl},
        o_.work_dir + "/service.log");
    auto address = WaitForReadyFile(ready, std::chrono::seconds(30));
    if (!address) {
      return absl::UnavailableError("sharding service did not become ready: " +
                                    Tail(o_.work_dir + "/service.log"));
    }
    address_ = *address;
    return absl::OkStatus();
  }
  absl::Status Restart() { return Start(address_); }  // same port
  void Kill() {
    proc_->Signal(SIGKILL);
    proc_->Wait(std::chrono::seconds(10));
  }
  void Stop() {
    proc_->Signal(SIGTERM);
    if (!proc_->Wait(std::chrono::seconds(10))) Kill();
  }
  const std::string& address() const { return address_; }

 private:
  const DemoOptions& o_;
  std::unique_ptr<Process> proc_;
  std::string address_;
};

struct WorkerSlot {
  std::string id;
  int64_t incarnation = 0;
  std::unique_ptr<Process> proc;
  bool done = false;
};

}  // namespace

absl::StatusOr<DemoResult> RunDemo(const DemoOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.on_event) o.on_event(s);
  };
  std::filesystem::create_directories(o.work_dir);
  std::filesystem::remove_all(o.work_dir + "/state");  // every demo run starts afresh
  const auto start = Clock::now();
  ServiceProcess service(o);
  RETURN_IF_ERROR(service.Start("127.0.0.1:0"));
  say("sharding service serving on " + service.address());

  client::ShardingClientOptions copts;
  copts.job = "demo";
  copts.dataset = "clicks";
  copts.worker_id = "demo-driver";
  client::ShardingClient driver(client::CreateShardingChannel(service.address()), copts);
  v1::DatasetSpec spec;
  spec.set_job(copts.job);
  spec.set_name(copts.dataset);
  spec.set_record_count(o.records);
  spec.set_shard_size(o.shard_size);
  spec.set_epochs(o.epochs);
  spec.set_shuffle(o.shuffle);
  spec.set_seed(o.seed);
  ASSIGN_OR_RETURN(v1::CreateDatasetResponse created, driver.CreateDataset(spec));
  say(absl::StrFormat("dataset demo/clicks: %d records, %d shards, %d epochs", o.records,
                      created.shard_count(), o.epochs));

  std::vector<WorkerSlot> workers(o.workers);
  std::vector<std::string> journals;
  auto spawn = [&](WorkerSlot& w) {
    w.proc = std::make_unique<Process>(
        std::vector<std::string>{o.bin_dir + "/antdt-demo-worker", "--address", service.address(),
                                 "--job", copts.job, "--dataset", copts.dataset, "--worker-id",
                                 w.id, "--incarnation", std::to_string(w.incarnation), "--journal",
                                 o.work_dir + "/" + w.id + ".journal", "--record-us",
                                 std::to_string(o.record_us), "--commit-every",
                                 std::to_string(o.commit_every)},
        o.work_dir + "/" + w.id + ".log");
  };
  for (int i = 0; i < o.workers; ++i) {
    workers[i].id = "worker-" + std::to_string(i);
    journals.push_back(o.work_dir + "/" + workers[i].id + ".journal");
    std::filesystem::remove(journals.back());
    spawn(workers[i]);
  }

  // Kill points: fractions of the whole job, in order; each a worker or the service.
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> at(0.05, 0.9);
  std::vector<std::pair<double, bool>> kills;  // (fraction, is_service)
  for (int i = 0; i < o.worker_kills; ++i) kills.emplace_back(at(rng), false);
  for (int i = 0; i < o.service_kills; ++i) kills.emplace_back(at(rng), true);
  std::sort(kills.begin(), kills.end());
  size_t next_kill = 0;

  DemoResult result;
  const int64_t total = o.records * o.epochs;
  for (;;) {
    bool all_done = true;
    for (WorkerSlot& w : workers) {
      if (w.done) continue;
      if (auto status = w.proc->Wait(std::chrono::milliseconds(0))) {
        if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
          return absl::InternalError(absl::StrCat(w.id, " failed (status ", *status,
                                                  "): ", Tail(o.work_dir + "/" + w.id + ".log")));
        }
        w.done = true;
        say(w.id + " finished");
        continue;
      }
      all_done = false;
    }
    if (all_done) break;
    if (Clock::now() - start > std::chrono::milliseconds(o.timeout_ms)) {
      for (WorkerSlot& w : workers) {
        if (!w.done) w.proc->Signal(SIGKILL);
      }
      service.Kill();
      return absl::DeadlineExceededError("demo: workers did not finish in time");
    }
    auto progress = driver.Progress();
    if (progress.ok()) {
      result.progress = *progress;
      const double fraction =
          static_cast<double>(progress->records_committed_total()) / static_cast<double>(total);
      if (o.on_status) {
        o.on_status(absl::StrFormat(
            "epoch %d/%d  records %d/%d (%.0f%%)  %.0f rec/s  shards todo/doing/done %d/%d/%d  "
            "requeues %d",
            std::min(progress->epoch() + 1, progress->epochs()), progress->epochs(),
            progress->records_committed_total(), total, fraction * 100,
            progress->records_per_second(), progress->shards_todo(), progress->shards_doing(),
            progress->shards_done(), progress->requeues()));
      }
      while (next_kill < kills.size() && fraction >= kills[next_kill].first) {
        if (kills[next_kill].second) {
          say(absl::StrFormat("SIGKILL sharding service at %.0f%% of the job", fraction * 100));
          service.Kill();
          RETURN_IF_ERROR(service.Restart());
          ++result.service_kills;
          say("sharding service restarted on " + service.address());
        } else {
          std::vector<WorkerSlot*> alive;
          for (WorkerSlot& w : workers) {
            if (!w.done) alive.push_back(&w);
          }
          if (!alive.empty()) {
            WorkerSlot& w = *alive[rng() % alive.size()];
            w.proc->Signal(SIGKILL);
            w.proc->Wait(std::chrono::seconds(10));
            ++w.incarnation;
            say(absl::StrFormat("SIGKILL %s at %.0f%% of the job; restarted as incarnation %d",
                                w.id, fraction * 100, w.incarnation));
            spawn(w);
            ++result.worker_kills;
          }
        }
        ++next_kill;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (auto progress = driver.Progress(); progress.ok()) result.progress = *progress;
  service.Stop();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSIGN_OR_RETURN(result.verification, VerifyJournals(journals, o.records, o.epochs));
  return result;
}

}  // namespace antdt::demo
