// The real antdt-sharding-service binary on 127.0.0.1 with real clients.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/sharding_client.h"
#include "common/credential.h"
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
    // No credential of the test's own: serving unchecked is asked for.
    const bool credential = std::find(extra.begin(), extra.end(), "--token-file") != extra.end() ||
                            std::getenv("ANTDT_TOKEN") != nullptr;
    if (!credential) argv.insert(argv.end(), {"--auth", "none"});
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

  client::ShardingClient Client(const std::string& worker, int64_t incarnation = 0,
                                const std::string& token = "") {
    client::ShardingClientOptions o;
    o.job = "job";
    o.dataset = "data";
    o.worker_id = worker;
    o.incarnation = incarnation;
    o.retry_budget_ms = 20'000;
    o.token = token;
    return client::ShardingClient(channel_, o);
  }

  // The service holding `token` (--token-file), with `extra` flags.
  void StartWithToken(const std::string& token, std::vector<std::string> extra = {}) {
    std::ofstream(dir_.File("token")) << token << "\n";
    extra.insert(extra.begin(), {"--token-file", dir_.File("token")});
    Start(extra);
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

  // SIGKILL, then the binary again on the same port and state.
  void KillAndRestart(std::vector<std::string> extra = {}, int signal = SIGKILL) {
    proc_->Signal(signal);
    ASSERT_TRUE(proc_->Wait(std::chrono::seconds(15)));
    Start(std::move(extra), address_);
  }

  void ConsumeAllAcrossARestart(int workers, int64_t records, int64_t shard_size,
                                int64_t commit_every, int64_t stop_after, int signal,
                                std::chrono::microseconds per_record);

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

// With the job's credential (--token-file), every call without it is refused
// UNAUTHENTICATED and every call with another PERMISSION_DENIED, changing
// nothing; each refusal is counted and logged, never with a token; the
// health service (Kubernetes' probe) answers without one.
TEST_F(ServiceTest, CallsWithoutTheJobsCredentialAreRefused) {
  const std::string token = "job-token-0123456789abcdef";
  ASSERT_NO_FATAL_FAILURE(StartWithToken(token));
  auto health = grpc::health::v1::Health::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  }
  client::ShardingClientOptions o;
  o.job = "job";
  o.dataset = "data";
  o.worker_id = "w";
  o.token = token;
  client::ShardingClient owner(channel_, o);
  ASSERT_TRUE(owner.CreateDataset(Spec()).ok());
  auto lease = owner.Acquire();
  ASSERT_TRUE(lease.ok() && *lease) << lease.status();

  // Every RPC, as another tenant's process would send it.
  auto stub = v1::ShardingService::NewStub(channel_);
  v1::DatasetRef ref;
  ref.set_job("job");
  ref.set_name("data");
  using Call = std::function<grpc::Status(grpc::ClientContext*)>;
  const std::vector<std::pair<std::string, Call>> calls = {
      {"CreateDataset",
       [&](grpc::ClientContext* c) {
         v1::CreateDatasetRequest r;
         *r.mutable_spec() = Spec();
         r.mutable_spec()->set_name("stolen");
         v1::CreateDatasetResponse out;
         return stub->CreateDataset(c, r, &out);
       }},
      {"AcquireShard",
       [&](grpc::ClientContext* c) {
         v1::AcquireShardRequest r;
         *r.mutable_dataset() = ref;
         r.set_worker_id("intruder");
         v1::AcquireShardResponse out;
         return stub->AcquireShard(c, r, &out);
       }},
      {"ReportProgress",
       [&](grpc::ClientContext* c) {
         v1::ReportProgressRequest r;
         *r.mutable_dataset() = ref;
         v1::ReportProgressResponse out;
         return stub->ReportProgress(c, r, &out);
       }},
      {"CompleteShard",
       [&](grpc::ClientContext* c) {
         v1::CompleteShardRequest r;
         *r.mutable_dataset() = ref;
         v1::CompleteShardResponse out;
         return stub->CompleteShard(c, r, &out);
       }},
      {"ReleaseWorker",
       [&](grpc::ClientContext* c) {
         v1::ReleaseWorkerRequest r;
         *r.mutable_dataset() = ref;
         r.set_worker_id("w");
         r.set_incarnation(-1);
         v1::ReleaseWorkerResponse out;
         return stub->ReleaseWorker(c, r, &out);
       }},
      {"Checkpoint",
       [&](grpc::ClientContext* c) {
         v1::CheckpointRequest r;
         *r.mutable_dataset() = ref;
         v1::CheckpointResponse out;
         return stub->Checkpoint(c, r, &out);
       }},
      {"Restore",
       [&](grpc::ClientContext* c) {
         v1::RestoreRequest r;
         *r.mutable_dataset() = ref;
         v1::RestoreResponse out;
         return stub->Restore(c, r, &out);
       }},
      {"GetProgress",
       [&](grpc::ClientContext* c) {
         v1::GetProgressRequest r;
         *r.mutable_dataset() = ref;
         v1::GetProgressResponse out;
         return stub->GetProgress(c, r, &out);
       }},
  };
  for (const auto& [method, call] : calls) {
    SCOPED_TRACE(method);
    grpc::ClientContext none;
    const grpc::Status missing = call(&none);
    EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED) << missing.error_message();
    EXPECT_NE(missing.error_message().find("ANTDT_TOKEN"), std::string::npos);
    grpc::ClientContext other;
    other.AddMetadata("authorization", "Bearer another-jobs-token-0123456789ab");
    EXPECT_EQ(call(&other).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    grpc::ClientContext not_bearer;
    not_bearer.AddMetadata("authorization", token);
    EXPECT_EQ(call(&not_bearer).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }

  // Nothing changed: the owner's lease still holds, no dataset "stolen".
  ASSERT_TRUE(owner.Complete(**lease).ok());
  auto progress = owner.Progress();
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->records_committed_total(), 100);
  EXPECT_EQ(progress->shards_doing(), 0) << "the lease the intruder tried to release held";
  client::ShardingClientOptions so = o;
  so.dataset = "stolen";
  EXPECT_EQ(client::ShardingClient(channel_, so).Progress().status().code(),
            absl::StatusCode::kNotFound);

  auto body = antdt::testing::HttpGet(metrics_, "/metrics");
  ASSERT_TRUE(body);
  for (const char* want :
       {"antdt_sharding_auth_refusals_total{method=\"ReleaseWorker\",reason=\"missing\"} 1",
        "antdt_sharding_auth_refusals_total{method=\"Restore\",reason=\"wrong\"} 2",
        "antdt_sharding_rpcs_total{code=\"UNAUTHENTICATED\",method=\"CreateDataset\"} 1"}) {
    EXPECT_NE(body->find(want), std::string::npos) << want << "\n" << *body;
  }
  const std::string log = Log();
  EXPECT_NE(log.find("auth=token"), std::string::npos) << log;
  EXPECT_NE(log.find("event=auth_refused method=Restore reason=wrong"), std::string::npos) << log;
  EXPECT_EQ(log.find(token), std::string::npos) << "the token was logged";
  EXPECT_EQ(log.find("another-jobs-token"), std::string::npos) << "a token was logged";
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

// `workers` threads run the SDK's loop (ConsumeAll: one CompleteShard with
// `next` per shard, progress every `commit_every` records) over `records`
// records; once `stop_after` were processed the service gets `signal` and is
// started again. Every worker ends without an error, every record announced
// committed exactly once, and the dataset ends finished.
void ServiceTest::ConsumeAllAcrossARestart(int workers, int64_t records, int64_t shard_size,
                                           int64_t commit_every, int64_t stop_after, int signal,
                                           std::chrono::microseconds per_record) {
  v1::DatasetSpec spec = Spec();
  spec.set_record_count(records);
  spec.set_shard_size(shard_size);
  ASSERT_TRUE(Client("w0").CreateDataset(spec).ok());
  std::mutex mu;
  std::map<int64_t, int> committed;  // record id -> times announced
  std::atomic<int64_t> processed{0};
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(workers);
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w, this] {
      auto client = Client(absl::StrCat("w", w));
      results[w] = client.ConsumeAll(
          commit_every,
          [&](const client::ShardLease&, int64_t) {
            ++processed;
            std::this_thread::sleep_for(per_record);
          },
          [&](const client::ShardLease& lease, int64_t from, int64_t to) {
            std::lock_guard<std::mutex> lock(mu);
            for (int64_t i = from; i < to; ++i) ++committed[lease.RecordAt(i)];
          });
    });
  }
  while (processed < stop_after) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  KillAndRestart({}, signal);  // the clients retry through it
  for (auto& th : threads) th.join();
  for (const absl::Status& r : results) EXPECT_TRUE(r.ok()) << r;
  ASSERT_EQ(committed.size(), static_cast<size_t>(records));
  for (const auto& [record, times] : committed) ASSERT_EQ(times, 1) << "record " << record;
  auto progress = Client("w0").Progress();
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_TRUE(progress->finished());
  EXPECT_EQ(progress->records_committed_total(), records);
}

