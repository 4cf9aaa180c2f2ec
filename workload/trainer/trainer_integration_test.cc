// The demo trainer end to end: the real sharding service, one parameter
// server and three workers on 127.0.0.1; one worker is SIGKILLed mid-run and
// restarted with a higher incarnation. Every record must be committed exactly
// once (the workers' journals) and the model must have learned (the PS's loss).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "antdt/v1/sharding.grpc.pb.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "client/sharding_client.h"
#include "common/credential.h"
#include "common/testing/testing.h"
#include "workload/demo/journal.h"
#include "workload/trainer/ps_checkpoint.h"

namespace antdt {
namespace {

using antdt::testing::BinPath;
using antdt::testing::Process;
using antdt::testing::ReadyFileField;
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

// Job ctr's dataset train: kRecords records in shards of 100, shuffled.
v1::DatasetSpec CtrDataset() {
  v1::DatasetSpec spec;
  spec.set_job("ctr");
  spec.set_name("train");
  spec.set_record_count(kRecords);
  spec.set_shard_size(100);
  spec.set_epochs(1);
  spec.set_shuffle(true);
  spec.set_seed(3);
  return spec;
}

// The test's own client of job ctr's dataset at the sharding service `address`.
client::ShardingClient CtrAdmin(const std::string& address) {
  client::ShardingClientOptions o;
  o.job = "ctr";
  o.dataset = "train";
  o.worker_id = "test";
  return client::ShardingClient(client::CreateShardingChannel(address), o);
}

// The demo trainer's worker `w` (incarnation `incarnation`) on job ctr's
// dataset train, 16 features over the servers `ps` (comma-separated).
std::vector<std::string> WorkerArgv(const std::string& sharding, const std::string& ps, int w,
                                    int incarnation, const std::string& journal) {
  return {BinPath("antdt-trainer-worker"),
          "--sharding",
          sharding,
          "--job",
          "ctr",
          "--dataset",
          "train",
          "--ps",
          ps,
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
          journal};
}

// Steps every server of the test has a checkpoint of.
std::optional<int64_t> LatestCommon(const std::string& dir) {
  return trainer::LatestCommonCheckpoint(dir, {"ps-0", "ps-1"});
}
int64_t CheckpointsOfPs1(const std::string& dir) {
  return static_cast<int64_t>(trainer::CheckpointSteps(dir, "ps-1").size());
}

TEST(TrainerIntegrationTest, TrainsAndCommitsEveryRecordOnceThroughAWorkerKill) {
  TempDir dir;
  Process service({BinPath("antdt-sharding-service"), "--listen", "127.0.0.1:0", "--state-dir",
                   dir.File("state"), "--ready-file", dir.File("service.ready"), "--auth", "none"},
                  dir.File("service.log"));
  auto sharding = WaitForReadyFile(dir.File("service.ready"), seconds(30));
  ASSERT_TRUE(sharding) << Read(dir.File("service.log"));
  client::ShardingClient admin = CtrAdmin(*sharding);
  ASSERT_TRUE(admin.CreateDataset(CtrDataset()).ok());

  Process ps({BinPath("antdt-ps"), "--listen", "127.0.0.1:0", "--ready-file", dir.File("ps.ready"),
              "--id", "ps-0", "--features", "16", "--workers", std::to_string(kWorkers),
              "--learning-rate", "1", "--step-timeout", "1s", "--log-every-steps", "10"},
             dir.File("ps.log"));
  auto ps_address = WaitForReadyFile(dir.File("ps.ready"), seconds(30));
  ASSERT_TRUE(ps_address) << Read(dir.File("ps.log"));

  auto journal = [&](int w) { return dir.File("worker-" + std::to_string(w) + ".journal"); };
  auto log = [&](int w) { return dir.File("worker-" + std::to_string(w) + ".log"); };
  auto start = [&](int w, int incarnation) {
    const std::vector<std::string> argv =
        WorkerArgv(*sharding, *ps_address, w, incarnation, journal(w));
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

// A server given the job's credential refuses every call without it
// (UNAUTHENTICATED) or with another (PERMISSION_DENIED), changing nothing, and
// logs the refusal without the token.
TEST(ParameterServerAuthTest, RefusesCallsWithoutTheJobsCredential) {
  TempDir dir;
  const std::string token = "job-credential-7f3a";
  std::ofstream(dir.File("token")) << token << "\n";
  Process ps(
      {BinPath("antdt-ps"), "--listen", "127.0.0.1:0", "--ready-file", dir.File("ps.ready"), "--id",
       "ps-0", "--features", "4", "--workers", "1", "--token-file", dir.File("token")},
      dir.File("ps.log"));
  auto address = WaitForReadyFile(dir.File("ps.ready"), seconds(30));
  ASSERT_TRUE(address) << Read(dir.File("ps.log"));
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  v1::PushGradientRequest push;
  push.set_worker_id("w0");
  push.set_samples(1);
  for (int i = 0; i < 4; ++i) push.add_gradient(1.0f);
  v1::HandoffRequest handoff;
  handoff.set_moved_to("127.0.0.1:9");
  handoff.set_timeout_ms(1000);
  for (const std::string& sent : {std::string(), std::string("another-job")}) {
    const grpc::StatusCode want =
        sent.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::PERMISSION_DENIED;
    grpc::ClientContext c1, c2, c3;
    AddCredential(c1, sent);
    AddCredential(c2, sent);
    AddCredential(c3, sent);
    v1::PushGradientResponse pushed;
    v1::ParameterServerState state;
    v1::ParameterServerStats stats;
    EXPECT_EQ(stub->PushGradient(&c1, push, &pushed).error_code(), want);
    EXPECT_EQ(stub->Handoff(&c2, handoff, &state).error_code(), want);
    EXPECT_EQ(stub->Stats(&c3, v1::StatsRequest(), &stats).error_code(), want);
  }
  // Nothing changed: the server is not moved and took no gradient.
  grpc::ClientContext ok1, ok2;
  AddCredential(ok1, token);
  AddCredential(ok2, token);
  v1::PushGradientResponse pushed;
  ASSERT_TRUE(stub->PushGradient(&ok1, push, &pushed).ok());
  EXPECT_TRUE(pushed.accepted());
  v1::ParameterServerStats stats;
  ASSERT_TRUE(stub->Stats(&ok2, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.samples(), 1);
  const std::string log = Read(dir.File("ps.log"));
  EXPECT_NE(log.find("event=auth_refused"), std::string::npos) << log;
  EXPECT_EQ(log.find(token), std::string::npos) << "the token was logged";
}

// A worker told to compute a share of its device time is refused, naming the
// flag, where the share is outside (0, 1] or its device time is spent asleep.
TEST(TrainerWorkerFlagsTest, ADeviceCpuShareNeedsCpuWorkAndAShareUpToOne) {
  TempDir dir;
  const std::vector<std::string> base = {BinPath("antdt-trainer-worker"),
                                         "--sharding",
                                         "127.0.0.1:9",
                                         "--job",
                                         "j",
                                         "--dataset",
                                         "d",
                                         "--worker-id",
                                         "worker-0",
                                         "--journal",
                                         dir.File("journal"),
                                         "--ps",
                                         "127.0.0.1:9",
                                         "--features",
                                         "4",
                                         "--device-us-per-sample",
                                         "100"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--device-cpu-share", "0.1"}, "--device-cpu-share: needs --device-work cpu"},
      {{"--device-work", "cpu", "--device-cpu-share", "0"},
       "--device-cpu-share: must be a number in (0, 1]"},
      {{"--device-work", "cpu", "--device-cpu-share", "1.5"},
       "--device-cpu-share: must be a number in (0, 1]"},
      {{"--device-work", "cpu", "--device-cpu-share", "a tenth"},
       "--device-cpu-share: must be a number in (0, 1]"},
  };
  int i = 0;
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    const std::string log = dir.File("w" + std::to_string(i++) + ".log");
    Process worker(argv, log);
    const std::optional<int> status = worker.Wait(seconds(10));
    ASSERT_TRUE(status) << message;
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << message;
    EXPECT_NE(Read(log).find(message), std::string::npos) << Read(log);
    EXPECT_FALSE(std::ifstream(dir.File("journal")).good()) << "a refused worker wrote its journal";
  }
}

// A server told to take over one that no longer answers starts from its own
// newest checkpoint when it may (--restore-step latest), and fails saying so
// when it may not.
TEST(ParameterServerStartTest, ATakeOverThatCannotHappenFallsBackToTheNewestCheckpoint) {
  TempDir dir;
  trainer::PsState state;
  state.step = 40;
  state.parameters = {0.5f, -0.5f};
  state.samples = 1234;
  ASSERT_TRUE(trainer::WriteCheckpoint(dir.File("ckpt"), "ps-0", state, 3).ok());
  auto start = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinPath("antdt-ps"),
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     dir.File(name),
                                     "--features",
                                     "2",
                                     "--workers",
                                     "1",
                                     "--checkpoint-dir",
                                     dir.File("ckpt"),
                                     "--take-over",
                                     "127.0.0.1:1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(argv, dir.File(name + ".log"));
  };
  auto strict = start("strict", {});
  auto status = strict->Wait(seconds(90));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0);
  EXPECT_NE(Read(dir.File("strict.log")).find("--take-over 127.0.0.1:1"), std::string::npos)
      << Read(dir.File("strict.log"));

  auto fallback = start("fallback", {"--restore-step", "latest"});
  auto address = WaitForReadyFile(dir.File("fallback"), seconds(90));
  ASSERT_TRUE(address) << Read(dir.File("fallback.log"));
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::ParameterServerStats stats;
  ASSERT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.step(), 40);
  EXPECT_EQ(stats.samples(), 1234);
  const std::string log = Read(dir.File("fallback.log"));
  EXPECT_NE(log.find("event=take_over_failed"), std::string::npos) << log;
  EXPECT_NE(log.find("event=restored ps=ps-0 step=40 from=checkpoint"), std::string::npos) << log;
}

// With --agent, a server reports each step's own time to its node's agent as
// role "ps" (so the Monitor scores it directly), with the job's credential.
TEST(ParameterServerStartTest, ReportsItsStepTimesToTheNodesAgent) {
  TempDir dir;
  Process agent({BinPath("antdt-agent"), "--node", "n", "--listen", "127.0.0.1:0",
                 "--metrics-listen", "127.0.0.1:0", "--ready-file", dir.File("agent.ready")},
                dir.File("agent.log"));
  auto agent_address = WaitForReadyFile(dir.File("agent.ready"), seconds(30));
  ASSERT_TRUE(agent_address) << Read(dir.File("agent.log"));
  const std::string metrics = ReadyFileField(dir.File("agent.ready"), "metrics").value_or("");
  ASSERT_FALSE(metrics.empty());
  Process ps({BinPath("antdt-ps"), "--listen", "127.0.0.1:0", "--ready-file", dir.File("ps.ready"),
              "--id", "ps-0", "--features", "1", "--workers", "1", "--agent", *agent_address,
              "--job", "ctr", "--namespace", "team"},
             dir.File("ps.log"));
  auto address = WaitForReadyFile(dir.File("ps.ready"), seconds(30));
  ASSERT_TRUE(address) << Read(dir.File("ps.log"));
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  for (int64_t step = 0; step < 3; ++step) {
    grpc::ClientContext ctx;
    v1::PushGradientRequest req;
    req.set_worker_id("w0");
    req.set_step(step);
    req.set_samples(1);
    req.add_gradient(1.0f);
    v1::PushGradientResponse resp;
    ASSERT_TRUE(stub->PushGradient(&ctx, req, &resp).ok());
  }
  // Reports go in batches; the server sends what is left as it stops.
  ps.Signal(SIGTERM);
  ASSERT_TRUE(ps.Wait(seconds(10)));
  const std::string series =
      "antdt_worker_steps_total{job=\"ctr\",namespace=\"team\",role=\"ps\",worker=\"ps-0\"} 3";
  std::string text;
  EXPECT_TRUE(WaitFor(
      [&] {
        text = antdt::testing::HttpGet(metrics, "/metrics").value_or("");
        return text.find(series) != std::string::npos;
      },
      seconds(10)))
      << text;
  // --agent without --job is refused, naming the flag.
  Process bad({BinPath("antdt-ps"), "--features", "1", "--workers", "1", "--agent", *agent_address},
              dir.File("bad.log"));
  auto status = bad.Wait(seconds(30));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2);
  EXPECT_NE(Read(dir.File("bad.log")).find("--agent: needs --job"), std::string::npos);
}

