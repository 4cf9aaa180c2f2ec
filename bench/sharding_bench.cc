// antdt-bench-sharding: figures for the sharding service, each beside a
// baseline measured in the same run.
//  1. AcquireShard+CompleteShard pairs per second and p50/p99 pair latency at
//     1, 8 and 32 concurrent clients against the real service binary in
//     durable mode (SQLite WAL, fsync per group commit), beside pairs of empty
//     unary RPCs (grpc.health.v1.Health/Check) to the same process; and the
//     pair in one call (CompleteShard with `next`), as the SDKs' loops make it.
//  2. Recovery after kill -9 with 1,000,000 shards stored: time from exec to
//     serving, beside the same on an empty state directory.
//  3. The cost of security: the same pairs against a service holding a token
//     (--token-file; every call carries it), and one with the token and TLS
//     (certificates made by scripts/make-certs.sh), beside a service without.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "antdt/v1/sharding.grpc.pb.h"
#include "common/config.h"
#include "common/process.h"
#include "health_probe.grpc.pb.h"
#include "services/sharding/sqlite_store.h"

namespace {

using antdt::Process;
using Clock = std::chrono::steady_clock;

std::string g_bin_dir;
std::string g_work_dir;
std::string g_tls_dir;  // certificates (scripts/make-certs.sh); "" : none made

struct Service {
  std::unique_ptr<Process> proc;
  std::string address;
  double ready_seconds = 0;  // exec to ready file
};

Service StartService(const std::string& state_dir, const std::string& sync, const std::string& log,
                     const std::string& token_file = "", bool tls = false) {
  Service s;
  const std::string ready = g_work_dir + "/ready";
  std::filesystem::remove(ready);
  auto t0 = Clock::now();
  std::vector<std::string> argv = {g_bin_dir + "/antdt-sharding-service",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--state-dir",
                                   state_dir,
                                   "--ready-file",
                                   ready,
                                   "--sync",
                                   sync};
  if (!token_file.empty()) {
    argv.push_back("--token-file");
    argv.push_back(token_file);
  } else {
    argv.insert(argv.end(), {"--auth", "none"});
  }
  if (tls) {
    argv.insert(argv.end(), {"--tls-cert", g_tls_dir + "/server.crt", "--tls-key",
                             g_tls_dir + "/server.key", "--tls-ca", g_tls_dir + "/ca.crt"});
  }
  s.proc = std::make_unique<Process>(argv, log);
  auto address = antdt::WaitForReadyFile(ready, std::chrono::seconds(120));
  if (!address) {
    std::fprintf(stderr, "service did not start; see %s\n", log.c_str());
    std::exit(1);
  }
  s.ready_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  s.address = *address;
  return s;
}

bool g_dial_tls = false;  // NewChannel speaks TLS (trusting g_tls_dir's CA)

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, int i) {
  grpc::ChannelArguments args;
  args.SetInt("antdt.bench.channel", i);  // a connection of its own per client
  if (!g_dial_tls)
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = *antdt::ReadFile(g_tls_dir + "/ca.crt");
  args.SetSslTargetNameOverride("antdt.internal");
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(tls), args);
}

// Makes the certificates with the repository's script (next to build/bin);
// false when it is not there.
bool MakeCerts() {
  const std::string script = g_bin_dir + "/../../scripts/make-certs.sh";
  if (!std::filesystem::exists(script)) return false;
  g_tls_dir = g_work_dir + "/tls";
  return std::system((script + " " + g_tls_dir + " >/dev/null").c_str()) == 0;
}

struct Figures {
  double pairs_per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  int64_t pairs = 0;
};

template <typename PairFn>
Figures Measure(int clients, double seconds, const std::string& address, PairFn make_pair_fn) {
  std::vector<std::vector<double>> lat(clients);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  Clock::time_point end;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto pair = make_pair_fn(NewChannel(address, c), c);
      pair();  // warm the connection
      ++ready;
      while (!go) std::this_thread::yield();
      while (Clock::now() < end) {
        auto t = Clock::now();
        if (!pair()) break;
        lat[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
      }
    });
  }
  while (ready < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto start = Clock::now();
  end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go = true;
  for (auto& t : threads) t.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  Figures f;
  f.pairs = static_cast<int64_t>(all.size());
  if (all.empty()) return f;
  f.pairs_per_second = static_cast<double>(all.size()) / elapsed;
  f.p50_ms = all[all.size() / 2];
  f.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  return f;
}

// Client `c`'s AcquireShard on dataset bench/pairs.
antdt::v1::AcquireShardRequest PairAcquire(int c) {
  antdt::v1::AcquireShardRequest req;
  req.mutable_dataset()->set_job("bench");
  req.mutable_dataset()->set_name("pairs");
  req.set_worker_id("w" + std::to_string(c));
  return req;
}

