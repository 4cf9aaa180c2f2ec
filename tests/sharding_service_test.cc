// The real antdt-sharding-service binary on 127.0.0.1 with real clients.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "client/sharding_client.h"
#include "common/testing/testing.h"
#include "health_probe.grpc.pb.h"

namespace antdt {
namespace {

using antdt::testing::BinPath;
using antdt::testing::Process;
using antdt::testing::TempDir;

class ServiceTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}, const std::string& listen = "127.0.0.1:0") {
    std::filesystem::remove(dir_.File("ready"));
    std::vector<std::string> argv = {BinPath("antdt-sharding-service"),
                                     "--listen",
                                     listen,
                                     "--state-dir",
                                     dir_.File("state"),
                                     "--ready-file",
                                     dir_.File("ready"),
                                     "--metrics-listen",
                                     "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<Process>(argv, dir_.File("service.log"));
    auto address = antdt::testing::WaitForReadyFile(dir_.File("ready"), std::chrono::seconds(30));
    ASSERT_TRUE(address) << "not ready; log:\n" << Log();
    address_ = *address;
    metrics_ = antdt::testing::ReadyFileField(dir_.File("ready"), "metrics").value_or("");
    channel_ = client::CreateShardingChannel(address_);
  }

  std::string Log() {
    std::ifstream in(dir_.File("service.log"));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  client::ShardingClient Client(const std::string& worker, int64_t incarnation = 0) {
    client::ShardingClientOptions o;
    o.job = "job";
    o.dataset = "data";
    o.worker_id = worker;
    o.incarnation = incarnation;
    o.retry_budget_ms = 20'000;
    return client::ShardingClient(channel_, o);
  }

  v1::DatasetSpec Spec() {
    v1::DatasetSpec spec;
    spec.set_job("job");
    spec.set_name("data");
    spec.set_record_count(1000);
    spec.set_shard_size(100);
    spec.set_epochs(1);
    return spec;
  }

  TempDir dir_;
  std::unique_ptr<Process> proc_;
  std::string address_;
  std::string metrics_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ServiceTest, ServesHealthAndMetrics) {
  Start();
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  auto client = Client("w");
  ASSERT_TRUE(client.CreateDataset(Spec()).ok());
  auto lease = client.Acquire();
  ASSERT_TRUE(lease.ok() && *lease);
  ASSERT_TRUE(client.Complete(**lease).ok());
  ASSERT_FALSE(metrics_.empty());
  auto body = antdt::testing::HttpGet(metrics_, "/metrics");
  ASSERT_TRUE(body);
  for (const char* want : {
           "antdt_sharding_shards{job=\"job\",dataset=\"data\",state=\"done\"} 1",
           "antdt_sharding_shards{job=\"job\",dataset=\"data\",state=\"todo\"} 9",
           "antdt_sharding_records_committed{job=\"job\",dataset=\"data\"} 100",
           "antdt_sharding_acquire_latency_seconds_count 1",
           "antdt_sharding_requeues_total{job=\"job\",dataset=\"data\"} 0",
           "antdt_sharding_lease_expirations_total{job=\"job\",dataset=\"data\"} 0",
           "antdt_sharding_rpcs_total{code=\"OK\",method=\"CompleteShard\"} 1",
       }) {
    EXPECT_NE(body->find(want), std::string::npos) << want << "\n" << *body;
  }
  EXPECT_TRUE(antdt::testing::HttpGet(metrics_, "/healthz"));
}

TEST_F(ServiceTest, MetricsPassPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (scripts/install-deps.sh installs it)";
  }
  Start();
  auto client = Client("w");
  ASSERT_TRUE(client.CreateDataset(Spec()).ok());
  auto lease = client.Acquire();
  ASSERT_TRUE(lease.ok() && *lease);
  auto body = antdt::testing::HttpGet(metrics_, "/metrics");
  ASSERT_TRUE(body);
  {
    std::ofstream out(dir_.File("metrics.txt"));
    out << *body;
  }
  const std::string cmd = "promtool check metrics < " + dir_.File("metrics.txt") + " > " +
                          dir_.File("promtool.txt") + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(dir_.File("promtool.txt"));
  std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << report;
  EXPECT_EQ(report, "") << report;
}

