#include "services/sharding/service.h"

#include <chrono>

#include "common/log.h"
#include "common/status.h"
#include "prometheus/metric_family.h"

namespace antdt::sharding {

ShardingServiceImpl::ShardingServiceImpl(Ledger* ledger, prometheus::Registry& registry,
                                         TokenCheck auth, std::string job)
    : ledger_(ledger),
      auth_(std::move(auth)),
      job_(std::move(job)),
      rpcs_(prometheus::BuildCounter()
                .Name("antdt_sharding_rpcs_total")
                .Help("Sharding service calls by method and gRPC status code.")
                .Register(registry)),
      refusals_(prometheus::BuildCounter()
                    .Name("antdt_sharding_auth_refusals_total")
                    .Help("Calls refused for their credential, by method and reason (missing: "
                          "none; wrong: not this job's token).")
                    .Register(registry)),
      acquire_latency_(prometheus::BuildHistogram()
                           .Name("antdt_sharding_acquire_latency_seconds")
                           .Help("Time to answer AcquireShard, durable commit included.")
                           .Register(registry)
                           .Add({}, prometheus::Histogram::BucketBoundaries{
                                        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05, 0.1, 0.25, 1})) {}

grpc::Status ShardingServiceImpl::Authorize(const grpc::ServerContextBase& context,
                                            const char* method) {
  grpc::Status refused = auth_.Check(context);
  if (refused.ok()) return refused;
  const bool missing = refused.error_code() == grpc::StatusCode::UNAUTHENTICATED;
  refusals_.Add({{"method", method}, {"reason", missing ? "missing" : "wrong"}}).Increment();
  rpcs_.Add({{"method", method}, {"code", missing ? "UNAUTHENTICATED" : "PERMISSION_DENIED"}})
      .Increment();
  LogEvent(
      "auth_refused",
      {{"method", method}, {"reason", missing ? "missing" : "wrong"}, {"peer", context.peer()}});
  return refused;
}

absl::Status ShardingServiceImpl::InScope(const std::string& job, const char* field) const {
  if (job_.empty() || job == job_) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(field, ": this service serves the datasets of job ", job_, " only"));
}

grpc::Status ShardingServiceImpl::Admit(const grpc::ServerContextBase& context, const char* method,
                                        const absl::Status& scope) {
  if (grpc::Status refused = Authorize(context, method); !refused.ok()) return refused;
  if (!scope.ok()) Count(method, scope);
  return ToGrpcStatus(scope);
}

void ShardingServiceImpl::Count(const char* method, const absl::Status& status) {
  rpcs_.Add({{"method", method}, {"code", absl::StatusCodeToString(status.code())}}).Increment();
}

template <typename Resp, typename Fn>
grpc::Status ShardingServiceImpl::Handle(grpc::ServerContext* context, const char* method,
                                         absl::Status scope, Resp* resp, Fn&& fn) {
  if (grpc::Status refused = Admit(*context, method, scope); !refused.ok()) return refused;
  absl::StatusOr<Resp> result = fn();
  Count(method, result.status());
  if (result.ok()) *resp = std::move(result).value();
  return ToGrpcStatus(result.status());
}

template <typename Resp, typename Fn>
grpc::ServerUnaryReactor* ShardingServiceImpl::HandleDeferred(grpc::CallbackServerContext* context,
                                                              const char* method,
                                                              absl::Status scope, Resp* resp,
                                                              Fn&& fn, std::function<void()> done) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status refused = Admit(*context, method, scope); !refused.ok()) {
    reactor->Finish(refused);
    return reactor;
  }
  Deferred<Resp> answer = fn();
  auto finish = [this, reactor, resp, method, done = std::move(done),
                 result = std::move(answer.result)](absl::Status durable) mutable {
    const absl::Status status = durable.ok() ? result.status() : durable;
    Count(method, status);
    if (status.ok()) *resp = std::move(result).value();
    if (done) done();
    reactor->Finish(ToGrpcStatus(status));
  };
  if (answer.durable_seq == 0) {
    finish(absl::OkStatus());
  } else {
    ledger_->store()->OnDurable(answer.durable_seq, std::move(finish));
  }
  return reactor;
}

grpc::Status ShardingServiceImpl::CreateDataset(grpc::ServerContext* context,
                                                const v1::CreateDatasetRequest* req,
                                                v1::CreateDatasetResponse* resp) {
  return Handle(context, "CreateDataset", InScope(req->spec().job(), "spec.job"), resp,
                [&] { return ledger_->CreateDataset(*req); });
}

