#include "services/monitor/monitor_service.h"

#include <google/protobuf/arena.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/status.h"
#include "common/tls.h"

namespace antdt::monitor {

absl::StatusOr<MonitorConfig> ParseMonitorConfig(const std::string& yaml) {
  MonitorConfig c;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("monitor: not valid YAML: ", e.what()));
  }
  if (root.IsNull()) return c;
  if (!root.IsMap()) return absl::InvalidArgumentError("monitor: must be a mapping");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const std::string field = "monitor." + key;
    if (!kv.second.IsScalar()) return absl::InvalidArgumentError(field + ": must be a scalar");
    const std::string v = kv.second.as<std::string>();
    auto number = [&](double& out) -> absl::Status {
      if (!absl::SimpleAtod(v, &out)) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": must be a number, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    auto integer = [&](int& out) -> absl::Status {
      if (!absl::SimpleAtoi(v, &out)) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": must be an integer, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    if (key == "window") {
      ASSIGN_OR_RETURN(c.window_ms, ParseDurationMs(v, field));
    } else if (key == "window_steps") {
      RETURN_IF_ERROR(integer(c.steps_per_window));
    } else if (key == "allowed_lateness") {
      ASSIGN_OR_RETURN(c.allowed_lateness_ms, ParseDurationMs(v, field));
    } else if (key == "straggler_threshold") {
      RETURN_IF_ERROR(number(c.straggler_threshold));
    } else if (key == "recover_threshold") {
      RETURN_IF_ERROR(number(c.recover_threshold));
    } else if (key == "leader_threshold") {
      RETURN_IF_ERROR(number(c.leader_threshold));
    } else if (key == "persistent_windows") {
      RETURN_IF_ERROR(integer(c.persistent_windows));
    } else if (key == "warmup_windows") {
      RETURN_IF_ERROR(integer(c.warmup_windows));
    } else if (key == "min_peers") {
      RETURN_IF_ERROR(integer(c.min_peers));
    } else if (key == "job_slowdown_ratio") {
      RETURN_IF_ERROR(number(c.job_slowdown_ratio));
    } else {
      return absl::InvalidArgumentError(field + ": unknown field");
    }
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

MonitorServiceImpl::MonitorServiceImpl(Monitor monitor, const Clock* clock)
    : hub_(std::move(monitor), clock) {}

grpc::Status MonitorServiceImpl::Stream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::MonitorMessage, v1::AgentMessage>* stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "this Monitor is a standby's: agents stream to the acting leader's");
    }
    open_.insert(ctx);
  }
  std::optional<std::vector<std::string>> names;
  if (require_node_certificates_) {
    names = PeerCertificateNames(*ctx);
    if (names->empty()) {
      hub_.RefuseStream(ctx->peer(), "", "no_certificate");
      Close(ctx);
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "a node stream needs the agent's client certificate (mutual TLS)");
    }
  }
  stream->SendInitialMetadata();  // tells the agent it reached a Monitor
  std::shared_ptr<MonitorHub::AgentStream> agent = hub_.OpenStream(
      ctx->peer(), [stream](const v1::MonitorMessage& message) { return stream->Write(message); },
      std::move(names));
  grpc::Status status = grpc::Status::OK;
  // Each message is parsed into an arena emptied after it, so a batch's
  // reports and their strings cost no allocation each: a message reused
  // across reads would not help, as parsing clears its oneof, which frees the
  // batch. Blocks of at most 64 KiB (a 512-report batch takes a few); none is
  // kept between messages.
  google::protobuf::ArenaOptions arena_options;
  arena_options.start_block_size = 4 << 10;
  arena_options.max_block_size = 64 << 10;
  google::protobuf::Arena arena(arena_options);
  for (;; arena.Reset()) {
    auto* message = google::protobuf::Arena::CreateMessage<v1::AgentMessage>(&arena);
    if (!stream->Read(message)) break;
    if (!hub_.Receive(*agent, *message)) {
      status = grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          "the agent's certificate does not name node \"" + message->hello().node() + "\"");
      break;
    }
  }
  hub_.CloseStream(*agent);
  Close(ctx);
  return status;
}

void MonitorServiceImpl::Close(grpc::ServerContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(ctx);
}

void MonitorServiceImpl::SetAcceptingAgents(bool accepting) {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = accepting;
  if (accepting) return;
  for (grpc::ServerContext* ctx : open_) ctx->TryCancel();
}

grpc::Status MonitorServiceImpl::GetJobHealth(grpc::ServerContext*,
                                              const v1::GetJobHealthRequest* req,
                                              v1::GetJobHealthResponse* resp) {
  absl::StatusOr<v1::GetJobHealthResponse> health = hub_.Health(req->namespace_(), req->job());
  if (!health.ok()) return ToGrpcStatus(health.status());
  *resp = *std::move(health);
  return grpc::Status::OK;
}

}  // namespace antdt::monitor
