#include "client/sharding_client.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tls.h"

namespace antdt::client {

bool IsRetryable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded ||
         status.code() == absl::StatusCode::kCancelled ||
         status.code() == absl::StatusCode::kResourceExhausted;
}

std::shared_ptr<grpc::Channel> CreateShardingChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return antdt::CreateChannel(address, args);
}

ShardingClient::ShardingClient(std::shared_ptr<grpc::Channel> channel,
                               ShardingClientOptions options)
    : stub_(v1::ShardingService::NewStub(channel)), options_(std::move(options)) {
  if (!options_.token.empty()) return;
  absl::StatusOr<std::string> token = TokenFromEnvironment();
  if (token.ok()) {
    options_.token = *std::move(token);
  } else {
    // Calls go without it and are refused, saying so.
    LogEvent("credential_unreadable", {{"error", std::string(token.status().message())}});
  }
}

v1::DatasetRef ShardingClient::Ref() const {
  v1::DatasetRef ref;
  ref.set_job(options_.job);
  ref.set_name(options_.dataset);
  return ref;
}

template <typename Req, typename Resp, typename Call>
absl::Status ShardingClient::CallWithRetry(const Req& req, Resp* resp, Call call) {
  thread_local std::mt19937 rng(std::random_device{}());
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_budget_ms);
  int64_t backoff_ms = 50;
  for (;;) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options_.call_timeout_ms));
    AddCredential(ctx, options_.token);
    absl::Status status = FromGrpcStatus(call(&ctx, req, resp));
    if (status.ok() || !IsRetryable(status)) return status;
    if (std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff_ms) > give_up) {
      return status;
    }
    std::uniform_int_distribution<int64_t> jitter(backoff_ms / 2, backoff_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 2000);
  }
}

absl::StatusOr<v1::CreateDatasetResponse> ShardingClient::CreateDataset(
    const v1::DatasetSpec& spec) {
  v1::CreateDatasetRequest req;
  *req.mutable_spec() = spec;
  v1::CreateDatasetResponse resp;
  RETURN_IF_ERROR(CallWithRetry(req, &resp, [&](grpc::ClientContext* c, const auto& q, auto* r) {
    return stub_->CreateDataset(c, q, r);
  }));
  return resp;
}

v1::AcquireShardRequest ShardingClient::AcquireRequest() const {
  v1::AcquireShardRequest req;
  *req.mutable_dataset() = Ref();
  req.set_worker_id(options_.worker_id);
  req.set_incarnation(options_.incarnation);
  // Retries of this call carry the same id: a lost answer costs no extra lease.
  thread_local std::mt19937_64 ids(std::random_device{}());
  req.set_request_id(absl::StrCat(absl::Hex(ids(), absl::kZeroPad16)));
  return req;
}

absl::StatusOr<std::optional<ShardLease>> ShardingClient::Acquire() {
  return AcquireWith(AcquireRequest(), nullptr);
}

absl::StatusOr<std::optional<ShardLease>> ShardingClient::AcquireWith(
    const v1::AcquireShardRequest& req, const v1::AcquireShardResponse* answered) {
  for (;;) {
    v1::AcquireShardResponse resp;
    const bool from_complete = answered != nullptr;
    if (from_complete) {
      resp = *answered;
      answered = nullptr;
    } else {
      RETURN_IF_ERROR(
          CallWithRetry(req, &resp, [&](grpc::ClientContext* c, const auto& q, auto* r) {
            return stub_->AcquireShard(c, q, r);
          }));
    }
    switch (resp.result()) {
      case v1::AcquireShardResponse::SHARD: {
        ShardLease lease;
        lease.shard = resp.shard();
        lease.token = resp.lease().token();
        lease.committed = resp.shard().committed();
        return std::optional<ShardLease>(std::move(lease));
      }
      case v1::AcquireShardResponse::END_OF_DATA:
        return std::optional<ShardLease>();
      case v1::AcquireShardResponse::WAIT:
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::max<int64_t>(resp.retry_after_ms(), 10)));
        break;
      case v1::AcquireShardResponse::RESULT_UNSPECIFIED:
        // A CompleteShard that could not acquire: AcquireShard says why.
        if (from_complete) break;
        [[fallthrough]];
      default:
        return absl::InternalError("AcquireShard: unknown result");
    }
  }
}

absl::Status ShardingClient::ReportProgress(ShardLease& lease, int64_t records_done) {
  v1::ReportProgressRequest req;
  *req.mutable_dataset() = Ref();
  req.set_token(lease.token);
  req.set_records_done(records_done);
  req.set_follow_shorter_end(options_.follow_shorter_leases);
  v1::ReportProgressResponse resp;
  RETURN_IF_ERROR(CallWithRetry(req, &resp, [&](grpc::ClientContext* c, const auto& q, auto* r) {
    return stub_->ReportProgress(c, q, r);
  }));
  lease.committed = std::max(lease.committed, records_done);
  lease.EndAt(resp.lease_end());
  return absl::OkStatus();
}

