// The Monitor's gRPC service: agents stream node samples and step reports in,
// and get directives and their workers' health back on the same stream;
// GetJobHealth answers anyone. Wraps one monitor::Monitor behind a mutex; a
// ticker thread closes windows. Hosted by `antdt monitor`, the local runner and
// the operator.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "antdt/v1/monitor.grpc.pb.h"
#include "common/clock.h"
#include "operator/monitor/monitor.h"
#include "prometheus/collectable.h"

namespace antdt::monitor {

// Parses the Monitor's YAML (window, thresholds, K...); unknown keys are
// rejected and errors name the field ("monitor.window: ...").
absl::StatusOr<MonitorConfig> ParseMonitorConfig(const std::string& yaml);

class MonitorServiceImpl final : public v1::Monitor::Service {
 public:
  MonitorServiceImpl(Monitor monitor, const Clock* clock);
  ~MonitorServiceImpl() override;

  grpc::Status Stream(grpc::ServerContext* ctx,
                      grpc::ServerReaderWriter<v1::MonitorMessage, v1::AgentMessage>* stream)
      override;
  grpc::Status GetJobHealth(grpc::ServerContext* ctx, const v1::GetJobHealthRequest* req,
                            v1::GetJobHealthResponse* resp) override;

  // Starts the ticker that closes windows every `tick_ms`.
  void Start(int64_t tick_ms);
  void Stop();
  // Closes elapsed windows and sends each agent its workers' health; the
  // ticker calls it, tests may too.
  void Tick();
  // Queues a directive for the agent of `node`; false when that agent is not
  // connected.
  bool SendDirective(const std::string& node, const v1::Directive& directive);

  // antdt_monitor_* metrics: ingest counters and per-worker health.
  std::shared_ptr<prometheus::Collectable> Collector();

 private:
  struct Session {
    std::string node;
    std::mutex write_mu;
    grpc::ServerReaderWriter<v1::MonitorMessage, v1::AgentMessage>* stream = nullptr;
  };

  const Clock* const clock_;
  mutable std::mutex mu_;
  Monitor monitor_;
  int64_t windows_seen_ = 0;
  std::map<Session*, std::shared_ptr<Session>> sessions_;
  int64_t streams_opened_ = 0;
  std::map<std::string, v1::AgentDropped> dropped_;  // by node, as agents last said

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ = false;
  std::thread ticker_;
};

}  // namespace antdt::monitor
