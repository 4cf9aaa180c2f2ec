// The Monitor's gRPC service: agents stream node samples and step reports in,
// and get directives and their workers' health back on the same stream;
// GetJobHealth answers anyone. A shell over a MonitorHub (the Monitor, the
// agents' streams, the ticker that closes windows): it only translates RPCs to
// hub calls. Hosted by `antdt monitor`, the local runner and the operator.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "antdt/v1/monitor.grpc.pb.h"
#include "common/clock.h"
#include "core/monitor/monitor.h"
#include "prometheus/collectable.h"
#include "services/monitor/monitor_hub.h"

namespace antdt::monitor {

// Parses the Monitor's YAML (window, thresholds, K...); unknown keys are
// rejected and errors name the field ("monitor.window: ...").
absl::StatusOr<MonitorConfig> ParseMonitorConfig(const std::string& yaml);

class MonitorServiceImpl final : public v1::Monitor::Service {
 public:
  MonitorServiceImpl(Monitor monitor, const Clock* clock);

  grpc::Status Stream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::MonitorMessage, v1::AgentMessage>* stream) override;
  grpc::Status GetJobHealth(grpc::ServerContext* ctx, const v1::GetJobHealthRequest* req,
                            v1::GetJobHealthResponse* resp) override;

  // The in-process hub behind the service, for hosts that call it directly.
  MonitorHub& hub() { return hub_; }

  // Whether agent streams are taken (true from the start). A standby replica
  // of the operator takes none until it leads: an agent that reached it
  // retries (UNAVAILABLE) until it reaches the acting one, whose Monitor
  // decides. Turning it off ends the streams open now.
  void SetAcceptingAgents(bool accepting);
  // Mutual TLS for node streams: an agent's stream needs a verified client
  // certificate that names the node its hello claims (system:node:NAME),
  // else UNAUTHENTICATED (none) or PERMISSION_DENIED (another node's);
  // each refusal is counted (antdt_monitor_agent_streams_refused_total) and
  // logged. Set before serving.
  void RequireNodeCertificates(bool require) { require_node_certificates_ = require; }

  // The hub's, for hosts written against the service (see MonitorHub).
  void Start(int64_t tick_ms) { hub_.Start(tick_ms); }
  void Stop() { hub_.Stop(); }
  void Tick() { hub_.Tick(); }
  bool SendDirective(const std::string& node, const v1::Directive& directive) {
    return hub_.SendDirective(node, directive);
  }
  std::shared_ptr<prometheus::Collectable> Collector() { return hub_.Collector(); }

 private:
  MonitorHub hub_;
  std::mutex mu_;
  bool accepting_ = true;
  std::set<grpc::ServerContext*> open_;  // the streams being served
  bool require_node_certificates_ = false;
  void Close(grpc::ServerContext* ctx);
};

}  // namespace antdt::monitor
