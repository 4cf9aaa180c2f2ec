// The gRPC shell of the sharding service: translates calls to the Ledger and
// records per-call metrics. Owns no state of its own.
#pragma once

#include <functional>
#include <memory>

#include "antdt/v1/sharding.grpc.pb.h"
#include "common/credential.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "services/sharding/ledger.h"

namespace antdt::sharding {

// The calls of every step (AcquireShard, ReportProgress, CompleteShard) use
// gRPC's callback API: a call waiting for the group commit holds no thread, and
// is answered by whichever thread commits (Store::OnDurable).
using ShardingServiceBase = v1::ShardingService::WithCallbackMethod_AcquireShard<
    v1::ShardingService::WithCallbackMethod_ReportProgress<
        v1::ShardingService::WithCallbackMethod_CompleteShard<v1::ShardingService::Service>>>;

class ShardingServiceImpl final : public ShardingServiceBase {
 public:
  // `auth`: every call must carry the job's credential (off: none checked).
  // `job`: the only job whose datasets calls may name ("" any): the token of
  // one job reaches no other job's data.
  ShardingServiceImpl(Ledger* ledger, prometheus::Registry& registry, TokenCheck auth = {},
                      std::string job = "");

  grpc::Status CreateDataset(grpc::ServerContext*, const v1::CreateDatasetRequest* req,
                             v1::CreateDatasetResponse* resp) override;
  grpc::ServerUnaryReactor* AcquireShard(grpc::CallbackServerContext*,
                                         const v1::AcquireShardRequest* req,
                                         v1::AcquireShardResponse* resp) override;
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext*,
                                           const v1::ReportProgressRequest* req,
                                           v1::ReportProgressResponse* resp) override;
  grpc::ServerUnaryReactor* CompleteShard(grpc::CallbackServerContext*,
                                          const v1::CompleteShardRequest* req,
                                          v1::CompleteShardResponse* resp) override;
  grpc::Status ReleaseWorker(grpc::ServerContext*, const v1::ReleaseWorkerRequest* req,
                             v1::ReleaseWorkerResponse* resp) override;
  grpc::Status Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest* req,
                          v1::CheckpointResponse* resp) override;
  grpc::Status Restore(grpc::ServerContext*, const v1::RestoreRequest* req,
                       v1::RestoreResponse* resp) override;
  grpc::Status GetProgress(grpc::ServerContext*, const v1::GetProgressRequest* req,
                           v1::GetProgressResponse* resp) override;

 private:
  // UNAUTHENTICATED or PERMISSION_DENIED (counted and logged) or OK.
  grpc::Status Authorize(const grpc::ServerContextBase& context, const char* method);
  // OK when `job` (the request's `field`) is the served job, or any job is
  // served; else PERMISSION_DENIED naming the field.
  absl::Status InScope(const std::string& job, const char* field) const;
  // Authorize, then `scope` (counted when refused): OK when the call may go on.
  grpc::Status Admit(const grpc::ServerContextBase& context, const char* method,
                     const absl::Status& scope);
  void Count(const char* method, const absl::Status& status);
  // `scope`: InScope of the request's job(s), checked after the credential.
  template <typename Resp, typename Fn>
  grpc::Status Handle(grpc::ServerContext* context, const char* method, absl::Status scope,
                      Resp* resp, Fn&& fn);
  // Answers once the ledger's batch is durable; `done` (if set) runs just before.
  template <typename Resp, typename Fn>
  grpc::ServerUnaryReactor* HandleDeferred(grpc::CallbackServerContext* context, const char* method,
                                           absl::Status scope, Resp* resp, Fn&& fn,
                                           std::function<void()> done = nullptr);

  Ledger* const ledger_;
  const TokenCheck auth_;
  const std::string job_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Counter>& refusals_;
  prometheus::Histogram& acquire_latency_;
};

// Exposes the ledger's state at scrape time: shards by state, epoch, records
// committed, requeues and lease expirations per dataset, each series with the
// dataset's `job` and, when `ns` is not empty, `namespace`.
std::shared_ptr<prometheus::Collectable> MakeLedgerCollector(const Ledger* ledger,
                                                             std::string ns = "");

}  // namespace antdt::sharding
