// antdt-bench-hostile: what heavy and hostile input costs everyone else
// (issue 31), each figure beside a baseline measured in the same run.
//
//   restore  The real antdt-sharding-service; a dataset of N one-record
//            shards is checkpointed and restored while another dataset's lease
//            is renewed every 25 ms (each renewal with a 0.5 s deadline):
//            renewal latency during the Restore against the same renewals with
//            the service idle; whether the lease was held; the service's RSS
//            before, at its peak and after.
//   http     /healthz through the metrics endpoint every AntDT process serves,
//            with 0, 100 and 500 idle connections and 50 half-sent requests
//            open; the baseline is prometheus-cpp's CivetWeb Exposer (what
//            served before), configured as it was, with 40 idle connections.
//
//   antdt-bench-hostile [--restore-shards 10000000] [--skip-restore] [--skip-http]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "antdt/v1/sharding.grpc.pb.h"
#include "common/config.h"
#include "common/process.h"
#include "common/server.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace {

using Clock = std::chrono::steady_clock;
using antdt::v1::ShardingService;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A field of /proc/PID/status in MB ("VmRSS", "VmHWM").
double StatusMb(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      long long kb = 0;
      if (std::sscanf(line.c_str() + field.size() + 1, "%lld", &kb) != 1) return -1;
      return static_cast<double>(kb) / 1024.0;
    }
  }
  return -1;
}

struct Latencies {
  std::vector<double> ms;
  int late = 0;  // over 0.5 s, or failed
  void Add(double v, bool ok) {
    ms.push_back(v);
    if (!ok || v > 500) ++late;
  }
  double Quantile(double q) {
    if (ms.empty()) return 0;
    std::sort(ms.begin(), ms.end());
    return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  }
};

antdt::v1::DatasetRef Ref(const std::string& name) {
  antdt::v1::DatasetRef ref;
  ref.set_job("bench");
  ref.set_name(name);
  return ref;
}

