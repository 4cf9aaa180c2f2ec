#include "workload/demo/demo_run.h"

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

class ServiceProcess {
 public:
  ServiceProcess(const DemoOptions& o) : o_(o) {}

  absl::Status Start(const std::string& listen) {
    const std::string ready = o_.work_dir + "/service.ready";
    std::filesystem::remove(ready);
    proc_ = std::make_unique<Process>(
        std::vector<std::string>{o_.bin_dir + "/antdt-sharding-service", "--listen", listen,
                                 "--state-dir", o_.work_dir + "/state", "--ready-file", ready,
                                 "--lease-ttl", o_.lease_ttl, "--auth", "none"},
        o_.work_dir + "/service.log");
    auto address = WaitForReadyFile(ready, std::chrono::seconds(30));
    if (!address) {
      return absl::UnavailableError("sharding service did not become ready: " +
                                    Tail(o_.work_dir + "/service.log", 2000));
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

// One demo run: the service and its dataset, the workers, the kills at their
// points of the job, the exactly-once check at the end.
class DemoRun {
 public:
  explicit DemoRun(const DemoOptions& o) : o_(o), service_(o), rng_(o.seed) {
    copts_.job = "demo";
    copts_.dataset = "clicks";
    copts_.worker_id = "demo-driver";
  }

  absl::StatusOr<DemoResult> Run() {
    std::filesystem::create_directories(o_.work_dir);
    std::filesystem::remove_all(o_.work_dir + "/state");  // every demo run starts afresh
    start_ = Clock::now();
    std::error_code ec;  // the service's log is appended to: this run's part starts here
    const auto log_from = std::filesystem::file_size(o_.work_dir + "/service.log", ec);
    RETURN_IF_ERROR(StartService());
    StartWorkers();
    PlanKills();
    RETURN_IF_ERROR(Loop());
    if (auto progress = driver_->Progress(); progress.ok()) result_.progress = *progress;
    service_.Stop();
    result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    std::ifstream log(o_.work_dir + "/service.log");
    if (!ec) log.seekg(static_cast<std::streamoff>(log_from));
    for (std::string line; std::getline(log, line);) {
      if (line.find("event=lease_shortened") != std::string::npos) ++result_.leases_shortened;
    }
    ASSIGN_OR_RETURN(result_.verification, VerifyJournals(journals_, o_.records, o_.epochs));
    return result_;
  }

 private:
  void Say(const std::string& s) const {
    if (o_.on_event) o_.on_event(s);
  }

  absl::Status StartService() {
    RETURN_IF_ERROR(service_.Start("127.0.0.1:0"));
    Say("sharding service serving on " + service_.address());
    driver_ = std::make_unique<client::ShardingClient>(
        client::CreateShardingChannel(service_.address()), copts_);
    v1::DatasetSpec spec;
    spec.set_job(copts_.job);
    spec.set_name(copts_.dataset);
    spec.set_record_count(o_.records);
    spec.set_shard_size(o_.shard_size);
    spec.set_epochs(o_.epochs);
    spec.set_shuffle(o_.shuffle);
    spec.set_seed(o_.seed);
    spec.set_min_shard_records(o_.min_shard_records);
    spec.set_workers(o_.workers);
    ASSIGN_OR_RETURN(v1::CreateDatasetResponse created, driver_->CreateDataset(spec));
    Say(absl::StrFormat("dataset demo/clicks: %d records, %d shards, %d epochs", o_.records,
                        created.shard_count(), o_.epochs));
    return absl::OkStatus();
  }

  void Spawn(WorkerSlot& w) {
    w.proc = std::make_unique<Process>(
        std::vector<std::string>{
            o_.bin_dir + "/antdt-demo-worker", "--address", service_.address(), "--job", copts_.job,
            "--dataset", copts_.dataset, "--worker-id", w.id, "--incarnation",
            std::to_string(w.incarnation), "--journal", o_.work_dir + "/" + w.id + ".journal",
            "--record-us",
            std::to_string(w.id == "worker-0" && o_.slow_record_us > 0 ? o_.slow_record_us
                                                                       : o_.record_us),
            "--commit-every", std::to_string(o_.commit_every)},
        o_.work_dir + "/" + w.id + ".log");
  }

  void StartWorkers() {
    workers_.resize(o_.workers);
    for (int i = 0; i < o_.workers; ++i) {
      workers_[i].id = "worker-" + std::to_string(i);
      journals_.push_back(o_.work_dir + "/" + workers_[i].id + ".journal");
      std::filesystem::remove(journals_.back());
      Spawn(workers_[i]);
    }
  }

  // Kill points: fractions of the whole job, in order; each a worker or the service.
  void PlanKills() {
    std::uniform_real_distribution<double> at(0.05, 0.9);
    for (int i = 0; i < o_.worker_kills; ++i) kills_.emplace_back(at(rng_), false);
    for (int i = 0; i < o_.service_kills; ++i) kills_.emplace_back(at(rng_), true);
    std::sort(kills_.begin(), kills_.end());
  }

  // True once every worker exited 0; an error for a worker that failed.
  absl::StatusOr<bool> PollWorkers() {
    bool all_done = true;
    for (WorkerSlot& w : workers_) {
      if (w.done) continue;
      if (auto status = w.proc->Wait(std::chrono::milliseconds(0))) {
        if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
          return absl::InternalError(absl::StrCat(w.id, " failed (status ", *status, "): ",
                                                  Tail(o_.work_dir + "/" + w.id + ".log", 2000)));
        }
        w.done = true;
        Say(w.id + " finished");
        continue;
      }
      all_done = false;
    }
    return all_done;
  }

  absl::Status Loop() {
    for (;;) {
      ASSIGN_OR_RETURN(const bool all_done, PollWorkers());
      if (all_done) return absl::OkStatus();
      if (Clock::now() - start_ > std::chrono::milliseconds(o_.timeout_ms)) {
        for (WorkerSlot& w : workers_) {
          if (!w.done) w.proc->Signal(SIGKILL);
        }
        service_.Kill();
        return absl::DeadlineExceededError("demo: workers did not finish in time");
      }
      if (auto progress = driver_->Progress(); progress.ok()) {
        result_.progress = *progress;
        const double fraction = static_cast<double>(progress->records_committed_total()) /
                                static_cast<double>(o_.records * o_.epochs);
        ShowProgress(*progress, fraction);
        RETURN_IF_ERROR(KillDue(fraction));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  void ShowProgress(const v1::GetProgressResponse& p, double fraction) const {
    if (!o_.on_status) return;
    o_.on_status(absl::StrFormat(
        "epoch %d/%d  records %d/%d (%.0f%%)  %.0f rec/s  shards todo/doing/done %d/%d/%d  "
        "requeues %d",
        std::min(p.epoch() + 1, p.epochs()), p.epochs(), p.records_committed_total(),
        o_.records * o_.epochs, fraction * 100, p.records_per_second(), p.shards_todo(),
        p.shards_doing(), p.shards_done(), p.requeues()));
  }

  // The kills whose point of the job has come: the service is SIGKILLed and
  // restarted, or a random live worker SIGKILLed and started as its next
  // incarnation.
  absl::Status KillDue(double fraction) {
    for (; next_kill_ < kills_.size() && fraction >= kills_[next_kill_].first; ++next_kill_) {
      if (kills_[next_kill_].second) {
        Say(absl::StrFormat("SIGKILL sharding service at %.0f%% of the job", fraction * 100));
        service_.Kill();
        RETURN_IF_ERROR(service_.Restart());
        ++result_.service_kills;
        Say("sharding service restarted on " + service_.address());
        continue;
      }
      std::vector<WorkerSlot*> alive;
      for (WorkerSlot& w : workers_) {
        if (!w.done) alive.push_back(&w);
      }
      if (alive.empty()) continue;
      WorkerSlot& w = *alive[rng_() % alive.size()];
      w.proc->Signal(SIGKILL);
      w.proc->Wait(std::chrono::seconds(10));
      ++w.incarnation;
      Say(absl::StrFormat("SIGKILL %s at %.0f%% of the job; restarted as incarnation %d", w.id,
                          fraction * 100, w.incarnation));
      Spawn(w);
      ++result_.worker_kills;
    }
    return absl::OkStatus();
  }

  const DemoOptions& o_;
  ServiceProcess service_;
  client::ShardingClientOptions copts_;
  std::unique_ptr<client::ShardingClient> driver_;
  std::vector<WorkerSlot> workers_;
  std::vector<std::string> journals_;
  std::mt19937_64 rng_;
  std::vector<std::pair<double, bool>> kills_;  // (fraction, is_service)
  size_t next_kill_ = 0;
  Clock::time_point start_;
  DemoResult result_;
};

}  // namespace

absl::StatusOr<DemoResult> RunDemo(const DemoOptions& o) { return DemoRun(o).Run(); }

}  // namespace antdt::demo