// A client's AcquireShard+CompleteShard pair on dataset bench/pairs, each
// call with `token` (none when empty).
std::function<bool()> ShardPair(const std::shared_ptr<grpc::Channel>& channel, int c,
                                const std::string& token) {
  auto stub = std::shared_ptr<antdt::v1::ShardingService::Stub>(
      antdt::v1::ShardingService::NewStub(channel));
  return [stub, c, token] {
    grpc::ClientContext a;
    if (!token.empty()) a.AddMetadata("authorization", "Bearer " + token);
    const antdt::v1::AcquireShardRequest req = PairAcquire(c);
    antdt::v1::AcquireShardResponse resp;
    if (!stub->AcquireShard(&a, req, &resp).ok() ||
        resp.result() != antdt::v1::AcquireShardResponse::SHARD) {
      return false;
    }
    grpc::ClientContext b;
    if (!token.empty()) b.AddMetadata("authorization", "Bearer " + token);
    antdt::v1::CompleteShardRequest done;
    *done.mutable_dataset() = req.dataset();
    done.set_token(resp.lease().token());
    antdt::v1::CompleteShardResponse dresp;
    return stub->CompleteShard(&b, done, &dresp).ok();
  };
}

// The same pair in one call: CompleteShard completes the client's shard and
// acquires its next (CompleteShardRequest.next), as the SDKs' loops do.
std::function<bool()> OneCallPair(const std::shared_ptr<grpc::Channel>& channel, int c) {
  auto stub = std::shared_ptr<antdt::v1::ShardingService::Stub>(
      antdt::v1::ShardingService::NewStub(channel));
  auto token = std::make_shared<uint64_t>(0);
  auto calls = std::make_shared<uint64_t>(0);
  return [stub, c, token, calls] {
    antdt::v1::AcquireShardRequest acquire = PairAcquire(c);
    acquire.set_request_id(absl::StrCat("r", c, "-", ++*calls));
    antdt::v1::AcquireShardResponse next;
    if (*token == 0) {
      grpc::ClientContext a;
      if (!stub->AcquireShard(&a, acquire, &next).ok()) return false;
    } else {
      grpc::ClientContext b;
      antdt::v1::CompleteShardRequest done;
      *done.mutable_dataset() = acquire.dataset();
      done.set_token(*token);
      *done.mutable_next() = acquire;
      antdt::v1::CompleteShardResponse resp;
      if (!stub->CompleteShard(&b, done, &resp).ok()) return false;
      next = resp.next();
    }
    if (next.result() != antdt::v1::AcquireShardResponse::SHARD) return false;
    *token = next.lease().token();
    return true;
  };
}

// Creates the pairs dataset (4M one-record shards) on a fresh service.
void CreatePairsDataset(const Service& svc, const std::string& token) {
  auto stub = antdt::v1::ShardingService::NewStub(NewChannel(svc.address, -1));
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  antdt::v1::CreateDatasetRequest req;
  req.mutable_spec()->set_job("bench");
  req.mutable_spec()->set_name("pairs");
  req.mutable_spec()->set_record_count(4'000'000);
  req.mutable_spec()->set_shard_size(1);
  req.mutable_spec()->set_epochs(1);
  antdt::v1::CreateDatasetResponse resp;
  if (!stub->CreateDataset(&ctx, req, &resp).ok()) std::exit(1);
}

// The same pairs against a service without a credential, one holding a
// token, and one with the token and TLS, each started fresh, side by side.
void SecurityCost(const std::vector<int>& levels, double seconds, const std::string& sync) {
  const std::string token = "bench-token-0123456789abcdef0123456789abcdef";
  const std::string token_file = g_work_dir + "/token";
  std::ofstream(token_file) << token << "\n";
  const bool tls = MakeCerts();
  std::printf(
      "\n== Security: AcquireShard+CompleteShard pairs (--sync %s) open, with a token, and "
      "with a token over TLS, %.0f s per figure ==\n",
      sync.c_str(), seconds);
  if (!tls) std::printf("(no TLS: scripts/make-certs.sh not found next to the build)\n");
  std::printf("%8s | %11s %8s | %11s %8s | %11s %8s | %11s %11s\n", "clients", "open pair/s",
              "p99 ms", "token", "p99 ms", "token+TLS", "p99 ms", "token/open", "tls/open");
  for (int clients : levels) {
    Figures figures[3];
    for (int mode = 0; mode < (tls ? 3 : 2); ++mode) {
      const std::string state = g_work_dir + "/credential-state";
      std::filesystem::remove_all(state);
      Service svc = StartService(state, sync, g_work_dir + "/credential.log",
                                 mode > 0 ? token_file : "", mode == 2);
      g_dial_tls = mode == 2;
      const std::string t = mode > 0 ? token : "";
      CreatePairsDataset(svc, t);
      figures[mode] = Measure(clients, seconds, svc.address,
                              [&t](auto channel, int c) { return ShardPair(channel, c, t); });
      g_dial_tls = false;
      svc.proc->Signal(SIGTERM);
      svc.proc->Wait(std::chrono::seconds(30));
    }
    const double open = figures[0].pairs_per_second;
    std::printf("%8d | %11.0f %8.3f | %11.0f %8.3f | %11.0f %8.3f | %11.2f %11.2f\n", clients, open,
                figures[0].p99_ms, figures[1].pairs_per_second, figures[1].p99_ms,
                figures[2].pairs_per_second, figures[2].p99_ms, figures[1].pairs_per_second / open,
                figures[2].pairs_per_second / open);
    std::fflush(stdout);
  }
}