// A job of the demo trainer on 127.0.0.1: the sharding service, two
// parameter servers (ps-0 also checkpoints the sharding service) checkpointing
// every 5 steps, three workers.
class ServerMoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<Process>(
        std::vector<std::string>{BinPath("antdt-sharding-service"), "--listen", "127.0.0.1:0",
                                 "--state-dir", dir_.File("state"), "--ready-file",
                                 dir_.File("service.ready"), "--auth", "none"},
        dir_.File("service.log"));
    auto sharding = WaitForReadyFile(dir_.File("service.ready"), seconds(30));
    ASSERT_TRUE(sharding) << Read(dir_.File("service.log"));
    sharding_ = *sharding;
    admin_ = std::make_unique<client::ShardingClient>(CtrAdmin(sharding_));
    ASSERT_TRUE(admin_->CreateDataset(CtrDataset()).ok());
    for (int k = 0; k < 2; ++k) {
      std::vector<std::string> extra;
      if (k == 0) extra = {"--sharding", sharding_, "--job", "ctr", "--dataset", "train"};
      ps_.push_back(StartServer(k, "", extra));
      ASSERT_TRUE(ps_.back().proc) << Read(dir_.File("ps-" + std::to_string(k) + ".log"));
    }
    for (int w = 0; w < kWorkers; ++w) {
      workers_.push_back(std::make_unique<Process>(
          WorkerArgv(sharding_, ps_[0].address + "," + ps_[1].address, w, 0, Journal(w)), Log(w)));
    }
  }

  struct Server {
    std::unique_ptr<Process> proc;
    std::string address;
  };

  // Server k (the `n`-th of its name), on `listen` (empty: a free port).
  Server StartServer(int k, const std::string& listen, std::vector<std::string> extra, int n = 0) {
    const std::string name = "ps-" + std::to_string(k) + (n > 0 ? "." + std::to_string(n) : "");
    std::vector<std::string> argv = {BinPath("antdt-ps"),
                                     "--listen",
                                     listen.empty() ? "127.0.0.1:0" : listen,
                                     "--ready-file",
                                     dir_.File(name + ".ready"),
                                     "--id",
                                     "ps-" + std::to_string(k),
                                     "--features",
                                     "8",
                                     "--workers",
                                     std::to_string(kWorkers),
                                     "--learning-rate",
                                     "1",
                                     "--step-timeout",
                                     "20s",
                                     "--log-every-steps",
                                     "10",
                                     "--checkpoint-dir",
                                     dir_.File("checkpoints"),
                                     "--checkpoint-every-steps",
                                     "5"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Server s;
    s.proc = std::make_unique<Process>(argv, dir_.File(name + ".log"));
    auto address = WaitForReadyFile(dir_.File(name + ".ready"), seconds(90));
    if (!address) return {};
    s.address = *address;
    return s;
  }

  std::string Journal(int w) const { return dir_.File("worker-" + std::to_string(w) + ".journal"); }
  std::string Log(int w) const { return dir_.File("worker-" + std::to_string(w) + ".log"); }

  v1::ParameterServerStats Stats(const std::string& address) {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::ParameterServerStats stats;
    EXPECT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &stats).ok());
    return stats;
  }

  void WaitForWorkers() {
    for (int w = 0; w < kWorkers; ++w) {
      auto status = workers_[w]->Wait(seconds(180));
      ASSERT_TRUE(status) << "worker-" << w << " still running:\n" << Read(Log(w));
      ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "worker-" << w << " failed:\n"
                                                                   << Read(Log(w));
    }
  }

  void ExpectExactlyOnce(std::vector<std::string> journals) {
    for (int w = 0; w < kWorkers; ++w) journals.push_back(Journal(w));
    auto verification = demo::VerifyJournals(journals, kRecords, /*epochs=*/1);
    ASSERT_TRUE(verification.ok()) << verification.status();
    EXPECT_TRUE(verification->exactly_once()) << verification->Summary();
  }

  TempDir dir_;
  std::unique_ptr<Process> service_;
  std::string sharding_;
  std::unique_ptr<client::ShardingClient> admin_;
  std::vector<Server> ps_;
  std::vector<std::unique_ptr<Process>> workers_;
};