grpc::ServerUnaryReactor* ShardingServiceImpl::AcquireShard(grpc::CallbackServerContext* context,
                                                            const v1::AcquireShardRequest* req,
                                                            v1::AcquireShardResponse* resp) {
  const auto start = std::chrono::steady_clock::now();
  return HandleDeferred(
      context, "AcquireShard", InScope(req->dataset().job(), "dataset.job"), resp,
      [&] { return ledger_->AcquireShardDeferred(*req); },
      [this, start] {
        acquire_latency_.Observe(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      });
}

grpc::ServerUnaryReactor* ShardingServiceImpl::ReportProgress(grpc::CallbackServerContext* context,
                                                              const v1::ReportProgressRequest* req,
                                                              v1::ReportProgressResponse* resp) {
  return HandleDeferred(context, "ReportProgress", InScope(req->dataset().job(), "dataset.job"),
                        resp, [&] { return ledger_->ReportProgressDeferred(*req); });
}

grpc::ServerUnaryReactor* ShardingServiceImpl::CompleteShard(grpc::CallbackServerContext* context,
                                                             const v1::CompleteShardRequest* req,
                                                             v1::CompleteShardResponse* resp) {
  absl::Status scope = InScope(req->dataset().job(), "dataset.job");
  if (scope.ok() && req->has_next() && !req->next().dataset().job().empty()) {
    scope = InScope(req->next().dataset().job(), "next.dataset.job");
  }
  return HandleDeferred(context, "CompleteShard", std::move(scope), resp,
                        [&] { return ledger_->CompleteShardDeferred(*req); });
}

grpc::Status ShardingServiceImpl::ReleaseWorker(grpc::ServerContext* context,
                                                const v1::ReleaseWorkerRequest* req,
                                                v1::ReleaseWorkerResponse* resp) {
  return Handle(context, "ReleaseWorker", InScope(req->dataset().job(), "dataset.job"), resp,
                [&] { return ledger_->ReleaseWorker(*req); });
}

grpc::Status ShardingServiceImpl::Checkpoint(grpc::ServerContext* context,
                                             const v1::CheckpointRequest* req,
                                             v1::CheckpointResponse* resp) {
  return Handle(context, "Checkpoint", InScope(req->dataset().job(), "dataset.job"), resp,
                [&] { return ledger_->Checkpoint(*req); });
}

grpc::Status ShardingServiceImpl::Restore(grpc::ServerContext* context,
                                          const v1::RestoreRequest* req,
                                          v1::RestoreResponse* resp) {
  return Handle(context, "Restore", InScope(req->dataset().job(), "dataset.job"), resp,
                [&] { return ledger_->Restore(*req); });
}

grpc::Status ShardingServiceImpl::GetProgress(grpc::ServerContext* context,
                                              const v1::GetProgressRequest* req,
                                              v1::GetProgressResponse* resp) {
  return Handle(context, "GetProgress", InScope(req->dataset().job(), "dataset.job"), resp,
                [&] { return ledger_->GetProgress(*req); });
}

namespace {

class LedgerCollector final : public prometheus::Collectable {
 public:
  LedgerCollector(const Ledger* ledger, std::string ns) : ledger_(ledger), ns_(std::move(ns)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    MetricFamily shards{"antdt_sharding_shards",
                        "Shards of the epoch in progress by state.",
                        MetricType::Gauge,
                        {}};
    MetricFamily epoch{"antdt_sharding_epoch",
                       "Epoch in progress (0-based; = epochs when done).",
                       MetricType::Gauge,
                       {}};
    MetricFamily committed{"antdt_sharding_records_committed",
                           "Records committed over all epochs (a restore can lower it).",
                           MetricType::Gauge,
                           {}};
    MetricFamily requeues{"antdt_sharding_requeues_total",
                          "Shard remainders sent back to the queue.",
                          MetricType::Counter,
                          {}};
    MetricFamily expirations{"antdt_sharding_lease_expirations_total",
                             "Leases that passed their deadline.",
                             MetricType::Counter,
                             {}};
    MetricFamily shortened{"antdt_sharding_leases_shortened_total",
                           "Leases that ended before their shard's end (guided leasing: the "
                           "epoch's end shared out in smaller leases).",
                           MetricType::Counter,
                           {}};
    for (const DatasetStats& s : ledger_->Stats()) {
      auto labels = [&](std::vector<prometheus::ClientMetric::Label> extra = {}) {
        std::vector<prometheus::ClientMetric::Label> l{{"job", s.job}, {"dataset", s.name}};
        if (!ns_.empty()) l.push_back({"namespace", ns_});
        l.insert(l.end(), extra.begin(), extra.end());
        return l;
      };
      auto gauge = [&](MetricFamily& f, double v, std::vector<prometheus::ClientMetric::Label> l) {
        prometheus::ClientMetric m;
        m.label = std::move(l);
        m.gauge.value = v;
        f.metric.push_back(m);
      };
      auto counter = [&](MetricFamily& f, double v) {
        prometheus::ClientMetric m;
        m.label = labels();
        m.counter.value = v;
        f.metric.push_back(m);
      };
      gauge(shards, static_cast<double>(s.shards_todo), labels({{"state", "todo"}}));
      gauge(shards, static_cast<double>(s.shards_doing), labels({{"state", "doing"}}));
      gauge(shards, static_cast<double>(s.shards_done), labels({{"state", "done"}}));
      gauge(epoch, s.epoch, labels());
      gauge(committed, static_cast<double>(s.records_committed_total), labels());
      counter(requeues, static_cast<double>(s.requeues));
      counter(expirations, static_cast<double>(s.lease_expirations));
      counter(shortened, static_cast<double>(s.leases_shortened));
    }
    return {shards, epoch, committed, requeues, expirations, shortened};
  }

 private:
  const Ledger* ledger_;
  const std::string ns_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeLedgerCollector(const Ledger* ledger, std::string ns) {
  return std::make_shared<LedgerCollector>(ledger, std::move(ns));
}

}  // namespace antdt::sharding