void Throughput(const std::vector<int>& levels, double seconds, const std::string& sync) {
  const std::string state = g_work_dir + "/throughput-state";
  std::filesystem::remove_all(state);
  Service svc = StartService(state, sync, g_work_dir + "/throughput.log");
  CreatePairsDataset(svc, "");
  std::printf(
      "\n== AcquireShard+CompleteShard pairs (durable: WAL, --sync %s) vs. "
      "empty unary pairs, %.0f s per figure ==\n",
      sync.c_str(), seconds);
  std::printf("%8s | %12s %9s %9s | %12s %9s %9s | %10s | %12s %9s %9s | %10s\n", "clients",
              "empty pair/s", "p50 ms", "p99 ms", "shard pair/s", "p50 ms", "p99 ms", "rate ratio",
              "one call/s", "p50 ms", "p99 ms", "rate ratio");
  for (int clients : levels) {
    Figures empty = Measure(clients, seconds, svc.address, [](auto channel, int) {
      auto stub = std::shared_ptr<grpc::health::v1::Health::Stub>(
          grpc::health::v1::Health::NewStub(channel));
      return [stub] {
        for (int i = 0; i < 2; ++i) {
          grpc::ClientContext ctx;
          grpc::health::v1::HealthCheckRequest req;
          grpc::health::v1::HealthCheckResponse resp;
          if (!stub->Check(&ctx, req, &resp).ok()) return false;
        }
        return true;
      };
    });
    Figures shard = Measure(clients, seconds, svc.address,
                            [](auto channel, int c) { return ShardPair(channel, c, ""); });
    Figures one = Measure(clients, seconds, svc.address,
                          [](auto channel, int c) { return OneCallPair(channel, c); });
    std::printf(
        "%8d | %12.0f %9.3f %9.3f | %12.0f %9.3f %9.3f | %10.2f | %12.0f %9.3f %9.3f | %10.2f\n",
        clients, empty.pairs_per_second, empty.p50_ms, empty.p99_ms, shard.pairs_per_second,
        shard.p50_ms, shard.p99_ms, shard.pairs_per_second / empty.pairs_per_second,
        one.pairs_per_second, one.p50_ms, one.p99_ms,
        one.pairs_per_second / empty.pairs_per_second);
    std::fflush(stdout);
  }
  svc.proc->Signal(SIGTERM);
  svc.proc->Wait(std::chrono::seconds(30));
}

