// The demo trainer end to end: the real sharding service, one parameter
// server and three workers on 127.0.0.1; one worker is SIGKILLed mid-run and
// restarted with a higher incarnation. Every record must be committed exactly
// once (the workers' journals) and the model must have learned (the PS's loss).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "antdt/v1/trainer.grpc.pb.h"
#include "client/sharding_client.h"
#include "common/testing/testing.h"
#include "examples/demo/journal.h"

namespace antdt {
namespace {

using antdt::testing::BinPath;
using antdt::testing::Process;
using antdt::testing::TempDir;
using antdt::testing::WaitFor;
using antdt::testing::WaitForReadyFile;
using std::chrono::seconds;

constexpr int64_t kRecords = 4000;
constexpr int kWorkers = 3;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int CountLines(const std::string& path, const std::string& prefix) {
  std::istringstream in(Read(path));
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(TrainerIntegrationTest, TrainsAndCommitsEveryRecordOnceThroughAWorkerKill) {
  TempDir dir;
  Process service({BinPath("antdt-sharding-service"), "--listen", "127.0.0.1:0", "--state-dir",
                   dir.File("state"), "--ready-file", dir.File("service.ready")},
                  dir.File("service.log"));
  auto sharding = WaitForReadyFile(dir.File("service.ready"), seconds(30));
  ASSERT_TRUE(sharding) << Read(dir.File("service.log"));
  client::ShardingClientOptions admin_options;
  admin_options.job = "ctr";
  admin_options.dataset = "train";
  admin_options.worker_id = "test";
  client::ShardingClient admin(client::CreateShardingChannel(*sharding), admin_options);
  v1::DatasetSpec spec;
  spec.set_job("ctr");
  spec.set_name("train");
  spec.set_record_count(kRecords);
  spec.set_shard_size(100);
  spec.set_epochs(1);
  spec.set_shuffle(true);
  spec.set_seed(3);
  ASSERT_TRUE(admin.CreateDataset(spec).ok());

  Process ps({BinPath("antdt-ps"), "--listen", "127.0.0.1:0", "--ready-file", dir.File("ps.ready"),
              "--id", "ps-0", "--features", "16", "--workers", std::to_string(kWorkers),
              "--learning-rate", "1", "--step-timeout", "1s", "--log-every-steps", "10"},
             dir.File("ps.log"));
  auto ps_address = WaitForReadyFile(dir.File("ps.ready"), seconds(30));
  ASSERT_TRUE(ps_address) << Read(dir.File("ps.log"));

  auto journal = [&](int w) { return dir.File("worker-" + std::to_string(w) + ".journal"); };
  auto log = [&](int w) { return dir.File("worker-" + std::to_string(w) + ".log"); };
  auto start = [&](int w, int incarnation) {
    const std::vector<std::string> argv = {BinPath("antdt-trainer-worker"),
                                           "--sharding",
                                           *sharding,
                                           "--job",
                                           "ctr",
                                           "--dataset",
                                           "train",
                                           "--ps",
                                           *ps_address,
                                           "--features",
                                           "16",
                                           "--local-batch",
                                           "50",
                                           "--device-us-per-sample",
                                           "1000",
                                           "--log-every-steps",
                                           "5",
                                           "--worker-id",
                                           "worker-" + std::to_string(w),
                                           "--incarnation",
                                           std::to_string(incarnation),
                                           "--journal",
                                           journal(w)};
    return std::make_unique<Process>(argv, log(w));
  };
  std::vector<std::unique_ptr<Process>> workers;
  for (int w = 0; w < kWorkers; ++w) workers.push_back(start(w, 0));

  // SIGKILL worker-1 once it has committed a few batches, then restart it.
  ASSERT_TRUE(WaitFor([&] { return CountLines(journal(1), "A ") >= 3; }, seconds(60)))
      << Read(log(1));
  workers[1]->Signal(SIGKILL);
  ASSERT_TRUE(workers[1]->Wait(seconds(10)));
  auto progress = admin.Progress();
  ASSERT_TRUE(progress.ok()) << progress.status();
  ASSERT_FALSE(progress->finished()) << "the run ended before the kill: make it longer";
  workers[1] = start(1, 1);

  for (int w = 0; w < kWorkers; ++w) {
    auto status = workers[w]->Wait(seconds(120));
    ASSERT_TRUE(status) << "worker-" << w << " still running:\n" << Read(log(w));
    ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "worker-" << w << " failed:\n"
                                                                 << Read(log(w));
  }
  EXPECT_NE(Read(log(1)).find("incarnation=1"), std::string::npos) << Read(log(1));

  auto verification =
      demo::VerifyJournals({journal(0), journal(1), journal(2)}, kRecords, /*epochs=*/1);
  ASSERT_TRUE(verification.ok()) << verification.status();
  EXPECT_TRUE(verification->exactly_once()) << verification->Summary();
  for (const auto& [name, records] : verification->per_journal) {
    EXPECT_GT(records, 0) << name << " committed nothing\n" << verification->Summary();
  }

  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(*ps_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::ParameterServerStats stats;
  ASSERT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &stats).ok());
  EXPECT_NEAR(stats.first_mean_loss(), std::log(2.0), 1e-6);  // the untrained model
  // The last step's loss, over as few as 50 samples: noisy, but far below the start.
  EXPECT_LT(stats.mean_loss(), stats.first_mean_loss()) << Read(dir.File("ps.log"));
  EXPECT_GE(stats.samples(), kRecords / 2);
  EXPECT_GT(stats.step(), 10);

  ps.Signal(SIGTERM);
  auto ps_status = ps.Wait(seconds(10));
  ASSERT_TRUE(ps_status);
  EXPECT_TRUE(WIFEXITED(*ps_status) && WEXITSTATUS(*ps_status) == 0) << Read(dir.File("ps.log"));
  EXPECT_NE(Read(dir.File("ps.log")).find("event=stopped"), std::string::npos);
  service.Signal(SIGTERM);
  service.Wait(seconds(10));
}

}  // namespace
}  // namespace antdt