TEST_F(ServiceTest, KillNineLosesNothingAcknowledged) {
  Start();
  auto client = Client("w");
  ASSERT_TRUE(client.CreateDataset(Spec()).ok());
  std::set<int64_t> acked;
  client::ShardLease held;
  for (int i = 0; i < 4; ++i) {
    auto lease = client.Acquire();
    ASSERT_TRUE(lease.ok() && *lease);
    held = **lease;
    if (i < 3) {
      ASSERT_TRUE(client.Complete(held).ok());
    } else {
      ASSERT_TRUE(client.ReportProgress(held, 37).ok());
    }
  }
  proc_->Signal(SIGKILL);
  ASSERT_TRUE(proc_->Wait(std::chrono::seconds(10)));
  Start({}, address_);  // same port, same state
  auto progress = client.Progress();
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->records_committed_epoch(), 337);
  EXPECT_EQ(progress->shards_done(), 3);
  EXPECT_EQ(progress->shards_doing(), 1);
  // The restarted worker gets its shard back after record 37.
  auto again = Client("w", 1);
  auto lease = again.Acquire();
  ASSERT_TRUE(lease.ok() && *lease);
  EXPECT_EQ((*lease)->shard.index(), held.shard.index());
  EXPECT_EQ((*lease)->shard.committed(), 37);
  EXPECT_EQ((*lease)->shard.start(), held.shard.start() + 37);
}

TEST_F(ServiceTest, ClientRidesOutARestart) {
  Start();
  auto client = Client("w");
  ASSERT_TRUE(client.CreateDataset(Spec()).ok());
  proc_->Signal(SIGKILL);
  ASSERT_TRUE(proc_->Wait(std::chrono::seconds(10)));
  const std::string address = address_;
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Start({}, address);
  });
  auto lease = client.Acquire();  // retries with backoff until the service is back
  restart.join();
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(lease->has_value());
}

TEST_F(ServiceTest, BadInputNamesTheFieldOverTheWire) {
  Start();
  auto stub = v1::ShardingService::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::CreateDatasetRequest req;
  *req.mutable_spec() = Spec();
  req.mutable_spec()->set_shard_size(0);
  v1::CreateDatasetResponse resp;
  grpc::Status s = stub->CreateDataset(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.shard_size"), std::string::npos);
  grpc::ClientContext ctx2;
  v1::AcquireShardRequest acq;
  acq.mutable_dataset()->set_job("job");
  acq.mutable_dataset()->set_name("missing");
  acq.set_worker_id("w");
  v1::AcquireShardResponse aresp;
  s = stub->AcquireShard(&ctx2, acq, &aresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("missing"), std::string::npos);
}

TEST_F(ServiceTest, StopsCleanlyOnSigterm) {
  Start();
  proc_->Signal(SIGTERM);
  auto status = proc_->Wait(std::chrono::seconds(15));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_NE(Log().find("event=stopped"), std::string::npos);
}

TEST(ServiceFlags, BadFlagsExitWithTheFieldNamed) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string want;
  } cases[] = {
      {{"--listen", "nowhere"}, "listen"},
      {{"--lease-ttl", "5"}, "--lease-ttl"},
      {{"--bogus", "1"}, "--bogus"},
      {{"--config", dir.File("missing.yaml")}, "--config"},
      // After the lease reaper started: it is stopped, not left to std::terminate.
      {{"--listen", "127.0.0.1:0", "--ready-file", dir.File("missing/ready")}, "cannot write"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {BinPath("antdt-sharding-service"), "--state-dir",
                                     dir.File("s")};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Process p(argv, dir.File("log"));
    auto status = p.Wait(std::chrono::seconds(10));
    ASSERT_TRUE(status);
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << "status " << *status;
    std::ifstream in(dir.File("log"));
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(log.find(c.want), std::string::npos) << log;
    std::filesystem::remove(dir.File("log"));
  }
}

}  // namespace
}  // namespace antdt