TEST_F(ServerMoveTest, ASlowServerMovesLiveAtAStepBoundaryAndNoUpdateIsLost) {
  ASSERT_TRUE(WaitFor([&] { return CountLines(Journal(0), "A ") >= 5; }, seconds(60)))
      << Read(Log(0));
  // The new ps-1 takes the old one's state at a step boundary; the old one
  // sends the workers on.
  Server moved = StartServer(1, "", {"--take-over", ps_[1].address}, 1);
  ASSERT_TRUE(moved.proc) << Read(dir_.File("ps-1.1.log"));
  const std::string old_log = Read(dir_.File("ps-1.log"));
  EXPECT_NE(old_log.find("event=handed_off"), std::string::npos) << old_log;
  ASSERT_FALSE(admin_->Progress()->finished()) << "the run ended before the move: make it longer";
  // Once a step completed on the new server every worker has followed it:
  // the old one stops.
  const int64_t moved_at = Stats(moved.address).step();
  ASSERT_TRUE(WaitFor([&] { return Stats(moved.address).step() > moved_at; }, seconds(60)));
  ps_[1].proc->Signal(SIGTERM);
  ASSERT_TRUE(ps_[1].proc->Wait(seconds(10)));
  WaitForWorkers();
  ExpectExactlyOnce({});
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_NE(Read(Log(w)).find("event=ps_moved"), std::string::npos) << Read(Log(w));
  }
  // No update lost or doubled in the move: both slices averaged the same
  // samples over the same steps.
  const v1::ParameterServerStats first = Stats(ps_[0].address);
  const v1::ParameterServerStats second = Stats(moved.address);
  EXPECT_EQ(second.samples(), first.samples());
  EXPECT_EQ(second.step(), first.step());
  EXPECT_EQ(first.samples(), kRecords);
  EXPECT_LT(second.mean_loss(), second.first_mean_loss());
}