// Three workers, a SIGKILL of the service midway.
TEST_F(ServiceTest, ConsumeAllCommitsEveryRecordOnceAcrossAKill) {
  Start();
  ConsumeAllAcrossARestart(3, 3000, 10, 4, 1000, SIGKILL, std::chrono::microseconds(200));
}

// A graceful stop (SIGTERM: a pod deleted, a node drained) midway through
// eight workers committing every record: the server cancels the calls it had
// not started (CANCELLED, not UNAVAILABLE), and the clients retry those too.
TEST_F(ServiceTest, ConsumeAllRidesOutAGracefulStop) {
  Start();
  ConsumeAllAcrossARestart(8, 4000, 4, 1, 1000, SIGTERM, std::chrono::microseconds(0));
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

// Each bad input of issue 14 over the wire: refused with the field or limit
// named, nothing created, the other tenant's dataset intact after a kill -9.
TEST_F(ServiceTest, BadInputFromOneTenantChangesNothingForOthers) {
  Start({"--max-datasets", "2"});
  auto client = Client("w");
  ASSERT_TRUE(client.CreateDataset(Spec()).ok());
  auto lease = client.Acquire();
  ASSERT_TRUE(lease.ok() && *lease);
  ASSERT_TRUE(client.Complete(**lease).ok());
  auto stub = v1::ShardingService::NewStub(channel_);
  auto create = [&](const std::function<void(v1::DatasetSpec&)>& mutate) {
    v1::CreateDatasetRequest req;
    *req.mutable_spec() = Spec();
    req.mutable_spec()->set_name("other");
    mutate(*req.mutable_spec());
    grpc::ClientContext ctx;
    v1::CreateDatasetResponse resp;
    return stub->CreateDataset(&ctx, req, &resp);
  };
  struct Case {
    std::function<void(v1::DatasetSpec&)> mutate;
    grpc::StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](v1::DatasetSpec& s) { s.set_name(std::string("a\0b", 3)); },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.name"},
      {[](v1::DatasetSpec& s) { s.set_name(std::string("a\0c", 3)); },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.name"},
      {[](v1::DatasetSpec& s) {
         s.set_record_count(0);
         for (int i = 0; i < 4; ++i) {
           s.add_files()->set_path("f");
           s.mutable_files(i)->set_records(int64_t{1} << 62);
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.files[1].records"},
      {[](v1::DatasetSpec& s) {
         s.set_shuffle(true);
         s.set_record_count(100'000'000);
         s.set_shard_size(10'000'000);
       },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "spec.shard_size"},
  };
  for (const Case& c : cases) {
    grpc::Status st = create(c.mutate);
    EXPECT_EQ(st.error_code(), c.code) << c.want << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.want), std::string::npos) << st.error_message();
  }
  grpc::ClientContext actx;
  v1::AcquireShardRequest acq;
  acq.mutable_dataset()->set_job("job");
  acq.mutable_dataset()->set_name("data");
  acq.set_worker_id(std::string("w\0x", 3));
  v1::AcquireShardResponse aresp;
  grpc::Status st = stub->AcquireShard(&actx, acq, &aresp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("worker_id"), std::string::npos) << st.error_message();
  ASSERT_TRUE(create([](v1::DatasetSpec&) {}).ok());
  st = create([](v1::DatasetSpec& s) { s.set_name("third"); });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_datasets (2)"), std::string::npos) << st.error_message();

  KillAndRestart({"--max-datasets", "2"});
  auto progress = client.Progress();
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->records_committed_total(), 100);
  EXPECT_EQ(progress->shards_todo(), 9);
  ASSERT_EQ(progress->workers_size(), 1);  // per-worker records survive the restart
  EXPECT_EQ(progress->workers(0).records_committed(), 100);
  for (const char* name : {"a", "third"}) {
    grpc::ClientContext ctx;
    v1::GetProgressRequest req;
    req.mutable_dataset()->set_job("job");
    req.mutable_dataset()->set_name(name);
    v1::GetProgressResponse resp;
    EXPECT_EQ(stub->GetProgress(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND)
        << name;
  }
}

// A tenant that behaves: consumes job/data one call at a time and counts every
// record whose commit was acknowledged, per epoch.
class GoodTenant {
 public:
  GoodTenant(const std::unique_ptr<v1::ShardingService::Stub>& stub, int64_t records, int epochs)
      : stub_(stub), records_(records), counts_(records * epochs, 0) {}

  // One call; false once the dataset is finished.
  bool Step() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (token_ == 0) {
      v1::AcquireShardRequest req;
      *req.mutable_dataset() = Ref();
      req.set_worker_id("good-worker");
      v1::AcquireShardResponse resp;
      grpc::Status s = stub_->AcquireShard(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (resp.result() == v1::AcquireShardResponse::END_OF_DATA) return false;
      if (resp.result() != v1::AcquireShardResponse::SHARD) return s.ok();
      token_ = resp.lease().token();
      epoch_ = resp.shard().epoch();
      first_ = resp.shard().start() - resp.shard().committed();
      done_ = resp.shard().committed();
      size_ = resp.shard().size();
      return true;
    }
    if (done_ < size_ / 2) {
      v1::ReportProgressRequest req;
      *req.mutable_dataset() = Ref();
      req.set_token(token_);
      req.set_records_done(size_ / 2);
      v1::ReportProgressResponse resp;
      grpc::Status s = stub_->ReportProgress(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (s.ok()) Count(size_ / 2);
      return s.ok();
    }
    v1::CompleteShardRequest req;
    *req.mutable_dataset() = Ref();
    req.set_token(token_);
    v1::CompleteShardResponse resp;
    grpc::Status s = stub_->CompleteShard(&ctx, req, &resp);
    EXPECT_TRUE(s.ok() && !resp.already_completed()) << s.error_message();
    if (s.ok()) Count(size_);
    token_ = 0;
    return s.ok();
  }

  // Records acknowledged other than exactly once.
  int64_t NotExactlyOnce() const {
    return std::count_if(counts_.begin(), counts_.end(), [](int c) { return c != 1; });
  }

  static v1::DatasetRef Ref() {
    v1::DatasetRef ref;
    ref.set_job("job");
    ref.set_name("data");
    return ref;
  }

 private:
  void Count(int64_t upto) {
    for (int64_t r = first_ + done_; r < first_ + upto; ++r) ++counts_[epoch_ * records_ + r];
    done_ = upto;
  }

  const std::unique_ptr<v1::ShardingService::Stub>& stub_;  // replaced at a restart
  const int64_t records_;
  std::vector<int> counts_;
  uint64_t token_ = 0;
  int64_t epoch_ = 0, first_ = 0, done_ = 0, size_ = 0;
};

// A token reaches only its own job's datasets (--job): a call with the valid
// token naming another job is refused PERMISSION_DENIED naming the field,
// and changes nothing (the lease it would have completed is still held).
TEST_F(ServiceTest, TheJobsTokenReachesOnlyItsJobsDatasets) {
  const std::string token = "job-token-0123456789abcdef";
  ASSERT_NO_FATAL_FAILURE(StartWithToken(token, {"--job", "job"}));
  client::ShardingClient owner = Client("w", 0, token);
  ASSERT_TRUE(owner.CreateDataset(Spec()).ok());
  auto lease = owner.Acquire();
  ASSERT_TRUE(lease.ok() && *lease) << lease.status();

  auto stub = v1::ShardingService::NewStub(channel_);
  auto call = [&](auto method, const auto& req, auto resp) {
    grpc::ClientContext ctx;
    AddCredential(ctx, token);
    return ((*stub).*method)(&ctx, req, &resp);
  };
  v1::CreateDatasetRequest create;
  *create.mutable_spec() = Spec();
  create.mutable_spec()->set_job("other-job");
  grpc::Status s =
      call(&v1::ShardingService::Stub::CreateDataset, create, v1::CreateDatasetResponse());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("spec.job"), std::string::npos) << s.error_message();

  v1::GetProgressRequest progress;
  progress.mutable_dataset()->set_job("other-job");
  progress.mutable_dataset()->set_name("data");
  s = call(&v1::ShardingService::Stub::GetProgress, progress, v1::GetProgressResponse());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("dataset.job"), std::string::npos) << s.error_message();

  v1::CompleteShardRequest complete;
  complete.mutable_dataset()->set_job("job");
  complete.mutable_dataset()->set_name("data");
  complete.set_token((*lease)->token);
  complete.mutable_next()->mutable_dataset()->set_job("other-job");
  complete.mutable_next()->mutable_dataset()->set_name("data");
  complete.mutable_next()->set_worker_id("w");
  s = call(&v1::ShardingService::Stub::CompleteShard, complete, v1::CompleteShardResponse());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("next.dataset.job"), std::string::npos) << s.error_message();
  // Nothing changed: the lease is still held and no record was committed.
  EXPECT_TRUE(owner.ReportProgress(**lease, 1).ok());
  auto p = owner.Progress();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->records_committed_total(), 1);
  EXPECT_NE(Log().find("job=job"), std::string::npos) << Log();
}

