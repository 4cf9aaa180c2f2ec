// The Monitor's in-process hub: one monitor::Monitor behind a mutex, the
// agents' streams by node, and a ticker thread that closes windows and sends
// each agent its workers' health. It knows nothing of gRPC: MonitorServiceImpl
// translates RPCs into its calls, and the hosts (`antdt monitor`, the local
// runner, the operator) may call it directly.
//
// Thread-safe. A stream's writer is never called from two threads at once, nor
// after CloseStream returns.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "antdt/v1/monitor.pb.h"
#include "common/clock.h"
#include "core/monitor/monitor.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace antdt::monitor {

// A node's certificate names it system:node:NAME, as a kubelet's client
// certificate does (a server certificate names no node).
inline constexpr char kNodeCertificatePrefix[] = "system:node:";
// Whether a client certificate's names (CN and DNS SANs) name `node` as
// system:node:NAME.
bool CertificateNamesNode(const std::vector<std::string>& names, const std::string& node);

class MonitorHub {
 public:
  // Writes one message to an agent; false once its stream has failed.
  using Writer = std::function<bool(const v1::MonitorMessage&)>;
  // One agent's stream, from OpenStream to CloseStream.
  struct AgentStream;

  MonitorHub(Monitor monitor, const Clock* clock);
  ~MonitorHub();  // Stop()s the ticker
  MonitorHub(const MonitorHub&) = delete;
  MonitorHub& operator=(const MonitorHub&) = delete;

  // An agent connected from `peer` (for logs). Messages for its node go
  // through `write` once its hello has named the node. With
  // `certificate_names` (mutual TLS: its verified client certificate's) the
  // stream speaks only for a node they name (CertificateNamesNode).
  std::shared_ptr<AgentStream> OpenStream(
      std::string peer, Writer write,
      std::optional<std::vector<std::string>> certificate_names = std::nullopt);
  // Takes one message from the stream's agent: a hello registers the stream
  // under its node (non-empty labels replace the node's); node samples and
  // step reports go into the Monitor; drop counts are kept by node for metrics.
  // False when the stream must end: a certified stream's hello named a node
  // its certificate does not (counted and logged). A certified stream's
  // reports for another node are dropped (reason node_identity), each report
  // of a batch (StepBatch) on its own: the batch's others go in.
  bool Receive(AgentStream& stream, const v1::AgentMessage& message);
  // Counts and logs a stream refused before it began (`reason`:
  // no_certificate, certificate).
  void RefuseStream(const std::string& peer, const std::string& node, const std::string& reason);
  // Unregisters the stream; waits out a write in flight.
  void CloseStream(AgentStream& stream);

  // Sends a directive to the agents of `node`; false when none is connected
  // or no write succeeded.
  bool SendDirective(const std::string& node, const v1::Directive& directive);
  // The health now of the job `name` in namespace `ns` (JobKey: jobs of the
  // same name in two namespaces are two jobs). When its workers report no
  // namespace the Monitor knows it by its bare name, which is tried next.
  // INVALID_ARGUMENT for an empty name, NOT_FOUND for a job with no reports.
  absl::StatusOr<v1::GetJobHealthResponse> Health(const std::string& ns,
                                                  const std::string& name) const;
  // Windows closed so far for that job (the same lookup), 0 when none.
  int64_t WindowsClosed(const std::string& ns, const std::string& name) const;
  // Forgets the job known by `job_key` (JobKey(namespace, name), or a bare
  // name): Monitor::Forget; its series leave /metrics.
  void ForgetJob(const std::string& job_key);

  // Which step reports the Monitor takes in. With a gate, only those it
  // accepts (a job's reports carrying its credential's digest); the others
  // are counted (antdt_monitor_reports_dropped_total{reason="credential"})
  // and the first of each job is logged. Called under the hub's lock: the
  // gate must not call the hub.
  using StepGate = std::function<bool(const v1::StepReport&)>;
  void SetStepGate(StepGate gate);

  // The digest of job ns/job's credential (TokenDigest), or none ("" digest):
  // every agent is told the whole set at once (JobCredentials) and again when
  // it connects, and refuses that job's step reports that carry another.
  void SetJobCredential(const std::string& ns, const std::string& job, const std::string& digest);

  // Starts the ticker that calls Tick every `tick_ms`.
  void Start(int64_t tick_ms);
  // Stops the ticker; idempotent.
  void Stop();
  // Closes elapsed windows and, when any closed, sends each agent its
  // workers' health. The ticker calls it; tests may too.
  void Tick();

  // antdt_monitor_* metrics: ingest counters and per-worker health.
  std::shared_ptr<prometheus::Collectable> Collector();

 private:
  // Writes unless the stream is closed; false when closed or the write failed.
  static bool Write(AgentStream& stream, const v1::MonitorMessage& message);
  void IngestStep(const v1::StepReport& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SpeaksForItsNode(const AgentStream& stream, const v1::AgentMessage& message) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  mutable std::mutex mu_;
  Monitor monitor_ ABSL_GUARDED_BY(mu_);
  int64_t windows_seen_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;  // hellos that registered a stream
  StepGate gate_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, std::string> job_digests_ ABSL_GUARDED_BY(mu_);
  v1::MonitorMessage CredentialsMessage() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t refused_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t foreign_reports_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> refused_streams_ ABSL_GUARDED_BY(mu_);   // by reason
  std::set<std::string> refused_jobs_ ABSL_GUARDED_BY(mu_);               // logged once each
  std::map<std::string, v1::AgentDropped> dropped_ ABSL_GUARDED_BY(mu_);  // by node, as agents said
  std::map<AgentStream*, std::shared_ptr<AgentStream>> streams_ ABSL_GUARDED_BY(mu_);  // open ones

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ ABSL_GUARDED_BY(tick_mu_) = false;
  std::thread ticker_;
};

// The Monitor's series of every member of `jobs` (what Collector() serves
// beside its ingest counters): per member antdt_monitor_straggler_score,
// _class, _speed_class, _sample_score, _compensated and _info (class, speed
// class, cause by name, "none" when not a straggler); per job
// antdt_monitor_stragglers, the members straggling now (by batch time, or per
// sample while a smaller batch compensates) by class, cause and compensated.
std::vector<prometheus::MetricFamily> HealthFamilies(
    const std::vector<v1::GetJobHealthResponse>& jobs);

}  // namespace antdt::monitor