// Writes a state directory holding one dataset of `shards` shards, all but
// 1,000 done and those 1,000 in flight, in the service's own format.
void FillState(const std::string& dir, int64_t shards) {
  using namespace antdt::sharding;
  auto store = SqliteStore::Open(dir, SqliteStore::Sync::kNormal);
  if (!store.ok()) std::exit(1);
  antdt::v1::DatasetSpec spec;
  spec.set_job("bench");
  spec.set_name("recovery");
  spec.set_record_count(shards * 10);
  spec.set_shard_size(10);
  spec.set_epochs(2);
  DatasetRow ds{1, "bench", "recovery", spec.SerializeAsString(), 0, 0, 0};
  uint64_t seq = (*store)->Append({ds});
  const int64_t doing = 1000;
  for (int64_t base = 0; base < shards; base += 50'000) {
    std::vector<Mutation> batch;
    for (int64_t i = base; i < std::min(shards, base + 50'000); ++i) {
      const bool done = i < shards - doing;
      const uint64_t token = static_cast<uint64_t>(i) + 1;
      batch.push_back(ShardRow{1, i, done ? ShardState::kDone : ShardState::kDoing, done ? 10 : 3,
                               done ? 0 : token});
      batch.push_back(LeaseRow{token, 1, 0, i, "w" + std::to_string(i % 64), 0, 0, done ? 10 : 3,
                               done ? LeaseState::kCompleted : LeaseState::kActive, ""});
    }
    seq = (*store)->Append(std::move(batch));
  }
  (*store)->Append({NextToken{static_cast<uint64_t>(shards) + 1}});
  (void)(*store)->WaitDurable((*store)->LastSeq());
  (void)seq;
}

double ServiceRecoverySeconds(const std::string& log) {
  std::ifstream in(log);
  std::string line, last;
  std::regex re("recovery_seconds=([0-9.e-]+)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) last = m[1];
  }
  double v = -1;
  if (!last.empty()) (void)absl::SimpleAtod(last, &v);
  return v;
}

void Recovery(int64_t shards) {
  std::printf("\n== Recovery after kill -9 ==\n");
  const std::string empty_dir = g_work_dir + "/empty-state";
  std::filesystem::remove_all(empty_dir);
  Service empty = StartService(empty_dir, "full", g_work_dir + "/empty.log");
  empty.proc->Signal(SIGKILL);
  empty.proc->Wait(std::chrono::seconds(10));
  Service empty2 = StartService(empty_dir, "full", g_work_dir + "/empty.log");
  empty2.proc->Signal(SIGKILL);
  empty2.proc->Wait(std::chrono::seconds(10));

  const std::string dir = g_work_dir + "/recovery-state";
  std::filesystem::remove_all(dir);
  auto t0 = Clock::now();
  FillState(dir, shards);
  const double fill = std::chrono::duration<double>(Clock::now() - t0).count();
  // Serve once and do a little work so the kill leaves a live WAL behind.
  Service first = StartService(dir, "full", g_work_dir + "/recovery.log");
  {
    auto stub = antdt::v1::ShardingService::NewStub(NewChannel(first.address, -1));
    for (int i = 0; i < 100; ++i) {
      grpc::ClientContext ctx;
      antdt::v1::ReportProgressRequest req;
      req.mutable_dataset()->set_job("bench");
      req.mutable_dataset()->set_name("recovery");
      req.set_token(static_cast<uint64_t>(shards - 1000 + i) + 1);
      req.set_records_done(5);
      antdt::v1::ReportProgressResponse resp;
      if (!stub->ReportProgress(&ctx, req, &resp).ok()) std::exit(1);
    }
  }
  first.proc->Signal(SIGKILL);
  first.proc->Wait(std::chrono::seconds(10));
  Service second = StartService(dir, "full", g_work_dir + "/recovery2.log");
  const double inside = ServiceRecoverySeconds(g_work_dir + "/recovery2.log");
  second.proc->Signal(SIGKILL);
  second.proc->Wait(std::chrono::seconds(10));
  std::printf(
      "state: %lld shards stored (%lld done, 1000 in flight), filled in %.1f s, "
      "db %.0f MB\n",
      static_cast<long long>(shards), static_cast<long long>(shards - 1000), fill,
      static_cast<double>(std::filesystem::file_size(dir + "/sharding.db")) / 1e6);
  std::printf("%-44s %8.3f s\n", "exec to serving, empty state (baseline)", empty2.ready_seconds);
  std::printf("%-44s %8.3f s\n", "exec to serving after kill -9, 1M shards", second.ready_seconds);
  std::printf("%-44s %8.3f s\n", "  of which loading state (service's log)", inside);
  std::printf("%-44s %8.1fx\n", "ratio to the empty start",
              second.ready_seconds / empty2.ready_seconds);
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = antdt::ParseFlags(
      argc, argv, {"seconds", "clients", "recovery-shards", "work-dir", "bin-dir", "sync"},
      {"skip-recovery", "skip-throughput", "skip-credential"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  std::error_code ec;
  g_bin_dir =
      flags->Get("bin-dir", std::filesystem::read_symlink("/proc/self/exe", ec).parent_path());
  g_work_dir = flags->Get("work-dir", "/tmp/antdt-bench-sharding");
  std::filesystem::create_directories(g_work_dir);
  double seconds = 3;
  (void)absl::SimpleAtod(flags->Get("seconds", "3"), &seconds);
  std::vector<int> levels;
  for (auto part : absl::StrSplit(flags->Get("clients", "1,8,32"), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(part, &v) && v > 0) levels.push_back(v);
  }
  int64_t shards = 1'000'000;
  (void)absl::SimpleAtoi(flags->Get("recovery-shards", "1000000"), &shards);
  std::printf("machine: %u cores; client and service share them\n",
              std::thread::hardware_concurrency());
  if (!flags->Has("skip-throughput")) Throughput(levels, seconds, flags->Get("sync", "full"));
  if (!flags->Has("skip-credential")) SecurityCost(levels, seconds, flags->Get("sync", "full"));
  if (!flags->Has("skip-recovery")) Recovery(shards);
  return 0;
}