void EndShardAt(v1::Shard& shard, int64_t end) {
  const int64_t n = end - shard.committed();  // records still to do, from the first
  if (shard.record_ids_size() > n) shard.mutable_record_ids()->Truncate(static_cast<int>(n));
  shard.set_end(shard.start() + n);
  shard.set_lease_end(end);
}

void ShardLease::EndAt(int64_t end) {
  if (end > 0 && end < lease_end() && end >= committed) EndShardAt(shard, end);
}

absl::StatusOr<v1::CompleteShardResponse> ShardingClient::CompleteCall(
    ShardLease& lease, const v1::AcquireShardRequest* next) {
  v1::CompleteShardRequest req;
  *req.mutable_dataset() = Ref();
  req.set_token(lease.token);
  if (next != nullptr) *req.mutable_next() = *next;
  v1::CompleteShardResponse resp;
  RETURN_IF_ERROR(CallWithRetry(req, &resp, [&](grpc::ClientContext* c, const auto& q, auto* r) {
    return stub_->CompleteShard(c, q, r);
  }));
  lease.committed = lease.lease_end();
  return resp;
}

absl::Status ShardingClient::Complete(ShardLease& lease) {
  return CompleteCall(lease, nullptr).status();
}

absl::StatusOr<std::optional<ShardLease>> ShardingClient::CompleteAndAcquire(ShardLease& lease) {
  const v1::AcquireShardRequest next = AcquireRequest();
  ASSIGN_OR_RETURN(v1::CompleteShardResponse resp, CompleteCall(lease, &next));
  return AcquireWith(next, &resp.next());
}

absl::Status ShardingClient::Release() {
  v1::ReleaseWorkerRequest req;
  req.mutable_dataset()->set_job(options_.job);
  req.set_worker_id(options_.worker_id);
  req.set_incarnation(options_.incarnation);
  v1::ReleaseWorkerResponse resp;
  return CallWithRetry(req, &resp, [&](grpc::ClientContext* c, const auto& q, auto* r) {
    return stub_->ReleaseWorker(c, q, r);
  });
}

absl::StatusOr<v1::GetProgressResponse> ShardingClient::Progress() {
  v1::GetProgressRequest req;
  *req.mutable_dataset() = Ref();
  v1::GetProgressResponse resp;
  RETURN_IF_ERROR(CallWithRetry(req, &resp, [&](grpc::ClientContext* c, const auto& q, auto* r) {
    return stub_->GetProgress(c, q, r);
  }));
  return resp;
}

absl::Status ShardingClient::ConsumeAll(int64_t commit_every, const ProcessFn& process,
                                        const CommitFn& on_commit) {
  if (commit_every <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit_every: must be > 0, got ", commit_every));
  }
  ASSIGN_OR_RETURN(std::optional<ShardLease> lease, Acquire());
  while (lease) {
    const int64_t base = lease->shard.committed();
    int64_t acked = 0;  // index into the remaining list
    // The last commit completes the shard and acquires the next in one call.
    std::optional<ShardLease> next;
    auto complete = [&] {
      absl::StatusOr<std::optional<ShardLease>> r = CompleteAndAcquire(*lease);
      if (r.ok()) next = *std::move(r);
      return r.status();
    };
    absl::Status status = lease->remaining() == 0 ? complete() : absl::OkStatus();
    for (int64_t i = 0; i < lease->remaining(); ++i) {
      process(*lease, lease->RecordAt(i));
      if (i + 1 == lease->remaining()) {
        status = complete();
      } else if ((i + 1 - acked) >= commit_every) {
        status = ReportProgress(*lease, base + i + 1);
      } else {
        continue;
      }
      if (!status.ok()) break;
      on_commit(*lease, acked, i + 1);
      acked = i + 1;
    }
    // A lease lost to expiry or a restore: its remainder is someone else's now.
    if (!status.ok() && status.code() != absl::StatusCode::kFailedPrecondition) return status;
    if (status.ok()) {
      lease = std::move(next);
    } else {
      ASSIGN_OR_RETURN(lease, Acquire());
    }
  }
  return absl::OkStatus();
}

absl::Status ReleaseWorker(const std::string& address, const ShardingClientOptions& options) {
  ShardingClient releaser(CreateShardingChannel(address), options);
  return releaser.Release();
}

}  // namespace antdt::client