TEST_F(ServerMoveTest, AKilledServerIsRestoredFromTheLastCheckpointAndEveryRecordCommittedOnce) {
  // SIGKILL ps-1 two or three steps past a checkpoint (every 5 steps): the
  // records of the step at the checkpoint are committed by then (a worker
  // commits a step's records before it pushes the next), so the restore has
  // commits to undo, and the next checkpoint is still steps away.
  ASSERT_TRUE(WaitFor(
      [&] {
        if (CheckpointsOfPs1(dir_.File("checkpoints")) < 2) return false;
        const int64_t step = Stats(ps_[0].address).step();
        return step % 5 == 2 || step % 5 == 3;
      },
      seconds(60)))
      << Read(Log(0));
  ps_[1].proc->Signal(SIGKILL);
  ASSERT_TRUE(ps_[1].proc->Wait(seconds(10)));
  ASSERT_FALSE(admin_->Progress()->finished()) << "the run ended before the kill: make it longer";
  // The newest step both servers have: ps-1 back from it on its address,
  // ps-0 back to it, then the data position.
  const std::optional<int64_t> step = LatestCommon(dir_.File("checkpoints"));
  ASSERT_TRUE(step.has_value());
  Server restored = StartServer(1, ps_[1].address, {"--restore-step", std::to_string(*step)}, 1);
  ASSERT_TRUE(restored.proc) << Read(dir_.File("ps-1.1.log"));
  {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(ps_[0].address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::RestoreCheckpointRequest req;
    req.set_step(*step);
    v1::ParameterServerState state;
    ASSERT_TRUE(stub->RestoreCheckpoint(&ctx, req, &state).ok());
    EXPECT_EQ(state.step(), *step);
  }
  auto stub = v1::ShardingService::NewStub(client::CreateShardingChannel(sharding_));
  grpc::ClientContext ctx;
  v1::RestoreRequest req;
  req.mutable_dataset()->set_job("ctr");
  req.mutable_dataset()->set_name("train");
  req.set_step(*step);
  v1::RestoreResponse resp;
  ASSERT_TRUE(stub->Restore(&ctx, req, &resp).ok());
  auto restores = demo::Journal::Open(dir_.File("restores.journal"));
  ASSERT_TRUE(restores.ok());
  int64_t undone = 0;
  for (const v1::RolledBack& rb : resp.rolled_back()) {
    restores->RolledBack(rb.epoch(), {rb.record_ids().begin(), rb.record_ids().end()});
    undone += rb.record_ids_size();
  }
  EXPECT_GT(undone, 0) << "nothing committed after the checkpoint: the test proves nothing";
  WaitForWorkers();
  ExpectExactlyOnce({dir_.File("restores.journal")});
  // Both servers trained on from the restored step. (Not necessarily to the
  // same step: a push in flight at the crash may complete a step on one
  // server that the other had already discarded; docs/local-runner.md.)
  const v1::ParameterServerStats first = Stats(ps_[0].address);
  const v1::ParameterServerStats second = Stats(restored.address);
  EXPECT_GT(first.step(), *step + 5);
  EXPECT_GT(second.step(), *step + 5);
  EXPECT_LE(std::abs(second.step() - first.step()), 1);
  EXPECT_LT(second.mean_loss(), second.first_mean_loss());
  EXPECT_NE(Read(dir_.File("ps-1.1.log")).find("event=restored"), std::string::npos);
}

}  // namespace
}  // namespace antdt