// Random requests to every RPC from one tenant: malformed names, huge and
// negative numbers, random tokens and steps.
class RandomTenant {
 public:
  RandomTenant(const std::unique_ptr<v1::ShardingService::Stub>& stub, uint64_t seed)
      : stub_(stub), rng_(seed) {}

  // One random call; its status.
  grpc::Status Call() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    switch (Pick(8)) {
      case 0: {
        v1::CreateDatasetRequest req;
        FillSpec(*req.mutable_spec());
        v1::CreateDatasetResponse resp;
        return stub_->CreateDataset(&ctx, req, &resp);
      }
      case 1: {
        v1::AcquireShardRequest req;
        FillRef(*req.mutable_dataset());
        req.set_worker_id(Name());
        req.set_incarnation(Number());
        if (Pick(2)) req.set_request_id(Name());
        v1::AcquireShardResponse resp;
        return stub_->AcquireShard(&ctx, req, &resp);
      }
      case 2: {
        v1::ReportProgressRequest req;
        FillRef(*req.mutable_dataset());
        req.set_token(Token());
        req.set_records_done(Number());
        v1::ReportProgressResponse resp;
        return stub_->ReportProgress(&ctx, req, &resp);
      }
      case 3: {
        v1::CompleteShardRequest req;
        FillRef(*req.mutable_dataset());
        req.set_token(Token());
        if (Pick(2)) {
          v1::AcquireShardRequest* next = req.mutable_next();
          if (Pick(2)) FillRef(*next->mutable_dataset());
          next->set_worker_id(Name());
          next->set_incarnation(Number());
          if (Pick(2)) next->set_request_id(Name());
        }
        v1::CompleteShardResponse resp;
        return stub_->CompleteShard(&ctx, req, &resp);
      }
      case 4: {
        v1::ReleaseWorkerRequest req;
        FillRef(*req.mutable_dataset());
        if (Pick(2)) req.mutable_dataset()->clear_name();
        req.set_worker_id(Name());
        req.set_incarnation(Number());
        v1::ReleaseWorkerResponse resp;
        return stub_->ReleaseWorker(&ctx, req, &resp);
      }
      case 5: {
        v1::CheckpointRequest req;
        FillRef(*req.mutable_dataset());
        req.set_step(Pick(2) ? Pick(3) : Number());
        v1::CheckpointResponse resp;
        return stub_->Checkpoint(&ctx, req, &resp);
      }
      case 6: {
        v1::RestoreRequest req;
        FillRef(*req.mutable_dataset());
        req.set_step(Pick(2) ? Pick(3) : Number());
        v1::RestoreResponse resp;
        return stub_->Restore(&ctx, req, &resp);
      }
      default: {
        v1::GetProgressRequest req;
        FillRef(*req.mutable_dataset());
        v1::GetProgressResponse resp;
        return stub_->GetProgress(&ctx, req, &resp);
      }
    }
  }

 private:
  int64_t Pick(int64_t n) { return static_cast<int64_t>(rng_() % static_cast<uint64_t>(n)); }

  // Valid names from a small pool (so that calls meet), empty, control
  // characters, too long, random ASCII. Never the good tenant's dataset or
  // worker: what one tenant does to its own data is not under test.
  std::string Name() {
    static const char* const kPool[] = {"fz", "d1", "d2", "w1", "w2", "job"};
    switch (Pick(10)) {
      case 0:
        return "";
      case 1: {
        std::string s(static_cast<size_t>(Pick(300)), 'x');
        for (char& c : s) c = static_cast<char>(Pick(0x80));  // NUL and controls too
        return s;
      }
      case 2:
        return std::string(static_cast<size_t>(Pick(2) ? 253 : 254 + Pick(1000)), 'n');
      default:
        return kPool[Pick(6)];
    }
  }

  int64_t Number() {
    static const int64_t kEdges[] = {
        0, 1, -1, INT64_MAX, INT64_MIN, INT64_MAX - 1, int64_t{1} << 62, 100'000, 100'001};
    switch (Pick(4)) {
      case 0:
        return kEdges[Pick(9)];
      case 1:
        return static_cast<int64_t>(rng_());
      default:
        return Pick(300);
    }
  }

  uint64_t Token() { return Pick(2) ? static_cast<uint64_t>(Pick(400)) : rng_(); }

  void FillRef(v1::DatasetRef& ref) {
    ref.set_job(Name());
    ref.set_name(Name());
    if (ref.job() == "job" && ref.name() == "data") ref.set_name("d1");
  }

  void FillSpec(v1::DatasetSpec& spec) {
    spec.set_job(Name());
    spec.set_name(Name());
    spec.set_record_count(Number());
    spec.set_shard_size(Number());
    static const int32_t kEpochs[] = {0, 1, 2, -1, INT32_MAX, INT32_MIN};
    spec.set_epochs(kEpochs[Pick(6)]);
    spec.set_shuffle(Pick(2));
    spec.set_seed(rng_());
    for (int64_t i = Pick(4); i > 0; --i) {
      v1::DataFile* f = spec.add_files();
      f->set_path(Pick(4) ? "f" : Name());
      f->set_records(Number());
    }
  }

  const std::unique_ptr<v1::ShardingService::Stub>& stub_;  // replaced at a restart
  std::mt19937_64 rng_;
};