void Restore(const std::string& bin_dir, const std::string& work, int64_t shards) {
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work);
  antdt::Process service({bin_dir + "/antdt-sharding-service", "--listen", "127.0.0.1:0",
                          "--state-dir", work + "/state", "--ready-file", work + "/ready", "--auth",
                          "none", "--lease-ttl", "2s", "--sync", "normal"},
                         work + "/service.log");
  auto address = antdt::WaitForReadyFile(work + "/ready", std::chrono::seconds(60));
  if (!address) {
    std::fprintf(stderr, "service did not start; see %s/service.log\n", work.c_str());
    return;
  }
  auto stub =
      ShardingService::NewStub(grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  auto call = [&](auto method, const auto& req, auto* resp, double deadline_s = 600) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
    return ((*stub).*method)(&ctx, req, resp);
  };
  for (const auto& [name, records, size] :
       {std::tuple<std::string, int64_t, int64_t>{"big", shards, 1}, {"small", 1000, 10}}) {
    antdt::v1::CreateDatasetRequest req;
    req.mutable_spec()->set_job("bench");
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->set_record_count(records);
    req.mutable_spec()->set_shard_size(size);
    req.mutable_spec()->set_epochs(1);
    antdt::v1::CreateDatasetResponse resp;
    if (grpc::Status s = call(&ShardingService::Stub::CreateDataset, req, &resp); !s.ok()) {
      std::fprintf(stderr, "CreateDataset %s: %s\n", name.c_str(), s.error_message().c_str());
      return;
    }
  }
  // Records committed on the big dataset before and after the checkpoint.
  auto commit_some = [&](int n) {
    for (int i = 0; i < n; ++i) {
      antdt::v1::AcquireShardRequest a;
      *a.mutable_dataset() = Ref("big");
      a.set_worker_id("w");
      antdt::v1::AcquireShardResponse lease;
      (void)call(&ShardingService::Stub::AcquireShard, a, &lease);
      antdt::v1::CompleteShardRequest c;
      *c.mutable_dataset() = Ref("big");
      c.set_token(lease.lease().token());
      antdt::v1::CompleteShardResponse done;
      (void)call(&ShardingService::Stub::CompleteShard, c, &done);
    }
  };
  commit_some(100);
  antdt::v1::CheckpointRequest cp;
  *cp.mutable_dataset() = Ref("big");
  cp.set_step(1);
  antdt::v1::CheckpointResponse cp_resp;
  const auto cp0 = Clock::now();
  (void)call(&ShardingService::Stub::Checkpoint, cp, &cp_resp);
  const double checkpoint_s = Ms(Clock::now() - cp0) / 1000;
  commit_some(100);

  antdt::v1::AcquireShardRequest a;
  *a.mutable_dataset() = Ref("small");
  a.set_worker_id("renewer");
  antdt::v1::AcquireShardResponse lease;
  (void)call(&ShardingService::Stub::AcquireShard, a, &lease);
  int64_t done = 0;
  auto renew = [&](Latencies& into) {
    antdt::v1::ReportProgressRequest r;
    *r.mutable_dataset() = Ref("small");
    r.set_token(lease.lease().token());
    r.set_records_done(std::min<int64_t>(++done, 9));
    antdt::v1::ReportProgressResponse resp;
    const auto t0 = Clock::now();
    const bool ok = call(&ShardingService::Stub::ReportProgress, r, &resp, 0.5).ok();
    into.Add(Ms(Clock::now() - t0), ok);
    return ok;
  };
  Latencies idle, during;
  for (int i = 0; i < 40; ++i) {
    renew(idle);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  const pid_t pid = service.pid();
  std::ofstream(absl::StrCat("/proc/", pid, "/clear_refs")) << "5";  // resets VmHWM
  const double rss_before = StatusMb(pid, "VmRSS");
  std::atomic<bool> restoring{true};
  const auto t0 = Clock::now();
  auto restored = std::async(std::launch::async, [&] {
    antdt::v1::RestoreRequest req;
    *req.mutable_dataset() = Ref("big");
    req.set_step(1);
    antdt::v1::RestoreResponse resp;
    grpc::Status s = call(&ShardingService::Stub::Restore, req, &resp);
    restoring = false;
    return s;
  });
  while (restoring) {
    renew(during);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  const grpc::Status s = restored.get();
  const double restore_s = Ms(Clock::now() - t0) / 1000;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double rss_after = StatusMb(pid, "VmRSS");
  const double rss_peak = StatusMb(pid, "VmHWM");
  Latencies last;
  const bool held = renew(last);
  std::printf("restore of %lld one-record shards: %s in %.2f s\n", static_cast<long long>(shards),
              s.ok() ? "OK" : s.error_message().c_str(), restore_s);
  std::printf("  (its Checkpoint took %.2f s)\n", checkpoint_s);
  std::printf("  another dataset's lease renewals   idle: %zu, p50 %.2f ms, max %.2f ms\n",
              idle.ms.size(), idle.Quantile(0.5), idle.Quantile(1));
  std::printf(
      "                               during it: %zu, p50 %.2f ms, max %.2f ms, "
      "%d over 0.5 s or failed; lease held after: %s\n",
      during.ms.size(), during.Quantile(0.5), during.Quantile(1), during.late, held ? "yes" : "NO");
  std::printf("  service RSS: before %.0f MB, peak %.0f MB, after %.0f MB (after/before %.3f)\n",
              rss_before, rss_peak, rss_after, rss_after / rss_before);
}

// Milliseconds for one /healthz with `idle` silent and `half` half-sent
// connections open (-1: no answer).
double HealthzWith(const std::string& address, int idle, int half) {
  std::vector<int> fds;
  for (int i = 0; i < idle; ++i) fds.push_back(antdt::ConnectAndSend(address, ""));
  for (int i = 0; i < half; ++i)
    fds.push_back(antdt::ConnectAndSend(address, "GET /metrics HTTP/1.1\r\nHo"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all accepted
  const auto t0 = Clock::now();
  const bool ok = antdt::HttpGet(address, "/healthz").has_value();
  const double ms = Ms(Clock::now() - t0);
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // all closed server side
  return ok ? ms : -1;
}

void Http() {
  auto registry = std::make_shared<prometheus::Registry>();
  auto ep = antdt::StartMetrics("127.0.0.1:0", registry);
  if (!ep.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ep.status().message()).c_str());
    return;
  }
  // The baseline: CivetWeb as it was configured (8 threads, 2 s request timeout).
  prometheus::Exposer civet(std::vector<std::string>{"listening_ports", "127.0.0.1:0",
                                                     "num_threads", "8", "request_timeout_ms",
                                                     "2000", "keep_alive_timeout_ms", "500"});
  auto health = std::make_shared<prometheus::Registry>();
  civet.RegisterCollectable(health, "/healthz");
  const std::string civet_address = absl::StrCat("127.0.0.1:", civet.GetListeningPorts().front());
  std::printf("/healthz                         AntDT (Beast)   baseline (CivetWeb)\n");
  const double base = HealthzWith(ep->address, 0, 0);
  std::printf("  no other connection            %8.2f ms    %8.2f ms\n", base,
              HealthzWith(civet_address, 0, 0));
  std::printf("  40 idle                        %8.2f ms    %8.2f ms\n",
              HealthzWith(ep->address, 40, 0), HealthzWith(civet_address, 40, 0));
  for (const auto& [idle, half] : {std::pair{100, 0}, {100, 50}, {500, 50}}) {
    const double ms = HealthzWith(ep->address, idle, half);
    std::printf("  %3d idle, %2d half-sent          %8.2f ms    (%.1fx none)\n", idle, half, ms,
                ms / base);
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = antdt::ParseFlags(
      argc, argv, {"bin-dir", "work-dir", "restore-shards", "skip-restore", "skip-http"},
      {"skip-restore", "skip-http"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  std::error_code ec;
  const std::string bin_dir =
      flags->Get("bin-dir", std::filesystem::read_symlink("/proc/self/exe", ec).parent_path());
  const std::string work = flags->Get("work-dir", "/tmp/antdt-bench-hostile");
  int64_t shards = 10'000'000;
  (void)absl::SimpleAtoi(flags->Get("restore-shards", "10000000"), &shards);
  if (!flags->Has("skip-http")) Http();
  if (!flags->Has("skip-restore")) Restore(bin_dir, work, shards);
  return 0;
}