// A few thousand random requests beside a tenant consuming its dataset: the
// service never crashes, never answers UNKNOWN or INTERNAL, and the tenant's
// records are committed exactly once, before and after a kill -9.
TEST_F(ServiceTest, RandomRequestsNeverCostAnotherTenant) {
  const std::vector<std::string> flags = {"--sync", "normal", "--max-total-shards", "2000000"};
  Start(flags);
  auto stub = v1::ShardingService::NewStub(channel_);
  v1::DatasetSpec spec = Spec();
  spec.set_epochs(3);
  ASSERT_TRUE(Client("setup").CreateDataset(spec).ok());
  GoodTenant good(stub, spec.record_count(), spec.epochs());
  RandomTenant random(stub, /*seed=*/14);
  auto restart = [&] {
    KillAndRestart(flags);
    stub = v1::ShardingService::NewStub(channel_);
  };
  const std::set<grpc::StatusCode> allowed = {grpc::StatusCode::OK,
                                              grpc::StatusCode::INVALID_ARGUMENT,
                                              grpc::StatusCode::NOT_FOUND,
                                              grpc::StatusCode::ALREADY_EXISTS,
                                              grpc::StatusCode::FAILED_PRECONDITION,
                                              grpc::StatusCode::RESOURCE_EXHAUSTED};
  std::map<grpc::StatusCode, int> codes;
  bool consuming = true;
  for (int i = 0; i < 5000; ++i) {
    grpc::Status s = random.Call();
    ++codes[s.error_code()];
    ASSERT_TRUE(allowed.count(s.error_code()))
        << "call " << i << ": code " << s.error_code() << " " << s.error_message() << "\n"
        << Log();
    if (i % 10 == 0 && consuming) consuming = good.Step();
    if (i == 2500) restart();
  }
  while (consuming) consuming = good.Step();
  ASSERT_TRUE(proc_->Running());
  EXPECT_EQ(good.NotExactlyOnce(), 0);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    v1::GetProgressRequest req;
    *req.mutable_dataset() = GoodTenant::Ref();
    v1::GetProgressResponse p;
    ASSERT_TRUE(stub->GetProgress(&ctx, req, &p).ok());
    EXPECT_TRUE(p.finished());
    EXPECT_EQ(p.records_committed_total(), 3000);
    if (i == 0) restart();  // what the random tenant stored recovers too
  }
  for (const auto& [code, n] : codes) std::printf("code %d: %d calls\n", code, n);
  EXPECT_GT(codes[grpc::StatusCode::OK], 100);
  EXPECT_GT(codes[grpc::StatusCode::INVALID_ARGUMENT], 100);
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

// What the C++ SDK does with a ReportProgress answer that ended the lease
// early (ReportProgressRequest.follow_shorter_end): remaining(), lease_end()
// and the record ids stop there; a later or lower end than it can honour is
// ignored.
TEST(ShardLeaseTest, EndAtStopsTheLeaseWhereTheServiceSaid) {
  for (const bool shuffled : {false, true}) {
    SCOPED_TRACE(shuffled);
    client::ShardLease lease;
    lease.shard.set_size(100);
    lease.shard.set_committed(10);  // acquired from the shard's 10th record
    lease.shard.set_start(110);
    lease.shard.set_end(200);
    if (shuffled) {
      for (int64_t i = 0; i < 90; ++i) lease.shard.add_record_ids(1'000 + i);
    }
    lease.committed = 20;
    ASSERT_EQ(lease.remaining(), 90);
    lease.EndAt(150);  // past the shard: ignored
    lease.EndAt(15);   // before what was committed: ignored
    lease.EndAt(0);    // a service that does not say
    EXPECT_EQ(lease.remaining(), 90);
    lease.EndAt(40);
    EXPECT_EQ(lease.lease_end(), 40);
    EXPECT_EQ(lease.remaining(), 30);
    EXPECT_EQ(lease.RecordAt(29), shuffled ? 1'029 : 139);
    EXPECT_EQ(lease.shard.end(), 140);
    if (shuffled) {
      EXPECT_EQ(lease.shard.record_ids_size(), 30);
    }
    lease.EndAt(60);  // never longer again
    EXPECT_EQ(lease.lease_end(), 40);
  }
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
      {{"--token-file", dir.File("missing-token")}, "token_file: cannot read"},
      // After the lease reaper started: it is stopped, not left to std::terminate.
      {{"--listen", "127.0.0.1:0", "--ready-file", dir.File("missing/ready"), "--auth", "none"},
       "cannot write"},
      // Authentication is off only when asked for, never for want of a token.
      {{}, "token_file: no credential"},
      {{"--auth", "off"}, "--auth: must be \"token\" or \"none\""},
      {{"--auth", "none", "--token-file", dir.File("token")}, "auth: \"none\" with a credential"},
      {{"--job", std::string("a\nb")}, "job: holds a control character"},
  };
  std::ofstream(dir.File("token")) << "a-token\n";
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

// $ANTDT_TOKEN passes the check a token file does: blank, oversized,
// multi-line or non-ASCII values refuse to start, naming the variable (and
// never saying the value), instead of serving with authentication off or
// with a token no client can send.
TEST(ServiceFlags, BadTokensInTheEnvironmentRefuseToStart) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"   ", "$ANTDT_TOKEN is blank"},
      {std::string(100 * 1024, 'x'), "$ANTDT_TOKEN holds more than 4096 bytes"},
      {"line-one\nline-two", "$ANTDT_TOKEN holds other than visible ASCII"},
      {"caf\xc3\xa9-token", "$ANTDT_TOKEN holds other than visible ASCII"},
  };
  for (const auto& [token, want] : cases) {
    setenv("ANTDT_TOKEN", token.c_str(), 1);
    Process p({BinPath("antdt-sharding-service"), "--state-dir", dir.File("s"), "--listen",
               "127.0.0.1:0", "--ready-file", dir.File("ready")},
              dir.File("log"));
    unsetenv("ANTDT_TOKEN");
    auto status = p.Wait(std::chrono::seconds(10));
    ASSERT_TRUE(status);
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << "status " << *status;
    EXPECT_FALSE(std::filesystem::exists(dir.File("ready"))) << "it served";
    std::ifstream in(dir.File("log"));
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(log.find(want), std::string::npos) << log;
    if (token.size() > 3) {
      EXPECT_EQ(log.find(token), std::string::npos) << "the token was said";
    }
    std::filesystem::remove(dir.File("log"));
  }
}

}  // namespace
}  // namespace antdt
